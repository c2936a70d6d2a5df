// Highway kernels for vec.h, compiled once per target (foreach_target) and dispatched at run time.
// Each loop handles whole vectors and finishes the remainder with scalar code, so any length and
// any alignment work.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/vec.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must follow foreach_target.h.
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"

#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "ops/vec.h"

HWY_BEFORE_NAMESPACE();
namespace promptcache {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using DH = hn::Rebind<hwy::float16_t, DF>;

// Hardware half conversion is exact (round to nearest even, infinities, NaN); Highway's software
// fallback on older targets truncates, so the row conversions use the scalar code there.
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2 && !defined(HWY_DISABLE_F16C)
constexpr bool kExactF16 = true;
#else
constexpr bool kExactF16 = false;
#endif

inline const hwy::float16_t* AsHalf(const uint16_t* p) {
  return reinterpret_cast<const hwy::float16_t*>(p);
}

float SumSquares(const float* x, int64_t n) {
  const DF d;
  const int64_t step = hn::Lanes(d);
  auto a0 = hn::Zero(d), a1 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 2 * step <= n; i += 2 * step) {
    const auto v0 = hn::LoadU(d, x + i), v1 = hn::LoadU(d, x + i + step);
    a0 = hn::MulAdd(v0, v0, a0);
    a1 = hn::MulAdd(v1, v1, a1);
  }
  for (; i + step <= n; i += step) {
    const auto v = hn::LoadU(d, x + i);
    a0 = hn::MulAdd(v, v, a0);
  }
  float sum = hn::GetLane(hn::SumOfLanes(d, hn::Add(a0, a1)));
  for (; i < n; ++i) sum += x[i] * x[i];
  return sum;
}

void RmsNormImpl(const float* x, const float* weight, int64_t n, float eps, float* out) {
  const float scale = 1.0f / std::sqrt(SumSquares(x, n) / static_cast<float>(n) + eps);
  const DF d;
  const int64_t step = hn::Lanes(d);
  const auto vs = hn::Set(d, scale);
  int64_t i = 0;
  for (; i + step <= n; i += step) {
    hn::StoreU(hn::Mul(hn::Mul(hn::LoadU(d, x + i), vs), hn::LoadU(d, weight + i)), d, out + i);
  }
  for (; i < n; ++i) out[i] = x[i] * scale * weight[i];
}

void RopeImpl(float* x, int n_heads, int head_dim, float pos, const float* inv_freq) {
  // Per-pair cosines duplicated over the pair, and sines with the sign the pair swap needs:
  // (a, b) -> (a c - b s, b c + a s) = (a, b) * (c, c) + (b, a) * (-s, s).
  constexpr int kMaxHeadDim = 1024;
  HWY_ALIGN float cs[kMaxHeadDim];
  HWY_ALIGN float sn[kMaxHeadDim];
  const int dim = head_dim & ~1;
  if (dim > kMaxHeadDim) HWY_ABORT("Rope: head_dim %d too large", head_dim);
  for (int i = 0; i < dim / 2; ++i) {
    const double theta = static_cast<double>(pos) * inv_freq[i];
    const float c = static_cast<float>(std::cos(theta)), s = static_cast<float>(std::sin(theta));
    cs[2 * i] = c;
    cs[2 * i + 1] = c;
    sn[2 * i] = -s;
    sn[2 * i + 1] = s;
  }
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + static_cast<int64_t>(h) * head_dim;
    int i = 0;
#if HWY_TARGET != HWY_SCALAR
    const DF d;
    const int step = static_cast<int>(hn::Lanes(d));
    for (; i + step <= dim; i += step) {
      const auto a = hn::LoadU(d, v + i);
      const auto swapped = hn::Shuffle2301(a);
      hn::StoreU(hn::MulAdd(a, hn::Load(d, cs + i), hn::Mul(swapped, hn::Load(d, sn + i))), d,
                 v + i);
    }
#endif
    for (; i < dim; i += 2) {
      const float a = v[i], b = v[i + 1];
      v[i] = a * cs[i] + b * sn[i];
      v[i + 1] = b * cs[i + 1] + a * sn[i + 1];
    }
  }
}

void SoftmaxImpl(float* x, int64_t n) {
  if (n <= 0) return;
  const DF d;
  const int64_t step = hn::Lanes(d);
  int64_t i = 0;
  float max = x[0];
  if (n >= step) {
    auto vmax = hn::LoadU(d, x);
    for (i = step; i + step <= n; i += step) vmax = hn::Max(vmax, hn::LoadU(d, x + i));
    max = hn::GetLane(hn::MaxOfLanes(d, vmax));
  }
  for (; i < n; ++i) max = std::fmax(max, x[i]);
  const auto vmax = hn::Set(d, max);
  auto vsum = hn::Zero(d);
  for (i = 0; i + step <= n; i += step) {
    const auto e = hn::Exp(d, hn::Sub(hn::LoadU(d, x + i), vmax));
    vsum = hn::Add(vsum, e);
    hn::StoreU(e, d, x + i);
  }
  float sum = hn::GetLane(hn::SumOfLanes(d, vsum));
  for (; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    sum += x[i];
  }
  const float inv = 1.0f / sum;
  const auto vinv = hn::Set(d, inv);
  for (i = 0; i + step <= n; i += step) hn::StoreU(hn::Mul(hn::LoadU(d, x + i), vinv), d, x + i);
  for (; i < n; ++i) x[i] *= inv;
}

void SwiGluImpl(float* gate, const float* up, int64_t n) {
  const DF d;
  const int64_t step = hn::Lanes(d);
  const auto one = hn::Set(d, 1.0f);
  // Highway's Exp is defined up to 88; beyond, silu(g) is below 1e-36 either way.
  const auto limit = hn::Set(d, 88.0f);
  int64_t i = 0;
  for (; i + step <= n; i += step) {
    const auto g = hn::LoadU(d, gate + i);
    const auto silu = hn::Div(g, hn::Add(one, hn::Exp(d, hn::Min(hn::Neg(g), limit))));
    hn::StoreU(hn::Mul(silu, hn::LoadU(d, up + i)), d, gate + i);
  }
  for (; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void AddImpl(float* y, const float* x, int64_t n) {
  const DF d;
  const int64_t step = hn::Lanes(d);
  int64_t i = 0;
  for (; i + step <= n; i += step) {
    hn::StoreU(hn::Add(hn::LoadU(d, y + i), hn::LoadU(d, x + i)), d, y + i);
  }
  for (; i < n; ++i) y[i] += x[i];
}

float DotF32Impl(const float* a, const float* b, int64_t n) {
  const DF d;
  const int64_t step = hn::Lanes(d);
  auto s0 = hn::Zero(d), s1 = hn::Zero(d), s2 = hn::Zero(d), s3 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 4 * step <= n; i += 4 * step) {
    s0 = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), s0);
    s1 = hn::MulAdd(hn::LoadU(d, a + i + step), hn::LoadU(d, b + i + step), s1);
    s2 = hn::MulAdd(hn::LoadU(d, a + i + 2 * step), hn::LoadU(d, b + i + 2 * step), s2);
    s3 = hn::MulAdd(hn::LoadU(d, a + i + 3 * step), hn::LoadU(d, b + i + 3 * step), s3);
  }
  for (; i + step <= n; i += step) s0 = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), s0);
  float sum = hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(s0, s1), hn::Add(s2, s3))));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

float DotF32F16Impl(const float* a, const uint16_t* b, int64_t n) {
  const DF d;
  const DH dh;
  const int64_t step = hn::Lanes(d);
  const hwy::float16_t* bh = AsHalf(b);
  auto s0 = hn::Zero(d), s1 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 2 * step <= n; i += 2 * step) {
    s0 = hn::MulAdd(hn::LoadU(d, a + i), hn::PromoteTo(d, hn::LoadU(dh, bh + i)), s0);
    s1 = hn::MulAdd(hn::LoadU(d, a + i + step), hn::PromoteTo(d, hn::LoadU(dh, bh + i + step)),
                    s1);
  }
  for (; i + step <= n; i += step) {
    s0 = hn::MulAdd(hn::LoadU(d, a + i), hn::PromoteTo(d, hn::LoadU(dh, bh + i)), s0);
  }
  float sum = hn::GetLane(hn::SumOfLanes(d, hn::Add(s0, s1)));
  for (; i < n; ++i) sum += a[i] * F16ToF32(b[i]);
  return sum;
}

void AxpyF32Impl(float alpha, const float* x, float* y, int64_t n) {
  const DF d;
  const int64_t step = hn::Lanes(d);
  const auto va = hn::Set(d, alpha);
  int64_t i = 0;
  for (; i + step <= n; i += step) {
    hn::StoreU(hn::MulAdd(va, hn::LoadU(d, x + i), hn::LoadU(d, y + i)), d, y + i);
  }
  for (; i < n; ++i) y[i] += alpha * x[i];
}

void AxpyF16Impl(float alpha, const uint16_t* x, float* y, int64_t n) {
  const DF d;
  const DH dh;
  const int64_t step = hn::Lanes(d);
  const hwy::float16_t* xh = AsHalf(x);
  const auto va = hn::Set(d, alpha);
  int64_t i = 0;
  for (; i + step <= n; i += step) {
    const auto xv = hn::PromoteTo(d, hn::LoadU(dh, xh + i));
    hn::StoreU(hn::MulAdd(va, xv, hn::LoadU(d, y + i)), d, y + i);
  }
  for (; i < n; ++i) y[i] += alpha * F16ToF32(x[i]);
}

void F32ToF16RowImpl(const float* x, uint16_t* out, int64_t n) {
  int64_t i = 0;
  if constexpr (kExactF16) {
    const DF d;
    const DH dh;
    const int64_t step = hn::Lanes(d);
    auto* oh = reinterpret_cast<hwy::float16_t*>(out);
    for (; i + step <= n; i += step) hn::StoreU(hn::DemoteTo(dh, hn::LoadU(d, x + i)), dh, oh + i);
  }
  for (; i < n; ++i) out[i] = F32ToF16(x[i]);
}

void F16ToF32RowImpl(const uint16_t* x, float* out, int64_t n) {
  int64_t i = 0;
  if constexpr (kExactF16) {
    const DF d;
    const DH dh;
    const int64_t step = hn::Lanes(d);
    const hwy::float16_t* xh = AsHalf(x);
    for (; i + step <= n; i += step) hn::StoreU(hn::PromoteTo(d, hn::LoadU(dh, xh + i)), d, out + i);
  }
  for (; i < n; ++i) out[i] = F16ToF32(x[i]);
}

}  // namespace HWY_NAMESPACE
}  // namespace promptcache
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace promptcache {

HWY_EXPORT(RmsNormImpl);
HWY_EXPORT(RopeImpl);
HWY_EXPORT(SoftmaxImpl);
HWY_EXPORT(SwiGluImpl);
HWY_EXPORT(AddImpl);
HWY_EXPORT(DotF32Impl);
HWY_EXPORT(DotF32F16Impl);
HWY_EXPORT(AxpyF32Impl);
HWY_EXPORT(AxpyF16Impl);
HWY_EXPORT(F32ToF16RowImpl);
HWY_EXPORT(F16ToF32RowImpl);

void RmsNorm(const float* x, const float* weight, int64_t n, float eps, float* out) {
  HWY_DYNAMIC_DISPATCH(RmsNormImpl)(x, weight, n, eps, out);
}
void Rope(float* x, int n_heads, int head_dim, float pos, const float* inv_freq) {
  HWY_DYNAMIC_DISPATCH(RopeImpl)(x, n_heads, head_dim, pos, inv_freq);
}
void Softmax(float* x, int64_t n) { HWY_DYNAMIC_DISPATCH(SoftmaxImpl)(x, n); }
void SwiGlu(float* gate, const float* up, int64_t n) {
  HWY_DYNAMIC_DISPATCH(SwiGluImpl)(gate, up, n);
}
void Add(float* y, const float* x, int64_t n) { HWY_DYNAMIC_DISPATCH(AddImpl)(y, x, n); }
float DotF32(const float* a, const float* b, int64_t n) {
  return HWY_DYNAMIC_DISPATCH(DotF32Impl)(a, b, n);
}
float DotF32F16(const float* a, const uint16_t* b, int64_t n) {
  return HWY_DYNAMIC_DISPATCH(DotF32F16Impl)(a, b, n);
}
void AxpyF32(float alpha, const float* x, float* y, int64_t n) {
  HWY_DYNAMIC_DISPATCH(AxpyF32Impl)(alpha, x, y, n);
}
void AxpyF16(float alpha, const uint16_t* x, float* y, int64_t n) {
  HWY_DYNAMIC_DISPATCH(AxpyF16Impl)(alpha, x, y, n);
}
void F32ToF16Row(const float* x, uint16_t* out, int64_t n) {
  HWY_DYNAMIC_DISPATCH(F32ToF16RowImpl)(x, out, n);
}
void F16ToF32Row(const uint16_t* x, float* out, int64_t n) {
  HWY_DYNAMIC_DISPATCH(F16ToF32RowImpl)(x, out, n);
}

}  // namespace promptcache
#endif  // HWY_ONCE
