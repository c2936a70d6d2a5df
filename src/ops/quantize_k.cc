// The 256-element quantizers (K-quants and IQ4_XS). Each works in three steps:
//  1. per group (16 or 32 values), the best float scale (and minimum) on its own;
//  2. those scales as small integers times the super-block's f16 scale(s), rounded;
//  3. the values requantized against the scales as stored, so the stored quants are the nearest
//     levels for the stored scales. For the types with minimums, each group's integer scale and
//     minimum are then refitted to those quants and the values requantized once more (neither
//     step can raise the error).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "ops/quant_blocks.h"
#include "ops/quantize.h"
#include "ops/quantize_fit.h"

namespace promptcache {

using namespace quant;  // NOLINT: block layouts and the fits

namespace {

// Refit-and-requantize rounds for the types with minimums (one gains ~1% of Q2_K's RMS error;
// a second almost nothing).
constexpr int kRefits = 1;

// ---------------------------------------------------------------- with minimums (Q2_K, Q4_K, Q5_K)

// A super-block as w = d * sc[g] * q - dmin * mn[g], q in 0..qmax, sc and mn in 0..scale_max.
struct AffineSuper {
  float d = 0, dmin = 0;
  int sc[16] = {}, mn[16] = {};
  int q[256] = {};
};

// Sums over one group for a least-squares fit of x ~ A * q - B.
struct GroupSums {
  float n = 0, sq = 0, sqq = 0, sx = 0, sxq = 0;
  float Error(float a, float b, float sxx) const {
    return sxx - 2 * a * sxq + 2 * b * sx + a * a * sqq - 2 * a * b * sq + n * b * b;
  }
};

// Every group's quants for its stored scale and minimum: the nearest level to each value.
void RequantizeAffine(const float* x, int group, int qmax, AffineSuper* s) {
  for (int g = 0; g < 256 / group; ++g) {
    const float a = s->d * static_cast<float>(s->sc[g]);
    const float b = s->dmin * static_cast<float>(s->mn[g]);
    const float ia = a != 0.0f ? 1.0f / a : 0.0f;
    for (int i = g * group; i < (g + 1) * group; ++i) {
      s->q[i] = RoundClamp((x[i] + b) * ia, 0, qmax);
    }
  }
}

// For fixed quants, the integer (sc, mn) of each group with the least error: the unconstrained
// least-squares pair, rounded both ways in each coordinate, and the current pair.
void RefitAffine(const float* x, int group, int scale_max, AffineSuper* s) {
  for (int g = 0; g < 256 / group; ++g) {
    GroupSums u;
    float sxx = 0;
    for (int i = g * group; i < (g + 1) * group; ++i) {
      const float q = static_cast<float>(s->q[i]);
      u.n += 1;
      u.sq += q;
      u.sqq += q * q;
      u.sx += x[i];
      u.sxq += x[i] * q;
      sxx += x[i] * x[i];
    }
    const float det = u.n * u.sqq - u.sq * u.sq;
    if (!(det > 0.0f) || s->d == 0.0f) continue;
    const float a = (u.n * u.sxq - u.sq * u.sx) / det;  // x ~ a * q - b
    const float b = (a * u.sq - u.sx) / u.n;
    const float sc = a / s->d, mn = s->dmin != 0.0f ? b / s->dmin : 0.0f;
    int best_sc = s->sc[g], best_mn = s->mn[g];
    float best = u.Error(s->d * best_sc, s->dmin * best_mn, sxx);
    for (const float c : {std::floor(sc), std::ceil(sc)}) {
      for (const float m : {std::floor(mn), std::ceil(mn)}) {
        const int ci = RoundClamp(c, 0, scale_max), mi = RoundClamp(m, 0, scale_max);
        const float err = u.Error(s->d * ci, s->dmin * mi, sxx);
        if (err < best) {
          best = err;
          best_sc = ci;
          best_mn = mi;
        }
      }
    }
    s->sc[g] = best_sc;
    s->mn[g] = best_mn;
  }
}

AffineSuper QuantizeAffineSuper(const float* x, int group, int qmax, int scale_max) {
  const int groups = 256 / group;
  AffineFit fit[16];
  float max_scale = 0, max_min = 0;
  for (int g = 0; g < groups; ++g) {
    fit[g] = FitAffine(x + g * group, group, qmax, /*min_at_most_zero=*/true);
    max_scale = std::max(max_scale, fit[g].scale);
    max_min = std::max(max_min, -fit[g].min);
  }
  AffineSuper s;
  s.d = RoundToF16(max_scale / static_cast<float>(scale_max));
  s.dmin = RoundToF16(max_min / static_cast<float>(scale_max));
  for (int g = 0; g < groups; ++g) {
    s.sc[g] = s.d > 0 ? RoundClamp(fit[g].scale / s.d, 0, scale_max) : 0;
    s.mn[g] = s.dmin > 0 ? RoundClamp(-fit[g].min / s.dmin, 0, scale_max) : 0;
  }
  RequantizeAffine(x, group, qmax, &s);
  for (int r = 0; r < kRefits; ++r) {
    RefitAffine(x, group, scale_max, &s);
    RequantizeAffine(x, group, qmax, &s);
  }
  return s;
}

// ---------------------------------------------------------------- symmetric (Q3_K, Q6_K, IQ4_XS)

// A super-block as w = d * sc[g] * value(q), sc in scale_lo..scale_hi.
struct SymSuper {
  float d = 0;
  int sc[16] = {};
  int q[256] = {};  // grid indices (for a uniform grid, the integer itself)
};

// Every group's quants for its stored scale (the nearest grid value to each value); returns the
// block's squared error.
template <typename Grid>
float RequantizeSym(const float* x, int group, const Grid& grid, SymSuper* s) {
  float err = 0;
  for (int g = 0; g < 256 / group; ++g) {
    const float a = s->d * static_cast<float>(s->sc[g]);
    const float ia = a != 0.0f ? 1.0f / a : 0.0f;
    for (int i = g * group; i < (g + 1) * group; ++i) {
      s->q[i] = grid.Nearest(x[i] * ia);
      const float e = x[i] - a * grid.Value(s->q[i]);
      err += e * e;
    }
  }
  return err;
}

template <typename Grid>
SymSuper QuantizeSymSuper(const float* x, int group, const Grid& grid, int scale_lo, int scale_hi) {
  const int groups = 256 / group;
  float scale[16], max = 0;
  for (int g = 0; g < groups; ++g) {
    scale[g] = FitScale(x + g * group, group, grid);
    if (std::fabs(scale[g]) > std::fabs(max)) max = scale[g];
  }
  SymSuper best;
  float best_err = INFINITY;
  bool have_best = false;
  // The largest group scale onto either end of the integer scales' range; the better one stays.
  for (const int end : {scale_lo, scale_hi}) {
    SymSuper s;
    s.d = RoundToF16(max / static_cast<float>(end));
    for (int g = 0; g < groups; ++g) {
      s.sc[g] = s.d != 0.0f ? RoundClamp(scale[g] / s.d, scale_lo, scale_hi) : 0;
    }
    const float err = RequantizeSym(x, group, grid, &s);
    if (!have_best || err < best_err) {
      best = s;
      best_err = err;
      have_best = true;
    }
  }
  return best;
}

}  // namespace

// ---------------------------------------------------------------- packing

void QuantizeBlockQ2_K(const float* x, uint8_t* block) {
  const AffineSuper s = QuantizeAffineSuper(x, 16, 3, 15);
  BlockQ2_K b = {};
  b.d = F32ToF16(s.d);
  b.dmin = F32ToF16(s.dmin);
  for (int g = 0; g < 16; ++g) b.scales[g] = static_cast<uint8_t>(s.sc[g] | s.mn[g] << 4);
  for (int e = 0; e < 256; ++e) {  // byte l of each half's 32: elements l + 32 * j, bits 2j
    const int half = e / 128, j = e % 128 / 32, l = e % 32;
    b.qs[32 * half + l] |= static_cast<uint8_t>(s.q[e] << (2 * j));
  }
  std::memcpy(block, &b, sizeof(b));
}

void QuantizeBlockQ3_K(const float* x, uint8_t* block) {
  const SymSuper s = QuantizeSymSuper(x, 16, UniformGrid{-4, 3}, -32, 31);
  BlockQ3_K b = {};
  b.d = F32ToF16(s.d);
  for (int g = 0; g < 16; ++g) {  // 6-bit scales + 32: low nibbles, then 2 high bits each
    const int v = s.sc[g] + 32;
    b.scales[g % 8] |= static_cast<uint8_t>((v & 15) << (g < 8 ? 0 : 4));
    b.scales[8 + g % 4] |= static_cast<uint8_t>((v >> 4) << (2 * (g / 4)));
  }
  for (int e = 0; e < 256; ++e) {  // q + 4: low two bits as Q2_K's, the third in hmask
    const int half = e / 128, j = e % 128 / 32, l = e % 32;
    const int u = s.q[e] + 4;
    b.qs[32 * half + l] |= static_cast<uint8_t>((u & 3) << (2 * j));
    if (u & 4) b.hmask[l] |= static_cast<uint8_t>(1 << (4 * half + j));
  }
  std::memcpy(block, &b, sizeof(b));
}

// Q4_K / Q5_K: the 6-bit scales and minimums of 8 groups in 12 bytes (the inverse of ScaleMinK4):
// groups 0..3 in the low 6 bits of bytes 0..3 (scales) and 4..7 (minimums); groups 4..7 with
// their low 4 bits in bytes 8..11 and their top 2 bits in the spare top bits of bytes 0..7.
void PackScalesK4(const int sc[8], const int mn[8], uint8_t out[12]) {
  for (int j = 0; j < 4; ++j) {
    out[j] = static_cast<uint8_t>(sc[j] | (sc[j + 4] >> 4) << 6);
    out[j + 4] = static_cast<uint8_t>(mn[j] | (mn[j + 4] >> 4) << 6);
    out[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | (mn[j + 4] & 15) << 4);
  }
}

template <typename Block, bool kFifthBit>
void QuantizeBlockQ45_K(const float* x, uint8_t* block) {
  const AffineSuper s = QuantizeAffineSuper(x, 32, kFifthBit ? 31 : 15, 63);
  Block b = {};
  b.d = F32ToF16(s.d);
  b.dmin = F32ToF16(s.dmin);
  PackScalesK4(s.sc, s.mn, b.scales);
  for (int g = 0; g < 8; ++g) {  // each 64 values: 32 bytes, low nibbles then high nibbles
    for (int l = 0; l < 32; ++l) {
      const int q = s.q[32 * g + l];
      b.qs[32 * (g / 2) + l] |= static_cast<uint8_t>((q & 15) << (g % 2 ? 4 : 0));
      if constexpr (kFifthBit) b.qh[l] |= static_cast<uint8_t>((q >> 4) << g);
    }
  }
  std::memcpy(block, &b, sizeof(b));
}

void QuantizeBlockQ4_K(const float* x, uint8_t* block) {
  QuantizeBlockQ45_K<BlockQ4_K, false>(x, block);
}

void QuantizeBlockQ5_K(const float* x, uint8_t* block) {
  QuantizeBlockQ45_K<BlockQ5_K, true>(x, block);
}

void QuantizeBlockQ6_K(const float* x, uint8_t* block) {
  const SymSuper s = QuantizeSymSuper(x, 16, UniformGrid{-32, 31}, -128, 127);
  BlockQ6_K b = {};
  b.d = F32ToF16(s.d);
  for (int g = 0; g < 16; ++g) b.scales[g] = static_cast<int8_t>(s.sc[g]);
  for (int e = 0; e < 256; ++e) {  // q + 32: low nibble in ql, top two bits in qh
    const int half = e / 128, k = e % 128 / 32, l = e % 32;
    const int u = s.q[e] + 32;
    b.ql[64 * half + l + 32 * (k % 2)] |= static_cast<uint8_t>((u & 15) << (k < 2 ? 0 : 4));
    b.qh[32 * half + l] |= static_cast<uint8_t>((u >> 4) << (2 * k));
  }
  std::memcpy(block, &b, sizeof(b));
}

void QuantizeBlockIQ4_XS(const float* x, uint8_t* block) {
  const SymSuper s = QuantizeSymSuper(x, 32, Iq4Grid{}, -32, 31);
  BlockIQ4_XS b = {};
  b.d = F32ToF16(s.d);
  for (int g = 0; g < 8; ++g) {  // 6-bit scales + 32: low nibbles in scales_l, 2 bits in scales_h
    const int v = s.sc[g] + 32;
    b.scales_l[g / 2] |= static_cast<uint8_t>((v & 15) << (4 * (g % 2)));
    b.scales_h |= static_cast<uint16_t>((v >> 4) << (2 * g));
    for (int j = 0; j < 16; ++j) {
      b.qs[16 * g + j] = static_cast<uint8_t>(s.q[32 * g + j] | s.q[32 * g + 16 + j] << 4);
    }
  }
  std::memcpy(block, &b, sizeof(b));
}

}  // namespace promptcache
