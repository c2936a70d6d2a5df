#include "ops/weight_types.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "core/fp16.h"
#include "ops/iq_decode.h"
#include "ops/quant_blocks.h"
#include "ops/quantize.h"

namespace promptcache {
namespace {

using namespace quant;  // NOLINT: block layouts

template <typename Block>
Block Load(const uint8_t* p) {
  Block b;
  std::memcpy(&b, p, sizeof(b));
  return b;
}

float Half(uint16_t h) { return F16ToF32(h); }

// ---------------------------------------------------------------- 32-element blocks

// Every decoder below produces the integer form; Evaluate turns it back into floats with the
// same operations ggml's dequantization uses, so DequantizeX(b) == Evaluate(DecodeX(b)) bit for
// bit (the tests check it for every type).

void DecodeQ4_0(const uint8_t* p, IntBlock* o) {
  const auto b = Load<BlockQ4_0>(p);
  for (int j = 0; j < 16; ++j) {
    o->q[j] = static_cast<int8_t>((b.qs[j] & 15) - 8);
    o->q[j + 16] = static_cast<int8_t>((b.qs[j] >> 4) - 8);
  }
  o->d = Half(b.d);
  o->m = 0;
}

void DecodeQ4_1(const uint8_t* p, IntBlock* o) {
  const auto b = Load<BlockQ4_1>(p);
  for (int j = 0; j < 16; ++j) {
    o->q[j] = static_cast<int8_t>(b.qs[j] & 15);
    o->q[j + 16] = static_cast<int8_t>(b.qs[j] >> 4);
  }
  o->d = Half(b.d);
  o->m = Half(b.m);
}

// The fifth bits of a Q5 block: element j's is bit j of qh.
template <typename Block>
void FiveBitQuants(const Block& b, int offset, int8_t* q) {
  uint32_t qh;
  std::memcpy(&qh, b.qh, 4);
  for (int j = 0; j < 16; ++j) {
    q[j] = static_cast<int8_t>(((b.qs[j] & 15) | ((qh >> j) & 1) << 4) - offset);
    q[j + 16] = static_cast<int8_t>(((b.qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4) - offset);
  }
}

void DecodeQ5_0(const uint8_t* p, IntBlock* o) {
  const auto b = Load<BlockQ5_0>(p);
  FiveBitQuants(b, 16, o->q);
  o->d = Half(b.d);
  o->m = 0;
}

void DecodeQ5_1(const uint8_t* p, IntBlock* o) {
  const auto b = Load<BlockQ5_1>(p);
  FiveBitQuants(b, 0, o->q);
  o->d = Half(b.d);
  o->m = Half(b.m);
}

void DecodeQ8_0(const uint8_t* p, IntBlock* o) {
  const auto b = Load<BlockQ8_0>(p);
  std::memcpy(o->q, b.qs, 32);
  o->d = Half(b.d);
  o->m = 0;
}

void DecodeIQ4_NL(const uint8_t* p, IntBlock* o) {
  const auto b = Load<BlockIQ4_NL>(p);
  for (int j = 0; j < 16; ++j) {
    o->q[j] = kIQ4Values[b.qs[j] & 15];
    o->q[j + 16] = kIQ4Values[b.qs[j] >> 4];
  }
  o->d = Half(b.d);
  o->m = 0;
}

// MXFP4: the codes' doubled values as quants, the E8M0 scale halved as d (both exact).
void DecodeMXFP4(const uint8_t* p, IntBlock* o) {
  const auto b = Load<BlockMXFP4>(p);
  for (int j = 0; j < 16; ++j) {
    o->q[j] = kMxfp4Values[b.qs[j] & 15];
    o->q[j + 16] = kMxfp4Values[b.qs[j] >> 4];
  }
  o->d = Mxfp4Scale(b.e);
  o->m = 0;
}

void ScalesMXFP4(const uint8_t* p, IntBlock* o) {
  o->d = Mxfp4Scale(p[0]);
  o->m = 0;
}

// ---------------------------------------------------------------- K-quants and IQ4_XS

// Each K decoder has a scales part (DecodeScales<...>, all the kernels need from the scalar code)
// and the quants.

void ScalesQ2_K(const uint8_t* p, IntBlock* o) {
  const auto b = Load<BlockQ2_K>(p);
  for (int g = 0; g < 16; ++g) {
    o->sc[g] = b.scales[g] & 15;
    o->mn[g] = b.scales[g] >> 4;
  }
  o->d = Half(b.d);
  o->m = Half(b.dmin);
}

void DecodeQ2_K(const uint8_t* p, IntBlock* o) {
  const auto b = Load<BlockQ2_K>(p);
  for (int e = 0; e < 256; ++e) {
    const int half = e / 128, j = e % 128 / 32, l = e % 32;
    o->q[e] = static_cast<int8_t>((b.qs[32 * half + l] >> (2 * j)) & 3);
  }
  ScalesQ2_K(p, o);
}

void ScalesQ3_K(const uint8_t* p, IntBlock* o) {
  const auto b = Load<BlockQ3_K>(p);
  int scales[16];
  UnpackScalesQ3_K(b.scales, scales);
  for (int g = 0; g < 16; ++g) {
    o->sc[g] = static_cast<int16_t>(scales[g] - 32);
    o->mn[g] = 0;
  }
  o->d = Half(b.d);
  o->m = 0;
}

void DecodeQ3_K(const uint8_t* p, IntBlock* o) {
  const auto b = Load<BlockQ3_K>(p);
  for (int e = 0; e < 256; ++e) {
    const int half = e / 128, j = e % 128 / 32, l = e % 32;
    const int low = (b.qs[32 * half + l] >> (2 * j)) & 3;
    const bool high = b.hmask[l] & (1 << (4 * half + j));
    o->q[e] = static_cast<int8_t>(low - (high ? 0 : 4));
  }
  ScalesQ3_K(p, o);
}

// Q4_K and Q5_K share the scale packing and the nibble order; Q5_K adds a fifth bit.
template <typename Block>
void ScalesQ45_K(const uint8_t* p, IntBlock* o) {
  const auto b = Load<Block>(p);
  for (int g = 0; g < 8; ++g) {  // groups of 32
    int scale, min;
    ScaleMinK4(g, b.scales, &scale, &min);
    o->sc[2 * g] = o->sc[2 * g + 1] = static_cast<int16_t>(scale);
    o->mn[2 * g] = o->mn[2 * g + 1] = static_cast<int16_t>(min);
  }
  o->d = Half(b.d);
  o->m = Half(b.dmin);
}

template <typename Block, bool kFifthBit>
void DecodeQ45_K(const uint8_t* p, IntBlock* o) {
  const auto b = Load<Block>(p);
  for (int g = 0; g < 8; ++g) {
    const uint8_t* qs = b.qs + 32 * (g / 2);
    for (int l = 0; l < 32; ++l) {
      int v = g % 2 ? qs[l] >> 4 : qs[l] & 15;
      if constexpr (kFifthBit) v |= ((b.qh[l] >> g) & 1) << 4;
      o->q[32 * g + l] = static_cast<int8_t>(v);
    }
  }
  ScalesQ45_K<Block>(p, o);
}

void ScalesQ6_K(const uint8_t* p, IntBlock* o) {
  const auto b = Load<BlockQ6_K>(p);
  for (int g = 0; g < 16; ++g) {
    o->sc[g] = b.scales[g];
    o->mn[g] = 0;
  }
  o->d = Half(b.d);
  o->m = 0;
}

void DecodeQ6_K(const uint8_t* p, IntBlock* o) {
  const auto b = Load<BlockQ6_K>(p);
  for (int e = 0; e < 256; ++e) {
    const int half = e / 128, k = e % 128 / 32, l = e % 32;
    const uint8_t ql = b.ql[64 * half + l + 32 * (k % 2)];
    const int low = k < 2 ? ql & 15 : ql >> 4;
    const int high = (b.qh[32 * half + l] >> (2 * k)) & 3;
    o->q[e] = static_cast<int8_t>((low | high << 4) - 32);
  }
  ScalesQ6_K(p, o);
}

void ScalesIQ4_XS(const uint8_t* p, IntBlock* o) {
  const auto b = Load<BlockIQ4_XS>(p);
  for (int g = 0; g < 8; ++g) {
    const int ls = ((b.scales_l[g / 2] >> (4 * (g % 2))) & 15) | ((b.scales_h >> (2 * g)) & 3) << 4;
    o->sc[2 * g] = o->sc[2 * g + 1] = static_cast<int16_t>(ls - 32);
    o->mn[2 * g] = o->mn[2 * g + 1] = 0;
  }
  o->d = Half(b.d);
  o->m = 0;
}

void DecodeIQ4_XS(const uint8_t* p, IntBlock* o) {
  const auto b = Load<BlockIQ4_XS>(p);
  for (int g = 0; g < 8; ++g) {
    for (int j = 0; j < 16; ++j) {
      o->q[32 * g + j] = kIQ4Values[b.qs[16 * g + j] & 15];
      o->q[32 * g + 16 + j] = kIQ4Values[b.qs[16 * g + j] >> 4];
    }
  }
  ScalesIQ4_XS(p, o);
}

// 32-element blocks: the scale (and offset) lead every block.
template <bool kMin>
void ScalesHeader(const uint8_t* p, IntBlock* o) {
  uint16_t h[2];
  std::memcpy(h, p, kMin ? 4 : 2);
  o->d = Half(h[0]);
  o->m = kMin ? Half(h[1]) : 0.0f;
}

// ---------------------------------------------------------------- reference dequantization

// ggml's dequantization from the integer form, operation for operation:
//   32-blocks without offset: q * d; with: q * d + m;
//   K without minimums: (d * sc) * q; with: (d * sc) * q - m * mn.
template <void (*kDecode)(const uint8_t*, IntBlock*), int kElems, bool kMin>
void Dequantize(const uint8_t* p, float* out) {
  IntBlock b;
  kDecode(p, &b);
  for (int i = 0; i < kElems; ++i) {
    const float q = static_cast<float>(b.q[i]);
    if constexpr (kElems == 32) {
      out[i] = kMin ? q * b.d + b.m : q * b.d;
    } else {
      const float dl = b.d * static_cast<float>(b.sc[i / 16]);
      out[i] = kMin ? dl * q - b.m * static_cast<float>(b.mn[i / 16]) : dl * q;
    }
  }
}

#define PC_INT_TYPE(T, decode, scales, elems, bytes, act, min, quantize)                 \
  WeightTypeInfo {                                                                        \
    GgmlType::T, elems, bytes, ActFormat::act, min, &Dequantize<decode, elems, min>, quantize, \
        &decode, &scales                                                                  \
  }

const WeightTypeInfo kTypes[] = {
    {GgmlType::kF32, 1, 4, ActFormat::kFloat, false, nullptr, nullptr, nullptr, nullptr},
    {GgmlType::kF16, 1, 2, ActFormat::kFloat, false, nullptr, nullptr, nullptr, nullptr},
    {GgmlType::kBF16, 1, 2, ActFormat::kFloat, false, nullptr, nullptr, nullptr, nullptr},
    PC_INT_TYPE(kQ4_0, DecodeQ4_0, ScalesHeader<false>, 32, 18, kQ8_0, false, &QuantizeBlockQ4_0),
    PC_INT_TYPE(kQ4_1, DecodeQ4_1, ScalesHeader<true>, 32, 20, kQ8_0, true, &QuantizeBlockQ4_1),
    PC_INT_TYPE(kQ5_0, DecodeQ5_0, ScalesHeader<false>, 32, 22, kQ8_0, false, &QuantizeBlockQ5_0),
    PC_INT_TYPE(kQ5_1, DecodeQ5_1, ScalesHeader<true>, 32, 24, kQ8_0, true, &QuantizeBlockQ5_1),
    PC_INT_TYPE(kQ8_0, DecodeQ8_0, ScalesHeader<false>, 32, 34, kQ8_0, false, &QuantizeBlockQ8_0),
    PC_INT_TYPE(kIQ4_NL, DecodeIQ4_NL, ScalesHeader<false>, 32, 18, kQ8_0, false,
                &QuantizeBlockIQ4_NL),
    PC_INT_TYPE(kMXFP4, DecodeMXFP4, ScalesMXFP4, 32, 17, kQ8_0, false,
                &QuantizeBlockMXFP4),
    PC_INT_TYPE(kQ2_K, DecodeQ2_K, ScalesQ2_K, 256, 84, kQ8_K, true, &QuantizeBlockQ2_K),
    PC_INT_TYPE(kQ3_K, DecodeQ3_K, ScalesQ3_K, 256, 110, kQ8_K, false, &QuantizeBlockQ3_K),
    PC_INT_TYPE(kQ4_K, (DecodeQ45_K<BlockQ4_K, false>), ScalesQ45_K<BlockQ4_K>, 256, 144, kQ8_K,
                true, &QuantizeBlockQ4_K),
    PC_INT_TYPE(kQ5_K, (DecodeQ45_K<BlockQ5_K, true>), ScalesQ45_K<BlockQ5_K>, 256, 176, kQ8_K,
                true, &QuantizeBlockQ5_K),
    PC_INT_TYPE(kQ6_K, DecodeQ6_K, ScalesQ6_K, 256, 210, kQ8_K, false, &QuantizeBlockQ6_K),
    PC_INT_TYPE(kIQ4_XS, DecodeIQ4_XS, ScalesIQ4_XS, 256, 136, kQ8_K, false,
                &QuantizeBlockIQ4_XS),
    // The low-bit i-quants (iq_decode.h): read only, no quantizer here.
    PC_INT_TYPE(kIQ3_S, DecodeIQ3_S, ScalesIQ3_S, 256, 110, kQ8_K, false, nullptr),
    PC_INT_TYPE(kIQ3_XXS, DecodeIQ3_XXS, ScalesIQ3_XXS, 256, 98, kQ8_K, false, nullptr),
    PC_INT_TYPE(kIQ2_S, DecodeIQ2_S, ScalesIQ2_S, 256, 82, kQ8_K, false, nullptr),
    PC_INT_TYPE(kIQ2_XS, DecodeIQ2_XS, ScalesIQ2_XS, 256, 74, kQ8_K, false, nullptr),
    PC_INT_TYPE(kIQ2_XXS, DecodeIQ2_XXS, ScalesIQ2_XXS, 256, 66, kQ8_K, false, nullptr),
    PC_INT_TYPE(kIQ1_M, DecodeIQ1_M, ScalesIQ1_M, 256, 56, kQ8_K, false, nullptr),
    PC_INT_TYPE(kIQ1_S, DecodeIQ1_S, ScalesIQ1_S, 256, 50, kQ8_K, false, nullptr),
};
#undef PC_INT_TYPE

// ---------------------------------------------------------------- activations

// Q8_0 form: per 32, scale amax / 127 (f16-rounded as a stored Q8_0 block has it), quants
// x * (127 / amax) rounded half to even, s = f16(unrounded scale * sum).
void QuantizeQ8_0Form(const float* x, int64_t n, int8_t* q, float* d, int16_t* sums, float* s) {
  for (int64_t b = 0; b < n / kBlock; ++b) {
    const float* xb = x + b * kBlock;
    float amax = 0.0f;
    for (int j = 0; j < kBlock; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float scale = amax / 127.0f;
    const float inv = amax != 0.0f ? 127.0f / amax : 0.0f;
    int sum = 0;
    for (int j = 0; j < kBlock; ++j) {
      const int v = static_cast<int>(std::nearbyint(xb[j] * inv));
      q[b * kBlock + j] = static_cast<int8_t>(v);
      sum += v;
    }
    d[b] = F16ToF32(F32ToF16(scale));
    sums[b] = static_cast<int16_t>(sum);
    s[b] = F16ToF32(F32ToF16(scale * static_cast<float>(sum)));
  }
}

// Q8_K form: per 256, the value of largest magnitude (the positive one if +a and -a tie) maps
// to -127 (scale 1 / (-127 / max)), quants rounded half to even and clamped to 127; sums per 16.
void QuantizeQ8_KForm(const float* x, int64_t n, int8_t* q, float* d, int16_t* sums) {
  for (int64_t b = 0; b < n / kSuperBlock; ++b) {
    const float* xb = x + b * kSuperBlock;
    int8_t* qb = q + b * kSuperBlock;
    float hi = xb[0], lo = xb[0];
    for (int j = 1; j < kSuperBlock; ++j) {
      hi = std::max(hi, xb[j]);
      lo = std::min(lo, xb[j]);
    }
    const float max = hi >= -lo ? hi : lo;
    if (max == 0.0f) {
      std::memset(qb, 0, kSuperBlock);
      d[b] = 0.0f;
    } else {
      const float iscale = -127.0f / max;
      for (int j = 0; j < kSuperBlock; ++j) {
        qb[j] = static_cast<int8_t>(std::min(127, static_cast<int>(std::nearbyint(iscale * xb[j]))));
      }
      d[b] = 1.0f / iscale;
    }
    for (int g = 0; g < kSuperBlock / 16; ++g) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += qb[16 * g + j];
      sums[b * (kSuperBlock / 16) + g] = static_cast<int16_t>(sum);
    }
  }
}

}  // namespace

const WeightTypeInfo* FindWeightType(GgmlType type) {
  for (const WeightTypeInfo& t : kTypes) {
    if (t.type == type) return &t;
  }
  return nullptr;
}

void QuantizeActivationsReference(ActFormat format, const float* x, int64_t n, int8_t* q, float* d,
                                  int16_t* sums, float* s) {
  if (format == ActFormat::kQ8_0) {
    PC_CHECK(n % kBlock == 0);
    QuantizeQ8_0Form(x, n, q, d, sums, s);
  } else {
    PC_CHECK(format == ActFormat::kQ8_K && n % kSuperBlock == 0);
    QuantizeQ8_KForm(x, n, q, d, sums);
  }
}

float DotIntForm(const WeightTypeInfo& t, const uint8_t* row, int64_t n,
                 const QuantizedRowView& x) {
  PC_CHECK(t.decode != nullptr && n % t.block_elems == 0);
  const int sums_per_block = t.act == ActFormat::kQ8_0 ? 1 : 16;
  IntBlock b;
  float acc = 0.0f;
  for (int64_t i = 0; i < n / t.block_elems; ++i) {
    t.decode(row + i * t.block_bytes, &b);
    const float s = t.act == ActFormat::kQ8_0 ? x.s[i] : 0.0f;
    acc =
        AccumulateBlock(t, b, x.q + i * t.block_elems, x.d[i], x.sums + i * sums_per_block, s, acc);
  }
  return acc;
}

}  // namespace promptcache
