// Matrix multiplication of GGUF weight matrices by activations: the kernel where almost all of a
// forward pass's time goes. Knows nothing of models: only a weight matrix in a ggml type and a
// batch of float rows.
//
// Decode (one token, or a few sequences decoding together) is a matrix-vector product bound by
// memory bandwidth; prefill (many tokens) is a matrix-matrix product bound by arithmetic and
// tiled for reuse. Work is split
// across the pool by weight rows, so each thread streams its own part of the weights once.
// SIMD paths are compiled for several targets with Highway and chosen at run time; MatMulReference
// is the plain scalar definition every fast path is tested against.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/thread_pool.h"
#include "gguf/gguf.h"

namespace promptcache {

// A [rows x cols] matrix stored row-major in `type` (in ggml terms: ne0 = cols, ne1 = rows).
struct WeightMatrix {
  GgmlType type = GgmlType::kF32;
  const uint8_t* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  size_t row_bytes = 0;  // RowBytes(type, cols)
};

// Types MatMul accepts: F32, F16, BF16, Q8_0, Q4_0.
bool MatMulSupports(GgmlType type);

// out[t * rows + r] = sum_c W[r, c] * x[t * cols + c], for t in [0, n_tokens), r in [0, rows).
// `pool` may be null (single-threaded). For quantized weights (Q8_0, Q4_0) x is first rounded to
// Q8_0, as llama.cpp does, whatever n_tokens is: results differ from the reference within that
// rounding, but a token's result does not depend on the other tokens of the call.
void MatMul(const WeightMatrix& w, const float* x, int64_t n_tokens, float* out, ThreadPool* pool);

// Several matrices (at most 8) with the same number of columns applied to the same x in one
// parallel job, e.g. the Q, K and V projections, or gate and up: outs[i] receives
// [n_tokens x ws[i].rows] as MatMul would write it. Saves a fork/join per extra matrix and
// quantizes x only once.
void MatMulMulti(const WeightMatrix* ws, int n, const float* x, int64_t n_tokens,
                 float* const* outs, ThreadPool* pool);

// Whether MatMul rounds x to Q8_0 (as QuantizeRow does, f16 scales included) for this weight
// type and token count: for quantized weights, always (with at most 8 tokens the kernels dot the
// int8 quants, with more the same values as floats); float weights see x as it is.
bool MatMulQuantizesActivations(GgmlType type, int64_t n_tokens);

// Plain scalar reference: dequantizes each weight row to float and sums in double.
void MatMulReference(const WeightMatrix& w, const float* x, int64_t n_tokens, float* out);

}  // namespace promptcache
