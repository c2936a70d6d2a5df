#include "ops/packed.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "core/fp16.h"
#include "ops/matmul.h"
#include "ops/quant_blocks.h"

namespace promptcache {
namespace {

using packed_internal::kRows;
using packed_internal::kVec;

int QuantFromStored(const PackedFormat& f, uint8_t u) {
  if (f.lut != nullptr) return f.lut[u & 15];
  if (f.p8) return static_cast<int8_t>(u);
  return int{u} - f.bias;
}

// Where the bits of quant e of row r live: plane vector and bit position within the byte.
struct Slot {
  int vec, shift;
};
Slot PlaneSlot(int ng, int per_vec_groups, int bits, int e) {
  const int g = e / 4;
  const int lanes = ng / per_vec_groups;  // vectors in the plane
  return {g % lanes, bits * (g / lanes)};
}

int GetBits(const uint8_t* plane, int ng, int per_vec, int bits, int r, int e) {
  const Slot s = PlaneSlot(ng, per_vec, bits, e);
  return (plane[s.vec * kVec + 4 * r + e % 4] >> s.shift) & ((1 << bits) - 1);
}

void PutHalf(uint8_t* p, float v) {
  const uint16_t h = F32ToF16(v);
  std::memcpy(p, &h, 2);
}

float GetHalf(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return F16ToF32(h);
}

// The stored value u of every integer-form quant q (indexed by q & 255), per format.
struct StoredValues {
  uint8_t u[256];
  explicit StoredValues(const PackedFormat& f) {
    for (int q = -128; q < 128; ++q) {
      int v = f.p8 ? q : q + f.bias;
      if (f.lut != nullptr) {
        v = 0;
        for (int i = 0; i < 16; ++i) {
          if (f.lut[i] == q) v = i;
        }
      }
      u[q & 255] = static_cast<uint8_t>(v);
    }
  }
};

const StoredValues& StoredFor(const PackedFormat& f) {
  static const auto* all = [] {
    auto* v = new std::vector<StoredValues>;
    for (const PackedFormat& pf : kPackedFormats) v->emplace_back(pf);
    return v;
  }();
  return (*all)[&f - kPackedFormats];
}

// 8 rows' block (in integer form; rows past the matrix are null) into a packed group: per dword
// group G the 32-byte vector of stored values (row r's quants 4G..4G+3 at bytes 4r..4r+3), then
// the planes assembled from whole vectors.
void PackGroup(const PackedFormat& f, const StoredValues& sv, const IntBlock* const rows[kRows],
               uint8_t* group) {
  const bool k = f.ng == 64;
  const int ng = f.ng;
  uint8_t vec[64][kVec] = {};
  if (f.lut_offset >= 0) std::memcpy(group + f.lut_offset, f.lut, 16);
  for (int r = 0; r < kRows; ++r) {
    const IntBlock* b = rows[r];
    if (b == nullptr) continue;
    if (f.d_f32) {
      std::memcpy(group + 4 * r, &b->d, 4);
    } else {
      PutHalf(group + 2 * r, b->d);
    }
    if (f.m_offset >= 0) PutHalf(group + f.m_offset + 2 * r, b->m);
    if (k) {
      const int groups = 256 / f.sub;
      for (int g = 0; g < groups; ++g) {
        const int i = g * f.sub / 16;  // the integer form keeps a scale per 16
        group[f.sc_offset + g * kRows + r] = static_cast<uint8_t>(static_cast<int8_t>(b->sc[i]));
        if (f.mn_offset >= 0) {
          group[f.mn_offset + g * kRows + r] = static_cast<uint8_t>(static_cast<int8_t>(b->mn[i]));
        }
      }
    }
    for (int G = 0; G < ng; ++G) {
      for (int j = 0; j < 4; ++j) vec[G][4 * r + j] = sv.u[b->q[4 * G + j] & 255];
    }
  }
  // Each plane vector: the bits of several groups (see packed.h).
  auto plane = [&](int offset, int lanes, int bits, int from_bit) {
    for (int v = 0; v < lanes; ++v) {
      uint8_t* dst = group + offset + v * kVec;
      for (int k2 = 0; k2 < ng / lanes; ++k2) {
        const uint8_t* src = vec[v + k2 * lanes];
        for (int i = 0; i < kVec; ++i) {
          dst[i] |= static_cast<uint8_t>(((src[i] >> from_bit) & ((1 << bits) - 1)) << (bits * k2));
        }
      }
    }
  };
  if (f.p8) plane(f.p8_offset, ng, 8, 0);
  if (f.p4) {
    plane(f.p4_offset, ng / 2, 4, 0);
    if (f.p1) plane(f.p1_offset, ng / 8, 1, 4);
    if (f.p2) plane(f.p2_offset, ng / 4, 2, 4);
  } else if (f.p2) {
    plane(f.p2_offset, ng / 4, 2, 0);
    if (f.p1) plane(f.p1_offset, ng / 8, 1, 2);
  }
}

}  // namespace

PackedMatrix PackMatrix(const WeightMatrix& w, ThreadPool* pool) {
  const PackedFormat* f = FindPackedFormat(w.type);
  const WeightTypeInfo* t = FindWeightType(w.type);
  PC_CHECK(f != nullptr && t != nullptr && w.cols % t->block_elems == 0);
  PackedMatrix p;
  p.format = f;
  p.rows = w.rows;
  p.cols = w.cols;
  p.blocks = w.cols / t->block_elems;
  p.panel_bytes = static_cast<size_t>(p.blocks) * f->group_bytes;
  const int64_t panels = (w.rows + kRows - 1) / kRows;
  // Fresh anonymous pages are zero (rows past the matrix stay so: d = 0); huge pages make the
  // first touch of a model's worth of memory much cheaper.
  const size_t bytes = std::max<size_t>(p.bytes(), 1);
  void* mem = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  PC_CHECK(mem != MAP_FAILED && "out of memory packing weights");
  ::madvise(mem, bytes, MADV_HUGEPAGE);
  p.data = {static_cast<uint8_t*>(mem), [bytes](uint8_t* m) { ::munmap(m, bytes); }};
  const StoredValues& sv = StoredFor(*f);
  auto pack = [&](int64_t p0, int64_t p1) {
    IntBlock blocks[kRows];
    const IntBlock* rows[kRows];
    for (int64_t panel = p0; panel < p1; ++panel) {
      uint8_t* dst = p.data.get() + panel * p.panel_bytes;
      for (int64_t i = 0; i < p.blocks; ++i) {
        for (int r = 0; r < kRows; ++r) {
          const int64_t row = panel * kRows + r;
          rows[r] = row < w.rows ? &blocks[r] : nullptr;
          if (rows[r]) t->decode(w.data + row * w.row_bytes + i * t->block_bytes, &blocks[r]);
        }
        PackGroup(*f, sv, rows, dst + i * f->group_bytes);
      }
    }
  };
  if (pool != nullptr && pool->size() > 1 && panels > 1) {
    pool->ParallelFor(panels, pack);
  } else {
    pack(0, panels);
  }
  return p;
}

void UnpackBlock(const PackedMatrix& p, int64_t row, int64_t block, IntBlock* out) {
  const PackedFormat& f = *p.format;
  const bool k = f.ng == 64;
  const int ng = f.ng, n = k ? 256 : 32, r = static_cast<int>(row % kRows);
  const uint8_t* group = p.Group(row / kRows, block);
  if (f.d_f32) {
    std::memcpy(&out->d, group + 4 * r, 4);
  } else {
    out->d = GetHalf(group + 2 * r);
  }
  out->m = f.m_offset >= 0 ? GetHalf(group + f.m_offset + 2 * r) : 0.0f;
  for (int i = 0; i < 16; ++i) {
    const int g = i * 16 / f.sub;
    out->sc[i] = k ? static_cast<int8_t>(group[f.sc_offset + g * kRows + r]) : 0;
    out->mn[i] = f.mn_offset >= 0 ? static_cast<int8_t>(group[f.mn_offset + g * kRows + r]) : 0;
  }
  for (int e = 0; e < n; ++e) {
    int u;
    if (f.p8) {
      u = GetBits(group + f.p8_offset, ng, 1, 8, r, e);
    } else if (f.p4) {
      u = GetBits(group + f.p4_offset, ng, 2, 4, r, e);
      if (f.p1) u |= GetBits(group + f.p1_offset, ng, 8, 1, r, e) << 4;
      if (f.p2) u |= GetBits(group + f.p2_offset, ng, 4, 2, r, e) << 4;
    } else {
      u = GetBits(group + f.p2_offset, ng, 4, 2, r, e);
      if (f.p1) u |= GetBits(group + f.p1_offset, ng, 8, 1, r, e) << 2;
    }
    out->q[e] = static_cast<int8_t>(QuantFromStored(f, static_cast<uint8_t>(u)));
  }
}

}  // namespace promptcache
