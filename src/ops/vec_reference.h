// Plain scalar definitions of the vec.h kernels: the ground truth the SIMD versions are tested
// against, written for clarity (double accumulation where it makes the reference more exact).
#pragma once

#include <cstdint>

namespace promptcache::reference {

void RmsNorm(const float* x, const float* weight, int64_t n, float eps, float* out);
void Rope(float* x, int n_heads, int head_dim, float pos, const float* inv_freq);
void RopeHalves(float* x, int n_heads, int head_dim, float pos, const float* inv_freq);
void Softmax(float* x, int64_t n);
void SwiGlu(float* gate, const float* up, int64_t n);
void GeluGlu(float* gate, const float* up, int64_t n);
void Softcap(float* x, int64_t n, float cap);
void Add(float* y, const float* x, int64_t n);
float DotF32(const float* a, const float* b, int64_t n);
float DotF32F16(const float* a, const uint16_t* b, int64_t n);
void AxpyF32(float alpha, const float* x, float* y, int64_t n);
void AxpyF16(float alpha, const uint16_t* x, float* y, int64_t n);
void DotF32Rows(const float* q, const float* k, int64_t stride, int64_t n_rows, int64_t dim,
                float* out);
void DotF32F16Rows(const float* q, const uint16_t* k, int64_t stride, int64_t n_rows, int64_t dim,
                   float* out);
void AxpyF32Rows(const float* w, const float* v, int64_t stride, int64_t n_rows, int64_t dim,
                 float* y);
void AxpyF16Rows(const float* w, const uint16_t* v, int64_t stride, int64_t n_rows, int64_t dim,
                 float* y);
void F32ToF16Row(const float* x, uint16_t* out, int64_t n);
// Softmax attention of one query over f32 key and value rows [first, n) of dim
// (ops/attention.h in one piece): out = sum_i softmax(score_i) v_i, in double, where
// score_i = scale * q·k_i, soft-capped to softcap * tanh(score_i / softcap) when softcap > 0.
void Attention(const float* q, const float* k, const float* v, int64_t n, int64_t dim, float scale,
               float* out, float softcap = 0.0f, int64_t first = 0);
void F16ToF32Row(const uint16_t* x, float* out, int64_t n);

}  // namespace promptcache::reference
