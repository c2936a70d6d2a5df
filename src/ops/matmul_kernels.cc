// Per-target Highway kernels behind MatMul (see matmul.h for the what, matmul_internal.h for the
// interface). Two paths:
//  - matrix-vector (one token): streams the weight rows one after another with software
//    prefetch. Quantized weights are dotted in integers against x quantized to Q8_0 (exact int32
//    block sums: AVX2 maddubs, or int16 pairwise madd on other targets), one float FMA per block.
//  - matrix-matrix (several tokens): converts a panel of kPrefillRowTile weight rows (a chunk of
//    columns) to f32 in a stack buffer, then a register-blocked kPrefillRowTile x
//    kPrefillTokenTile FMA micro-kernel runs every token of a cache-sized token chunk over it.
//    Activations stay in f32, so this path is as exact as float accumulation allows.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/matmul_kernels.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must follow foreach_target.h.
#include "hwy/highway.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "hwy/cache_control.h"
#include "core/fp16.h"
#include "ops/matmul_internal.h"
#include "ops/quant.h"

HWY_BEFORE_NAMESPACE();
namespace promptcache {
namespace internal {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using DI32 = hn::RebindToSigned<DF>;
using DI16 = hn::Repartition<int16_t, DI32>;
using DI8H = hn::Rebind<int8_t, DI16>;  // as many int8 lanes as DI16 has int16 lanes
using DU16 = hn::RebindToUnsigned<DI16>;
using DU8H = hn::Rebind<uint8_t, DU16>;
using DI8Q = hn::Rebind<int8_t, DI32>;  // as many int8 lanes as DI32 has int32 lanes
using DU8Q = hn::Rebind<uint8_t, DI32>;
using DH = hn::Rebind<hwy::float16_t, DF>;
using DB = hn::Rebind<hwy::bfloat16_t, DF>;
using VF = hn::Vec<DF>;

constexpr int kQ8Bytes = 34;
constexpr int kQ4Bytes = 18;
constexpr int kBlock = 32;
// Software prefetch distance for streamed weight rows: the hardware prefetcher alone left the
// matrix-vector kernels well short of the memory bandwidth (measured on Zen 3: Q8_0 with one
// thread 7 -> 12 GB/s).
#ifndef PC_PREFETCH_BYTES
#define PC_PREFETCH_BYTES 384
#endif
constexpr int kPrefetchBytes = PC_PREFETCH_BYTES;

inline float HalfAt(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2 && !defined(HWY_DISABLE_F16C)
  return _cvtsh_ss(h);
#else
  return F16ToF32(h);
#endif
}

inline float ReduceSum(VF v) { return hn::GetLane(hn::SumOfLanes(DF(), v)); }

// ---------------------------------------------------------------- activation quantization

void QuantizeActivationsImpl(const float* x, int64_t n, int8_t* q, float* d) {
  const DF df;
  const DI32 di32;
  const DI8Q di8;
  const size_t nf = hn::Lanes(df);
  const auto half = hn::Set(df, 0.5f), one = hn::Set(df, 1.0f);
  for (int64_t b = 0; b < n / kBlock; ++b) {
    const float* xb = x + b * kBlock;
    auto vmax = hn::Zero(df);
    for (size_t j = 0; j < kBlock; j += nf) vmax = hn::Max(vmax, hn::Abs(hn::LoadU(df, xb + j)));
    const float amax = hn::GetLane(hn::MaxOfLanes(df, vmax));
    const float scale = amax / 127.0f;
    const float inv = scale != 0.0f ? 1.0f / scale : 0.0f;
    d[b] = F16ToF32(F32ToF16(scale));
    const auto vinv = hn::Set(df, inv);
    for (size_t j = 0; j < kBlock; j += nf) {
      // Round half away from zero, as roundf (and so QuantizeRow) does.
      const auto v = hn::Mul(hn::LoadU(df, xb + j), vinv);
      const auto t = hn::Trunc(v);
      const auto r = hn::IfThenElse(hn::Abs(hn::Sub(v, t)) >= half,
                                    hn::Add(t, hn::CopySign(one, v)), t);
      hn::StoreU(hn::DemoteTo(di8, hn::ConvertTo(di32, r)), di8, q + b * kBlock + j);
    }
  }
}

// ---------------------------------------------------------------- matrix-vector kernels
//
// One weight row at a time, start to end: measured on Zen 3, streaming rows one by one reaches
// ~28 GB/s with two threads where interleaving 4 rows (to share loads of x, which sits in L1
// anyway) stayed near 15-20 GB/s. Independent accumulators hide the FMA latency instead.

// Float-like weights (F32, F16, BF16): Load(d, row, i) gives lanes i.. of a row as f32, At(row, i)
// one element.
struct F32Rows {
  static constexpr int kBytes = 4;
  static VF Load(DF d, const uint8_t* row, int64_t i) {
    return hn::LoadU(d, reinterpret_cast<const float*>(row) + i);
  }
  static float At(const uint8_t* row, int64_t i) {
    float v;
    std::memcpy(&v, row + 4 * i, 4);
    return v;
  }
};
struct F16Rows {
  static constexpr int kBytes = 2;
  static VF Load(DF d, const uint8_t* row, int64_t i) {
    return hn::PromoteTo(d, hn::LoadU(DH(), reinterpret_cast<const hwy::float16_t*>(row) + i));
  }
  static float At(const uint8_t* row, int64_t i) { return HalfAt(row + 2 * i); }
};
struct BF16Rows {
  static constexpr int kBytes = 2;
  static VF Load(DF d, const uint8_t* row, int64_t i) {
    return hn::PromoteTo(d, hn::LoadU(DB(), reinterpret_cast<const hwy::bfloat16_t*>(row) + i));
  }
  static float At(const uint8_t* row, int64_t i) {
    uint16_t v;
    std::memcpy(&v, row + 2 * i, 2);
    return BF16ToF32(v);
  }
};

template <class Rows>
float DotRowFloat(const uint8_t* row, const float* x, int64_t cols) {
  const DF d;
  const int64_t n = hn::Lanes(d);
  VF a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 4 * n <= cols; i += 4 * n) {
    hwy::Prefetch(row + i * Rows::kBytes + kPrefetchBytes);
    hwy::Prefetch(row + i * Rows::kBytes + kPrefetchBytes + 64);
    a0 = hn::MulAdd(Rows::Load(d, row, i), hn::LoadU(d, x + i), a0);
    a1 = hn::MulAdd(Rows::Load(d, row, i + n), hn::LoadU(d, x + i + n), a1);
    a2 = hn::MulAdd(Rows::Load(d, row, i + 2 * n), hn::LoadU(d, x + i + 2 * n), a2);
    a3 = hn::MulAdd(Rows::Load(d, row, i + 3 * n), hn::LoadU(d, x + i + 3 * n), a3);
  }
  for (; i + n <= cols; i += n) a0 = hn::MulAdd(Rows::Load(d, row, i), hn::LoadU(d, x + i), a0);
  float s = ReduceSum(hn::Add(hn::Add(a0, a1), hn::Add(a2, a3)));
  for (; i < cols; ++i) s += Rows::At(row, i) * x[i];
  return s;
}

#if HWY_TARGET == HWY_SCALAR
// The single-lane target cannot pair int16 lanes into int32; plain loops with the same
// arithmetic (exact int32 block sums, one float FMA per block) instead.
float DotRowQ8_0(const uint8_t* row, const int8_t* xq, const float* xd, int64_t nb) {
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    const auto* qs = reinterpret_cast<const int8_t*>(row + b * kQ8Bytes + 2);
    int32_t sum = 0;
    for (int j = 0; j < kBlock; ++j) sum += qs[j] * xq[b * kBlock + j];
    acc = std::fma(static_cast<float>(sum), HalfAt(row + b * kQ8Bytes) * xd[b], acc);
  }
  return acc;
}

float DotRowQ4_0(const uint8_t* row, const int8_t* xq, const float* xd, int64_t nb) {
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* qs = row + b * kQ4Bytes + 2;
    int32_t sum = 0;
    for (int j = 0; j < kBlock / 2; ++j) {
      sum += ((qs[j] & 0x0f) - 8) * xq[b * kBlock + j];
      sum += ((qs[j] >> 4) - 8) * xq[b * kBlock + kBlock / 2 + j];
    }
    acc = std::fma(static_cast<float>(sum), HalfAt(row + b * kQ4Bytes) * xd[b], acc);
  }
  return acc;
}

#elif HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
// AVX2 and later: Highway 1.0.3 has no u8 x i8 multiply-add, so raw intrinsics. The signs of the
// weights move onto x (sign_epi8), making the weights unsigned for maddubs; a 32-byte block is
// then one maddubs (i16 pairs, which cannot saturate: |w| <= 128 and |x| <= 127) and one madd.

inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Block b of a row against block b of x, accumulated into acc with the product of the scales.
template <bool kQ4>
inline __m256 DotBlockI8(const uint8_t* row, const int8_t* xq, const float* xd, int64_t b,
                         __m256 acc) {
  const uint8_t* blk = row + b * (kQ4 ? kQ4Bytes : kQ8Bytes);
  hwy::Prefetch(blk + kPrefetchBytes);
  __m256i w;
  if constexpr (kQ4) {
    // 32 int8 in element order: low nibbles (elements 0..15), then high nibbles, minus 8.
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2));
    const __m256i nibbles =
        _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(0x0f));
    w = _mm256_sub_epi8(nibbles, _mm256_set1_epi8(8));
  } else {
    w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
  }
  const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + b * kBlock));
  const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
  const __m256 sum = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
  return _mm256_fmadd_ps(sum, _mm256_set1_ps(HalfAt(blk) * xd[b]), acc);
}

template <bool kQ4>
float DotRowInt8(const uint8_t* row, const int8_t* xq, const float* xd, int64_t nb) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    a0 = DotBlockI8<kQ4>(row, xq, xd, b, a0);
    a1 = DotBlockI8<kQ4>(row, xq, xd, b + 1, a1);
  }
  if (b < nb) a0 = DotBlockI8<kQ4>(row, xq, xd, b, a0);
  return HorizontalSum(_mm256_add_ps(a0, a1));
}

float DotRowQ8_0(const uint8_t* row, const int8_t* xq, const float* xd, int64_t nb) {
  return DotRowInt8<false>(row, xq, xd, nb);
}

float DotRowQ4_0(const uint8_t* row, const int8_t* xq, const float* xd, int64_t nb) {
  return DotRowInt8<true>(row, xq, xd, nb);
}

#else
// Generic Highway: weights and x widened to int16, pairwise multiply-add into int32 (exact per
// block), then one FMA per block with the product of the two scales.

float DotRowQ8_0(const uint8_t* row, const int8_t* xq, const float* xd, int64_t nb) {
  const DF df;
  const DI32 di32;
  const DI16 di16;
  const DI8H di8;
  const size_t n16 = hn::Lanes(di16);
  VF acc = hn::Zero(df);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = row + b * kQ8Bytes;
    hwy::Prefetch(blk + kPrefetchBytes);
    const auto* qs = reinterpret_cast<const int8_t*>(blk + 2);
    auto s0 = hn::Zero(di32), s1 = hn::Zero(di32);
    for (size_t j = 0; j < kBlock; j += n16) {
      const auto xv = hn::PromoteTo(di16, hn::LoadU(di8, xq + b * kBlock + j));
      const auto wv = hn::PromoteTo(di16, hn::LoadU(di8, qs + j));
      s0 = hn::ReorderWidenMulAccumulate(di32, wv, xv, s0, s1);
    }
    const VF sum = hn::ConvertTo(df, hn::RearrangeToOddPlusEven(s0, s1));
    acc = hn::MulAdd(sum, hn::Set(df, HalfAt(blk) * xd[b]), acc);
  }
  return ReduceSum(acc);
}

// The nibbles are widened to int16 (low nibbles hold elements 0..15 of a block, high nibbles
// 16..31) and offset by -8, then as Q8_0.
float DotRowQ4_0(const uint8_t* row, const int8_t* xq, const float* xd, int64_t nb) {
  const DF df;
  const DI32 di32;
  const DI16 di16;
  const DI8H di8;
  const DU16 du16;
  const DU8H du8;
  const size_t n16 = hn::Lanes(di16);
  const auto mask = hn::Set(du16, 0x0f);
  const auto eight = hn::Set(di16, 8);
  VF acc = hn::Zero(df);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = row + b * kQ4Bytes;
    hwy::Prefetch(blk + kPrefetchBytes);
    auto s0 = hn::Zero(di32), s1 = hn::Zero(di32);
    for (size_t j = 0; j < kBlock / 2; j += n16) {
      const auto xlo = hn::PromoteTo(di16, hn::LoadU(di8, xq + b * kBlock + j));
      const auto xhi = hn::PromoteTo(di16, hn::LoadU(di8, xq + b * kBlock + kBlock / 2 + j));
      const auto v = hn::PromoteTo(du16, hn::LoadU(du8, blk + 2 + j));
      const auto lo = hn::Sub(hn::BitCast(di16, hn::And(v, mask)), eight);
      const auto hi = hn::Sub(hn::BitCast(di16, hn::ShiftRight<4>(v)), eight);
      s0 = hn::ReorderWidenMulAccumulate(di32, lo, xlo, s0, s1);
      s0 = hn::ReorderWidenMulAccumulate(di32, hi, xhi, s0, s1);
    }
    const VF sum = hn::ConvertTo(df, hn::RearrangeToOddPlusEven(s0, s1));
    acc = hn::MulAdd(sum, hn::Set(df, HalfAt(blk) * xd[b]), acc);
  }
  return ReduceSum(acc);
}
#endif  // HWY_TARGET

void MatVec(const MatMulJob& job, int64_t r0, int64_t r1) {
  const WeightMatrix& w = *job.w;
  const int64_t nb = w.cols / kBlock;
  float* out = job.out;
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = w.data + r * w.row_bytes;
    switch (w.type) {
      case GgmlType::kF32:
        out[r] = DotRowFloat<F32Rows>(row, job.x, w.cols);
        break;
      case GgmlType::kF16:
        out[r] = DotRowFloat<F16Rows>(row, job.x, w.cols);
        break;
      case GgmlType::kBF16:
        out[r] = DotRowFloat<BF16Rows>(row, job.x, w.cols);
        break;
      case GgmlType::kQ8_0:
        out[r] = DotRowQ8_0(row, job.xq, job.xd, nb);
        break;
      case GgmlType::kQ4_0:
        out[r] = DotRowQ4_0(row, job.xq, job.xd, nb);
        break;
      default:
        PC_CHECK(false && "MatMul: unsupported type");
    }
  }
}

// ---------------------------------------------------------------- matrix-matrix kernels

// Writes columns [k0, k0 + kc) of a weight row as f32 (k0 and kc multiples of 32 for the
// quantized types).
void ConvertToF32(GgmlType type, const uint8_t* row, int64_t k0, int64_t kc, float* dst) {
  const DF df;
  const int64_t n = hn::Lanes(df);
  switch (type) {
    case GgmlType::kF16:
    case GgmlType::kBF16: {
      const bool half = type == GgmlType::kF16;
      int64_t i = 0;
      for (; i + n <= kc; i += n) {
        hn::StoreU(half ? F16Rows::Load(df, row, k0 + i) : BF16Rows::Load(df, row, k0 + i), df,
                   dst + i);
      }
      for (; i < kc; ++i) dst[i] = half ? F16Rows::At(row, k0 + i) : BF16Rows::At(row, k0 + i);
      return;
    }
    case GgmlType::kQ8_0: {
      const DI32 di32;
      const DI8Q di8;
      for (int64_t b = 0; b < kc / kBlock; ++b) {
        const uint8_t* blk = row + (k0 / kBlock + b) * kQ8Bytes;
        const auto d = hn::Set(df, HalfAt(blk));
        const auto* qs = reinterpret_cast<const int8_t*>(blk + 2);
        for (int64_t j = 0; j < kBlock; j += n) {
          const auto q = hn::ConvertTo(df, hn::PromoteTo(di32, hn::LoadU(di8, qs + j)));
          hn::StoreU(hn::Mul(q, d), df, dst + b * kBlock + j);
        }
      }
      return;
    }
    case GgmlType::kQ4_0: {
      const DI32 di32;
      const DU8Q du8;
      const auto mask = hn::Set(di32, 0x0f), eight = hn::Set(di32, 8);
      for (int64_t b = 0; b < kc / kBlock; ++b) {
        const uint8_t* blk = row + (k0 / kBlock + b) * kQ4Bytes;
        const auto d = hn::Set(df, HalfAt(blk));
        for (int64_t j = 0; j < kBlock / 2; j += n) {
          const auto v = hn::BitCast(di32, hn::PromoteTo(hn::RebindToUnsigned<DI32>(),
                                                         hn::LoadU(du8, blk + 2 + j)));
          const auto lo = hn::Sub(hn::And(v, mask), eight);
          const auto hi = hn::Sub(hn::ShiftRight<4>(v), eight);
          hn::StoreU(hn::Mul(hn::ConvertTo(df, lo), d), df, dst + b * kBlock + j);
          hn::StoreU(hn::Mul(hn::ConvertTo(df, hi), d), df, dst + b * kBlock + kBlock / 2 + j);
        }
      }
      return;
    }
    default:
      PC_CHECK(false && "MatMul: unsupported type");
  }
}

// out[t * out_stride + r] (+)= dot(w_r[0, kc), x_t[0, kc)) for R rows and T tokens.
template <int T>
void MicroKernel(const float* const* w, const float* x, int64_t x_stride, int64_t kc, int rows,
                 bool accumulate, float* out, int64_t out_stride) {
  constexpr int R = kPrefillRowTile;
  const DF d;
  const int64_t n = hn::Lanes(d);
  VF acc[R][T];
  HWY_UNROLL(8)
  for (int r = 0; r < R; ++r) {
    HWY_UNROLL(8)
    for (int t = 0; t < T; ++t) acc[r][t] = hn::Zero(d);
  }
  int64_t k = 0;
  for (; k + n <= kc; k += n) {
    VF wv[R];
    HWY_UNROLL(8)
    for (int r = 0; r < R; ++r) wv[r] = hn::LoadU(d, w[r] + k);
    HWY_UNROLL(8)
    for (int t = 0; t < T; ++t) {
      const VF xv = hn::LoadU(d, x + t * x_stride + k);
      HWY_UNROLL(8)
      for (int r = 0; r < R; ++r) acc[r][t] = hn::MulAdd(wv[r], xv, acc[r][t]);
    }
  }
  for (int r = 0; r < rows; ++r) {
    HWY_UNROLL(8)
    for (int t = 0; t < T; ++t) {
      float s = ReduceSum(acc[r][t]);
      for (int64_t j = k; j < kc; ++j) s += w[r][j] * x[t * x_stride + j];
      float& o = out[t * out_stride + r];
      o = accumulate ? o + s : s;
    }
  }
}

// Cache blocking: a chunk of columns whose f32 panel (R rows) stays in L1, and a chunk of tokens
// whose activations for that column chunk stay in L2.
constexpr int64_t kMaxColChunk = 1024;
constexpr int64_t kTokenChunkBytes = 256 << 10;

void MatMat(const MatMulJob& job, int64_t r0, int64_t r1) {
  const WeightMatrix& w = *job.w;
  constexpr int R = kPrefillRowTile;
  constexpr int T = kPrefillTokenTile;
  const int64_t cols = w.cols, n_tokens = job.n_tokens;
  const int64_t n_col_chunks = (cols + kMaxColChunk - 1) / kMaxColChunk;
  const int64_t col_chunk = ((cols + n_col_chunks - 1) / n_col_chunks + kBlock - 1) / kBlock * kBlock;
  const int64_t token_chunk =
      std::max<int64_t>(T, kTokenChunkBytes / (col_chunk * 4) / T * T);
  HWY_ALIGN float panel[R * kMaxColChunk];
  const bool is_f32 = w.type == GgmlType::kF32;
  for (int64_t t0 = 0; t0 < n_tokens; t0 += token_chunk) {
    const int64_t t1 = std::min(n_tokens, t0 + token_chunk);
    for (int64_t k0 = 0; k0 < cols; k0 += col_chunk) {
      const int64_t kc = std::min(col_chunk, cols - k0);
      for (int64_t r = r0; r < r1; r += R) {
        const int rows = static_cast<int>(std::min<int64_t>(R, r1 - r));
        const float* wp[R];
        HWY_UNROLL(8)
        for (int i = 0; i < R; ++i) {
          if (i >= rows) {
            wp[i] = wp[0];  // computed but never stored
          } else if (is_f32) {
            wp[i] = reinterpret_cast<const float*>(w.data + (r + i) * w.row_bytes) + k0;
          } else {
            ConvertToF32(w.type, w.data + (r + i) * w.row_bytes, k0, kc, panel + i * kc);
            wp[i] = panel + i * kc;
          }
        }
        for (int64_t t = t0; t < t1; t += T) {
          const float* x = job.x + t * cols + k0;
          float* out = job.out + t * w.rows + r;
          switch (std::min<int64_t>(T, t1 - t)) {
            case 4:
              MicroKernel<4>(wp, x, cols, kc, rows, k0 > 0, out, w.rows);
              break;
            case 3:
              MicroKernel<3>(wp, x, cols, kc, rows, k0 > 0, out, w.rows);
              break;
            case 2:
              MicroKernel<2>(wp, x, cols, kc, rows, k0 > 0, out, w.rows);
              break;
            default:
              MicroKernel<1>(wp, x, cols, kc, rows, k0 > 0, out, w.rows);
              break;
          }
        }
      }
    }
  }
}

void MatMulRowsImpl(const MatMulJob& job, int64_t r0, int64_t r1) {
  if (UsesQuantizedActivations(job.w->type, job.n_tokens) || job.n_tokens == 1) {
    MatVec(job, r0, r1);
  } else {
    MatMat(job, r0, r1);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace internal
}  // namespace promptcache
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace promptcache::internal {

HWY_EXPORT(MatMulRowsImpl);
HWY_EXPORT(QuantizeActivationsImpl);

void MatMulRows(const MatMulJob& job, int64_t r0, int64_t r1) {
  HWY_DYNAMIC_DISPATCH(MatMulRowsImpl)(job, r0, r1);
}

void QuantizeActivations(const float* x, int64_t n, int8_t* q, float* d) {
  HWY_DYNAMIC_DISPATCH(QuantizeActivationsImpl)(x, n, q, d);
}

}  // namespace promptcache::internal
#endif  // HWY_ONCE
