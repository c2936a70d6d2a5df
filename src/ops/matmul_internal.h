// Internal interface between matmul.cc (API, threading, reference) and matmul_kernels.cc (the
// per-target Highway kernels). Not for use outside ops/.
#pragma once

#include <cstdint>

#include "ops/matmul.h"

namespace promptcache::internal {

// Granularity of the row split between threads on the matrix-vector path.
constexpr int kDecodeRowAlign = 4;
// Prefill micro-kernel tile: rows x tokens of accumulators, each weight vector reused for
// kPrefillTokenTile tokens and each activation vector for kPrefillRowTile rows.
constexpr int kPrefillRowTile = 3;
constexpr int kPrefillTokenTile = 4;

// One matrix multiply as the kernels see it. Activations are given as floats and, for quantized
// weight types on the matrix-vector path, also quantized to Q8_0 (int8 quants and
// the block scales, f16-rounded exactly as a stored Q8_0 block would have them).
struct MatMulJob {
  const WeightMatrix* w = nullptr;
  const float* x = nullptr;    // [n_tokens x cols]
  const int8_t* xq = nullptr;   // [n_tokens x cols] or null
  const float* xd = nullptr;    // [n_tokens x cols / 32] or null
  int64_t n_tokens = 0;
  float* out = nullptr;  // [n_tokens x rows]
};

// True where the kernels read xq/xd instead of x.
bool UsesQuantizedActivations(GgmlType type, int64_t n_tokens);

// Computes rows [r0, r1) of job.out (all tokens). Dispatches to the best Highway target.
void MatMulRows(const MatMulJob& job, int64_t r0, int64_t r1);

// Q8_0 quantization of n floats (n a multiple of 32), bit-identical to QuantizeRow(kQ8_0)
// as two arrays: the int8 quants, and the f16-rounded scales as floats.
void QuantizeActivations(const float* x, int64_t n, int8_t* q, float* d);

}  // namespace promptcache::internal
