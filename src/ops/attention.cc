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

// out[i] = the sum of a_i's lanes, i < 4: sums of lane pairs, then of pairs of pairs within each
// 128-bit block (interleaving the four vectors, so every step serves all four), then the blocks.
HWY_INLINE void Sum4(DF d, VF a0, VF a1, VF a2, VF a3, float* out) {
#if HWY_TARGET == HWY_SCALAR
  out[0] = hn::GetLane(a0);
  out[1] = hn::GetLane(a1);
  out[2] = hn::GetLane(a2);
  out[3] = hn::GetLane(a3);
#else
  const hn::Repartition<uint64_t, DF> d64;
  const VF t0 = hn::Add(hn::InterleaveLower(d, a0, a1), hn::InterleaveUpper(d, a0, a1));
  const VF t1 = hn::Add(hn::InterleaveLower(d, a2, a3), hn::InterleaveUpper(d, a2, a3));
  const auto w0 = hn::BitCast(d64, t0), w1 = hn::BitCast(d64, t1);
  const VF u = hn::Add(hn::BitCast(d, hn::InterleaveLower(d64, w0, w1)),
                       hn::BitCast(d, hn::InterleaveUpper(d64, w0, w1)));
  HWY_ALIGN float lanes[hn::MaxLanes(DF())];
  hn::Store(u, d, lanes);
  const int L = static_cast<int>(hn::Lanes(d));
  for (int i = 0; i < 4; ++i) {
    float sum = lanes[i];
    for (int b = 4; b < L; b += 4) sum += lanes[b + i];
    out[i] = sum;
  }
#endif
}

// s[qi][i] = q[qi] · k[i] for four key rows: per lane partial sums over the dimension, then the
// lanes summed (Sum4), then the scalar remainder.
template <class E, int Q>
HWY_INLINE void Scores4(const float* const* q, const typename E::T* const* k, int dim,
                        float* const* s) {
  const DF d;
  const int L = static_cast<int>(hn::Lanes(d));
  const int dv = dim / L * L;
  VF a[Q][4];
  for (int qi = 0; qi < Q; ++qi) {
    for (int i = 0; i < 4; ++i) a[qi][i] = hn::Zero(d);
  }
  for (int j = 0; j < dv; j += L) {
    const VF k0 = E::Load(d, k[0] + j), k1 = E::Load(d, k[1] + j);
    const VF k2 = E::Load(d, k[2] + j), k3 = E::Load(d, k[3] + j);
    for (int qi = 0; qi < Q; ++qi) {
      const VF qv = hn::LoadU(d, q[qi] + j);
      a[qi][0] = hn::MulAdd(qv, k0, a[qi][0]);
      a[qi][1] = hn::MulAdd(qv, k1, a[qi][1]);
      a[qi][2] = hn::MulAdd(qv, k2, a[qi][2]);
      a[qi][3] = hn::MulAdd(qv, k3, a[qi][3]);
    }
  }
  for (int qi = 0; qi < Q; ++qi) {
    Sum4(d, a[qi][0], a[qi][1], a[qi][2], a[qi][3], s[qi]);
    for (int i = 0; i < 4; ++i) {
      for (int j = dv; j < dim; ++j) s[qi][i] += q[qi][j] * E::At(k[i] + j);
    }
  }
}

// o[qi] += sum over r < rows of p[qi][r] * v[r]: per output lane, one chain over the rows in
// order.
template <class E, int Q>
HWY_INLINE void Accumulate(const float* const* p, const typename E::T* const* v, int rows, int dim,
                           float* const* o) {
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

template <class E>
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
        Scores4<E, 2>(q + m, k + r, dim, sr);
      } else {
        Scores4<E, 1>(q + m, k + r, dim, sr);
      }
    }
    for (int qi = 0; qi < pair; ++qi) {
      Softmax32(s[qi], n_valid[m + qi], scale, dim, st[m + qi], out[m + qi]);
    }
    const float* p[2] = {s[0], s[1]};
    if (pair == 2) {
      Accumulate<E, 2>(p, v, rows, dim, out + m);
    } else {
      Accumulate<E, 1>(p, v, rows, dim, out + m);
    }
  }
}

void AttendTileImpl(const AttnTile& tile, int dim, float scale, int n_queries,
                    const float* const* q, const int* n_valid, AttnState* const* st,
                    float* const* out) {
  if (tile.f16) {
    AttendTileT<F16Src>(tile, dim, scale, n_queries, q, n_valid, st, out);
  } else {
    AttendTileT<F32Src>(tile, dim, scale, n_queries, q, n_valid, st, out);
  }
}

void WidenTileImpl(const AttnTile& tile, int dim, float* k_out, float* v_out, AttnTile* dense) {
  const DF d;
  const int L = static_cast<int>(hn::Lanes(d));
  dense->f16 = false;
  dense->n = tile.n;
  for (int r = 0; r < tile.n; ++r) {
    float* kd = k_out + size_t(r) * dim;
    float* vd = v_out + size_t(r) * dim;
    if (tile.f16) {
      const auto* ks = static_cast<const uint16_t*>(tile.k[r]);
      const auto* vs = static_cast<const uint16_t*>(tile.v[r]);
      int j = 0;
      for (; j + L <= dim; j += L) {
        hn::StoreU(F16Src::Load(d, ks + j), d, kd + j);
        hn::StoreU(F16Src::Load(d, vs + j), d, vd + j);
      }
      for (; j < dim; ++j) {
        kd[j] = F16ToF32(ks[j]);
        vd[j] = F16ToF32(vs[j]);
      }
    } else {
      std::memcpy(kd, tile.k[r], sizeof(float) * dim);
      std::memcpy(vd, tile.v[r], sizeof(float) * dim);
    }
    dense->k[r] = kd;
    dense->v[r] = vd;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace promptcache
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace promptcache {

HWY_EXPORT(AttendTileImpl);
HWY_EXPORT(WidenTileImpl);

void AttendTile(const AttnTile& tile, int head_dim, float scale, int n_queries,
                const float* const* q, const int* n_valid, AttnState* const* state,
                float* const* out) {
  HWY_DYNAMIC_DISPATCH(AttendTileImpl)(tile, head_dim, scale, n_queries, q, n_valid, state, out);
}

void WidenTile(const AttnTile& tile, int head_dim, float* k_out, float* v_out, AttnTile* dense) {
  HWY_DYNAMIC_DISPATCH(WidenTileImpl)(tile, head_dim, k_out, v_out, dense);
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
