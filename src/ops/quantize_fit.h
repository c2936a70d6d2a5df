// The scale searches behind the quantizers (quantize.cc, quantize_k.cc): for one group of values,
// the scale (and minimum) whose rounded grid fits them with the least squared error, and the
// nearest grid point once a scale is fixed. Not for use outside ops/.
//
// Every search tries a few candidate scales around "the extreme value lands on the grid's end",
// rounds the values for each, and keeps the candidate whose least-squares refit leaves the least
// error. Trying several matters: the scale that maps the largest value exactly onto the last
// level wastes resolution on one outlier, while a slightly smaller one that clamps it often
// serves the other 31 values better.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>

#include "core/fp16.h"
#include "ops/quant_blocks.h"

namespace promptcache::quant {

// Candidates per grid end: the end's magnitude is varied by -kFitSteps..kFitSteps tenths of a
// grid step (21 candidates; on normal data half as many cost up to 1.2% more RMS error, twice as
// many gained under 1%).
constexpr int kFitSteps = 10;

// Rounds to the nearest integer (ties to even) after clamping to [lo, hi]; NaN gives lo. The
// clamp first keeps the float-to-int conversion defined for any input.
inline int RoundClamp(float v, int lo, int hi) {
  v = v > static_cast<float>(lo) ? v : static_cast<float>(lo);
  v = v < static_cast<float>(hi) ? v : static_cast<float>(hi);
  // Adding 1.5 * 2^23 leaves the value rounded to an integer (exact for |v| < 2^22).
  return static_cast<int>((v + 12582912.0f) - 12582912.0f);
}

// A float as the f16 the block stores, back as a float.
inline float RoundToF16(float v) { return F16ToF32(F32ToF16(v)); }

// The integers lo..hi (Q3_K, Q5_0, Q6_K): Nearest gives the integer itself.
struct UniformGrid {
  int lo, hi;
  float low_end() const { return static_cast<float>(lo); }
  float high_end() const { return static_cast<float>(hi); }
  float end_step() const { return 1.0f; }
  int Nearest(float u) const { return RoundClamp(u, lo, hi); }
  float Value(int q) const { return static_cast<float>(q); }
};

// IQ4_NL / IQ4_XS: the 16 values of kIQ4Values; Nearest gives an index. The searches call it
// dozens of times per value, so it is a table lookup: the midpoints between neighbouring grid
// values are all multiples of 1/2, so no quarter-unit cell straddles one and the cell decides.
struct Iq4Grid {
  static constexpr float kLimit = 160.0f;  // beyond +-160 the nearest value is an end anyway
  static constexpr int kCells = 4 * 2 * 160;
  static constexpr std::array<uint8_t, kCells> kNearest = [] {
    std::array<uint8_t, kCells> table{};
    for (int k = 0; k < kCells; ++k) {
      const float u = (static_cast<float>(k) + 0.5f) / 4 - kLimit;  // the cell's centre
      int best = 0;
      for (int i = 1; i < 16; ++i) {
        const float d = u - kIQ4Values[i], d_best = u - kIQ4Values[best];
        if (d * d < d_best * d_best) best = i;
      }
      table[k] = static_cast<uint8_t>(best);
    }
    return table;
  }();

  float low_end() const { return kIQ4Values[0]; }
  float high_end() const { return kIQ4Values[15]; }
  float end_step() const { return 24.0f; }  // about the spacing at either end
  int Nearest(float u) const {
    float cell = (u + kLimit) * 4;
    cell = cell > 0.0f ? cell : 0.0f;  // (NaN too)
    cell = cell < kCells - 1 ? cell : kCells - 1;
    return kNearest[static_cast<int>(cell)];
  }
  float Value(int i) const { return kIQ4Values[i]; }
};

// The least-squares scale s for x[i] ~ s * grid value, over candidates that put the value of
// largest magnitude near either end of the grid (both, since grids are not symmetric: -16..15,
// -127..113). 0 for an all-zero group.
template <typename Grid>
float FitScale(const float* x, int n, const Grid& grid) {
  float amax = 0.0f, max = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  if (!(amax > 0.0f)) return 0.0f;
  // With s = sxv / svv the squared error is sum(x^2) - sxv^2 / svv: maximise the gain.
  float best_scale = 0.0f, best_gain = 0.0f;
  for (const float end : {grid.low_end(), grid.high_end()}) {
    const float unit = std::copysign(0.1f * grid.end_step(), end);
    for (int t = -kFitSteps; t <= kFitSteps; ++t) {
      const float iscale = (end + static_cast<float>(t) * unit) / max;
      float sxv = 0.0f, svv = 0.0f;
      for (int i = 0; i < n; ++i) {
        const float v = grid.Value(grid.Nearest(x[i] * iscale));
        sxv += x[i] * v;
        svv += v * v;
      }
      if (svv > 0.0f && sxv * sxv > best_gain * svv) {
        best_gain = sxv * sxv / svv;
        best_scale = sxv / svv;
      }
    }
  }
  return best_scale;
}

// x[i] ~ scale * q[i] + min with q in 0..qmax.
struct AffineFit {
  float scale;
  float min;
};

// The least-squares (scale, min) over candidate scales spanning the group's range in about
// qmax steps. With min_at_most_zero (the K-quants, which store the minimum as a non-negative
// amount subtracted) the minimum is kept <= 0 and the range taken from 0 when all are positive.
AffineFit FitAffine(const float* x, int n, int qmax, bool min_at_most_zero);

}  // namespace promptcache::quant
