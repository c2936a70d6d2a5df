// Interim: forwards to the scalar references until the Highway kernels land.
#include "ops/vec.h"

#include "ops/vec_reference.h"

namespace promptcache {

void RmsNorm(const float* x, const float* weight, int64_t n, float eps, float* out) {
  reference::RmsNorm(x, weight, n, eps, out);
}
void Rope(float* x, int n_heads, int head_dim, float pos, const float* inv_freq) {
  reference::Rope(x, n_heads, head_dim, pos, inv_freq);
}
void Softmax(float* x, int64_t n) { reference::Softmax(x, n); }
void SwiGlu(float* gate, const float* up, int64_t n) { reference::SwiGlu(gate, up, n); }
void Add(float* y, const float* x, int64_t n) { reference::Add(y, x, n); }
float DotF32(const float* a, const float* b, int64_t n) { return reference::DotF32(a, b, n); }
float DotF32F16(const float* a, const uint16_t* b, int64_t n) {
  return reference::DotF32F16(a, b, n);
}
void AxpyF32(float alpha, const float* x, float* y, int64_t n) {
  reference::AxpyF32(alpha, x, y, n);
}
void AxpyF16(float alpha, const uint16_t* x, float* y, int64_t n) {
  reference::AxpyF16(alpha, x, y, n);
}
void F32ToF16Row(const float* x, uint16_t* out, int64_t n) { reference::F32ToF16Row(x, out, n); }
void F16ToF32Row(const uint16_t* x, float* out, int64_t n) { reference::F16ToF32Row(x, out, n); }

}  // namespace promptcache
