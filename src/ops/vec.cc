// Highway kernels for vec.h, compiled once per target (foreach_target) and dispatched at run time.
// Each loop handles whole vectors and finishes the remainder with scalar code, so any length and
// any alignment work.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/vec.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Highway headers below must follow foreach_target.h.
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
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

constexpr int kMaxHeadDim = 1024;

// Per-pair cosines duplicated over the pair, and sines with the sign the pair swap needs:
// (a, b) -> (a c - b s, b c + a s) = (a, b) * (c, c) + (b, a) * (-s, s).
// Kept between calls (the model rotates q and then k at the same position, so every other call
// finds it ready) and validated against all inputs, inv_freq by value, so it is never stale.
struct RopeTable {
  int dim = -1;
  float pos = 0.0f;
  float inv_freq[kMaxHeadDim / 2];
  HWY_ALIGN float cs[kMaxHeadDim];
  HWY_ALIGN float sn[kMaxHeadDim];
  HWY_ALIGN float cos_half[kMaxHeadDim / 2];  // cos and sin of each angle once (RopeHalves)
  HWY_ALIGN float sin_half[kMaxHeadDim / 2];
};

const RopeTable& GetRopeTable(int dim, float pos, const float* inv_freq) {
  thread_local RopeTable t;
  const size_t freq_bytes = sizeof(float) * (dim / 2);
  if (t.dim == dim && std::memcmp(&t.pos, &pos, sizeof(pos)) == 0 &&
      std::memcmp(t.inv_freq, inv_freq, freq_bytes) == 0) {
    return t;
  }
  t.dim = dim;
  t.pos = pos;
  std::memcpy(t.inv_freq, inv_freq, freq_bytes);
  for (int i = 0; i < dim / 2; ++i) {
    const double theta = static_cast<double>(pos) * inv_freq[i];
    const float c = static_cast<float>(std::cos(theta)), s = static_cast<float>(std::sin(theta));
    t.cs[2 * i] = c;
    t.cs[2 * i + 1] = c;
    t.sn[2 * i] = -s;
    t.sn[2 * i + 1] = s;
    t.cos_half[i] = c;
    t.sin_half[i] = s;
  }
  return t;
}

void RopeHalvesImpl(float* x, int n_heads, int head_dim, float pos, const float* inv_freq) {
  const int dim = head_dim & ~1;
  if (dim > kMaxHeadDim) HWY_ABORT("RopeHalves: head_dim %d too large", head_dim);
  const RopeTable& table = GetRopeTable(dim, pos, inv_freq);
  const int half = dim / 2;
  for (int h = 0; h < n_heads; ++h) {
    float* lo = x + static_cast<int64_t>(h) * head_dim;
    float* hi = lo + half;
    int i = 0;
#if HWY_TARGET != HWY_SCALAR
    const DF d;
    const int step = static_cast<int>(hn::Lanes(d));
    for (; i + step <= half; i += step) {
      const auto a = hn::LoadU(d, lo + i), b = hn::LoadU(d, hi + i);
      const auto c = hn::Load(d, table.cos_half + i), s = hn::Load(d, table.sin_half + i);
      hn::StoreU(hn::NegMulAdd(b, s, hn::Mul(a, c)), d, lo + i);
      hn::StoreU(hn::MulAdd(a, s, hn::Mul(b, c)), d, hi + i);
    }
#endif
    for (; i < half; ++i) {
      const float a = lo[i], b = hi[i], c = table.cos_half[i], s = table.sin_half[i];
      lo[i] = a * c - b * s;
      hi[i] = a * s + b * c;
    }
  }
}

void RopeImpl(float* x, int n_heads, int head_dim, float pos, const float* inv_freq) {
  const int dim = head_dim & ~1;
  if (dim > kMaxHeadDim) HWY_ABORT("Rope: head_dim %d too large", head_dim);
  const RopeTable& table = GetRopeTable(dim, pos, inv_freq);
  const float* cs = table.cs;
  const float* sn = table.sn;
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

// Applies fn (vector in, vector out) to whole vectors of x and then to the remainder padded into
// one more vector, so that each element's result is the same wherever it falls.
template <class Fn>
HWY_INLINE void MapPadded(float* x, const float* y, int64_t n, const Fn& fn) {
  const DF d;
  const int64_t step = hn::Lanes(d);
  int64_t i = 0;
  for (; i + step <= n; i += step) {
    const auto b = y ? hn::LoadU(d, y + i) : hn::Zero(d);
    hn::StoreU(fn(hn::LoadU(d, x + i), b), d, x + i);
  }
  if (i == n) return;
  HWY_ALIGN float xs[HWY_MAX_BYTES / sizeof(float)] = {}, ys[HWY_MAX_BYTES / sizeof(float)] = {};
  std::memcpy(xs, x + i, sizeof(float) * (n - i));
  if (y) std::memcpy(ys, y + i, sizeof(float) * (n - i));
  hn::Store(fn(hn::Load(d, xs), hn::Load(d, ys)), d, xs);
  std::memcpy(x + i, xs, sizeof(float) * (n - i));
}

void GeluGluImpl(float* gate, const float* up, int64_t n) {
  const DF d;
  const auto half = hn::Set(d, 0.5f), one = hn::Set(d, 1.0f);
  const auto c0 = hn::Set(d, 0.7978845608028654f), c1 = hn::Set(d, 0.044715f);
  MapPadded(gate, up, n, [&](auto g, auto u) {
    const auto inner = hn::Mul(c0, hn::MulAdd(hn::Mul(c1, g), hn::Mul(g, g), g));
    const auto gelu = hn::Mul(hn::Mul(half, g), hn::Add(one, hn::Tanh(d, inner)));
    return hn::Mul(gelu, u);
  });
}

void SoftcapImpl(float* x, int64_t n, float cap) {
  const DF d;
  const auto vcap = hn::Set(d, cap), inv = hn::Set(d, 1.0f / cap);
  MapPadded(x, nullptr, n,
            [&](auto v, auto) { return hn::Mul(vcap, hn::Tanh(d, hn::Mul(v, inv))); });
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
    s1 = hn::MulAdd(hn::LoadU(d, a + i + step), hn::PromoteTo(d, hn::LoadU(dh, bh + i + step)), s1);
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

// Element access for the batched row kernels: f32 rows or f16 rows widened to f32.
struct F32Elems {
  using T = float;
  static hn::Vec<DF> Load(DF d, const float* p) { return hn::LoadU(d, p); }
  static float At(const float* p) { return *p; }
};
struct F16Elems {
  using T = uint16_t;
  static hn::Vec<DF> Load(DF d, const uint16_t* p) {
    return hn::PromoteTo(d, hn::LoadU(DH(), AsHalf(p)));
  }
  static float At(const uint16_t* p) { return F16ToF32(*p); }
};

// Four rows at a time, so each load of q serves four keys.
template <class E>
void DotRowsImpl(const float* q, const typename E::T* k, int64_t stride, int64_t n_rows,
                 int64_t dim, float* out) {
  const DF d;
  const int64_t n = hn::Lanes(d);
  const int64_t dv = dim / n * n;
  int64_t i = 0;
  for (; i + 4 <= n_rows; i += 4) {
    const typename E::T* k0 = k + i * stride;
    const typename E::T* k1 = k0 + stride;
    const typename E::T* k2 = k1 + stride;
    const typename E::T* k3 = k2 + stride;
    auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
    for (int64_t j = 0; j < dv; j += n) {
      const auto qv = hn::LoadU(d, q + j);
      a0 = hn::MulAdd(qv, E::Load(d, k0 + j), a0);
      a1 = hn::MulAdd(qv, E::Load(d, k1 + j), a1);
      a2 = hn::MulAdd(qv, E::Load(d, k2 + j), a2);
      a3 = hn::MulAdd(qv, E::Load(d, k3 + j), a3);
    }
    float s0 = hn::GetLane(hn::SumOfLanes(d, a0)), s1 = hn::GetLane(hn::SumOfLanes(d, a1));
    float s2 = hn::GetLane(hn::SumOfLanes(d, a2)), s3 = hn::GetLane(hn::SumOfLanes(d, a3));
    for (int64_t j = dv; j < dim; ++j) {
      s0 += q[j] * E::At(k0 + j);
      s1 += q[j] * E::At(k1 + j);
      s2 += q[j] * E::At(k2 + j);
      s3 += q[j] * E::At(k3 + j);
    }
    out[i] = s0;
    out[i + 1] = s1;
    out[i + 2] = s2;
    out[i + 3] = s3;
  }
  for (; i < n_rows; ++i) {
    const typename E::T* ki = k + i * stride;
    auto a = hn::Zero(d);
    for (int64_t j = 0; j < dv; j += n) a = hn::MulAdd(hn::LoadU(d, q + j), E::Load(d, ki + j), a);
    float s = hn::GetLane(hn::SumOfLanes(d, a));
    for (int64_t j = dv; j < dim; ++j) s += q[j] * E::At(ki + j);
    out[i] = s;
  }
}

// y[j0, j0 + V lanes-vectors) kept in registers across all rows.
template <class E, int V>
void AxpyRowsChunk(const float* w, const typename E::T* v, int64_t stride, int64_t n_rows,
                   int64_t j0, float* y) {
  const DF d;
  const int64_t n = hn::Lanes(d);
  hn::Vec<DF> acc[V];
  HWY_UNROLL(8)
  for (int c = 0; c < V; ++c) acc[c] = hn::LoadU(d, y + j0 + c * n);
  for (int64_t i = 0; i < n_rows; ++i) {
    const auto wv = hn::Set(d, w[i]);
    const typename E::T* vi = v + i * stride + j0;
    HWY_UNROLL(8)
    for (int c = 0; c < V; ++c) acc[c] = hn::MulAdd(wv, E::Load(d, vi + c * n), acc[c]);
  }
  HWY_UNROLL(8)
  for (int c = 0; c < V; ++c) hn::StoreU(acc[c], d, y + j0 + c * n);
}

template <class E>
void AxpyRowsImpl(const float* w, const typename E::T* v, int64_t stride, int64_t n_rows,
                  int64_t dim, float* y) {
  const DF d;
  const int64_t n = hn::Lanes(d);
  int64_t j = 0;
  for (; j + 8 * n <= dim; j += 8 * n) AxpyRowsChunk<E, 8>(w, v, stride, n_rows, j, y);
  for (; j + 2 * n <= dim; j += 2 * n) AxpyRowsChunk<E, 2>(w, v, stride, n_rows, j, y);
  for (; j + n <= dim; j += n) AxpyRowsChunk<E, 1>(w, v, stride, n_rows, j, y);
  for (; j < dim; ++j) {
    float acc = y[j];
    for (int64_t i = 0; i < n_rows; ++i) acc += w[i] * E::At(v + i * stride + j);
    y[j] = acc;
  }
}

void DotF32RowsImpl(const float* q, const float* k, int64_t stride, int64_t n_rows, int64_t dim,
                    float* out) {
  DotRowsImpl<F32Elems>(q, k, stride, n_rows, dim, out);
}
void DotF32F16RowsImpl(const float* q, const uint16_t* k, int64_t stride, int64_t n_rows,
                       int64_t dim, float* out) {
  DotRowsImpl<F16Elems>(q, k, stride, n_rows, dim, out);
}
void AxpyF32RowsImpl(const float* w, const float* v, int64_t stride, int64_t n_rows, int64_t dim,
                     float* y) {
  AxpyRowsImpl<F32Elems>(w, v, stride, n_rows, dim, y);
}
void AxpyF16RowsImpl(const float* w, const uint16_t* v, int64_t stride, int64_t n_rows, int64_t dim,
                     float* y) {
  AxpyRowsImpl<F16Elems>(w, v, stride, n_rows, dim, y);
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
    for (; i + step <= n; i += step)
      hn::StoreU(hn::PromoteTo(d, hn::LoadU(dh, xh + i)), d, out + i);
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
HWY_EXPORT(RopeHalvesImpl);
HWY_EXPORT(SoftmaxImpl);
HWY_EXPORT(SwiGluImpl);
HWY_EXPORT(GeluGluImpl);
HWY_EXPORT(SoftcapImpl);
HWY_EXPORT(AddImpl);
HWY_EXPORT(DotF32Impl);
HWY_EXPORT(DotF32F16Impl);
HWY_EXPORT(AxpyF32Impl);
HWY_EXPORT(AxpyF16Impl);
HWY_EXPORT(DotF32RowsImpl);
HWY_EXPORT(DotF32F16RowsImpl);
HWY_EXPORT(AxpyF32RowsImpl);
HWY_EXPORT(AxpyF16RowsImpl);
HWY_EXPORT(F32ToF16RowImpl);
HWY_EXPORT(F16ToF32RowImpl);

void RmsNorm(const float* x, const float* weight, int64_t n, float eps, float* out) {
  HWY_DYNAMIC_DISPATCH(RmsNormImpl)(x, weight, n, eps, out);
}
void Rope(float* x, int n_heads, int head_dim, float pos, const float* inv_freq) {
  HWY_DYNAMIC_DISPATCH(RopeImpl)(x, n_heads, head_dim, pos, inv_freq);
}
void RopeHalves(float* x, int n_heads, int head_dim, float pos, const float* inv_freq) {
  HWY_DYNAMIC_DISPATCH(RopeHalvesImpl)(x, n_heads, head_dim, pos, inv_freq);
}
void Softmax(float* x, int64_t n) { HWY_DYNAMIC_DISPATCH(SoftmaxImpl)(x, n); }
void SwiGlu(float* gate, const float* up, int64_t n) {
  HWY_DYNAMIC_DISPATCH(SwiGluImpl)(gate, up, n);
}
void GeluGlu(float* gate, const float* up, int64_t n) {
  HWY_DYNAMIC_DISPATCH(GeluGluImpl)(gate, up, n);
}
void Softcap(float* x, int64_t n, float cap) { HWY_DYNAMIC_DISPATCH(SoftcapImpl)(x, n, cap); }
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
void DotF32Rows(const float* q, const float* k, int64_t stride, int64_t n_rows, int64_t dim,
                float* out) {
  HWY_DYNAMIC_DISPATCH(DotF32RowsImpl)(q, k, stride, n_rows, dim, out);
}
void DotF32F16Rows(const float* q, const uint16_t* k, int64_t stride, int64_t n_rows, int64_t dim,
                   float* out) {
  HWY_DYNAMIC_DISPATCH(DotF32F16RowsImpl)(q, k, stride, n_rows, dim, out);
}
void AxpyF32Rows(const float* w, const float* v, int64_t stride, int64_t n_rows, int64_t dim,
                 float* y) {
  HWY_DYNAMIC_DISPATCH(AxpyF32RowsImpl)(w, v, stride, n_rows, dim, y);
}
void AxpyF16Rows(const float* w, const uint16_t* v, int64_t stride, int64_t n_rows, int64_t dim,
                 float* y) {
  HWY_DYNAMIC_DISPATCH(AxpyF16RowsImpl)(w, v, stride, n_rows, dim, y);
}
void F32ToF16Row(const float* x, uint16_t* out, int64_t n) {
  HWY_DYNAMIC_DISPATCH(F32ToF16RowImpl)(x, out, n);
}
void F16ToF32Row(const uint16_t* x, float* out, int64_t n) {
  HWY_DYNAMIC_DISPATCH(F16ToF32RowImpl)(x, out, n);
}

}  // namespace promptcache
#endif  // HWY_ONCE
