#include "ops/vec_reference.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/fp16.h"

namespace promptcache::reference {

void RmsNorm(const float* x, const float* weight, int64_t n, float eps, float* out) {
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const double scale = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(x[i] * scale * weight[i]);
}

void Rope(float* x, int n_heads, int head_dim, float pos, const float* inv_freq) {
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + static_cast<int64_t>(h) * head_dim;
    for (int i = 0; i < head_dim / 2; ++i) {
      const double theta = static_cast<double>(pos) * inv_freq[i];
      const double c = std::cos(theta), s = std::sin(theta);
      const double a = v[2 * i], b = v[2 * i + 1];
      v[2 * i] = static_cast<float>(a * c - b * s);
      v[2 * i + 1] = static_cast<float>(a * s + b * c);
    }
  }
}

void RopeHalves(float* x, int n_heads, int head_dim, float pos, const float* inv_freq) {
  const int half = head_dim / 2;
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + static_cast<int64_t>(h) * head_dim;
    for (int i = 0; i < half; ++i) {
      const double theta = static_cast<double>(pos) * inv_freq[i];
      const double c = std::cos(theta), s = std::sin(theta);
      const double a = v[i], b = v[i + half];
      v[i] = static_cast<float>(a * c - b * s);
      v[i + half] = static_cast<float>(a * s + b * c);
    }
  }
}

void Softmax(float* x, int64_t n) {
  if (n <= 0) return;
  float max = x[0];
  for (int64_t i = 1; i < n; ++i) max = std::fmax(max, x[i]);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i]) - max);
  for (int64_t i = 0; i < n; ++i) {
    x[i] = static_cast<float>(std::exp(static_cast<double>(x[i]) - max) / sum);
  }
}

void SwiGlu(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i];
    gate[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * up[i]);
  }
}

void GeluGlu(float* gate, const float* up, int64_t n) {
  const double k = std::sqrt(2.0 / 3.14159265358979323846);
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i];
    gate[i] =
        static_cast<float>(0.5 * g * (1.0 + std::tanh(k * (g + 0.044715 * g * g * g))) * up[i]);
  }
}

void Softcap(float* x, int64_t n, float cap) {
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(cap * std::tanh(double{x[i]} / cap));
}

void Add(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

float DotF32(const float* a, const float* b, int64_t n) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(a[i]) * b[i];
  return static_cast<float>(sum);
}

float DotF32F16(const float* a, const uint16_t* b, int64_t n) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(a[i]) * F16ToF32(b[i]);
  return static_cast<float>(sum);
}

void AxpyF32(float alpha, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

void AxpyF16(float alpha, const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * F16ToF32(x[i]);
}

void DotF32Rows(const float* q, const float* k, int64_t stride, int64_t n_rows, int64_t dim,
                float* out) {
  for (int64_t i = 0; i < n_rows; ++i) out[i] = DotF32(q, k + i * stride, dim);
}

void DotF32F16Rows(const float* q, const uint16_t* k, int64_t stride, int64_t n_rows, int64_t dim,
                   float* out) {
  for (int64_t i = 0; i < n_rows; ++i) out[i] = DotF32F16(q, k + i * stride, dim);
}

void AxpyF32Rows(const float* w, const float* v, int64_t stride, int64_t n_rows, int64_t dim,
                 float* y) {
  for (int64_t j = 0; j < dim; ++j) {
    double sum = y[j];
    for (int64_t i = 0; i < n_rows; ++i) sum += static_cast<double>(w[i]) * v[i * stride + j];
    y[j] = static_cast<float>(sum);
  }
}

void AxpyF16Rows(const float* w, const uint16_t* v, int64_t stride, int64_t n_rows, int64_t dim,
                 float* y) {
  for (int64_t j = 0; j < dim; ++j) {
    double sum = y[j];
    for (int64_t i = 0; i < n_rows; ++i) {
      sum += static_cast<double>(w[i]) * F16ToF32(v[i * stride + j]);
    }
    y[j] = static_cast<float>(sum);
  }
}

void F32ToF16Row(const float* x, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = F32ToF16(x[i]);
}

void F16ToF32Row(const uint16_t* x, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = F16ToF32(x[i]);
}

void Attention(const float* q, const float* k, const float* v, int64_t n, int64_t dim, float scale,
               float* out, float softcap, int64_t first) {
  std::vector<double> s(n);
  double max = -INFINITY;
  for (int64_t i = first; i < n; ++i) {
    double dot = 0.0;
    for (int64_t j = 0; j < dim; ++j) dot += static_cast<double>(q[j]) * k[i * dim + j];
    s[i] = scale * dot;
    if (softcap > 0) s[i] = softcap * std::tanh(s[i] / softcap);
    max = std::max(max, s[i]);
  }
  double sum = 0.0;
  for (int64_t i = first; i < n; ++i) sum += (s[i] = std::exp(s[i] - max));
  for (int64_t j = 0; j < dim; ++j) {
    double acc = 0.0;
    for (int64_t i = first; i < n; ++i) acc += s[i] * v[i * dim + j];
    out[j] = static_cast<float>(acc / sum);
  }
}

}  // namespace promptcache::reference
