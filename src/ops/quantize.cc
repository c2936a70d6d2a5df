#include "ops/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "ops/quant_blocks.h"

namespace promptcache {

using quant::BlockQ4_0;
using quant::BlockQ8_0;

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

}  // namespace promptcache
