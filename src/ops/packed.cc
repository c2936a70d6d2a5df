#include "ops/packed.h"

#include <cstdlib>
#include <cstring>

#include "core/check.h"
#include "core/fp16.h"
#include "ops/matmul.h"
#include "ops/quant_blocks.h"

namespace promptcache {
namespace {

using packed_internal::kRows;
using packed_internal::kVec;

// The stored value u of integer-form quant q.
uint8_t StoredValue(const PackedFormat& f, int q) {
  if (f.lut) {
    for (int i = 0; i < 16; ++i) {
      if (quant::kIQ4Values[i] == q) return static_cast<uint8_t>(i);
    }
    PC_CHECK(false && "not an IQ4 value");
  }
  return static_cast<uint8_t>(f.p8 ? q : q + f.bias);
}

int QuantFromStored(const PackedFormat& f, uint8_t u) {
  if (f.lut) return quant::kIQ4Values[u & 15];
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

void PutBits(uint8_t* plane, int ng, int per_vec, int bits, int r, int e, int value) {
  const Slot s = PlaneSlot(ng, per_vec, bits, e);
  plane[s.vec * kVec + 4 * r + e % 4] |= static_cast<uint8_t>(value << s.shift);
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

// Row r's block (in integer form) into a packed group.
void PackBlock(const PackedFormat& f, const WeightTypeInfo& t, const IntBlock& b, int r,
               uint8_t* group) {
  const bool k = f.ng == 64;
  const int ng = f.ng, n = t.block_elems;
  PutHalf(group + 2 * r, b.d);
  if (f.m_offset >= 0) PutHalf(group + f.m_offset + 2 * r, b.m);
  if (k) {
    const int groups = 256 / f.sub;
    for (int g = 0; g < groups; ++g) {
      const int i = g * f.sub / 16;  // the integer form keeps a scale per 16
      group[f.sc_offset + g * kRows + r] = static_cast<uint8_t>(static_cast<int8_t>(b.sc[i]));
      if (f.mn_offset >= 0) {
        group[f.mn_offset + g * kRows + r] = static_cast<uint8_t>(static_cast<int8_t>(b.mn[i]));
      }
    }
  }
  for (int e = 0; e < n; ++e) {
    const int u = StoredValue(f, b.q[e]);
    if (f.p8) {
      PutBits(group + f.p8_offset, ng, 1, 8, r, e, u);
    } else if (f.p4) {
      PutBits(group + f.p4_offset, ng, 2, 4, r, e, u & 15);
      if (f.p1) PutBits(group + f.p1_offset, ng, 8, 1, r, e, (u >> 4) & 1);
      if (f.p2) PutBits(group + f.p2_offset, ng, 4, 2, r, e, (u >> 4) & 3);
    } else {
      PutBits(group + f.p2_offset, ng, 4, 2, r, e, u & 3);
      if (f.p1) PutBits(group + f.p1_offset, ng, 8, 1, r, e, (u >> 2) & 1);
    }
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
  const size_t bytes = (p.bytes() + 63) / 64 * 64;
  p.data = {static_cast<uint8_t*>(std::aligned_alloc(64, bytes > 0 ? bytes : 64)), std::free};
  PC_CHECK(p.data != nullptr);
  auto pack = [&](int64_t p0, int64_t p1) {
    IntBlock b;
    for (int64_t panel = p0; panel < p1; ++panel) {
      uint8_t* dst = p.data.get() + panel * p.panel_bytes;
      std::memset(dst, 0, p.panel_bytes);  // rows past the matrix stay zero (d = 0)
      for (int r = 0; r < kRows && panel * kRows + r < w.rows; ++r) {
        const uint8_t* row = w.data + (panel * kRows + r) * w.row_bytes;
        for (int64_t i = 0; i < p.blocks; ++i) {
          t->decode(row + i * t->block_bytes, &b);
          PackBlock(*f, *t, b, r, dst + i * f->group_bytes);
        }
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
  out->d = GetHalf(group + 2 * r);
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
