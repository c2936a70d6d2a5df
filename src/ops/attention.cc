// Highway kernels for attention.h, compiled once per target (foreach_target) and dispatched at
// run time. Queries go in pairs so that each K or V vector loaded serves two of them; a pair and
// a lone query run the same per-lane arithmetic, which is what keeps a query's result
// independent of its neighbours. Scores of a tile are always padded to 32 entries (masked lanes
// zero) before they are summed, for the same reason.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/attention.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Highway headers below must follow foreach_target.h.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "hwy/highway.h"
#include "ops/attention.h"

HWY_BEFORE_NAMESPACE();
namespace promptcache {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using DH = hn::Rebind<hwy::float16_t, DF>;
using VF = hn::Vec<DF>;

// Element access: f32 rows, or f16 rows widened exactly to f32.
struct F32Src {
  using T = float;
  static VF Load(DF d, const float* p) { return hn::LoadU(d, p); }
  static float At(const float* p) { return *p; }
};
struct F16Src {
  using T = uint16_t;
  static VF Load(DF d, const uint16_t* p) {
    return hn::PromoteTo(d, hn::LoadU(DH(), reinterpret_cast<const hwy::float16_t*>(p)));
  }
  static float At(const uint16_t* p) { return F16ToF32(*p); }
};

#if HWY_TARGET != HWY_SCALAR
// The lane sums of a0..a3 as the lanes of each 128-bit block of the result, which then holds
// partial sums: block b lane i = the sum over a_i's lanes in block b. Pairs of lanes first, then
// pairs of pairs, the four vectors interleaved so that every step serves all of them.
HWY_INLINE VF Reduce4(DF d, VF a0, VF a1, VF a2, VF a3) {
  const hn::Repartition<uint64_t, DF> d64;
  const VF t0 = hn::Add(hn::InterleaveLower(d, a0, a1), hn::InterleaveUpper(d, a0, a1));
  const VF t1 = hn::Add(hn::InterleaveLower(d, a2, a3), hn::InterleaveUpper(d, a2, a3));
  const auto w0 = hn::BitCast(d64, t0), w1 = hn::BitCast(d64, t1);
  return hn::Add(hn::BitCast(d, hn::InterleaveLower(d64, w0, w1)),
                 hn::BitCast(d, hn::InterleaveUpper(d64, w0, w1)));
}

// out[i] = the sum of the 128-bit blocks of u, lane i < 4.
HWY_INLINE void StoreBlockSums(DF d, VF u, float* out) {
  const int L = static_cast<int>(hn::Lanes(d));
  if (L == 8) {
    const hn::Half<DF> dh;
    hn::StoreU(hn::Add(hn::LowerHalf(dh, u), hn::UpperHalf(dh, u)), dh, out);
    return;
  }
  HWY_ALIGN float lanes[hn::MaxLanes(DF())];
  hn::Store(u, d, lanes);
  for (int i = 0; i < 4; ++i) {
    float sum = lanes[i];
    for (int b = 4; b < L; b += 4) sum += lanes[b + i];
    out[i] = sum;
  }
}
#endif

// s[qi][i] = q[qi] · k[i] for four key rows and Q (1 or 2) queries: per lane partial sums over
// the dimension, then the lanes summed (Reduce4), then the scalar remainder. The accumulators
// are named, not an array: GCC kept an array of them on the stack, and the reduction then
// waited on store forwarding.
template <class E, int Q, int kDim>
HWY_INLINE void Scores4(const float* const* q, const typename E::T* const* k, int dim,
                        float* const* s) {
  if (kDim > 0) dim = kDim;
  const DF d;
  const int L = static_cast<int>(hn::Lanes(d));
  const int dv = dim / L * L;
  VF a0 = hn::Zero(d), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
  const float* q0 = q[0];
  const float* q1 = q[Q - 1];
  for (int j = 0; j < dv; j += L) {
    const VF k0 = E::Load(d, k[0] + j), k1 = E::Load(d, k[1] + j);
    const VF k2 = E::Load(d, k[2] + j), k3 = E::Load(d, k[3] + j);
    const VF x = hn::LoadU(d, q0 + j);
    a0 = hn::MulAdd(x, k0, a0);
    a1 = hn::MulAdd(x, k1, a1);
    a2 = hn::MulAdd(x, k2, a2);
    a3 = hn::MulAdd(x, k3, a3);
    if (Q == 2) {
      const VF y = hn::LoadU(d, q1 + j);
      b0 = hn::MulAdd(y, k0, b0);
      b1 = hn::MulAdd(y, k1, b1);
      b2 = hn::MulAdd(y, k2, b2);
      b3 = hn::MulAdd(y, k3, b3);
    }
  }
#if HWY_TARGET == HWY_SCALAR
  s[0][0] = hn::GetLane(a0), s[0][1] = hn::GetLane(a1);
  s[0][2] = hn::GetLane(a2), s[0][3] = hn::GetLane(a3);
  if (Q == 2) {
    s[1][0] = hn::GetLane(b0), s[1][1] = hn::GetLane(b1);
    s[1][2] = hn::GetLane(b2), s[1][3] = hn::GetLane(b3);
  }
#else
  StoreBlockSums(d, Reduce4(d, a0, a1, a2, a3), s[0]);
  if (Q == 2) StoreBlockSums(d, Reduce4(d, b0, b1, b2, b3), s[1]);
#endif
  if (dv == dim) return;
  for (int qi = 0; qi < Q; ++qi) {
    for (int i = 0; i < 4; ++i) {
      for (int j = dv; j < dim; ++j) s[qi][i] += q[qi][j] * E::At(k[i] + j);
    }
  }
}

// o[qi] += sum over r < rows of p[qi][r] * v[r]: per output lane, one chain over the rows in
// order.
template <class E, int Q, int kDim>
HWY_INLINE void Accumulate(const float* const* p, const typename E::T* const* v, int rows, int dim,
                           float* const* o) {
  if (kDim > 0) dim = kDim;
  const DF d;
  const int L = static_cast<int>(hn::Lanes(d));
  int j = 0;
  for (; j + 4 * L <= dim; j += 4 * L) {
    VF a[Q][4];
    for (int qi = 0; qi < Q; ++qi) {
      for (int i = 0; i < 4; ++i) a[qi][i] = hn::LoadU(d, o[qi] + j + i * L);
    }
    for (int r = 0; r < rows; ++r) {
      const typename E::T* vr = v[r] + j;
      const VF v0 = E::Load(d, vr), v1 = E::Load(d, vr + L);
      const VF v2 = E::Load(d, vr + 2 * L), v3 = E::Load(d, vr + 3 * L);
      for (int qi = 0; qi < Q; ++qi) {
        const VF w = hn::Set(d, p[qi][r]);
        a[qi][0] = hn::MulAdd(w, v0, a[qi][0]);
        a[qi][1] = hn::MulAdd(w, v1, a[qi][1]);
        a[qi][2] = hn::MulAdd(w, v2, a[qi][2]);
        a[qi][3] = hn::MulAdd(w, v3, a[qi][3]);
      }
    }
    for (int qi = 0; qi < Q; ++qi) {
      for (int i = 0; i < 4; ++i) hn::StoreU(a[qi][i], d, o[qi] + j + i * L);
    }
  }
  for (; j + L <= dim; j += L) {
    VF a[Q];
    for (int qi = 0; qi < Q; ++qi) a[qi] = hn::LoadU(d, o[qi] + j);
    for (int r = 0; r < rows; ++r) {
      const VF vv = E::Load(d, v[r] + j);
      for (int qi = 0; qi < Q; ++qi) a[qi] = hn::MulAdd(hn::Set(d, p[qi][r]), vv, a[qi]);
    }
    for (int qi = 0; qi < Q; ++qi) hn::StoreU(a[qi], d, o[qi] + j);
  }
  for (; j < dim; ++j) {
    for (int qi = 0; qi < Q; ++qi) {
      float acc = o[qi][j];
      for (int r = 0; r < rows; ++r) acc = std::fma(p[qi][r], E::At(v[r] + j), acc);
      o[qi][j] = acc;
    }
  }
}

// exp(x) for x <= 0 (scores minus their max), to about 2e-7 relative error: 2^(x log2 e) as
// 2^n (added to the exponent bits) times 2^f, |f| <= 1/2, by Cephes' exp2f polynomial. A third
// of the cost of Highway's Exp, which is the largest part of a tile's work after the dot
// products.
HWY_INLINE VF ExpNonPositive(DF d, VF x) {
  const hn::RebindToSigned<DF> di;
  const VF y = hn::Mul(hn::Max(x, hn::Set(d, -87.0f)), hn::Set(d, 1.44269504088896341f));
  const VF n = hn::Round(y);
  const VF f = hn::Sub(y, n);
  VF p = hn::Set(d, 1.535336188319500e-4f);
  p = hn::MulAdd(p, f, hn::Set(d, 1.339887440266574e-3f));
  p = hn::MulAdd(p, f, hn::Set(d, 9.618437357674640e-3f));
  p = hn::MulAdd(p, f, hn::Set(d, 5.550332471162809e-2f));
  p = hn::MulAdd(p, f, hn::Set(d, 2.402264791363012e-1f));
  p = hn::MulAdd(p, f, hn::Set(d, 6.931472028550421e-1f));
  const VF r = hn::MulAdd(p, f, hn::Set(d, 1.0f));
  const auto bits = hn::Add(hn::BitCast(di, r), hn::ShiftLeft<23>(hn::ConvertTo(di, n)));
  return hn::BitCast(d, bits);
}

// Turns one query's raw scores s[0, 32) into weights p = exp(scale * s - max) for its n valid
// rows and 0 beyond, moving the state's max up (and rescaling its output) when needed.
HWY_INLINE void Softmax32(float* s, int n, float scale, int dim, AttnState* st, float* o) {
  const DF d;
  const int L = static_cast<int>(hn::Lanes(d));
  const VF vscale = hn::Set(d, scale);
  VF vmax = hn::Set(d, -INFINITY);
  for (int r = 0; r < kAttnTileRows; r += L) {
    VF x = hn::Mul(hn::LoadU(d, s + r), vscale);
    if (n - r < L) x = hn::IfThenElse(hn::FirstN(d, std::max(n - r, 0)), x, vmax);
    hn::StoreU(x, d, s + r);
    vmax = hn::Max(vmax, x);
  }
  const float tile_max = hn::GetLane(hn::MaxOfLanes(d, vmax));
  const float new_max = tile_max > st->max ? tile_max : st->max;
  const VF vnew = hn::Set(d, new_max);
  VF vsum = hn::Zero(d);
  for (int r = 0; r < kAttnTileRows; r += L) {
    VF e = ExpNonPositive(d, hn::Sub(hn::LoadU(d, s + r), vnew));
    if (n - r < L) e = hn::IfThenElseZero(hn::FirstN(d, std::max(n - r, 0)), e);
    hn::StoreU(e, d, s + r);
    vsum = hn::Add(vsum, e);
  }
  if (st->sum > 0.0f && new_max > st->max) {
    const float f = std::exp(st->max - new_max);
    const VF vf = hn::Set(d, f);
    int j = 0;
    for (; j + L <= dim; j += L) hn::StoreU(hn::Mul(hn::LoadU(d, o + j), vf), d, o + j);
    for (; j < dim; ++j) o[j] *= f;
    st->sum *= f;
  }
  st->max = new_max;
  st->sum += hn::GetLane(hn::SumOfLanes(d, vsum));
}

// kDim > 0: the head size, known when compiling (loops unroll); 0: any, from `dim`.
template <class E, int kDim>
void AttendTileT(const AttnTile& tile, int dim, float scale, int n_queries, const float* const* q,
                 const int* n_valid, AttnState* const* st, float* const* out) {
  using T = typename E::T;
  static const float kZeros[kAttnMaxHeadDim] = {};  // all-zero bytes: a zero row of either type
  const T* k[kAttnTileRows];
  const T* v[kAttnTileRows];
  for (int r = 0; r < kAttnTileRows; ++r) {
    k[r] = static_cast<const T*>(r < tile.n ? tile.k[r] : static_cast<const void*>(kZeros));
    v[r] = static_cast<const T*>(r < tile.n ? tile.v[r] : static_cast<const void*>(kZeros));
  }
  HWY_ALIGN float scores[2][kAttnTileRows];
  for (int m = 0; m < n_queries; m += 2) {
    const int pair = std::min(2, n_queries - m);
    int rows = n_valid[m];
    if (pair == 2) rows = std::max(rows, n_valid[m + 1]);
    float* s[2] = {scores[0], scores[1]};
    for (int r = 0; r < rows; r += 4) {
      float* sr[2] = {s[0] + r, s[1] + r};
      if (pair == 2) {
        Scores4<E, 2, kDim>(q + m, k + r, dim, sr);
      } else {
        Scores4<E, 1, kDim>(q + m, k + r, dim, sr);
      }
    }
    for (int qi = 0; qi < pair; ++qi) {
      Softmax32(s[qi], n_valid[m + qi], scale, dim, st[m + qi], out[m + qi]);
    }
    const float* p[2] = {s[0], s[1]};
    if (pair == 2) {
      Accumulate<E, 2, kDim>(p, v, rows, dim, out + m);
    } else {
      Accumulate<E, 1, kDim>(p, v, rows, dim, out + m);
    }
  }
}

void AttendTileImpl(const AttnTile& tile, int dim, float scale, int n_queries,
                    const float* const* q, const int* n_valid, AttnState* const* st,
                    float* const* out) {
  // Llama-family models have heads of 64 or 128.
  if (tile.f16) {
    if (dim == 64) return AttendTileT<F16Src, 64>(tile, dim, scale, n_queries, q, n_valid, st, out);
    if (dim == 128) {
      return AttendTileT<F16Src, 128>(tile, dim, scale, n_queries, q, n_valid, st, out);
    }
    AttendTileT<F16Src, 0>(tile, dim, scale, n_queries, q, n_valid, st, out);
  } else {
    if (dim == 64) return AttendTileT<F32Src, 64>(tile, dim, scale, n_queries, q, n_valid, st, out);
    if (dim == 128) {
      return AttendTileT<F32Src, 128>(tile, dim, scale, n_queries, q, n_valid, st, out);
    }
    AttendTileT<F32Src, 0>(tile, dim, scale, n_queries, q, n_valid, st, out);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace promptcache
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace promptcache {

HWY_EXPORT(AttendTileImpl);

void AttendTile(const AttnTile& tile, int head_dim, float scale, int n_queries,
                const float* const* q, const int* n_valid, AttnState* const* state,
                float* const* out) {
  HWY_DYNAMIC_DISPATCH(AttendTileImpl)(tile, head_dim, scale, n_queries, q, n_valid, state, out);
}

void MergeAttention(const AttnState& b, const float* out_b, AttnState* a, float* out_a,
                    int head_dim) {
  if (b.sum == 0.0f) return;  // b saw no keys
  if (a->sum == 0.0f) {
    *a = b;
    std::memcpy(out_a, out_b, sizeof(float) * head_dim);
    return;
  }
  const float m = std::fmax(a->max, b.max);
  const float fa = std::exp(a->max - m), fb = std::exp(b.max - m);
  for (int j = 0; j < head_dim; ++j) out_a[j] = out_a[j] * fa + out_b[j] * fb;
  a->sum = a->sum * fa + b.sum * fb;
  a->max = m;
}

}  // namespace promptcache
#endif  // HWY_ONCE
