#include "ops/quant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/fp16.h"

namespace promptcache {
namespace {

std::vector<float> RandomRow(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

TEST(Quant, SupportedTypes) {
  for (GgmlType t :
       {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_0, GgmlType::kQ4_0,
        GgmlType::kQ4_K, GgmlType::kQ6_K, GgmlType::kIQ4_XS}) {
    EXPECT_TRUE(RowConversionSupports(t));
  }
  EXPECT_FALSE(RowConversionSupports(GgmlType::kTQ1_0));
  EXPECT_FALSE(RowConversionSupports(GgmlType::kI32));
}

TEST(Quant, Q8_0BlockLayout) {
  float x[32];
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j - 16);  // amax 16 at j = 0
  uint8_t blk[34];
  QuantizeRow(GgmlType::kQ8_0, x, 32, blk);
  uint16_t d;
  std::memcpy(&d, blk, 2);
  EXPECT_EQ(d, F32ToF16(16.0f / 127.0f));
  for (int j = 0; j < 32; ++j) {
    EXPECT_EQ(static_cast<int8_t>(blk[2 + j]), std::round(x[j] * 127.0f / 16.0f)) << j;
  }
  EXPECT_EQ(static_cast<int8_t>(blk[2]), -127);
}

TEST(Q4_0, BlockLayoutAndNibbleOrder) {
  float x[32] = {};
  x[0] = -8.0f;   // largest magnitude, negative: d = 1, maps to quant 0
  x[1] = 7.0f;    // quant 15
  x[16] = 3.0f;   // first high nibble: quant 11
  x[31] = -2.0f;  // quant 6
  uint8_t blk[18];
  QuantizeRow(GgmlType::kQ4_0, x, 32, blk);
  uint16_t d;
  std::memcpy(&d, blk, 2);
  EXPECT_EQ(F16ToF32(d), 1.0f);
  EXPECT_EQ(blk[2 + 0], 0x0 | 11 << 4);
  EXPECT_EQ(blk[2 + 1], 15 | 8 << 4);
  EXPECT_EQ(blk[2 + 15], 8 | 6 << 4);
  std::vector<float> back(32);
  DequantizeRow(GgmlType::kQ4_0, blk, 32, back.data());
  for (int j = 0; j < 32; ++j) EXPECT_EQ(back[j], x[j]) << j;
}

TEST(Q4_0, PositiveMaxUsesNegativeScale) {
  float x[32] = {};
  x[5] = 4.0f;  // d = 4 / -8 = -0.5: 4 maps to quant 0, and 0 to quant 8
  uint8_t blk[18];
  QuantizeRow(GgmlType::kQ4_0, x, 32, blk);
  uint16_t d;
  std::memcpy(&d, blk, 2);
  EXPECT_EQ(F16ToF32(d), -0.5f);
  EXPECT_EQ(blk[2 + 5], 0x80);
  EXPECT_EQ(blk[2 + 6], 0x88);
}

TEST(Quant, ZeroBlocks) {
  std::vector<float> x(64, 0.0f), back(64, 1.0f);
  std::vector<uint8_t> q8(68), q4(36);
  QuantizeRow(GgmlType::kQ8_0, x.data(), 64, q8.data());
  for (uint8_t b : q8) EXPECT_EQ(b, 0);
  QuantizeRow(GgmlType::kQ4_0, x.data(), 64, q4.data());
  EXPECT_EQ(q4[2], 0x88);
  DequantizeRow(GgmlType::kQ4_0, q4.data(), 64, back.data());
  for (float v : back) EXPECT_EQ(v, 0.0f);
}

// Round trip error bounds: Q8_0 rounds to a step of amax/127 (error <= half a step, plus the f16
// rounding of the scale: < 2^-11 relative, on values up to amax). Q4_0's step is amax/8, and
// values of the sign opposite to the largest one clamp at quant 15 = 7 steps, so its error can
// reach a whole step.
TEST(Quant, RoundTripErrorWithinHalfAStep) {
  const int64_t n = 32 * 40;
  const auto x = RandomRow(n, 1, 3.0f);
  std::vector<float> back(n);
  for (GgmlType t : {GgmlType::kQ8_0, GgmlType::kQ4_0}) {
    const bool q8 = t == GgmlType::kQ8_0;
    std::vector<uint8_t> buf(n / 32 * (q8 ? 34 : 18));
    QuantizeRow(t, x.data(), n, buf.data());
    DequantizeRow(t, buf.data(), n, back.data());
    for (int64_t b = 0; b < n / 32; ++b) {
      float amax = 0.0f;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
      const float step = amax / (q8 ? 127.0f : 8.0f);
      const float tol = (q8 ? 0.5f : 1.0f) * step + amax / 1024.0f;
      for (int j = 0; j < 32; ++j) {
        ASSERT_NEAR(back[b * 32 + j], x[b * 32 + j], tol) << static_cast<int>(t) << " " << b;
      }
    }
  }
}

TEST(Quant, F16RoundTripsEveryHalf) {
  std::vector<uint16_t> h(65536), back(65536);
  for (int i = 0; i < 65536; ++i) h[i] = static_cast<uint16_t>(i);
  std::vector<float> f(65536);
  DequantizeRow(GgmlType::kF16, h.data(), 65536, f.data());
  QuantizeRow(GgmlType::kF16, f.data(), 65536, back.data());
  for (int i = 0; i < 65536; ++i) {
    if (std::isnan(f[i])) {
      ASSERT_TRUE(std::isnan(F16ToF32(h[i]))) << i;
      continue;
    }
    ASSERT_EQ(f[i], F16ToF32(h[i])) << i;
    ASSERT_EQ(back[i], h[i]) << i;
  }
}

TEST(Quant, Bf16AndF32) {
  const auto x = RandomRow(100, 2);
  std::vector<uint16_t> b(100);
  std::vector<float> back(100);
  QuantizeRow(GgmlType::kBF16, x.data(), 100, b.data());
  DequantizeRow(GgmlType::kBF16, b.data(), 100, back.data());
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(b[i], F32ToBF16(x[i]));
    EXPECT_NEAR(back[i], x[i], std::fabs(x[i]) / 256.0f);
  }
  std::vector<float> f(100);
  QuantizeRow(GgmlType::kF32, x.data(), 100, f.data());
  DequantizeRow(GgmlType::kF32, f.data(), 100, back.data());
  EXPECT_EQ(back, x);
}

}  // namespace
}  // namespace promptcache
