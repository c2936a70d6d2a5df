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
#include <functional>

#include "core/thread_pool.h"
#include "gguf/gguf.h"

namespace promptcache {

struct PackedMatrix;

// A [rows x cols] matrix stored row-major in `type` (in ggml terms: ne0 = cols, ne1 = rows).
// Quantized matrices may also have a packed form (packed.h), which the x86 kernels use instead;
// without one they fall back to a plain loop.
struct WeightMatrix {
  GgmlType type = GgmlType::kF32;
  const uint8_t* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  size_t row_bytes = 0;  // RowBytes(type, cols)
  const PackedMatrix* packed = nullptr;
};

// Types MatMul accepts: every type of weight_types.h's table (F32, F16, BF16, Q4_0, Q4_1,
// Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, and the low-bit
// i-quants IQ3_S, IQ3_XXS, IQ2_S, IQ2_XS, IQ2_XXS, IQ1_M, IQ1_S).
bool MatMulSupports(GgmlType type);

// Per-token work that produces x's rows [t0, t1) (a norm, an activation): given to MatMul, it
// runs in the parallel job that prepares (quantizes) those rows, instead of a job of its own
// before the multiply. Called once for each of some ranges that cover [0, n_tokens).
using TokenRowsFn = std::function<void(int64_t t0, int64_t t1)>;

// out[t * rows + r] = sum_c W[r, c] * x[t * cols + c], for t in [0, n_tokens), r in [0, rows).
// `pool` may be null (single-threaded). Quantized weights multiply x quantized to 8 bits as
// llama.cpp does (Q8_0 form for 32-element types, Q8_K form for the 256-element ones): the result
// is exactly MatMulIntFormReference's. Every output is computed by the same operations whatever
// n_tokens, the thread count or the instruction set (for float weights: the same within one
// instruction set), so a token's result never depends on the other tokens of the call.
// `before`, when not null, first writes x's rows (TokenRowsFn).
void MatMul(const WeightMatrix& w, const float* x, int64_t n_tokens, float* out, ThreadPool* pool,
            const TokenRowsFn* before = nullptr);

// Several matrices (at most 8) with the same number of columns applied to the same x in one
// parallel job, e.g. the Q, K and V projections, or gate and up: outs[i] receives
// [n_tokens x ws[i].rows] as MatMul would write it. Saves a fork/join per extra matrix and
// quantizes x only once per form.
void MatMulMulti(const WeightMatrix* ws, int n, const float* x, int64_t n_tokens,
                 float* const* outs, ThreadPool* pool, const TokenRowsFn* before = nullptr);

// Matrices (any number) with the same number of columns, each applied to its own rows of x, in
// one parallel job: ws[i] multiplies rows [first_row[i], first_row[i] + n_rows[i]) of x's
// x_rows rows, and outs[i] receives [n_rows[i] x ws[i].rows] as MatMul would write it for those
// rows. Ranges may overlap (two matrices of one input) or be empty. Mixture-of-experts layers run
// each expert on its tokens so: x holds the tokens grouped by expert, quantized once. `before`
// writes all x_rows rows.
void MatMulGrouped(const WeightMatrix* ws, int n, const int64_t* first_row,
                   const int64_t* n_rows, const float* x, int64_t x_rows, float* const* outs,
                   ThreadPool* pool, const TokenRowsFn* before = nullptr);

// Whether MatMul quantizes x for this weight type (all but F32, F16, BF16).
bool MatMulQuantizesActivations(GgmlType type);

// The kernel MatMul runs `w` with on the Highway target the dispatch chooses now (the CPU's best,
// or the one a ScopedOpsTarget selects; see OpsActiveTargetName), for any number of tokens:
//   packed_int8_vpdpbusd       packed weights, AVX-512 VNNI (AVX3 targets on CPUs that have it)
//   packed_int8_maddubs        packed weights, AVX2 maddubs + madd (unsigned quants)
//   packed_int8_maddubs_sign   the same for signed quants (Q8_0, the IQ types, MXFP4: signs moved
//                              onto the activations)
//   packed_int8_portable       packed weights read back block by block in plain C++ (non-x86,
//                              SSE4 and scalar targets)
//   unpacked_int8_loop         a quantized matrix without a packed form: the plain fallback loop
//   float_fma_256, float_muladd_128, ... float weights (F32, F16, BF16 converted to f32): vector
//                              multiply-adds (fused or not) of that many bits
// Named by the code that runs, from the same choices MatMul makes.
const char* MatMulKernelName(const WeightMatrix& w);

// Plain scalar reference of the mathematics: dequantizes each weight row to float and sums the
// products with the unrounded x in double.
void MatMulReference(const WeightMatrix& w, const float* x, int64_t n_tokens, float* out);

// Plain scalar reference of exactly what MatMul computes for quantized weights: x quantized by
// QuantizeActivationsReference, each output by DotIntForm (weight_types.h).
void MatMulIntFormReference(const WeightMatrix& w, const float* x, int64_t n_tokens, float* out);

}  // namespace promptcache
