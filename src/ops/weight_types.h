// The weight types the kernels know: one row each in one table, with the type's block size, the
// activations it is multiplied with, its reference dequantization (the definition of what the
// bytes mean), its quantizer (for `synth` and `quantize`), and its decoding into the integer form
// that every matrix kernel computes with.
//
// The integer form. Every quantized type is, block by block, small integers times scales:
//   32-element types (activations in Q8_0 form):  w[i] = d * q[i] + m
//   K-quants, IQ4_XS and the low-bit i-quants (activations in Q8_K form):
//                                                   w[i] = d * sc[i / 16] * q[i] - m * mn[i / 16]
// with q an int8 and sc, mn small integers. The low-bit i-quants (IQ1_S .. IQ3_S, iq_decode.h)
// fit it exactly: q a codebook magnitude times a sign (IQ1: 8 * {-1, 0, 1} +- 1), sc = 2s + 1,
// d the file's scale times a power of two; they have no quantizer here. A matrix product is then
// exact int32 block sums of q times the activations' int8 quants, and a fixed sequence of float
// operations per block (see DotIntForm). Kernels may find the integer sums any way they like:
// the result is the same to the bit on every instruction set, for every batch size.
#pragma once

#include <cstdint>

#include "gguf/gguf.h"

namespace promptcache {

// What a weight type's rows are multiplied with.
enum class ActFormat : uint8_t {
  kFloat,  // F32, F16, BF16: activations as floats
  kQ8_0,   // 32-element types: activations in 32-blocks of int8 with a float scale
  kQ8_K,   // K-quants, IQ4_XS, low-bit i-quants: 256-blocks of int8 with a float scale
};

// One block of a quantized row in integer form (only block_elems entries of q are used; sc and
// mn only for kQ8_K types).
struct IntBlock {
  int8_t q[256];
  int16_t sc[16];  // scale of each 16 elements
  int16_t mn[16];  // minimum of each 16 elements (types with has_min)
  float d = 0;     // the block's scale (K: the super-block's)
  float m = 0;     // 32-blocks: the offset; K: the scale of the minimums
};

struct WeightTypeInfo {
  GgmlType type;
  int block_elems;
  int block_bytes;
  ActFormat act;
  bool has_min;  // 32-blocks: w = d*q + m; K: minimums subtracted
  // Reference: one block to floats, as ggml defines it (float arithmetic in its order).
  void (*dequantize)(const uint8_t* block, float* out);
  // One block from floats; null where this engine has no quantizer for the type.
  void (*quantize)(const float* in, uint8_t* block);
  // One block to its integer form (null for float types).
  void (*decode)(const uint8_t* block, IntBlock* out);
  // Only d, m, sc and mn of the integer form (what the kernels' SIMD decoders do not produce).
  void (*decode_scales)(const uint8_t* block, IntBlock* out);
};

// The row for `type`, or null for types this engine cannot compute with.
const WeightTypeInfo* FindWeightType(GgmlType type);

// Activations in the form quantized weights need: per token, cols int8 quants; per block (32 for
// kQ8_0, 256 for kQ8_K) a float scale; per 32 (kQ8_0) or 16 (kQ8_K) elements the quants' sum.
// kQ8_0 also has, per block, s = the unrounded scale times the sum, rounded to f16 (llama.cpp's
// Q8_1 form, what offsets are multiplied with).
struct QuantizedRowView {
  const int8_t* q;
  const float* d;
  const int16_t* sums;
  const float* s;  // kQ8_0 only
};
// Quantizes n floats (n a multiple of the block) into the views' arrays: q[n], d[n / block],
// sums[n / 32] and s[n / 32] (kQ8_0) or sums[n / 16] (kQ8_K; s unused). The reference; kernels
// must match it exactly. The rounding is llama.cpp's on x86: Q8_0 form, scale amax / 127 stored
// as f16, quants round(x * 127 / amax) half to even; Q8_K form, see weight_types.cc.
void QuantizeActivationsReference(ActFormat format, const float* x, int64_t n, int8_t* q,
                                  float* d, int16_t* sums, float* s);

// The canonical dot product of one quantized row (n elements in `type`) with one token's
// quantized activations: exact integer sums per block, then per block, in order,
//   32-blocks: acc = fma(isum, d * dx, acc); with has_min: acc = fma(m, s, acc)
//   K:         acc = fma(S, d * dx, acc);    with has_min: acc = fma(M, -(m * dx), acc)
// where S = sum over groups of 16 of sc * (q . xq) and M = sum of mn * (group sum of xq).
float DotIntForm(const WeightTypeInfo& t, const uint8_t* row, int64_t n, const QuantizedRowView& x);

// One block's step of DotIntForm: block b (decoded) against the token's quants xq, scale dx,
// sums and (kQ8_0) s of that block; returns the new accumulator.
inline float AccumulateBlock(const WeightTypeInfo& t, const IntBlock& b, const int8_t* xq,
                             float dx, const int16_t* sums, float s, float acc) {
  if (t.act == ActFormat::kQ8_0) {
    int32_t isum = 0;
    for (int j = 0; j < 32; ++j) isum += b.q[j] * xq[j];
    acc = __builtin_fmaf(static_cast<float>(isum), b.d * dx, acc);
    if (t.has_min) acc = __builtin_fmaf(b.m, s, acc);
    return acc;
  }
  int32_t scaled = 0, m = 0;
  for (int g = 0; g < 16; ++g) {
    int32_t group = 0;
    for (int j = 0; j < 16; ++j) group += b.q[16 * g + j] * xq[16 * g + j];
    scaled += b.sc[g] * group;
    m += b.mn[g] * sums[g];
  }
  acc = __builtin_fmaf(static_cast<float>(scaled), b.d * dx, acc);
  if (t.has_min) acc = __builtin_fmaf(static_cast<float>(m), -(b.m * dx), acc);
  return acc;
}

}  // namespace promptcache
