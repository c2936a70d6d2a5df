// The on-disk block layouts of ggml's quantized weight types, byte for byte (the GGUF format's
// facts: every engine reading the same file must agree on them). Used by the reference
// (de)quantizers and the kernels' block decoders. Not for use outside ops/.
//
// Two families:
//  - 32-element blocks (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL): one f16 scale (and offset) each;
//    MXFP4 (OCP microscaling FP4, gpt-oss's experts): a power-of-two scale byte instead.
//  - 256-element super-blocks, the K-quants and IQ4_XS: an f16 super-block scale (and one for the
//    minimums) with small integer scales per 16 or 32 elements; the low-bit i-quants (IQ1_S ..
//    IQ3_S) the same with codebook indices (iq_grids.h) and sign bits instead of quants.
// Nibble order: in a 32-element block, byte j holds element j (low nibble) and j + 16 (high).
#pragma once

#include <cstdint>

namespace promptcache::quant {

constexpr int kBlock = 32;       // elements of a 32-element block
constexpr int kSuperBlock = 256;  // elements of a K-quant super-block

struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[16];
};
struct BlockQ4_1 {
  uint16_t d, m;
  uint8_t qs[16];
};
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];  // bit j: the fifth bit of element j
  uint8_t qs[16];
};
struct BlockQ5_1 {
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[16];
};
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[32];
};
struct BlockIQ4_NL {
  uint16_t d;
  uint8_t qs[16];  // indices into kIQ4Values
};
// MXFP4: e is an E8M0 exponent (the scale 2^(e - 127)); the nibbles are E2M1 codes indexing
// kMxfp4Values, which holds twice each code's value, so the block's d is 2^(e - 128).
struct BlockMXFP4 {
  uint8_t e;
  uint8_t qs[16];
};

// Q2_K: 16 groups of 16; scales[g] holds the group's scale (low nibble) and minimum (high).
// qs: 2 bits per element; for each half of 128 elements, byte l of its 32 holds elements
// l + 32 * s (bits 2s..2s+1), s = 0..3, of groups numbered from l / 16.
struct BlockQ2_K {
  uint8_t scales[16];
  uint8_t qs[64];
  uint16_t d, dmin;
};
// Q3_K: as Q2_K's low bits, plus a high-bit mask (set: +0, clear: -4) and 16 6-bit scales
// (offset by 32) packed into 12 bytes.
struct BlockQ3_K {
  uint8_t hmask[32];
  uint8_t qs[64];
  uint8_t scales[12];
  uint16_t d;
};
// Q4_K / Q5_K: 8 groups of 32 with 6-bit scales and minimums packed into 12 bytes; for each 64
// elements, 32 bytes hold the first 32 in low nibbles and the next 32 in high nibbles.
struct BlockQ4_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qs[128];
};
struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qh[32];  // bit 2i / 2i+1 of byte l: fifth bit of element l of group 2i / 2i+1
  uint8_t qs[128];
};
// Q6_K: 16 groups of 16 with int8 scales; low 4 bits in ql, high 2 bits in qh (see the decoder).
struct BlockQ6_K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;
};
// IQ4_XS: 8 groups of 32, 6-bit scales (offset by 32): low 4 bits in scales_l, high 2 bits in
// scales_h; the quants index kIQ4Values as IQ4_NL's do.
struct BlockIQ4_XS {
  uint16_t d;
  uint16_t scales_h;
  uint8_t scales_l[4];
  uint8_t qs[128];
};

// The low-bit i-quants: 8 groups of 32, each 4 (IQ3: 8) codebook indices of 8 (IQ3: 4)
// magnitudes, per group a 4-bit scale s (the group's scale is 2s + 1 in the integer form), and
// signs (IQ1: a shift of +-1/8 instead). Where signs come 7 to a byte group, the 8th is the one
// making the count of minus signs even (IQ2SignBits).
// IQ2_XXS: per group two dwords: 4 grid bytes; 4 x 7 sign bits then the scale in bits 28-31.
struct BlockIQ2_XXS {
  uint16_t d;
  uint16_t qs[32];
};
// IQ2_XS: per 8 elements a 9-bit grid index and 7 sign bits; per 16 elements a 4-bit scale.
struct BlockIQ2_XS {
  uint16_t d;
  uint16_t qs[32];
  uint8_t scales[8];  // group g: low nibble its first 16 elements, high nibble the next 16
};
// IQ2_S: 10-bit grid indices (low 8 bits in qs[0..31], high 2 in qh), 8 sign bits each in
// qs[32..63], scales as IQ2_XS.
struct BlockIQ2_S {
  uint16_t d;
  uint8_t qs[64];
  uint8_t qh[8];
  uint8_t scales[8];
};
// IQ3_XXS: 64 grid bytes (4 magnitudes each), then per group a dword as IQ2_XXS's second.
struct BlockIQ3_XXS {
  uint16_t d;
  uint8_t qs[96];
};
// IQ3_S: 9-bit grid indices (low 8 bits in qs, the 9th in qh: bit i of qh[g] for index i of
// group g), 8 sign bits per 8 elements, 4-bit scales two per byte.
struct BlockIQ3_S {
  uint16_t d;
  uint8_t qs[64];
  uint8_t qh[8];
  uint8_t signs[32];
  uint8_t scales[4];
};
// IQ1_S: 11-bit grid indices (low 8 bits in qs, high 3 in qh[g] bits 3i..3i+2), per group in
// qh[g] the scale (bits 12-14) and the shift's sign (bit 15: -1/8, else +1/8).
struct BlockIQ1_S {
  uint16_t d;
  uint8_t qs[32];
  uint16_t qh[8];
};
// IQ1_M: grid indices as IQ1_S's (high 3 bits in the nibbles of qh, bit 3 of each nibble the
// shift's sign for those 8 elements); 3-bit scales per 16 elements in the four 16-bit words of
// scales (bits 0-11), whose top nibbles together are the f16 super-block scale.
struct BlockIQ1_M {
  uint8_t qs[32];
  uint8_t qh[16];
  uint8_t scales[8];
};

static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22 &&
              sizeof(BlockQ5_1) == 24 && sizeof(BlockQ8_0) == 34 && sizeof(BlockIQ4_NL) == 18 &&
              sizeof(BlockMXFP4) == 17);
static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110 && sizeof(BlockQ4_K) == 144 &&
              sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210 && sizeof(BlockIQ4_XS) == 136);
static_assert(sizeof(BlockIQ2_XXS) == 66 && sizeof(BlockIQ2_XS) == 74 && sizeof(BlockIQ2_S) == 82 &&
              sizeof(BlockIQ3_XXS) == 98 && sizeof(BlockIQ3_S) == 110 && sizeof(BlockIQ1_S) == 50 &&
              sizeof(BlockIQ1_M) == 56);

// IQ4_NL / IQ4_XS: the 16 values a 4-bit index stands for (a non-linear grid).
inline constexpr int8_t kIQ4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                          1,    13,   25,  38,  53,  69,  89,  113};

// MXFP4: twice the E2M1 value of each 4-bit code (sign bit 3; magnitudes 0, 0.5, 1, 1.5, 2, 3,
// 4, 6), integers so that the code is a quant of the integer form.
inline constexpr int8_t kMxfp4Values[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                            0, -1, -2, -3, -4, -6, -8, -12};

// MXFP4: the block scale d = 2^(e - 128) (half the E8M0 value, to go with kMxfp4Values), exact
// for every e (e < 2 gives subnormals, as ggml's does).
inline float Mxfp4Scale(uint8_t e) {
  const uint32_t bits = e >= 2 ? uint32_t(e - 1) << 23 : uint32_t(0x00200000) << e;
  float d;
  __builtin_memcpy(&d, &bits, 4);
  return d;
}

// IQ2 / IQ3 types: the 8 sign bits (bit j set: element j negative) from the 7 stored ones.
constexpr int IQ2SignBits(int stored7) {
  return stored7 | (__builtin_popcount(static_cast<unsigned>(stored7)) & 1) << 7;
}

// The 16 signed values the low-bit i-quants' integer-form quants take (padded with zeros, which
// none takes): the packed LUTs (packed.h). IQ2: +-8, 25, 43 (IQ2_S also 62); IQ3_XXS: 4 .. 62;
// IQ3_S: 1 .. 15; IQ1: 8 * {-1, 0, 1} +- 1.
inline constexpr int8_t kIQ2Values[16] = {8, 25, 43, 62, -8, -25, -43, -62};
inline constexpr int8_t kIQ3XxsValues[16] = {4,  12,  20,  28,  36,  44,  52,  62,
                                             -4, -12, -20, -28, -36, -44, -52, -62};
inline constexpr int8_t kIQ3SValues[16] = {1,  3,  5,  7,  9,  11,  13,  15,
                                           -1, -3, -5, -7, -9, -11, -13, -15};
inline constexpr int8_t kIQ1Values[16] = {-9, -1, 7, -7, 1, 9};

// Q4_K / Q5_K: the 6-bit scale and minimum of group j (0..7) from the packed 12 bytes.
inline void ScaleMinK4(int j, const uint8_t* q, int* scale, int* min) {
  if (j < 4) {
    *scale = q[j] & 63;
    *min = q[j + 4] & 63;
  } else {
    *scale = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *min = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Q3_K: the 16 6-bit scales (0..63, before the offset of 32) from the packed 12 bytes.
inline void UnpackScalesQ3_K(const uint8_t* packed, int out[16]) {
  for (int j = 0; j < 16; ++j) {
    const int low = j < 8 ? packed[j] & 0xF : packed[j - 8] >> 4;
    const int high = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
    out[j] = low | high << 4;
  }
}

}  // namespace promptcache::quant
