// Matrix products of float weights (F32, F16, BF16) for any number of tokens. A panel of
// kFloatRowTile weight rows (a chunk of their columns) is converted to f32 in a stack buffer (F32
// rows are read in place), then a register-blocked rows x kFloatTokenTile FMA micro-kernel runs
// every token of a cache-sized token chunk over it, so each weight load serves several tokens and
// each activation load several rows.
//
// One token or hundreds, each output element is computed the same way: one vector accumulator
// over a column chunk (chunks set by the column count alone), its lanes summed by one fixed tree
// (SumLanes4), the chunk sums added in order. So results do not depend on the batch.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/float_kernels.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Highway headers below must follow foreach_target.h.
#include <algorithm>

#include "core/check.h"
#include "hwy/highway.h"
#include "ops/kernel_util-inl.h"
#include "ops/matmul_internal.h"

HWY_BEFORE_NAMESPACE();
namespace promptcache {
namespace internal {
namespace HWY_NAMESPACE {

constexpr int kFloatRowTile = 3;
constexpr int kFloatTokenTile = 4;

// Writes columns [k0, k0 + kc) of an F16 or BF16 weight row as f32.
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
    default:
      PC_CHECK(false && "MatMul: unsupported type");
  }
}

// The micro-kernel's vectors: at most 256 bits, also on AVX-512 (which keeps its 32 registers).
// Measured on an AVX-512 Xeon whose 512-bit FMAs do no more work than two 256-bit ones and lower
// the clock: with 512-bit vectors prefill was 19% slower than the AVX2 kernels (pp128 520 against
// 640 tokens/s); capped, it matches them. A CPU with two 512-bit FMA units might gain from full
// width; none was at hand to measure.
using DM = hn::CappedTag<float, 8>;
using VM = hn::Vec<DM>;

// out[t * out_stride + r] (+)= dot(w_r[0, kc), x_t[0, kc)) for R rows and T tokens.
template <int T>
void MicroKernel(const float* const* w, const float* x, int64_t x_stride, int64_t kc, int rows,
                 bool accumulate, float* out, int64_t out_stride) {
  constexpr int R = kFloatRowTile;
  const DM d;
  const int64_t n = hn::Lanes(d);
  VM acc[R][T];
  HWY_UNROLL(8)
  for (int r = 0; r < R; ++r) {
    HWY_UNROLL(8)
    for (int t = 0; t < T; ++t) acc[r][t] = hn::Zero(d);
  }
  int64_t k = 0;
  for (; k + n <= kc; k += n) {
    VM wv[R];
    HWY_UNROLL(8)
    for (int r = 0; r < R; ++r) wv[r] = hn::LoadU(d, w[r] + k);
    HWY_UNROLL(8)
    for (int t = 0; t < T; ++t) {
      const VM xv = hn::LoadU(d, x + t * x_stride + k);
      HWY_UNROLL(8)
      for (int r = 0; r < R; ++r) acc[r][t] = hn::MulAdd(wv[r], xv, acc[r][t]);
    }
  }
  for (int r = 0; r < rows; ++r) {
    // The same tree for every T (each output's sum depends only on its own vector).
    float sums[4];
    const VM zero = hn::Zero(d);
    SumLanes4<DM>(acc[r][0], T > 1 ? acc[r][1 % T] : zero, T > 2 ? acc[r][2 % T] : zero,
                  T > 3 ? acc[r][3 % T] : zero, sums);
    HWY_UNROLL(8)
    for (int t = 0; t < T; ++t) {
      float s = sums[t];
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

void FloatMatMulRowsImpl(const MatMulJob& job, int64_t r0, int64_t r1) {
  const WeightMatrix& w = *job.w;
  constexpr int R = kFloatRowTile;
  constexpr int T = kFloatTokenTile;
  const int64_t cols = w.cols, n_tokens = job.n_tokens;
  const int64_t n_col_chunks = (cols + kMaxColChunk - 1) / kMaxColChunk;
  const int64_t col_chunk =
      ((cols + n_col_chunks - 1) / n_col_chunks + kBlock - 1) / kBlock * kBlock;
  const int64_t token_chunk = std::max<int64_t>(T, kTokenChunkBytes / (col_chunk * 4) / T * T);
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

}  // namespace HWY_NAMESPACE
}  // namespace internal
}  // namespace promptcache
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace promptcache::internal {

HWY_EXPORT(FloatMatMulRowsImpl);

void FloatMatMulRows(const MatMulJob& job, int64_t r0, int64_t r1) {
  HWY_DYNAMIC_DISPATCH(FloatMatMulRowsImpl)(job, r0, r1);
}

}  // namespace promptcache::internal
#endif  // HWY_ONCE
