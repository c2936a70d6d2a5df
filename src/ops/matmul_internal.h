// Internal interface between matmul.cc (API, threading, reference) and the per-target Highway
// kernels: matvec_kernels.cc (one or a few tokens) and matmat_kernels.cc (many tokens). Not for
// use outside ops/.
#pragma once

#include <cstdint>

#include "ops/matmul.h"

namespace promptcache::internal {

// Up to this many tokens MatMul is bound by streaming the weights from memory and uses the
// matrix-vector kernels (each row read from memory once); beyond, the tiled matrix-matrix ones.
constexpr int64_t kMaxMatVecTokens = 8;
// Granularity of the row split between threads on the matrix-vector path.
constexpr int kMatVecRowAlign = 4;
// Matrix-matrix micro-kernel tile: rows x tokens of accumulators.
constexpr int kPrefillRowTile = 3;
constexpr int kPrefillTokenTile = 4;

inline bool UsesMatVec(int64_t n_tokens) { return n_tokens <= kMaxMatVecTokens; }

// True where the kernels read xq/xd instead of x: quantized weights on the matrix-vector path.
bool UsesQuantizedActivations(GgmlType type, int64_t n_tokens);

// One matrix multiply as the kernels see it. Activations are given as floats and, where
// UsesQuantizedActivations, also quantized to Q8_0: int8 quants, and the block scales as floats,
// f16-rounded exactly as a stored Q8_0 block would have them.
struct MatMulJob {
  const WeightMatrix* w = nullptr;
  const float* x = nullptr;    // [n_tokens x cols]
  const int8_t* xq = nullptr;  // [n_tokens x cols] or null
  const float* xd = nullptr;   // [n_tokens x cols / 32] or null
  int64_t n_tokens = 0;
  float* out = nullptr;  // [n_tokens x rows]
};

// Compute rows [r0, r1) of job.out (all tokens), dispatched to the best Highway target.
void MatVecRows(const MatMulJob& job, int64_t r0, int64_t r1);
void MatMatRows(const MatMulJob& job, int64_t r0, int64_t r1);

// Q8_0 quantization of n floats (n a multiple of 32), bit-identical to QuantizeRow(kQ8_0)
// as two arrays: the int8 quants, and the f16-rounded scales as floats.
void QuantizeActivations(const float* x, int64_t n, int8_t* q, float* d);
// The same rounding as floats (scale times quant): what the matrix-matrix kernels see for
// quantized weights, so that both paths compute the same products.
void RoundActivations(const float* x, int64_t n, float* out);

}  // namespace promptcache::internal
