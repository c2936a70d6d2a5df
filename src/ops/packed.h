// Quantized weight matrices repacked for the int8 kernels: 8 rows interleaved, so one 256-bit
// vector holds 4 consecutive quants of each of 8 rows, the layout a u8 x s8 multiply-add
// (vpdpbusd, maddubs) wants. The kernels then read each weight once, in order, with no transposes
// or horizontal sums, for one token or hundreds.
//
// A panel is 8 rows; its blocks (32 elements, or K-quant super-blocks of 256) are stored one
// after the other as packed groups: a header of the 8 rows' scales, then the quants as bit
// planes. Every group holds NG dword groups (NG = 8 per 32-block, 64 per super-block), dword group
// G being quants 4G..4G+3 of the block, byte 4r + j of its vector holding row r's quant 4G + j.
// The planes:
//   P8: NG vectors, vector G = the quants of group G (Q8_0: the signed values as stored)
//   P4: NG / 2 vectors; vector v: low nibbles group v, high nibbles group v + NG / 2
//   P2: NG / 4 vectors; vector v: bits 2k, 2k+1 group v + k NG / 4
//   P1: NG / 8 vectors; vector v: bit k group v + k NG / 8
// and a quant's stored value u is P4 | P1 << 4 (5-bit), P4 | P2 << 4 (6-bit), P2 | P1 << 2
// (3-bit), one plane alone otherwise; for IQ4 types u indexes kIQ4Values, for MXFP4
// kMxfp4Values, for the low-bit i-quants their values (P4 for IQ3's 16, P2 | P1 << 2 for the
// IQ2 and IQ1 types' 6 or 8). The integer form's q is u - bias (or the table's value).
// The header: 32-element types: d (and m) of the 8 rows as f16 (MXFP4: as f32, since its
// power-of-two scales span far more than f16's range); K types: d (and dmin) as f16, then per
// group of 16 or 32 quants the 8 rows' integer scales (and minimums) as int8. The low-bit
// i-quants (IQ1_S .. IQ3_S) keep d as f32 (the file's f16 d / 4 or / 8 may not be an f16) and
// end the header with their LUT, so that the types of one shape share one kernel that reads its
// table at run time (packed_kernels_iq.cc).
// Packed sizes are the file's within a few percent (Q2_K: +19%, its 4-bit scales unpacked),
// except the low-bit i-quants': 4.44 bits per weight for IQ3_XXS and IQ3_S (files: 3.06, 3.44),
// 3.44 for IQ2_XXS and IQ1_S (2.06, 1.56), 3.69 for IQ2_XS, IQ2_S and IQ1_M (2.31, 2.56, 1.75).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "core/thread_pool.h"
#include "ops/quant_blocks.h"
#include "ops/weight_types.h"

namespace promptcache {

struct WeightMatrix;

// How a quantized type is packed (a row of the packed-format table).
struct PackedFormat {
  GgmlType type;
  int ng;              // dword groups per block: 8 (32-element blocks) or 64 (K super-blocks)
  int p8, p4, p2, p1;  // planes present (0 or 1)
  const int8_t* lut;   // u indexes this table of 16 values (null: no table)
  bool d_f32;          // the rows' d are f32 (else f16)
  int lut_offset;      // where the header holds lut (-1: the kernels use lut itself)
  int bias;            // q = u - bias (0 for LUT types and types with minimums)
  int sub;             // K: quants per integer scale (16 or 32); 32-element types: 32
  // Bytes of one packed group (8 rows x one block), and where its parts begin.
  int header_bytes, group_bytes;
  int sc_offset, mn_offset;  // K: int8 scales and minimums ([groups][8]); -1 if absent
  int m_offset;              // f16 offsets (32-element types) or dmin (K); -1 if absent
  int p8_offset, p4_offset, p2_offset, p1_offset;
};

namespace packed_internal {

constexpr int kRows = 8;
constexpr int kVec = 32;  // bytes of one plane vector: 8 rows x 4 quants

// Lays out a format's parts from its planes and header.
constexpr PackedFormat Make(GgmlType type, bool k, int p8, int p4, int p2, int p1,
                            const int8_t* lut, int bias, bool min, int sub, bool d_f32 = false,
                            bool lut_in_header = false) {
  PackedFormat f{type, k ? 64 : 8, p8, p4, p2, p1, lut, d_f32, -1, bias,
                 sub,  0,          0,  -1, -1, -1, -1,  -1,    -1, -1};
  int at = d_f32 ? 32 : 16;  // d: 8 x f16 or f32
  if (min) {
    f.m_offset = at;
    at += 16;
  }
  if (k) {
    const int groups = 256 / sub;
    f.sc_offset = at;
    at += groups * kRows;
    if (min) {
      f.mn_offset = at;
      at += groups * kRows;
    }
  }
  if (lut_in_header) {
    f.lut_offset = at;
    at += 16;
  }
  f.header_bytes = at;
  if (p8) f.p8_offset = at, at += f.ng * kVec;
  if (p4) f.p4_offset = at, at += f.ng / 2 * kVec;
  if (p2) f.p2_offset = at, at += f.ng / 4 * kVec;
  if (p1) f.p1_offset = at, at += f.ng / 8 * kVec;
  f.group_bytes = at;
  return f;
}

}  // namespace packed_internal

// The packed formats: each quantized type's planes, offset or bias, and scale layout.
inline constexpr PackedFormat kPackedFormats[] = {
    //                     type             K      p8 p4 p2 p1 lut          bias min  sub
    packed_internal::Make(GgmlType::kQ8_0, false, 1, 0, 0, 0, nullptr, 0, false, 32),
    packed_internal::Make(GgmlType::kQ4_0, false, 0, 1, 0, 0, nullptr, 8, false, 32),
    packed_internal::Make(GgmlType::kQ4_1, false, 0, 1, 0, 0, nullptr, 0, true, 32),
    packed_internal::Make(GgmlType::kIQ4_NL, false, 0, 1, 0, 0, quant::kIQ4Values, 0, false, 32),
    packed_internal::Make(GgmlType::kMXFP4, false, 0, 1, 0, 0, quant::kMxfp4Values, 0, false, 32,
                          /*d_f32=*/true),
    packed_internal::Make(GgmlType::kQ5_0, false, 0, 1, 0, 1, nullptr, 16, false, 32),
    packed_internal::Make(GgmlType::kQ5_1, false, 0, 1, 0, 1, nullptr, 0, true, 32),
    packed_internal::Make(GgmlType::kQ2_K, true, 0, 0, 1, 0, nullptr, 0, true, 16),
    packed_internal::Make(GgmlType::kQ3_K, true, 0, 0, 1, 1, nullptr, 4, false, 16),
    packed_internal::Make(GgmlType::kQ4_K, true, 0, 1, 0, 0, nullptr, 0, true, 32),
    packed_internal::Make(GgmlType::kQ5_K, true, 0, 1, 0, 1, nullptr, 0, true, 32),
    packed_internal::Make(GgmlType::kQ6_K, true, 0, 1, 1, 0, nullptr, 32, false, 16),
    packed_internal::Make(GgmlType::kIQ4_XS, true, 0, 1, 0, 0, quant::kIQ4Values, 0, false, 32),
    // The low-bit i-quants: three shapes (IQ3: P4; IQ2 and IQ1: 3 bits, scales per 32 or 16),
    // each run by one kernel.
    packed_internal::Make(GgmlType::kIQ3_XXS, true, 0, 1, 0, 0, quant::kIQ3XxsValues, 0, false, 32,
                          true, true),
    packed_internal::Make(GgmlType::kIQ3_S, true, 0, 1, 0, 0, quant::kIQ3SValues, 0, false, 32,
                          true, true),
    packed_internal::Make(GgmlType::kIQ2_XXS, true, 0, 0, 1, 1, quant::kIQ2Values, 0, false, 32,
                          true, true),
    packed_internal::Make(GgmlType::kIQ1_S, true, 0, 0, 1, 1, quant::kIQ1Values, 0, false, 32, true,
                          true),
    packed_internal::Make(GgmlType::kIQ2_XS, true, 0, 0, 1, 1, quant::kIQ2Values, 0, false, 16,
                          true, true),
    packed_internal::Make(GgmlType::kIQ2_S, true, 0, 0, 1, 1, quant::kIQ2Values, 0, false, 16, true,
                          true),
    packed_internal::Make(GgmlType::kIQ1_M, true, 0, 0, 1, 1, quant::kIQ1Values, 0, false, 16, true,
                          true),
};

// Whether two formats lay out their groups alike (a kernel for one runs the other, given the LUT
// from the header).
constexpr bool SamePackedShape(const PackedFormat& a, const PackedFormat& b) {
  return a.ng == b.ng && a.p8 == b.p8 && a.p4 == b.p4 && a.p2 == b.p2 && a.p1 == b.p1 &&
         (a.lut != nullptr) == (b.lut != nullptr) && a.d_f32 == b.d_f32 &&
         a.lut_offset == b.lut_offset && a.bias == b.bias && a.sub == b.sub &&
         a.header_bytes == b.header_bytes && a.group_bytes == b.group_bytes &&
         a.sc_offset == b.sc_offset && a.mn_offset == b.mn_offset && a.m_offset == b.m_offset &&
         a.p4_offset == b.p4_offset && a.p2_offset == b.p2_offset && a.p1_offset == b.p1_offset &&
         a.p8_offset == b.p8_offset;
}

constexpr const PackedFormat* FindPackedFormat(GgmlType type) {
  for (const PackedFormat& f : kPackedFormats) {
    if (f.type == type) return &f;
  }
  return nullptr;
}

// A matrix in packed form: panels of 8 rows (the last padded with zero rows), each
// `blocks` packed groups long.
struct PackedMatrix {
  const PackedFormat* format = nullptr;
  int64_t rows = 0, cols = 0;
  int64_t blocks = 0;        // per row
  size_t panel_bytes = 0;    // blocks * group_bytes
  // Zero-initialized anonymous memory (huge pages where the kernel gives them).
  std::unique_ptr<uint8_t, std::function<void(uint8_t*)>> data;

  const uint8_t* Group(int64_t panel, int64_t block) const {
    return data.get() + panel * panel_bytes + block * format->group_bytes;
  }
  size_t bytes() const { return panel_bytes * static_cast<size_t>((rows + 7) / 8); }
};

// Packs a quantized matrix (types with a PackedFormat); `pool` may be null.
PackedMatrix PackMatrix(const WeightMatrix& w, ThreadPool* pool);

// The integer form of row r's block b, read back from the packed matrix: what the kernels see.
// (Tests check it equals decoding the original block.)
void UnpackBlock(const PackedMatrix& p, int64_t row, int64_t block, IntBlock* out);

}  // namespace promptcache
