// Highway kernels for attention.h, compiled once per target (foreach_target) and dispatched at
// run time. Queries go in groups (of four with AVX-512, else three; six for tiles decoded to f32
// first) so that each K or V vector loaded serves several of them; a group and a lone query run the
// same per-lane arithmetic, which is what keeps a query's result independent of its neighbours.
// Scores of a tile are always padded to kAttnTileRows entries (masked lanes zero) before they are
// summed, for the same reason.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/attention.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Highway headers below must follow foreach_target.h.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/fp16.h"
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "ops/attention.h"
#include "ops/kernel_util-inl.h"

HWY_BEFORE_NAMESPACE();
namespace promptcache {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using internal::HWY_NAMESPACE::SumLanes4;

using DF = hn::ScalableTag<float>;
using DH = hn::Rebind<hwy::float16_t, DF>;
using VF = hn::Vec<DF>;

using internal::HWY_NAMESPACE::F16Rows;
using internal::HWY_NAMESPACE::F32Rows;
using internal::HWY_NAMESPACE::HalfAt;
using DI32 = hn::RebindToSigned<DF>;
using DI8Q = hn::Rebind<int8_t, DI32>;
using DU8Q = hn::Rebind<uint8_t, DI32>;

// Row access, as kernel_util's F32Rows and F16Rows: Load(d, row, j) gives elements j.. of a row
// as f32, At(row, j) one element. Quantized rows are decoded where they are used, q * scale
// (exact in f32); the kernels load at multiples of the lane count, so with at most 16 lanes a
// vector never straddles two 32-value blocks (or the two nibble halves of a Q4_0 block).
struct Q8Rows {
  static constexpr size_t kBlockBytes = 34;
  static VF Load(DF d, const uint8_t* row, int j) {
    if (hn::MaxLanes(d) > 16) return Gather<Q8Rows>(d, row, j);
    const uint8_t* b = row + size_t(j / 32) * kBlockBytes;
    const auto q =
        hn::PromoteTo(DI32(), hn::LoadU(DI8Q(), reinterpret_cast<const int8_t*>(b + 2 + j % 32)));
    return hn::Mul(hn::ConvertTo(d, q), hn::Set(d, HalfAt(b)));
  }
  static float At(const uint8_t* row, int j) {
    const uint8_t* b = row + size_t(j / 32) * kBlockBytes;
    return static_cast<float>(static_cast<int8_t>(b[2 + j % 32])) * HalfAt(b);
  }
  template <class E>
  static VF Gather(DF d, const uint8_t* row, int j) {
    HWY_ALIGN float x[hn::MaxLanes(DF())];
    for (size_t i = 0; i < hn::Lanes(d); ++i) x[i] = E::At(row, j + static_cast<int>(i));
    return hn::Load(d, x);
  }
};
struct Q4Rows {
  static constexpr size_t kBlockBytes = 18;
  static VF Load(DF d, const uint8_t* row, int j) {
    if (hn::MaxLanes(d) > 16) return Q8Rows::Gather<Q4Rows>(d, row, j);
    const uint8_t* b = row + size_t(j / 32) * kBlockBytes;
    const int w = j % 32;
    auto q = hn::PromoteTo(DI32(), hn::LoadU(DU8Q(), b + 2 + w % 16));
    q = w >= 16 ? hn::ShiftRight<4>(q) : hn::And(q, hn::Set(DI32(), 0xF));
    const VF x = hn::ConvertTo(d, hn::Sub(q, hn::Set(DI32(), 8)));
    return hn::Mul(x, hn::Set(d, HalfAt(b)));
  }
  static float At(const uint8_t* row, int j) {
    const uint8_t* b = row + size_t(j / 32) * kBlockBytes;
    const int w = j % 32;
    const int q = w >= 16 ? b[2 + w - 16] >> 4 : b[2 + w] & 0xF;
    return static_cast<float>(q - 8) * HalfAt(b);
  }
};

// a_i += x * k_i for i < 4 (inlined: the accumulators stay in registers).
HWY_INLINE void MulAdd4(VF x, VF k0, VF k1, VF k2, VF k3, VF* a0, VF* a1, VF* a2, VF* a3) {
  *a0 = hn::MulAdd(x, k0, *a0);
  *a1 = hn::MulAdd(x, k1, *a1);
  *a2 = hn::MulAdd(x, k2, *a2);
  *a3 = hn::MulAdd(x, k3, *a3);
}

// s[qi][i] = q[qi] · k[i] for four key rows and Q (1 to 4) queries: per lane partial sums
// over the dimension, then the lanes summed (SumLanes4), then the scalar remainder. Each query's
// arithmetic is the same whatever Q. The accumulators are named, not an array: GCC kept an array
// of them on the stack, and the reduction then waited on store forwarding.
template <class E, int Q, int kDim>
HWY_INLINE void Scores4(const float* const* q, const uint8_t* const* k, int dim, float* const* s) {
  static_assert(Q >= 1 && Q <= 6);
  if (kDim > 0) dim = kDim;
  const DF d;
  const int L = static_cast<int>(hn::Lanes(d));
  const int dv = dim / L * L;
  VF a0 = hn::Zero(d), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
  VF c0 = a0, c1 = a0, c2 = a0, c3 = a0, e0 = a0, e1 = a0, e2 = a0, e3 = a0;
  VF f0 = a0, f1 = a0, f2 = a0, f3 = a0, g0 = a0, g1 = a0, g2 = a0, g3 = a0;
  for (int j = 0; j < dv; j += L) {
    const VF k0 = E::Load(d, k[0], j), k1 = E::Load(d, k[1], j);
    const VF k2 = E::Load(d, k[2], j), k3 = E::Load(d, k[3], j);
    MulAdd4(hn::LoadU(d, q[0] + j), k0, k1, k2, k3, &a0, &a1, &a2, &a3);
    if (Q >= 2) MulAdd4(hn::LoadU(d, q[Q >= 2 ? 1 : 0] + j), k0, k1, k2, k3, &b0, &b1, &b2, &b3);
    if (Q >= 3) MulAdd4(hn::LoadU(d, q[Q >= 3 ? 2 : 0] + j), k0, k1, k2, k3, &c0, &c1, &c2, &c3);
    if (Q >= 4) MulAdd4(hn::LoadU(d, q[Q >= 4 ? 3 : 0] + j), k0, k1, k2, k3, &e0, &e1, &e2, &e3);
    if (Q >= 5) MulAdd4(hn::LoadU(d, q[Q >= 5 ? 4 : 0] + j), k0, k1, k2, k3, &f0, &f1, &f2, &f3);
    if (Q >= 6) MulAdd4(hn::LoadU(d, q[Q >= 6 ? 5 : 0] + j), k0, k1, k2, k3, &g0, &g1, &g2, &g3);
  }
  SumLanes4(a0, a1, a2, a3, s[0]);
  if (Q >= 2) SumLanes4(b0, b1, b2, b3, s[Q >= 2 ? 1 : 0]);
  if (Q >= 3) SumLanes4(c0, c1, c2, c3, s[Q >= 3 ? 2 : 0]);
  if (Q >= 4) SumLanes4(e0, e1, e2, e3, s[Q >= 4 ? 3 : 0]);
  if (Q >= 5) SumLanes4(f0, f1, f2, f3, s[Q >= 5 ? 4 : 0]);
  if (Q >= 6) SumLanes4(g0, g1, g2, g3, s[Q >= 6 ? 5 : 0]);
  if (dv == dim) return;
  for (int qi = 0; qi < Q; ++qi) {
    for (int i = 0; i < 4; ++i) {
      for (int j = dv; j < dim; ++j) s[qi][i] += q[qi][j] * E::At(k[i], j);
    }
  }
}

// o[qi][j] += sum over r < rows of p[qi][r] * v[r][j] for columns j in [j0, dim): per output
// lane, one chain over the rows in order.
template <class E, int Q, int kDim>
HWY_INLINE void Accumulate(const float* const* p, const uint8_t* const* v, int rows, int dim,
                           float* const* o, int j0 = 0) {
  if (kDim > 0) dim = kDim;
  const DF d;
  const int L = static_cast<int>(hn::Lanes(d));
  int j = j0;
  for (; j + 4 * L <= dim; j += 4 * L) {
    VF a[Q][4];
    for (int qi = 0; qi < Q; ++qi) {
      for (int i = 0; i < 4; ++i) a[qi][i] = hn::LoadU(d, o[qi] + j + i * L);
    }
    for (int r = 0; r < rows; ++r) {
      const VF v0 = E::Load(d, v[r], j), v1 = E::Load(d, v[r], j + L);
      const VF v2 = E::Load(d, v[r], j + 2 * L), v3 = E::Load(d, v[r], j + 3 * L);
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
      const VF vv = E::Load(d, v[r], j);
      for (int qi = 0; qi < Q; ++qi) a[qi] = hn::MulAdd(hn::Set(d, p[qi][r]), vv, a[qi]);
    }
    for (int qi = 0; qi < Q; ++qi) hn::StoreU(a[qi], d, o[qi] + j);
  }
  for (; j < dim; ++j) {
    for (int qi = 0; qi < Q; ++qi) {
      float acc = o[qi][j];
      for (int r = 0; r < rows; ++r) acc = std::fma(p[qi][r], E::At(v[r], j), acc);
      o[qi][j] = acc;
    }
  }
}

// Accumulate for Q (3 to 6) queries over columns [0, dim / (4L) * 4L), the accumulators named
// (an array of sixteen was spilled): per output lane the same chain as Accumulate's. Returns the
// columns done.
template <class E, int Q, int kDim>
HWY_INLINE int AccumulateWide(const float* const* p, const uint8_t* const* v, int rows, int dim,
                              float* const* o) {
  static_assert(Q >= 3 && Q <= 6);
  if (kDim > 0) dim = kDim;
  const DF d;
  const int L = static_cast<int>(hn::Lanes(d));
  // Queries past Q alias the last one (their accumulators are never used).
  float* const o3 = o[std::min(3, Q - 1)];
  float* const o4 = o[std::min(4, Q - 1)];
  float* const o5 = o[std::min(5, Q - 1)];
  const float* const p3 = p[std::min(3, Q - 1)];
  const float* const p4 = p[std::min(4, Q - 1)];
  const float* const p5 = p[std::min(5, Q - 1)];
  int j = 0;
  for (; j + 4 * L <= dim; j += 4 * L) {
    VF a0 = hn::LoadU(d, o[0] + j), a1 = hn::LoadU(d, o[0] + j + L);
    VF a2 = hn::LoadU(d, o[0] + j + 2 * L), a3 = hn::LoadU(d, o[0] + j + 3 * L);
    VF b0 = hn::LoadU(d, o[1] + j), b1 = hn::LoadU(d, o[1] + j + L);
    VF b2 = hn::LoadU(d, o[1] + j + 2 * L), b3 = hn::LoadU(d, o[1] + j + 3 * L);
    VF c0 = hn::LoadU(d, o[2] + j), c1 = hn::LoadU(d, o[2] + j + L);
    VF c2 = hn::LoadU(d, o[2] + j + 2 * L), c3 = hn::LoadU(d, o[2] + j + 3 * L);
    VF e0 = hn::LoadU(d, o3 + j), e1 = hn::LoadU(d, o3 + j + L);
    VF e2 = hn::LoadU(d, o3 + j + 2 * L), e3 = hn::LoadU(d, o3 + j + 3 * L);
    VF f0 = hn::LoadU(d, o4 + j), f1 = hn::LoadU(d, o4 + j + L);
    VF f2 = hn::LoadU(d, o4 + j + 2 * L), f3 = hn::LoadU(d, o4 + j + 3 * L);
    VF g0 = hn::LoadU(d, o5 + j), g1 = hn::LoadU(d, o5 + j + L);
    VF g2 = hn::LoadU(d, o5 + j + 2 * L), g3 = hn::LoadU(d, o5 + j + 3 * L);
    for (int r = 0; r < rows; ++r) {
      const VF v0 = E::Load(d, v[r], j), v1 = E::Load(d, v[r], j + L);
      const VF v2 = E::Load(d, v[r], j + 2 * L), v3 = E::Load(d, v[r], j + 3 * L);
      MulAdd4(hn::Set(d, p[0][r]), v0, v1, v2, v3, &a0, &a1, &a2, &a3);
      MulAdd4(hn::Set(d, p[1][r]), v0, v1, v2, v3, &b0, &b1, &b2, &b3);
      MulAdd4(hn::Set(d, p[2][r]), v0, v1, v2, v3, &c0, &c1, &c2, &c3);
      if (Q >= 4) MulAdd4(hn::Set(d, p3[r]), v0, v1, v2, v3, &e0, &e1, &e2, &e3);
      if (Q >= 5) MulAdd4(hn::Set(d, p4[r]), v0, v1, v2, v3, &f0, &f1, &f2, &f3);
      if (Q >= 6) MulAdd4(hn::Set(d, p5[r]), v0, v1, v2, v3, &g0, &g1, &g2, &g3);
    }
    hn::StoreU(a0, d, o[0] + j), hn::StoreU(a1, d, o[0] + j + L);
    hn::StoreU(a2, d, o[0] + j + 2 * L), hn::StoreU(a3, d, o[0] + j + 3 * L);
    hn::StoreU(b0, d, o[1] + j), hn::StoreU(b1, d, o[1] + j + L);
    hn::StoreU(b2, d, o[1] + j + 2 * L), hn::StoreU(b3, d, o[1] + j + 3 * L);
    hn::StoreU(c0, d, o[2] + j), hn::StoreU(c1, d, o[2] + j + L);
    hn::StoreU(c2, d, o[2] + j + 2 * L), hn::StoreU(c3, d, o[2] + j + 3 * L);
    if (Q >= 4) {
      hn::StoreU(e0, d, o3 + j), hn::StoreU(e1, d, o3 + j + L);
      hn::StoreU(e2, d, o3 + j + 2 * L), hn::StoreU(e3, d, o3 + j + 3 * L);
    }
    if (Q >= 5) {
      hn::StoreU(f0, d, o4 + j), hn::StoreU(f1, d, o4 + j + L);
      hn::StoreU(f2, d, o4 + j + 2 * L), hn::StoreU(f3, d, o4 + j + 3 * L);
    }
    if (Q >= 6) {
      hn::StoreU(g0, d, o5 + j), hn::StoreU(g1, d, o5 + j + L);
      hn::StoreU(g2, d, o5 + j + 2 * L), hn::StoreU(g3, d, o5 + j + 3 * L);
    }
  }
  return j;
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

// Not inlined: inlined into AttendGroup once per query of a group of six, its registers crowded
// the scores' and the sum's, and a call of 48 queries took 15-20% longer (ops_bench).
// Turns one query's raw scores s[0, kAttnTileRows) into weights p = exp(score - max) for its valid
// rows [lo, n) and 0 elsewhere, moving the state's max up (and rescaling its output) when needed.
HWY_NOINLINE void SoftmaxTile(float* s, int lo, int n, const AttnScoring& sc, int dim,
                              AttnState* st, float* o) {
  const DF d;
  const int L = static_cast<int>(hn::Lanes(d));
  const VF vscale = hn::Set(d, sc.scale);
  const VF vcap = hn::Set(d, sc.softcap), vinv = hn::Set(d, sc.softcap > 0 ? 1 / sc.softcap : 0);
  // Lanes of rows [lo, n) of the vector at r.
  auto valid = [&](int r) {
    return hn::AndNot(hn::FirstN(d, std::max(lo - r, 0)), hn::FirstN(d, std::max(n - r, 0)));
  };
  VF vmax = hn::Set(d, -INFINITY);
  for (int r = 0; r < kAttnTileRows; r += L) {
    VF x = hn::Mul(hn::LoadU(d, s + r), vscale);
    if (sc.softcap > 0) x = hn::Mul(vcap, hn::Tanh(d, hn::Mul(x, vinv)));
    if (r < lo || n - r < L) x = hn::IfThenElse(valid(r), x, vmax);
    hn::StoreU(x, d, s + r);
    vmax = hn::Max(vmax, x);
  }
  const float tile_max = hn::GetLane(hn::MaxOfLanes(d, vmax));
  const float new_max = tile_max > st->max ? tile_max : st->max;
  const VF vnew = hn::Set(d, new_max);
  VF vsum = hn::Zero(d);
  for (int r = 0; r < kAttnTileRows; r += L) {
    VF e = ExpNonPositive(d, hn::Sub(hn::LoadU(d, s + r), vnew));
    if (r < lo || n - r < L) e = hn::IfThenElseZero(valid(r), e);
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

// Queries per group: four where there are registers for their accumulators (AVX-512's 32),
// else three (measured faster than two with AVX2's 16, despite a spilled register).
// Tiles decoded to f32 rows (below) take six: their vectors are plain loads, and the 24
// accumulators of Scores4 and AccumulateWide still fit.
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
constexpr int kGroup = 4;
constexpr int kDecodedGroup = 6;
#else
constexpr int kGroup = 3;
constexpr int kDecodedGroup = 3;
#endif

// Scores, softmax and weighted sum of V for queries [m, m + Q) over `rows` rows of the tile.
template <class E, int Q, int kDim>
HWY_INLINE void AttendGroup(const uint8_t* const* k, const uint8_t* const* v, int dim,
                            const AttnScoring& sc, int rows, const float* const* q,
                            const int* first_valid, const int* n_valid, AttnState* const* st,
                            float* const* out) {
  HWY_ALIGN float scores[Q][kAttnTileRows];
  float* s[Q];
  for (int qi = 0; qi < Q; ++qi) s[qi] = scores[qi];
  for (int r = 0; r < rows; r += 4) {
    float* sr[Q];
    for (int qi = 0; qi < Q; ++qi) sr[qi] = s[qi] + r;
    Scores4<E, Q, kDim>(q, k + r, dim, sr);
  }
  for (int qi = 0; qi < Q; ++qi) {
    const int lo = first_valid ? first_valid[qi] : 0;
    SoftmaxTile(s[qi], lo, n_valid[qi], sc, dim, st[qi], out[qi]);
  }
  const float* p[Q];
  for (int qi = 0; qi < Q; ++qi) p[qi] = s[qi];
  if constexpr (Q >= 3) {
    const int done = AccumulateWide<E, Q, kDim>(p, v, rows, dim, out);
    if (done < dim) {
      // The remaining columns, one query at a time: the same per-lane chains.
      for (int qi = 0; qi < Q; ++qi) Accumulate<E, 1, 0>(p + qi, v, rows, dim, out + qi, done);
    }
  } else {
    Accumulate<E, Q, kDim>(p, v, rows, dim, out);
  }
}

// kDim > 0: the head size, known when compiling (loops unroll); 0: any, from `dim`. Queries go
// in groups of kG.
template <class E, int kDim, int kG = kGroup>
void AttendTileT(const AttnTile& tile, int dim, const AttnScoring& sc, int n_queries,
                 const float* const* q, const int* first_valid, const int* n_valid,
                 AttnState* const* st, float* const* out) {
  // All-zero bytes: a zero row of every type (a quantized block with scale 0 decodes to zeros).
  static const float kZeros[kAttnMaxHeadDim] = {};
  const uint8_t* k[kAttnTileRows];
  const uint8_t* v[kAttnTileRows];
  for (int r = 0; r < kAttnTileRows; ++r) {
    k[r] = static_cast<const uint8_t*>(r < tile.n ? tile.k[r] : static_cast<const void*>(kZeros));
    v[r] = static_cast<const uint8_t*>(r < tile.n ? tile.v[r] : static_cast<const void*>(kZeros));
  }
  for (int m = 0, g; m < n_queries; m += g) {
    g = std::min(n_queries - m, kG);
    const int rows = *std::max_element(n_valid + m, n_valid + m + g);
    const int* fv = first_valid ? first_valid + m : nullptr;
    const auto* qm = q + m;
    const int* nv = n_valid + m;
    switch (g) {
      case 6:
        if constexpr (kG >= 6) {
          AttendGroup<E, 6, kDim>(k, v, dim, sc, rows, qm, fv, nv, st + m, out + m);
        }
        break;
      case 5:
        if constexpr (kG >= 5) {
          AttendGroup<E, 5, kDim>(k, v, dim, sc, rows, qm, fv, nv, st + m, out + m);
        }
        break;
      case 4:
        if constexpr (kG >= 4) {
          AttendGroup<E, 4, kDim>(k, v, dim, sc, rows, qm, fv, nv, st + m, out + m);
        }
        break;
      case 3:
        AttendGroup<E, 3, kDim>(k, v, dim, sc, rows, qm, fv, nv, st + m, out + m);
        break;
      case 2:
        AttendGroup<E, 2, kDim>(k, v, dim, sc, rows, qm, fv, nv, st + m, out + m);
        break;
      default:
        AttendGroup<E, 1, kDim>(k, v, dim, sc, rows, qm, fv, nv, st + m, out + m);
    }
  }
}

// Calls with many queries (a prompt's tokens times the query heads of a KV head) decode the
// tile's f16 or quantized rows once into f32 rows instead of once per group of queries, and
// take the queries six at a time where registers allow: the same values (decoding is exact) and
// the same per-query arithmetic, so the same results as a call with few queries. Measured with
// ops_bench's BM_AttendTile (AVX-512): 3-6% less time with 24 or 48 queries, none with 12.
constexpr int kDecodeMinQueries = 16;

template <class E, int kDim>
void AttendDecodedOnce(const AttnTile& tile, int dim, const AttnScoring& sc, int n_queries,
                       const float* const* q, const int* first_valid, const int* n_valid,
                       AttnState* const* st, float* const* out) {
  static_assert(kDim > 0);
  const DF d;
  const int L = static_cast<int>(hn::Lanes(d));
  // On the stack (64 KiB at most, for heads of 256): nothing allocated, nothing kept.
  HWY_ALIGN float rows[2 * kAttnTileRows * kDim];
  const int n = std::min(tile.n, *std::max_element(n_valid, n_valid + n_queries));
  AttnTile f;
  f.type = AttnRowType::kF32;
  f.n = n;
  for (int r = 0; r < n; ++r) {
    float* k = rows + r * kDim;
    float* v = k + kAttnTileRows * kDim;
    const auto* kq = static_cast<const uint8_t*>(tile.k[r]);
    const auto* vq = static_cast<const uint8_t*>(tile.v[r]);
    for (int j = 0; j < kDim; j += L) hn::Store(E::Load(d, kq, j), d, k + j);
    for (int j = 0; j < kDim; j += L) hn::Store(E::Load(d, vq, j), d, v + j);
    f.k[r] = k;
    f.v[r] = v;
  }
  AttendTileT<F32Rows, kDim, kDecodedGroup>(f, dim, sc, n_queries, q, first_valid, n_valid, st,
                                            out);
}

// The head sizes AttendTileE unrolls: with many queries, the tile decoded once.
template <class E, int kDim>
void AttendTileD(const AttnTile& tile, int dim, const AttnScoring& sc, int n_queries,
                 const float* const* q, const int* first_valid, const int* n_valid,
                 AttnState* const* st, float* const* out) {
  if constexpr (!std::is_same_v<E, F32Rows> && kDim > 0) {
    if (n_queries >= kDecodeMinQueries && kDim % hn::Lanes(DF()) == 0) {
      return AttendDecodedOnce<E, kDim>(tile, dim, sc, n_queries, q, first_valid, n_valid, st, out);
    }
  }
  AttendTileT<E, kDim>(tile, dim, sc, n_queries, q, first_valid, n_valid, st, out);
}

template <class E>
void AttendTileE(const AttnTile& tile, int dim, const AttnScoring& sc, int n_queries,
                 const float* const* q, const int* first_valid, const int* n_valid,
                 AttnState* const* st, float* const* out) {
  // Heads of 64, 128 (Llama, Qwen, Phi) and 256 (Gemma) get unrolled loops.
  switch (dim) {
    case 64:
      return AttendTileD<E, 64>(tile, dim, sc, n_queries, q, first_valid, n_valid, st, out);
    case 128:
      return AttendTileD<E, 128>(tile, dim, sc, n_queries, q, first_valid, n_valid, st, out);
    case 256:
      return AttendTileD<E, 256>(tile, dim, sc, n_queries, q, first_valid, n_valid, st, out);
    default:
      return AttendTileT<E, 0>(tile, dim, sc, n_queries, q, first_valid, n_valid, st, out);
  }
}

// Quantized rows that start inside a block (heads smaller than a block, or not a multiple of
// it): their vectors would straddle blocks, so the tile is decoded by the scalar accessor into
// f32 rows first (exactly: the same values), then attended as f32 rows are.
template <class E>
void AttendDecoded(const AttnTile& tile, int dim, const AttnScoring& sc, int n_queries,
                   const float* const* q, const int* first_valid, const int* n_valid,
                   AttnState* const* st, float* const* out) {
  thread_local std::vector<float> rows;
  rows.resize(size_t(2) * kAttnTileRows * dim);
  AttnTile f;
  f.type = AttnRowType::kF32;
  f.n = tile.n;
  for (int r = 0; r < tile.n; ++r) {
    float* k = rows.data() + size_t(r) * dim;
    float* v = k + size_t(kAttnTileRows) * dim;
    const auto* kq = static_cast<const uint8_t*>(tile.k[r]);
    const auto* vq = static_cast<const uint8_t*>(tile.v[r]);
    for (int j = 0; j < dim; ++j) k[j] = E::At(kq, tile.column + j);
    for (int j = 0; j < dim; ++j) v[j] = E::At(vq, tile.column + j);
    f.k[r] = k;
    f.v[r] = v;
  }
  AttendTileE<F32Rows>(f, dim, sc, n_queries, q, first_valid, n_valid, st, out);
}

void AttendTileImpl(const AttnTile& tile, int dim, const AttnScoring& sc, int n_queries,
                    const float* const* q, const int* first_valid, const int* n_valid,
                    AttnState* const* st, float* const* out) {
  if (tile.column != 0 && tile.type == AttnRowType::kQ8_0) {
    return AttendDecoded<Q8Rows>(tile, dim, sc, n_queries, q, first_valid, n_valid, st, out);
  }
  if (tile.column != 0 && tile.type == AttnRowType::kQ4_0) {
    return AttendDecoded<Q4Rows>(tile, dim, sc, n_queries, q, first_valid, n_valid, st, out);
  }
  switch (tile.type) {
    case AttnRowType::kF16:
      return AttendTileE<F16Rows>(tile, dim, sc, n_queries, q, first_valid, n_valid, st, out);
    case AttnRowType::kF32:
      return AttendTileE<F32Rows>(tile, dim, sc, n_queries, q, first_valid, n_valid, st, out);
    case AttnRowType::kQ8_0:
      return AttendTileE<Q8Rows>(tile, dim, sc, n_queries, q, first_valid, n_valid, st, out);
    case AttnRowType::kQ4_0:
      return AttendTileE<Q4Rows>(tile, dim, sc, n_queries, q, first_valid, n_valid, st, out);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace promptcache
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace promptcache {

HWY_EXPORT(AttendTileImpl);

void AttendTile(const AttnTile& tile, int head_dim, const AttnScoring& scoring, int n_queries,
                const float* const* q, const int* first_valid, const int* n_valid,
                AttnState* const* state, float* const* out) {
  HWY_DYNAMIC_DISPATCH(AttendTileImpl)
  (tile, head_dim, scoring, n_queries, q, first_valid, n_valid, state, out);
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
