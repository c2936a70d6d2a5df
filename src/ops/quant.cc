#include "ops/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "core/fp16.h"
#include "ops/vec.h"

namespace promptcache {
namespace {

// ggml's block layouts, byte for byte (no padding: the f16 scale is followed directly by the
// quants, so the structs are packed by construction).
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQ8_0Block];
};
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQ4_0Block / 2];
};
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ4_0) == 18);

// roundf (half away from zero) for |v| < 2^23, without a libm call: truncate, then correct by
// the exactly computed fraction.
inline int RoundHalfAway(float v) {
  const int i = static_cast<int>(v);
  const float frac = v - static_cast<float>(i);
  return i + (frac >= 0.5f) - (frac <= -0.5f);
}

void QuantizeQ8_0(const float* src, int64_t n, BlockQ8_0* dst) {
  for (int64_t b = 0; b < n / kQ8_0Block; ++b) {
    const float* x = src + b * kQ8_0Block;
    float amax = 0.0f;
    for (int j = 0; j < kQ8_0Block; ++j) amax = std::max(amax, std::fabs(x[j]));
    // The quants are computed with the exact float scale; only the stored scale is rounded.
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ8_0 blk;
    blk.d = F32ToF16(d);
    for (int j = 0; j < kQ8_0Block; ++j) blk.qs[j] = static_cast<int8_t>(RoundHalfAway(x[j] * id));
    std::memcpy(&dst[b], &blk, sizeof(blk));
  }
}

void DequantizeQ8_0(const BlockQ8_0* src, int64_t n, float* dst) {
  for (int64_t b = 0; b < n / kQ8_0Block; ++b) {
    BlockQ8_0 blk;
    std::memcpy(&blk, &src[b], sizeof(blk));
    const float d = F16ToF32(blk.d);
    float* y = dst + b * kQ8_0Block;
    for (int j = 0; j < kQ8_0Block; ++j) y[j] = d * static_cast<float>(blk.qs[j]);
  }
}

void QuantizeQ4_0(const float* src, int64_t n, BlockQ4_0* dst) {
  constexpr int kHalf = kQ4_0Block / 2;
  for (int64_t b = 0; b < n / kQ4_0Block; ++b) {
    const float* x = src + b * kQ4_0Block;
    // The signed value of largest magnitude maps to -8, so the full range [-8, 7] is used on the
    // side where it matters (the first such value wins ties, as in ggml).
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kQ4_0Block; ++j) {
      if (amax < std::fabs(x[j])) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ4_0 blk;
    blk.d = F32ToF16(d);
    for (int j = 0; j < kHalf; ++j) {
      const int lo = std::min(15, static_cast<int>(static_cast<int8_t>(x[j] * id + 8.5f)));
      const int hi = std::min(15, static_cast<int>(static_cast<int8_t>(x[j + kHalf] * id + 8.5f)));
      blk.qs[j] = static_cast<uint8_t>(lo | hi << 4);
    }
    std::memcpy(&dst[b], &blk, sizeof(blk));
  }
}

void DequantizeQ4_0(const BlockQ4_0* src, int64_t n, float* dst) {
  constexpr int kHalf = kQ4_0Block / 2;
  for (int64_t b = 0; b < n / kQ4_0Block; ++b) {
    BlockQ4_0 blk;
    std::memcpy(&blk, &src[b], sizeof(blk));
    const float d = F16ToF32(blk.d);
    float* y = dst + b * kQ4_0Block;
    for (int j = 0; j < kHalf; ++j) {
      y[j] = d * static_cast<float>((blk.qs[j] & 0x0f) - 8);
      y[j + kHalf] = d * static_cast<float>((blk.qs[j] >> 4) - 8);
    }
  }
}

}  // namespace

bool RowConversionSupports(GgmlType type) {
  switch (type) {
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kBF16:
    case GgmlType::kQ8_0:
    case GgmlType::kQ4_0:
      return true;
    default:
      return false;
  }
}

void DequantizeRow(GgmlType type, const void* src, int64_t n, float* dst) {
  switch (type) {
    case GgmlType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case GgmlType::kF16:
      F16ToF32Row(static_cast<const uint16_t*>(src), dst, n);
      return;
    case GgmlType::kBF16: {
      const auto* s = static_cast<const uint8_t*>(src);
      for (int64_t i = 0; i < n; ++i) {
        uint16_t v;
        std::memcpy(&v, s + 2 * i, 2);
        dst[i] = BF16ToF32(v);
      }
      return;
    }
    case GgmlType::kQ8_0:
      PC_CHECK(n % kQ8_0Block == 0);
      DequantizeQ8_0(static_cast<const BlockQ8_0*>(src), n, dst);
      return;
    case GgmlType::kQ4_0:
      PC_CHECK(n % kQ4_0Block == 0);
      DequantizeQ4_0(static_cast<const BlockQ4_0*>(src), n, dst);
      return;
    default:
      PC_CHECK(false && "DequantizeRow: unsupported type");
  }
}

void QuantizeRow(GgmlType type, const float* src, int64_t n, void* dst) {
  switch (type) {
    case GgmlType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case GgmlType::kF16:
      F32ToF16Row(src, static_cast<uint16_t*>(dst), n);
      return;
    case GgmlType::kBF16: {
      auto* d = static_cast<uint8_t*>(dst);
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t v = F32ToBF16(src[i]);
        std::memcpy(d + 2 * i, &v, 2);
      }
      return;
    }
    case GgmlType::kQ8_0:
      PC_CHECK(n % kQ8_0Block == 0);
      QuantizeQ8_0(src, n, static_cast<BlockQ8_0*>(dst));
      return;
    case GgmlType::kQ4_0:
      PC_CHECK(n % kQ4_0Block == 0);
      QuantizeQ4_0(src, n, static_cast<BlockQ4_0*>(dst));
      return;
    default:
      PC_CHECK(false && "QuantizeRow: unsupported type");
  }
}

}  // namespace promptcache
