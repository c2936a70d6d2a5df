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
#include <cstring>
#include <type_traits>

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

// The micro-kernel's weight rows: an f32 panel, or F32 rows in place.
struct PanelF32 {
  const float* const* w;  // [R], each at the chunk's first column
  VM Load(DM d, int r, int64_t k) const { return hn::LoadU(d, w[r] + k); }
  float At(int r, int64_t k) const { return w[r][k]; }
};
// out[t * out_stride + r] (+)= dot(w_r[0, kc), x_t[0, kc)) for R rows and T tokens.
template <int T, class Rows>
void MicroKernel(const Rows& w, const float* x, int64_t x_stride, int64_t kc, int rows,
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
    for (int r = 0; r < R; ++r) wv[r] = w.Load(d, r, k);
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
      for (int64_t j = k; j < kc; ++j) s += w.At(r, j) * x[t * x_stride + j];
      float& o = out[t * out_stride + r];
      o = accumulate ? o + s : s;
    }
  }
}

template <class Rows>
void MicroKernelT(int t_count, const Rows& w, const float* x, int64_t x_stride, int64_t kc,
                  int rows, bool accumulate, float* out, int64_t out_stride) {
  switch (t_count) {
    case 4:
      return MicroKernel<4>(w, x, x_stride, kc, rows, accumulate, out, out_stride);
    case 3:
      return MicroKernel<3>(w, x, x_stride, kc, rows, accumulate, out, out_stride);
    case 2:
      return MicroKernel<2>(w, x, x_stride, kc, rows, accumulate, out, out_stride);
    default:
      return MicroKernel<1>(w, x, x_stride, kc, rows, accumulate, out, out_stride);
  }
}

// Cache blocking: a chunk of columns whose f32 panel (R rows) stays in L1, and a chunk of tokens
// whose activations for that column chunk stay in L2.
constexpr int64_t kMaxColChunk = 512;
constexpr int64_t kTokenChunkBytes = 256 << 10;

// Few tokens: NR rows at a time, each streamed start to end (one sequential stream per row for
// the prefetchers), chunk by chunk, so that NR * T accumulator chains hide the FMA latency. Each
// chunk's sum is the micro-kernel's: one vector accumulator, the same lane tree, chunks added in
// order; which rows go together changes nothing in a row's result.
template <int NR, int T, class Load>
void RowDots(const Load* load, const float* x, int64_t cols, int64_t col_chunk, float* out,
             int64_t out_stride, int64_t out_row_step) {
  const DM d;
  const int64_t n = hn::Lanes(d);
  const VM zero = hn::Zero(d);
  float total[NR][T] = {};
  for (int64_t c0 = 0; c0 < cols; c0 += col_chunk) {
    const int64_t len = std::min(col_chunk, cols - c0);
    VM a[NR][T];
    HWY_UNROLL(8)
    for (int i = 0; i < NR; ++i) {
      HWY_UNROLL(8)
      for (int t = 0; t < T; ++t) a[i][t] = zero;
    }
    // One vector of columns at j into every row's and token's accumulator.
    auto columns = [&](int64_t j) __attribute__((always_inline)) {
      HWY_UNROLL(8)
      for (int i = 0; i < NR; ++i) {
        const VM w = load[i](d, j);
        HWY_UNROLL(8)
        for (int t = 0; t < T; ++t)
          a[i][t] = hn::MulAdd(w, hn::LoadU(d, x + t * cols + j), a[i][t]);
      }
    };
    int64_t k = 0;
    for (; k + 4 * n <= len; k += 4 * n) {
      HWY_UNROLL(8)
      for (int i = 0; i < NR; ++i) load[i].Prefetch(c0 + k);
      HWY_UNROLL(4)
      for (int v = 0; v < 4; ++v) columns(c0 + k + v * n);
    }
    for (; k + n <= len; k += n) columns(c0 + k);
    HWY_UNROLL(8)
    for (int i = 0; i < NR; ++i) {
      float sums[4];
      SumLanes4<DM>(a[i][0], T > 1 ? a[i][1 % T] : zero, T > 2 ? a[i][2 % T] : zero,
                    T > 3 ? a[i][3 % T] : zero, sums);
      HWY_UNROLL(8)
      for (int t = 0; t < T; ++t) {
        float s = sums[t];
        for (int64_t j = k; j < len; ++j) s += load[i].At(c0 + j) * x[t * cols + c0 + j];
        total[i][t] = c0 == 0 ? s : total[i][t] + s;
      }
    }
  }
  HWY_UNROLL(8)
  for (int i = 0; i < NR; ++i) {
    HWY_UNROLL(8)
    for (int t = 0; t < T; ++t) out[t * out_stride + i * out_row_step] = total[i][t];
  }
}

constexpr int kRowPrefetchBytes = 512;

// One row's loader for RowDots.
template <typename Elem>
struct RowLoad {
  const Elem* row;
  // The cache lines kRowPrefetchBytes ahead of element k's next 4 vectors (32 elements, 64 or
  // 128 bytes); past the row's end, the next row's: the stream's continuation.
  void Prefetch(int64_t k) const {
    const uint8_t* p = reinterpret_cast<const uint8_t*>(row + k) + kRowPrefetchBytes;
    hwy::Prefetch(p);
    if constexpr (sizeof(Elem) == 4) hwy::Prefetch(p + 64);
  }
  VM operator()(DM d, int64_t k) const {
    if constexpr (std::is_same_v<Elem, float>) {
      return hn::LoadU(d, row + k);
    } else {
      return hn::PromoteTo(d, hn::LoadU(hn::Rebind<Elem, DM>(), row + k));
    }
  }
  float At(int64_t k) const {
    if constexpr (std::is_same_v<Elem, float>) {
      return row[k];
    } else {
      uint16_t v;
      std::memcpy(&v, row + k, 2);
      return std::is_same_v<Elem, hwy::float16_t> ? F16ToF32(v) : BF16ToF32(v);
    }
  }
};

// Rows [r0, r1) for T tokens, NR rows at a time, the rest one by one. The NR rows are a quarter
// of the range apart (for NR = 4), so that each is one long sequential stream through the
// weights, the pattern memory prefetchers serve best (consecutive rows made NR short streams).
template <int NR, int T, typename Elem>
void RowDotsRange(const MatMulJob& job, int64_t r0, int64_t r1, int64_t col_chunk) {
  const WeightMatrix& w = *job.w;
  auto row = [&](int64_t r) { return reinterpret_cast<const Elem*>(w.data + r * w.row_bytes); };
  const int64_t step = (r1 - r0) / NR;
  if (step > 0) {
    for (int64_t j = 0; j < step; ++j) {
      RowLoad<Elem> loads[NR];
      for (int i = 0; i < NR; ++i) loads[i] = {row(r0 + j + i * step)};
      RowDots<NR, T>(loads, job.x, w.cols, col_chunk, job.out + r0 + j, w.rows, step);
    }
  }
  for (int64_t r = r0 + NR * step; r < r1; ++r) {
    const RowLoad<Elem> load{row(r)};
    RowDots<1, T>(&load, job.x, w.cols, col_chunk, job.out + r, w.rows, 1);
  }
}

// NR * T = 4 accumulator chains.
template <typename Elem>
void RowDotsAll(const MatMulJob& job, int64_t r0, int64_t r1, int64_t col_chunk) {
  switch (job.n_tokens) {
    case 4:
      return RowDotsRange<1, 4, Elem>(job, r0, r1, col_chunk);
    case 3:
      return RowDotsRange<1, 3, Elem>(job, r0, r1, col_chunk);
    case 2:
      return RowDotsRange<2, 2, Elem>(job, r0, r1, col_chunk);
    default:
      return RowDotsRange<4, 1, Elem>(job, r0, r1, col_chunk);
  }
}

void FloatMatMulRowsImpl(const MatMulJob& job, int64_t r0, int64_t r1) {
  const WeightMatrix& w = *job.w;
  constexpr int R = kFloatRowTile;
  constexpr int T = kFloatTokenTile;
  const int64_t cols = w.cols, n_tokens = job.n_tokens;
  const int64_t n_col_chunks = (cols + kMaxColChunk - 1) / kMaxColChunk;
  const int64_t col_chunk =
      ((cols + n_col_chunks - 1) / n_col_chunks + kBlock - 1) / kBlock * kBlock;
  const int64_t token_chunk = std::max<int64_t>(T, kTokenChunkBytes / (col_chunk * 4) / T * T);
  if (n_tokens <= kFloatTokenTile) {  // few tokens: rows streamed (RowDots)
    switch (w.type) {
      case GgmlType::kF32:
        return RowDotsAll<float>(job, r0, r1, col_chunk);
      case GgmlType::kF16:
        return RowDotsAll<hwy::float16_t>(job, r0, r1, col_chunk);
      default:
        return RowDotsAll<hwy::bfloat16_t>(job, r0, r1, col_chunk);
    }
  }
  HWY_ALIGN float panel[R * kMaxColChunk];
  const bool is_f32 = w.type == GgmlType::kF32;
  for (int64_t t0 = 0; t0 < n_tokens; t0 += token_chunk) {
    const int64_t t1 = std::min(n_tokens, t0 + token_chunk);
    for (int64_t k0 = 0; k0 < cols; k0 += col_chunk) {
      const int64_t kc = std::min(col_chunk, cols - k0);
      for (int64_t r = r0; r < r1; r += R) {
        const int rows = static_cast<int>(std::min<int64_t>(R, r1 - r));
        const uint8_t* row[R];
        const float* wp[R];
        HWY_UNROLL(8)
        for (int i = 0; i < R; ++i) {
          row[i] = w.data + (r + std::min(i, rows - 1)) * w.row_bytes;  // past r1: never stored
          if (is_f32) {
            wp[i] = reinterpret_cast<const float*>(row[i]) + k0;
          } else {
            ConvertToF32(w.type, row[i], k0, kc, panel + i * kc);
            wp[i] = panel + i * kc;
          }
        }
        // The next panel's weights are fetched while this one's tokens run, a few lines per
        // micro-kernel call: read in 3 short pieces 1-2 KiB long from rows far apart, they
        // are a pattern the hardware prefetchers do not follow.
        const int64_t next = std::min(r + R, r1 - 1), elem = is_f32 ? 4 : 2;
        const int64_t lines_per_row = (kc * elem + 63) / 64, lines = R * lines_per_row;
        const int64_t calls = (t1 - t0 + T - 1) / T, per_call = (lines + calls - 1) / calls;
        int64_t line = 0;
        for (int64_t t = t0; t < t1; t += T) {
          for (int64_t e = std::min(lines, line + per_call); line < e; ++line) {
            const int64_t i = line / lines_per_row;
            hwy::Prefetch(w.data + std::min(next + i, r1 - 1) * w.row_bytes + k0 * elem +
                          (line % lines_per_row) * 64);
          }
          const float* x = job.x + t * cols + k0;
          float* out = job.out + t * w.rows + r;
          const int tc = static_cast<int>(std::min<int64_t>(T, t1 - t));
          MicroKernelT(tc, PanelF32{wp}, x, cols, kc, rows, k0 > 0, out, w.rows);
        }
      }
    }
  }
}

const char* FloatKernelNameImpl(GgmlType type) {
  if (type != GgmlType::kF32 && type != GgmlType::kF16 && type != GgmlType::kBF16) {
    return "unsupported";
  }
#if HWY_TARGET == HWY_SCALAR || HWY_TARGET == HWY_EMU128
  return "float_scalar";
#else
  // The micro-kernel's and RowDots' vectors (DM), fused multiply-adds where the target has them.
  const bool fma = HWY_NATIVE_FMA;
  switch (hn::Lanes(DM()) * 32) {
    case 512:
      return fma ? "float_fma_512" : "float_muladd_512";
    case 256:
      return fma ? "float_fma_256" : "float_muladd_256";
    case 128:
      return fma ? "float_fma_128" : "float_muladd_128";
    default:
      return fma ? "float_fma" : "float_muladd";
  }
#endif
}

}  // namespace HWY_NAMESPACE
}  // namespace internal
}  // namespace promptcache
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace promptcache::internal {

HWY_EXPORT(FloatMatMulRowsImpl);
HWY_EXPORT(FloatKernelNameImpl);

const char* FloatKernelName(GgmlType type) {
  return HWY_DYNAMIC_DISPATCH(FloatKernelNameImpl)(type);
}

void FloatMatMulRows(const MatMulJob& job, int64_t r0, int64_t r1) {
  HWY_DYNAMIC_DISPATCH(FloatMatMulRowsImpl)(job, r0, r1);
}

}  // namespace promptcache::internal
#endif  // HWY_ONCE
