#include "ops/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "ops/quant_blocks.h"
#include "ops/quantize_fit.h"

namespace promptcache {

namespace quant {

AffineFit FitAffine(const float* x, int n, int qmax, bool min_at_most_zero) {
  float lo = x[0], hi = x[0], sx = 0.0f, sxx = 0.0f;
  for (int i = 0; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
    sx += x[i];
    sxx += x[i] * x[i];
  }
  if (min_at_most_zero) lo = std::min(lo, 0.0f);
  if (!(hi > lo)) return {0.0f, lo};  // constant (or NaN) group: the minimum says it all
  const float fn = static_cast<float>(n);
  AffineFit best = {(hi - lo) / static_cast<float>(qmax), lo};
  float best_err = INFINITY;
  for (int t = -kFitSteps; t <= kFitSteps; ++t) {
    const float iscale = (static_cast<float>(qmax) + 0.1f * static_cast<float>(t)) / (hi - lo);
    float sq = 0.0f, sqq = 0.0f, sxq = 0.0f;
    for (int i = 0; i < n; ++i) {
      const float q = static_cast<float>(RoundClamp((x[i] - lo) * iscale, 0, qmax));
      sq += q;
      sqq += q * q;
      sxq += x[i] * q;
    }
    const float det = fn * sqq - sq * sq;
    if (!(det > 0.0f)) continue;  // every value on one level: nothing to fit
    float s = (fn * sxq - sq * sx) / det;
    float b = (sx - s * sq) / fn;
    if (min_at_most_zero && b > 0.0f) {
      b = 0.0f;
      s = sxq / sqq;
    }
    if (!(s > 0.0f)) continue;
    const float err = sxx - 2 * s * sxq - 2 * b * sx + s * s * sqq + 2 * s * b * sq + fn * b * b;
    if (err < best_err) {
      best_err = err;
      best = {s, b};
    }
  }
  return best;
}

}  // namespace quant

using namespace quant;  // NOLINT: block layouts and the fits

// roundf (half away from zero) for |v| < 2^23, without a libm call: truncate, then correct by
// the exactly computed fraction.
static inline int RoundHalfAway(float v) {
  const int i = static_cast<int>(v);
  const float frac = v - static_cast<float>(i);
  return i + (frac >= 0.5f) - (frac <= -0.5f);
}

void QuantizeBlockQ8_0(const float* x, uint8_t* block) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  // The quants are computed with the exact float scale; only the stored scale is rounded.
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  BlockQ8_0 blk;
  blk.d = F32ToF16(d);
  for (int j = 0; j < 32; ++j) blk.qs[j] = static_cast<int8_t>(RoundHalfAway(x[j] * id));
  std::memcpy(block, &blk, sizeof(blk));
}

void QuantizeBlockQ4_0(const float* x, uint8_t* block) {
  // The signed value of largest magnitude maps to -8, so the full range [-8, 7] is used on the
  // side where it matters (the first such value wins ties, as in ggml).
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < 32; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  const float d = max / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  BlockQ4_0 blk;
  blk.d = F32ToF16(d);
  for (int j = 0; j < 16; ++j) {
    const int lo = std::min(15, static_cast<int>(static_cast<int8_t>(x[j] * id + 8.5f)));
    const int hi = std::min(15, static_cast<int>(static_cast<int8_t>(x[j + 16] * id + 8.5f)));
    blk.qs[j] = static_cast<uint8_t>(lo | hi << 4);
  }
  std::memcpy(block, &blk, sizeof(blk));
}

namespace {

// The 32 quants (0..qmax) of an offset block for its stored scale and minimum: each the nearest
// level, so the stored integers are the best ones for the stored (f16-rounded) scales.
void AffineQuants(const float* x, float d, float m, int qmax, int q[32]) {
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int j = 0; j < 32; ++j) q[j] = RoundClamp((x[j] - m) * id, 0, qmax);
}

// Low nibbles hold elements 0..15, high nibbles 16..31.
void PackNibbles(const int q[32], uint8_t qs[16]) {
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>((q[j] & 15) | (q[j + 16] & 15) << 4);
}

// Bit j of the result: the fifth bit of quant j.
uint32_t FifthBits(const int q[32]) {
  uint32_t qh = 0;
  for (int j = 0; j < 32; ++j) qh |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
  return qh;
}

template <typename Block, int kQMax>
void QuantizeOffsetBlock(const float* x, uint8_t* block) {
  const AffineFit fit = FitAffine(x, 32, kQMax, /*min_at_most_zero=*/false);
  Block blk;
  blk.d = F32ToF16(fit.scale);
  blk.m = F32ToF16(fit.min);
  int q[32];
  AffineQuants(x, F16ToF32(blk.d), F16ToF32(blk.m), kQMax, q);
  PackNibbles(q, blk.qs);
  if constexpr (kQMax == 31) {
    const uint32_t qh = FifthBits(q);
    std::memcpy(blk.qh, &qh, 4);
  }
  std::memcpy(block, &blk, sizeof(blk));
}

}  // namespace

void QuantizeBlockQ4_1(const float* x, uint8_t* block) {
  QuantizeOffsetBlock<BlockQ4_1, 15>(x, block);
}

void QuantizeBlockQ5_1(const float* x, uint8_t* block) {
  QuantizeOffsetBlock<BlockQ5_1, 31>(x, block);
}

void QuantizeBlockQ5_0(const float* x, uint8_t* block) {
  const UniformGrid grid{-16, 15};
  BlockQ5_0 blk;
  blk.d = F32ToF16(FitScale(x, 32, grid));
  const float d = F16ToF32(blk.d);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  int q[32];
  for (int j = 0; j < 32; ++j) q[j] = grid.Nearest(x[j] * id) + 16;
  PackNibbles(q, blk.qs);
  const uint32_t qh = FifthBits(q);
  std::memcpy(blk.qh, &qh, 4);
  std::memcpy(block, &blk, sizeof(blk));
}

void QuantizeBlockIQ4_NL(const float* x, uint8_t* block) {
  const Iq4Grid grid;
  BlockIQ4_NL blk;
  blk.d = F32ToF16(FitScale(x, 32, grid));
  const float d = F16ToF32(blk.d);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  int q[32];
  for (int j = 0; j < 32; ++j) q[j] = grid.Nearest(x[j] * id);
  PackNibbles(q, blk.qs);
  std::memcpy(block, &blk, sizeof(blk));
}

// MXFP4 as ggml quantizes it, so that a file's bytes are llama.cpp's: the scale 2^(floor(log2
// amax) - 3), whose top level 12 d is 0.75 to 1.5 of amax (values above it clip: the levels are
// twice as fine as with the next scale up), and every value's nearest level (the first on a tie,
// so +0 rather than -0). The exponent is clamped to E8M0's range, where ggml's would wrap.
void QuantizeBlockMXFP4(const float* x, uint8_t* block) {
  BlockMXFP4 blk = {};
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  if (amax > 0.0f) {
    const float e = std::floor(std::log2(amax)) - 2 + 127;
    blk.e = static_cast<uint8_t>(std::clamp(e, 0.0f, 254.0f));
    const float d = Mxfp4Scale(blk.e);
    int q[32];
    for (int j = 0; j < 32; ++j) {
      int best = 0;
      for (int i = 1; i < 16; ++i) {
        if (std::fabs(x[j] - d * kMxfp4Values[i]) < std::fabs(x[j] - d * kMxfp4Values[best])) {
          best = i;
        }
      }
      q[j] = best;
    }
    PackNibbles(q, blk.qs);
  }
  std::memcpy(block, &blk, sizeof(blk));
}

}  // namespace promptcache
