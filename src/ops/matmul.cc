#include "ops/matmul.h"

#include <algorithm>
#include <vector>

#include "core/check.h"
#include "ops/matmul_internal.h"
#include "ops/quant.h"

namespace promptcache {
namespace {

using internal::MatMulJob;

bool IsQuantized(GgmlType type) { return type == GgmlType::kQ8_0 || type == GgmlType::kQ4_0; }

size_t ExpectedRowBytes(GgmlType type, int64_t cols) {
  switch (type) {
    case GgmlType::kF32:
      return static_cast<size_t>(cols) * 4;
    case GgmlType::kF16:
    case GgmlType::kBF16:
      return static_cast<size_t>(cols) * 2;
    case GgmlType::kQ8_0:
      return static_cast<size_t>(cols / kQ8_0Block) * 34;
    case GgmlType::kQ4_0:
      return static_cast<size_t>(cols / kQ4_0Block) * 18;
    default:
      return 0;
  }
}

void CheckMatrix(const WeightMatrix& w) {
  PC_CHECK(MatMulSupports(w.type));
  PC_CHECK(w.rows >= 0 && w.cols >= 0);
  PC_CHECK(!IsQuantized(w.type) || w.cols % kQ8_0Block == 0);
  PC_CHECK(w.row_bytes >= ExpectedRowBytes(w.type, w.cols));
}

// Activations quantized once per call, before the parallel part; grows and is reused, so the
// steady state allocates nothing.
struct QuantizedActivations {
  std::vector<int8_t> q;
  std::vector<float> d;
};

int64_t RowTile(int64_t n_tokens) {
  return internal::UsesMatVec(n_tokens) ? internal::kMatVecRowAlign : internal::kPrefillRowTile;
}

}  // namespace

bool MatMulSupports(GgmlType type) {
  switch (type) {
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kBF16:
    case GgmlType::kQ8_0:
    case GgmlType::kQ4_0:
      return true;
    default:
      return false;
  }
}

bool MatMulQuantizesActivations(GgmlType type, int64_t n_tokens) { return IsQuantized(type); }

namespace internal {
bool UsesQuantizedActivations(GgmlType type, int64_t n_tokens) {
  return IsQuantized(type) && UsesMatVec(n_tokens);
}
}  // namespace internal

void MatMul(const WeightMatrix& w, const float* x, int64_t n_tokens, float* out, ThreadPool* pool) {
  float* outs[1] = {out};
  MatMulMulti(&w, 1, x, n_tokens, outs, pool);
}

void MatMulMulti(const WeightMatrix* ws, int n, const float* x, int64_t n_tokens,
                 float* const* outs, ThreadPool* pool) {
  if (n <= 0 || n_tokens <= 0) return;
  bool quantize = false;
  for (int i = 0; i < n; ++i) {
    CheckMatrix(ws[i]);
    PC_CHECK(ws[i].cols == ws[0].cols);
    quantize = quantize || internal::UsesQuantizedActivations(ws[i].type, n_tokens);
  }
  // Quantized weights see activations rounded to Q8_0 on both paths: the matrix-vector kernels
  // dot the int8 quants, the matrix-matrix ones these same values as floats. So a token's result
  // does not depend on how many tokens share the call, and a KV cache filled one token at a time
  // matches one filled by a batched prefill (up to float summation order).
  bool round = false;
  for (int i = 0; i < n; ++i) {
    round = round || (IsQuantized(ws[i].type) && !internal::UsesMatVec(n_tokens));
  }
  const int64_t cols = ws[0].cols;
  thread_local QuantizedActivations qa;
  thread_local std::vector<float> x_rounded;
  const size_t elems = static_cast<size_t>(n_tokens * cols);
  if (quantize && qa.q.size() < elems) qa.q.resize(elems);
  if (quantize && qa.d.size() < elems / kQ8_0Block) qa.d.resize(elems / kQ8_0Block);
  if (round && x_rounded.size() < elems) x_rounded.resize(elems);
  // Prepared once, before the row-parallel part, but itself split by tokens across the pool.
  auto prepare = [&, q = qa.q.data(), d = qa.d.data(), xr = x_rounded.data()](int64_t t0,
                                                                              int64_t t1) {
    const int64_t begin = t0 * cols, count = (t1 - t0) * cols;
    if (quantize)
      internal::QuantizeActivations(x + begin, count, q + begin, d + begin / kQ8_0Block);
    if (round) internal::RoundActivations(x + begin, count, xr + begin);
  };
  if (quantize || round) {
    if (pool != nullptr && pool->size() > 1 && n_tokens > 1) {
      pool->ParallelFor(n_tokens, prepare);
    } else {
      prepare(0, n_tokens);
    }
  }

  // Work units are row tiles of every matrix, numbered across the matrices in order; each thread
  // takes a contiguous range of them.
  constexpr int kMaxMatrices = 8;
  PC_CHECK(n <= kMaxMatrices);
  MatMulJob jobs[kMaxMatrices];
  int64_t tile[kMaxMatrices], first_unit[kMaxMatrices + 1];
  first_unit[0] = 0;
  for (int i = 0; i < n; ++i) {
    jobs[i].w = &ws[i];
    jobs[i].x = round && IsQuantized(ws[i].type) ? x_rounded.data() : x;
    jobs[i].n_tokens = n_tokens;
    jobs[i].out = outs[i];
    if (internal::UsesQuantizedActivations(ws[i].type, n_tokens)) {
      jobs[i].xq = qa.q.data();
      jobs[i].xd = qa.d.data();
    }
    tile[i] = RowTile(n_tokens);
    first_unit[i + 1] = first_unit[i] + (ws[i].rows + tile[i] - 1) / tile[i];
  }
  auto run_units = [&](int64_t u0, int64_t u1) {
    for (int i = 0; i < n; ++i) {
      const int64_t b = std::max(u0, first_unit[i]), e = std::min(u1, first_unit[i + 1]);
      if (b >= e) continue;
      const int64_t r0 = (b - first_unit[i]) * tile[i];
      const int64_t r1 = std::min(ws[i].rows, (e - first_unit[i]) * tile[i]);
      if (internal::UsesMatVec(n_tokens)) {
        internal::MatVecRows(jobs[i], r0, r1);
      } else {
        internal::MatMatRows(jobs[i], r0, r1);
      }
    }
  };
  const int64_t units = first_unit[n];
  // Below this many multiply-adds a fork/join costs more than it saves (tiny models, and any
  // model when the machine is oversubscribed and a worker may not be running).
  constexpr int64_t kMinParallelWork = int64_t(1) << 17;
  int64_t work = 0;
  for (int i = 0; i < n; ++i) work += ws[i].rows * ws[i].cols * n_tokens;
  if (pool == nullptr || pool->size() == 1 || work < kMinParallelWork) {
    run_units(0, units);
  } else {
    pool->ParallelFor(units, run_units);
  }
}

void MatMulReference(const WeightMatrix& w, const float* x, int64_t n_tokens, float* out) {
  CheckMatrix(w);
  std::vector<float> row(static_cast<size_t>(w.cols));
  for (int64_t r = 0; r < w.rows; ++r) {
    DequantizeRow(w.type, w.data + r * w.row_bytes, w.cols, row.data());
    for (int64_t t = 0; t < n_tokens; ++t) {
      const float* xt = x + t * w.cols;
      double sum = 0.0;
      for (int64_t c = 0; c < w.cols; ++c) sum += static_cast<double>(row[c]) * xt[c];
      out[t * w.rows + r] = static_cast<float>(sum);
    }
  }
}

}  // namespace promptcache
