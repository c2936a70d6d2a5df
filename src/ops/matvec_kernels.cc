// Matrix-vector kernels behind MatMul, for one token (decoding) or a few (several sequences
// decoding together): bound by memory bandwidth, so each weight row is streamed from memory
// once, start to end, with software prefetch, and dotted with up to kTokenGroup tokens per pass
// (further groups re-read the row from L1). Quantized weights are dotted in integers against x
// quantized to Q8_0 (exact int32 block sums: AVX2 maddubs, or int16 pairwise madd on other
// targets), one float FMA per block and token.
//
// Measured on Zen 3: streaming rows one by one reaches ~28 GB/s with two threads, where
// interleaving 4 rows (to share loads of x, which sits in L1 anyway) stayed near 15-20 GB/s; and
// without software prefetch Q8_0 on one thread reached 7 GB/s instead of 12.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/matvec_kernels.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Highway headers below must follow foreach_target.h.
#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "hwy/highway.h"
#include "ops/kernel_util-inl.h"
#include "ops/matmul_internal.h"

HWY_BEFORE_NAMESPACE();
namespace promptcache {
namespace internal {
namespace HWY_NAMESPACE {

constexpr int kPrefetchBytes = 384;
constexpr int kTokenGroup = 4;

// ---------------------------------------------------------------- activation quantization

// Q8_0 quantization of x, block by block: emit(b, scale, j, rounded) receives each block's scale
// (f16-rounded, as stored) and its rounded quants x / scale as floats (exact small integers).
template <class Emit>
void QuantizeBlocks(const float* x, int64_t n, const Emit& emit) {
  const DF df;
  const size_t nf = hn::Lanes(df);
  const auto half = hn::Set(df, 0.5f), one = hn::Set(df, 1.0f);
  for (int64_t b = 0; b < n / kBlock; ++b) {
    const float* xb = x + b * kBlock;
    auto vmax = hn::Zero(df);
    for (size_t j = 0; j < kBlock; j += nf) vmax = hn::Max(vmax, hn::Abs(hn::LoadU(df, xb + j)));
    const float amax = hn::GetLane(hn::MaxOfLanes(df, vmax));
    const float scale = amax / 127.0f;
    const float inv = scale != 0.0f ? 1.0f / scale : 0.0f;
    const float stored = F16ToF32(F32ToF16(scale));
    const auto vinv = hn::Set(df, inv);
    for (size_t j = 0; j < kBlock; j += nf) {
      // Round half away from zero, as roundf (and so QuantizeRow) does.
      const auto v = hn::Mul(hn::LoadU(df, xb + j), vinv);
      const auto t = hn::Trunc(v);
      const auto r =
          hn::IfThenElse(hn::Abs(hn::Sub(v, t)) >= half, hn::Add(t, hn::CopySign(one, v)), t);
      emit(b, stored, j, r);
    }
  }
}

void QuantizeActivationsImpl(const float* x, int64_t n, int8_t* q, float* d) {
  const DI32 di32;
  const DI8Q di8;
  QuantizeBlocks(x, n, [&](int64_t b, float scale, size_t j, VF r) {
    d[b] = scale;
    hn::StoreU(hn::DemoteTo(di8, hn::ConvertTo(di32, r)), di8, q + b * kBlock + j);
  });
}

void RoundActivationsImpl(const float* x, int64_t n, float* out) {
  const DF df;
  // A quant (8 bits) times an f16 scale (11 bits) is exact in float.
  QuantizeBlocks(x, n, [&](int64_t b, float scale, size_t j, VF r) {
    hn::StoreU(hn::Mul(r, hn::Set(df, scale)), df, out + b * kBlock + j);
  });
}

// ---------------------------------------------------------------- dot products of one row

// A group of tokens: token t's floats at x + t * cols, its Q8_0 quants at xq + t * cols and
// scales at xd + t * nb. Results go to out[t * out_stride].
struct Tokens {
  const float* x;
  const int8_t* xq;
  const float* xd;
  int64_t cols;
  int64_t nb;
  float* out;
  int64_t out_stride;
};

// Float-like rows. One token: four accumulators; several: two per token.
template <class Rows, int T>
void DotRowFloat(const uint8_t* row, const Tokens& tk) {
  const DF d;
  const int64_t n = hn::Lanes(d), cols = tk.cols;
  const float* x = tk.x;
  int64_t i = 0;
  if constexpr (T == 1) {
    VF a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
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
    tk.out[0] = s;
  } else {
    VF a[T], b[T];
    HWY_UNROLL(8)
    for (int t = 0; t < T; ++t) a[t] = b[t] = hn::Zero(d);
    for (; i + 2 * n <= cols; i += 2 * n) {
      hwy::Prefetch(row + i * Rows::kBytes + kPrefetchBytes);
      const VF w0 = Rows::Load(d, row, i), w1 = Rows::Load(d, row, i + n);
      HWY_UNROLL(8)
      for (int t = 0; t < T; ++t) {
        a[t] = hn::MulAdd(w0, hn::LoadU(d, x + t * cols + i), a[t]);
        b[t] = hn::MulAdd(w1, hn::LoadU(d, x + t * cols + i + n), b[t]);
      }
    }
    for (; i + n <= cols; i += n) {
      const VF w0 = Rows::Load(d, row, i);
      HWY_UNROLL(8)
      for (int t = 0; t < T; ++t) a[t] = hn::MulAdd(w0, hn::LoadU(d, x + t * cols + i), a[t]);
    }
    HWY_UNROLL(8)
    for (int t = 0; t < T; ++t) {
      float s = ReduceSum(hn::Add(a[t], b[t]));
      for (int64_t j = i; j < cols; ++j) s += Rows::At(row, j) * x[t * cols + j];
      tk.out[t * tk.out_stride] = s;
    }
  }
}

#if HWY_TARGET == HWY_SCALAR
// The single-lane target cannot pair int16 lanes into int32; plain loops with the same
// arithmetic (exact int32 block sums, one float FMA per block) instead.
template <bool kQ4, int T>
void DotRowInt8(const uint8_t* row, const Tokens& tk) {
  HWY_UNROLL(8)
  for (int t = 0; t < T; ++t) {
    const int8_t* xq = tk.xq + t * tk.cols;
    const float* xd = tk.xd + t * tk.nb;
    float acc = 0.0f;
    for (int64_t b = 0; b < tk.nb; ++b) {
      const uint8_t* blk = row + b * (kQ4 ? kQ4Bytes : kQ8Bytes);
      int32_t sum = 0;
      for (int j = 0; j < kBlock; ++j) {
        const int w = kQ4 ? ((blk[2 + j % 16] >> (j < 16 ? 0 : 4)) & 0x0f) - 8
                          : static_cast<int8_t>(blk[2 + j]);
        sum += w * xq[b * kBlock + j];
      }
      acc = std::fma(static_cast<float>(sum), HalfAt(blk) * xd[b], acc);
    }
    tk.out[t * tk.out_stride] = acc;
  }
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

// The 32 weights of a block as int8 in element order (Q4_0: low nibbles are elements 0..15).
template <bool kQ4>
inline __m256i LoadBlockI8(const uint8_t* blk) {
  if constexpr (kQ4) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2));
    const __m256i nibbles =
        _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(0x0f));
    return _mm256_sub_epi8(nibbles, _mm256_set1_epi8(8));
  } else {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
  }
}

// Sum of w * x over a block as 8 int32 lanes, given |w| = abs_w.
inline __m256 BlockDot(__m256i abs_w, __m256i w, const int8_t* x) {
  const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
  const __m256i p16 = _mm256_maddubs_epi16(abs_w, _mm256_sign_epi8(xv, w));
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
}

template <bool kQ4, int T>
void DotRowInt8(const uint8_t* row, const Tokens& tk) {
  constexpr int kBytes = kQ4 ? kQ4Bytes : kQ8Bytes;
  const int64_t nb = tk.nb;
  // Per token two accumulators (even and odd blocks) to hide the FMA latency; the same for one
  // token as for several, so a token's result does not depend on how many share the call.
  __m256 acc0[T], acc1[T];
  HWY_UNROLL(8)
  for (int t = 0; t < T; ++t) acc0[t] = acc1[t] = _mm256_setzero_ps();
  auto step = [&](int64_t b, __m256* acc) HWY_ATTR {
    const uint8_t* blk = row + b * kBytes;
    hwy::Prefetch(blk + kPrefetchBytes);
    const __m256i w = LoadBlockI8<kQ4>(blk);
    const __m256i abs_w = _mm256_sign_epi8(w, w);
    const float dw = HalfAt(blk);
    HWY_UNROLL(8)
    for (int t = 0; t < T; ++t) {
      const __m256 sum = BlockDot(abs_w, w, tk.xq + t * tk.cols + b * kBlock);
      acc[t] = _mm256_fmadd_ps(sum, _mm256_set1_ps(dw * tk.xd[t * nb + b]), acc[t]);
    }
  };
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    step(b, acc0);
    step(b + 1, acc1);
  }
  if (b < nb) step(b, acc0);
  HWY_UNROLL(8)
  for (int t = 0; t < T; ++t) {
    tk.out[t * tk.out_stride] = HorizontalSum(_mm256_add_ps(acc0[t], acc1[t]));
  }
}

#else
// Generic Highway: weights and x widened to int16, pairwise multiply-add into int32 (exact per
// block), then one FMA per block and token with the product of the two scales.
template <bool kQ4, int T>
void DotRowInt8(const uint8_t* row, const Tokens& tk) {
  constexpr int kBytes = kQ4 ? kQ4Bytes : kQ8Bytes;
  const DF df;
  const DI32 di32;
  const DI16 di16;
  const DI8H di8;
  const DU16 du16;
  const DU8H du8;
  const size_t n16 = hn::Lanes(di16);
  const auto mask = hn::Set(du16, 0x0f);
  const auto eight = hn::Set(di16, 8);
  VF acc[T];
  HWY_UNROLL(8)
  for (int t = 0; t < T; ++t) acc[t] = hn::Zero(df);
  for (int64_t b = 0; b < tk.nb; ++b) {
    const uint8_t* blk = row + b * kBytes;
    hwy::Prefetch(blk + kPrefetchBytes);
    hn::Vec<DI32> s0[T], s1[T];
    HWY_UNROLL(8)
    for (int t = 0; t < T; ++t) s0[t] = s1[t] = hn::Zero(di32);
    if constexpr (kQ4) {
      // Low nibbles hold elements 0..15 of the block, high nibbles 16..31.
      for (size_t j = 0; j < kBlock / 2; j += n16) {
        const auto v = hn::PromoteTo(du16, hn::LoadU(du8, blk + 2 + j));
        const auto lo = hn::Sub(hn::BitCast(di16, hn::And(v, mask)), eight);
        const auto hi = hn::Sub(hn::BitCast(di16, hn::ShiftRight<4>(v)), eight);
        HWY_UNROLL(8)
        for (int t = 0; t < T; ++t) {
          const int8_t* x = tk.xq + t * tk.cols + b * kBlock;
          const auto xlo = hn::PromoteTo(di16, hn::LoadU(di8, x + j));
          const auto xhi = hn::PromoteTo(di16, hn::LoadU(di8, x + kBlock / 2 + j));
          s0[t] = hn::ReorderWidenMulAccumulate(di32, lo, xlo, s0[t], s1[t]);
          s0[t] = hn::ReorderWidenMulAccumulate(di32, hi, xhi, s0[t], s1[t]);
        }
      }
    } else {
      const auto* qs = reinterpret_cast<const int8_t*>(blk + 2);
      for (size_t j = 0; j < kBlock; j += n16) {
        const auto wv = hn::PromoteTo(di16, hn::LoadU(di8, qs + j));
        HWY_UNROLL(8)
        for (int t = 0; t < T; ++t) {
          const int8_t* x = tk.xq + t * tk.cols + b * kBlock;
          const auto xv = hn::PromoteTo(di16, hn::LoadU(di8, x + j));
          s0[t] = hn::ReorderWidenMulAccumulate(di32, wv, xv, s0[t], s1[t]);
        }
      }
    }
    const float dw = HalfAt(blk);
    HWY_UNROLL(8)
    for (int t = 0; t < T; ++t) {
      const VF sum = hn::ConvertTo(df, hn::RearrangeToOddPlusEven(s0[t], s1[t]));
      acc[t] = hn::MulAdd(sum, hn::Set(df, dw * tk.xd[t * tk.nb + b]), acc[t]);
    }
  }
  HWY_UNROLL(8)
  for (int t = 0; t < T; ++t) tk.out[t * tk.out_stride] = ReduceSum(acc[t]);
}
#endif  // HWY_TARGET

template <int T>
void DotRow(GgmlType type, const uint8_t* row, const Tokens& tk) {
  switch (type) {
    case GgmlType::kF32:
      return DotRowFloat<F32Rows, T>(row, tk);
    case GgmlType::kF16:
      return DotRowFloat<F16Rows, T>(row, tk);
    case GgmlType::kBF16:
      return DotRowFloat<BF16Rows, T>(row, tk);
    case GgmlType::kQ8_0:
      return DotRowInt8<false, T>(row, tk);
    case GgmlType::kQ4_0:
      return DotRowInt8<true, T>(row, tk);
    default:
      PC_CHECK(false && "MatMul: unsupported type");
  }
}

void MatVecRowsImpl(const MatMulJob& job, int64_t r0, int64_t r1) {
  const WeightMatrix& w = *job.w;
  const int64_t nb = w.cols / kBlock;
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = w.data + r * w.row_bytes;
    for (int64_t t0 = 0; t0 < job.n_tokens; t0 += kTokenGroup) {
      const Tokens tk{job.x + t0 * w.cols,
                      job.xq ? job.xq + t0 * w.cols : nullptr,
                      job.xd ? job.xd + t0 * nb : nullptr,
                      w.cols,
                      nb,
                      job.out + t0 * w.rows + r,
                      w.rows};
      switch (std::min<int64_t>(kTokenGroup, job.n_tokens - t0)) {
        case 4:
          DotRow<4>(w.type, row, tk);
          break;
        case 3:
          DotRow<3>(w.type, row, tk);
          break;
        case 2:
          DotRow<2>(w.type, row, tk);
          break;
        default:
          DotRow<1>(w.type, row, tk);
          break;
      }
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace internal
}  // namespace promptcache
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace promptcache::internal {

HWY_EXPORT(MatVecRowsImpl);
HWY_EXPORT(QuantizeActivationsImpl);
HWY_EXPORT(RoundActivationsImpl);

void MatVecRows(const MatMulJob& job, int64_t r0, int64_t r1) {
  HWY_DYNAMIC_DISPATCH(MatVecRowsImpl)(job, r0, r1);
}

void QuantizeActivations(const float* x, int64_t n, int8_t* q, float* d) {
  HWY_DYNAMIC_DISPATCH(QuantizeActivationsImpl)(x, n, q, d);
}

void RoundActivations(const float* x, int64_t n, float* out) {
  HWY_DYNAMIC_DISPATCH(RoundActivationsImpl)(x, n, out);
}

}  // namespace promptcache::internal
#endif  // HWY_ONCE
