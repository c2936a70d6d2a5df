// Vector kernels of a transformer layer that are not matrix multiplies: RMSNorm, rotary position
// embedding, softmax, SwiGLU, dot products and axpy against float or half rows (attention reads
// its K/V cache through these). SIMD via Highway with run-time dispatch; each has a scalar
// reference in vec_reference.h used by the tests.
#pragma once

#include <cstdint>

namespace promptcache {

// out[i] = x[i] / sqrt(mean(x^2) + eps) * weight[i]. out may alias x.
void RmsNorm(const float* x, const float* weight, int64_t n, float eps, float* out);

// Rotary embedding on adjacent pairs, as GGUF llama files expect: for each head h and pair i,
// (x[2i], x[2i+1]) is rotated by angle pos * inv_freq[i]. x holds n_heads * head_dim floats.
void Rope(float* x, int n_heads, int head_dim, float pos, const float* inv_freq);
// Rotary embedding on the two halves of each head (GPT-NeoX's layout, which Qwen, Gemma and Phi
// files use): (x[i], x[i + head_dim/2]) is rotated by angle pos * inv_freq[i].
void RopeHalves(float* x, int n_heads, int head_dim, float pos, const float* inv_freq);

// In place: x[i] = exp(x[i] - max) / sum.
void Softmax(float* x, int64_t n);

// gate[i] = silu(gate[i]) * up[i].
void SwiGlu(float* gate, const float* up, int64_t n);
// gate[i] = gelu(gate[i]) * up[i], GELU in its tanh form (Gemma's gated FFN):
// gelu(g) = g/2 * (1 + tanh(sqrt(2/pi) * (g + 0.044715 g^3))). Every element takes the same
// vector arithmetic (the remainder is padded to a whole vector), so results do not depend on n.
void GeluGlu(float* gate, const float* up, int64_t n);
// x[i] = cap * tanh(x[i] / cap): soft-capping of attention scores and logits (Gemma 2). Every
// element takes the same vector arithmetic, as in GeluGlu.
void Softcap(float* x, int64_t n, float cap);

// y[i] += x[i].
void Add(float* y, const float* x, int64_t n);

float DotF32(const float* a, const float* b, int64_t n);
float DotF32F16(const float* a, const uint16_t* b, int64_t n);
// y[i] += alpha * x[i].
void AxpyF32(float alpha, const float* x, float* y, int64_t n);
void AxpyF16(float alpha, const uint16_t* x, float* y, int64_t n);

// Batched forms for attention over a KV cache, one call per run of cache rows instead of one per
// row: n_rows keys or values of `dim` elements each, `stride` elements apart (a cache row holds
// every KV head of a position, so one head's vectors are strided).
// out[i] = dot(q, k + i * stride) for i in [0, n_rows).
void DotF32Rows(const float* q, const float* k, int64_t stride, int64_t n_rows, int64_t dim,
                float* out);
void DotF32F16Rows(const float* q, const uint16_t* k, int64_t stride, int64_t n_rows, int64_t dim,
                   float* out);
// y[j] += sum_i w[i] * v[i * stride + j] for j in [0, dim).
void AxpyF32Rows(const float* w, const float* v, int64_t stride, int64_t n_rows, int64_t dim,
                 float* y);
void AxpyF16Rows(const float* w, const uint16_t* v, int64_t stride, int64_t n_rows, int64_t dim,
                 float* y);

void F32ToF16Row(const float* x, uint16_t* out, int64_t n);
void F16ToF32Row(const uint16_t* x, float* out, int64_t n);

}  // namespace promptcache
