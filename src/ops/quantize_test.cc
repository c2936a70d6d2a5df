// The quantizers (quantize.h) judged by the reference dequantization: DequantizeRow(QuantizeRow(x))
// for rows of several distributions must stay within what each format's resolution allows, the
// stored quants must be the nearest levels for the stored scales, the RMS error must stay below
// a per-type fraction of the data's RMS, and hand-made blocks must give the bytes the format
// prescribes.
#include "ops/quantize.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/fp16.h"
#include "ops/quant.h"
#include "ops/quant_blocks.h"
#include "ops/weight_types.h"

namespace promptcache {
namespace {

// What each format can resolve. For a scale group (16 or 32 values sharing a scale) of range a
// (hi - lo for types with a minimum, the largest magnitude otherwise) a grid step is a / steps;
// the K-quants add the rounding of the group's scale (and minimum) to an integer of at most
// scale_max units of the super-block's scale: up to half a unit, that is at most
// (largest range + largest minimum in the super-block) / (2 * scale_max) per value.
struct Spec {
  GgmlType type;
  int group;         // values per scale
  bool has_min;      // w = d * q + m (32-blocks) or minus dmin * mn (K)
  double steps;      // grid steps over a group's range
  int scale_max;     // K-quants: largest integer group scale; 0: the scale is an f16
  int qlo, qhi;      // the integer-form quants (IQ4: indices into kIQ4Values)
  bool nearest;      // quants are the nearest levels for the stored scales
  double rms_bound;  // RMS error / RMS of normal and uniform data stays below this
};

// RMS bounds: about 20% above what these rows measure with normal data (Q8_0 0.0053, Q4_0
// 0.085, Q4_1 0.070, Q5_0 0.040, Q5_1 0.033, IQ4_NL 0.073, Q2_K 0.27, Q3_K 0.14, Q4_K 0.071,
// Q5_K 0.035, Q6_K 0.017, IQ4_XS 0.073; llama.cpp's quantizers, without an importance matrix,
// measure the same or up to 12% more on the same rows). A quantizer one bit short fails them.
// MXFP4's (normal 0.114, uniform 0.141, the worse one bounded) is ggml's own rule, byte for byte.
const Spec kSpecs[] = {
    {GgmlType::kQ8_0, 32, false, 127, 0, -128, 127, false, 0.0065},
    {GgmlType::kQ4_0, 32, false, 8, 0, -8, 7, false, 0.105},
    {GgmlType::kQ4_1, 32, true, 15, 0, 0, 15, true, 0.085},
    {GgmlType::kQ5_0, 32, false, 16, 0, -16, 15, true, 0.048},
    {GgmlType::kQ5_1, 32, true, 31, 0, 0, 31, true, 0.041},
    {GgmlType::kIQ4_NL, 32, false, 113.0 / 24, 0, 0, 15, true, 0.09},
    // MXFP4's levels are 0 to 12 units of a power-of-two scale, 4 apart at the top: a value
    // rounds by at most a quarter of itself, a clipped one (ggml's scale puts amax at 8 to 16
    // units) by under a quarter of amax, so 5 "steps" (1.25 amax / 5).
    {GgmlType::kMXFP4, 32, false, 5, 0, 0, 15, true, 0.17},
    {GgmlType::kQ2_K, 16, true, 3, 15, 0, 3, true, 0.32},
    {GgmlType::kQ3_K, 16, false, 4, 31, -4, 3, true, 0.175},
    {GgmlType::kQ4_K, 32, true, 15, 63, 0, 15, true, 0.087},
    {GgmlType::kQ5_K, 32, true, 31, 63, 0, 31, true, 0.043},
    {GgmlType::kQ6_K, 16, false, 32, 127, -32, 31, true, 0.02},
    {GgmlType::kIQ4_XS, 32, false, 113.0 / 24, 31, 0, 15, true, 0.09},
};

enum class Dist { kNormal, kUniform, kOutliers, kPositive, kConstant };

std::vector<float> Row(Dist dist, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (size_t i = 0; i < x.size(); ++i) {
    switch (dist) {
      case Dist::kNormal:
        x[i] = normal(rng);
        break;
      case Dist::kUniform:
        x[i] = uniform(rng);
        break;
      case Dist::kOutliers:  // one value in 64 twenty times larger
        x[i] = normal(rng) * (rng() % 64 == 0 ? 20.0f : 1.0f);
        break;
      case Dist::kPositive:  // all of one sign, away from zero (a minimum matters)
        x[i] = 2.0f + 0.5f * uniform(rng);
        break;
      case Dist::kConstant:  // of a weight's size: some super-block scales are f16 subnormals
        x[i] = 0.01f;
        break;
    }
  }
  return x;
}

std::vector<float> RoundTrip(GgmlType type, const std::vector<float>& x,
                             std::vector<uint8_t>* bytes = nullptr) {
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> q(RowBytes(type, n));
  QuantizeRow(type, x.data(), n, q.data());
  std::vector<float> back(x.size());
  DequantizeRow(type, q.data(), n, back.data());
  if (bytes != nullptr) *bytes = q;
  return back;
}

// Range (or largest magnitude) of x[begin, begin + n) as Spec describes, and its negative part.
void GroupRange(const Spec& s, const float* x, int n, double* range, double* neg_min) {
  double lo = x[0], hi = x[0], amax = 0;
  for (int i = 0; i < n; ++i) {
    lo = std::min<double>(lo, x[i]);
    hi = std::max<double>(hi, x[i]);
    amax = std::max<double>(amax, std::fabs(x[i]));
  }
  if (s.has_min && s.scale_max > 0) lo = std::min(lo, 0.0);  // K minimums are <= 0
  *range = s.has_min ? hi - lo : amax;
  *neg_min = std::max(0.0, -lo);
}

// Every value within 1.25 grid steps of its group plus (K) the scale rounding; the f16 scales
// add up to 2^-10 of the largest value. Half a step is the rounding; the rest is room for a
// least-squares fit that lets a group's extreme value clamp to serve the others (measured up to
// 0.93 of a step for Q2_K with outliers; Q4_0 clamps the side opposite its largest value at 7
// of 8 steps, a whole step).
void ExpectWithinResolution(const Spec& s, const std::vector<float>& x,
                            const std::vector<float>& back, const std::string& what) {
  const WeightTypeInfo* info = FindWeightType(s.type);
  const int block = info->block_elems;
  for (size_t b = 0; b < x.size() / block; ++b) {
    const float* xb = x.data() + b * block;
    double big_range = 0, big_min = 0, amax = 0;
    for (int g = 0; g < block / s.group; ++g) {
      double r, m;
      GroupRange(s, xb + g * s.group, s.group, &r, &m);
      big_range = std::max(big_range, r);
      big_min = std::max(big_min, m);
    }
    for (int i = 0; i < block; ++i) amax = std::max<double>(amax, std::fabs(xb[i]));
    const double rounding =
        (s.scale_max > 0 ? (big_range + big_min) / (2.0 * s.scale_max) : 0.0) + amax / 1024;
    for (int g = 0; g < block / s.group; ++g) {
      double r, m;
      GroupRange(s, xb + g * s.group, s.group, &r, &m);
      const double bound = 1.25 * r / s.steps + rounding;
      for (int i = g * s.group; i < (g + 1) * s.group; ++i) {
        ASSERT_LE(std::fabs(back[b * block + i] - xb[i]), bound)
            << what << " block " << b << " element " << i;
      }
    }
  }
}

// The value a quant stands for in block `ib` (integer form), element i: as the reference
// dequantization computes it.
float Level(const Spec& s, const IntBlock& ib, int i, int q) {
  const float v = s.type == GgmlType::kIQ4_NL || s.type == GgmlType::kIQ4_XS
                      ? static_cast<float>(quant::kIQ4Values[q])
                  : s.type == GgmlType::kMXFP4 ? static_cast<float>(quant::kMxfp4Values[q])
                                               : static_cast<float>(q);
  if (FindWeightType(s.type)->block_elems == 32) return s.has_min ? v * ib.d + ib.m : v * ib.d;
  const float dl = ib.d * static_cast<float>(ib.sc[i / 16]);
  return s.has_min ? dl * v - ib.m * static_cast<float>(ib.mn[i / 16]) : dl * v;
}

// Each dequantized value is the level nearest to its input among all its group's levels.
void ExpectNearestLevels(const Spec& s, const std::vector<float>& x,
                         const std::vector<uint8_t>& bytes, const std::vector<float>& back,
                         const std::string& what) {
  const WeightTypeInfo* info = FindWeightType(s.type);
  IntBlock ib;
  for (size_t b = 0; b < x.size() / info->block_elems; ++b) {
    info->decode(bytes.data() + b * info->block_bytes, &ib);
    for (int i = 0; i < info->block_elems; ++i) {
      const size_t at = b * info->block_elems + i;
      double best = INFINITY;
      for (int q = s.qlo; q <= s.qhi; ++q) {
        best = std::min(best, std::fabs(static_cast<double>(x[at]) - Level(s, ib, i, q)));
      }
      const double got = std::fabs(static_cast<double>(x[at]) - back[at]);
      ASSERT_LE(got, best * (1 + 1e-5) + 1e-9 * std::fabs(x[at]))
          << what << " block " << b << " element " << i;
    }
  }
}

std::string Name(const Spec& s, const char* dist, int64_t n) {
  return GgmlTypeName(s.type) + " " + dist + " n=" + std::to_string(n);
}

TEST(Quantize, EveryTypeQuantizes) {
  for (const Spec& s : kSpecs) EXPECT_TRUE(QuantizeSupports(s.type)) << GgmlTypeName(s.type);
}

TEST(Quantize, ErrorWithinResolution) {
  const std::pair<Dist, const char*> dists[] = {{Dist::kNormal, "normal"},
                                                {Dist::kUniform, "uniform"},
                                                {Dist::kOutliers, "outliers"},
                                                {Dist::kPositive, "positive"},
                                                {Dist::kConstant, "constant"}};
  for (const Spec& s : kSpecs) {
    for (const auto& [dist, dist_name] : dists) {
      for (const int64_t n : {256, 1024, 4096}) {
        const std::vector<float> x = Row(dist, n, static_cast<uint32_t>(n) + 7);
        std::vector<uint8_t> bytes;
        const std::vector<float> back = RoundTrip(s.type, x, &bytes);
        ExpectWithinResolution(s, x, back, Name(s, dist_name, n));
        if (s.nearest) ExpectNearestLevels(s, x, bytes, back, Name(s, dist_name, n));
      }
    }
  }
}

TEST(Quantize, RmsErrorBelowBound) {
  for (const Spec& s : kSpecs) {
    for (const Dist dist : {Dist::kNormal, Dist::kUniform}) {
      const std::vector<float> x = Row(dist, 4096, 3);
      const std::vector<float> back = RoundTrip(s.type, x);
      double err = 0, sum = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        err += (back[i] - x[i]) * (back[i] - x[i]);
        sum += x[i] * x[i];
      }
      const double ratio = std::sqrt(err / sum);
      EXPECT_LT(ratio, s.rms_bound) << GgmlTypeName(s.type) << " dist " << static_cast<int>(dist);
      // Printed so that the bounds above can be re-measured.
      std::printf("%-7s %-8s rms error / rms %.4f\n", GgmlTypeName(s.type).c_str(),
                  dist == Dist::kNormal ? "normal" : "uniform", ratio);
    }
  }
}

// Zero stays zero; a constant of ordinary size comes back to within its f16 scale's rounding.
TEST(Quantize, ZeroAndConstantRows) {
  for (const Spec& s : kSpecs) {
    for (const float c : {0.0f, 0.75f, -3.0f}) {
      const std::vector<float> x(512, c);
      const std::vector<float> back = RoundTrip(s.type, x);
      for (size_t i = 0; i < x.size(); ++i) {
        ASSERT_NEAR(back[i], c, std::fabs(c) / 1024) << GgmlTypeName(s.type) << " c=" << c;
      }
    }
  }
}

// ---------------------------------------------------------------- bytes of hand-made blocks

template <size_t N>
void ExpectBytes(const std::vector<uint8_t>& got, size_t at, const uint8_t (&want)[N]) {
  for (size_t i = 0; i < N; ++i) EXPECT_EQ(got[at + i], want[i]) << "byte " << at + i;
}

// Q5_0, exactly representable with d = 1: quant j - 16 + 16 = j, fifth bits set for j >= 16.
TEST(QuantizeLayout, Q5_0) {
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j - 16);
  std::vector<uint8_t> b;
  EXPECT_EQ(RoundTrip(GgmlType::kQ5_0, x, &b), x);
  ExpectBytes(b, 0, {0x00, 0x3C, 0x00, 0x00, 0xFF, 0xFF});  // d = f16(1), qh
  for (int j = 0; j < 16; ++j) EXPECT_EQ(b[6 + j], j | j << 4) << j;
}

// Q4_1: 1 + 0.5 * (j % 16), so d = 0.5, m = 1, quant j % 16 in both nibbles of byte j.
TEST(QuantizeLayout, Q4_1) {
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = 1.0f + 0.5f * static_cast<float>(j % 16);
  std::vector<uint8_t> b;
  EXPECT_EQ(RoundTrip(GgmlType::kQ4_1, x, &b), x);
  ExpectBytes(b, 0, {0x00, 0x38, 0x00, 0x3C});  // d = f16(0.5), m = f16(1)
  for (int j = 0; j < 16; ++j) EXPECT_EQ(b[4 + j], j | j << 4) << j;
}

// IQ4_NL: half of each grid value in order, twice: d = 0.5, index j % 16.
TEST(QuantizeLayout, IQ4_NL) {
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = 0.5f * quant::kIQ4Values[j % 16];
  std::vector<uint8_t> b;
  EXPECT_EQ(RoundTrip(GgmlType::kIQ4_NL, x, &b), x);
  ExpectBytes(b, 0, {0x00, 0x38});
  for (int j = 0; j < 16; ++j) EXPECT_EQ(b[2 + j], j | j << 4) << j;
}

// MXFP4: a quarter of each E2M1 code's doubled value, twice: e = 126 (d = 2^-2), code j % 16
// (the code of -0, 8, comes back as +0's).
TEST(QuantizeLayout, MXFP4) {
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = 0.25f * quant::kMxfp4Values[j % 16];
  std::vector<uint8_t> b;
  EXPECT_EQ(RoundTrip(GgmlType::kMXFP4, x, &b), x);
  ASSERT_EQ(b.size(), 17u);
  EXPECT_EQ(b[0], 126);
  for (int j = 0; j < 16; ++j) {
    const int code = j == 8 ? 0 : j;
    EXPECT_EQ(b[1 + j], code | code << 4) << j;
  }
}

// Q4_K with d = 1/64, dmin = 1/32 and chosen 6-bit scales and minimums per group of 32; the
// quants l % 16 reach both ends, so the fit is exact.
TEST(QuantizeLayout, Q4_K) {
  const int sc[8] = {63, 1, 2, 3, 40, 50, 33, 17}, mn[8] = {0, 63, 5, 7, 1, 2, 3, 60};
  std::vector<float> x(256);
  for (int g = 0; g < 8; ++g) {
    for (int l = 0; l < 32; ++l) x[32 * g + l] = sc[g] / 64.0f * (l % 16) - mn[g] / 32.0f;
  }
  std::vector<uint8_t> b;
  EXPECT_EQ(RoundTrip(GgmlType::kQ4_K, x, &b), x);
  // d, dmin; then groups 0..3's scales with the top bits of 4..7's in bits 6..7, likewise the
  // minimums; then 4..7's low nibbles (scale | minimum << 4).
  ExpectBytes(b, 0,
              {0x00, 0x24, 0x00, 0x28, 0xBF, 0xC1, 0x82, 0x43, 0x00, 0x3F, 0x05, 0xC7, 0x18, 0x22,
               0x31, 0xC1});
  for (int i = 0; i < 128; ++i) EXPECT_EQ(b[16 + i], (i % 16) * 0x11) << i;
}

// Q6_K: int8 group scales (d = 2^-10) and quants spanning -32..31 in every group of 16; the
// stored q + 32 has its low nibble in ql and its top two bits in qh (element e: half h = e / 128,
// quarter k = e % 128 / 32, lane l = e % 32: ql[64h + l + 32 (k % 2)], nibble k / 2; qh[32h + l],
// bits 2k..2k+1).
TEST(QuantizeLayout, Q6_K) {
  const int sc[16] = {127, 1, -5, 64, 100, -100, 2, 3, 7, 11, -13, 17, 19, 23, 29, 31};
  std::vector<float> x(256);
  int u[256];
  for (int e = 0; e < 256; ++e) {
    u[e] = 63 * (e % 16) / 15;  // 0, 4, 8, ..., 58, 63
    x[e] = static_cast<float>(sc[e / 16] * (u[e] - 32)) / 1024.0f;
  }
  std::vector<uint8_t> b;
  EXPECT_EQ(RoundTrip(GgmlType::kQ6_K, x, &b), x);
  uint8_t ql[128] = {}, qh[64] = {};
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, k = e % 128 / 32, l = e % 32;
    ql[64 * h + l + 32 * (k % 2)] |= static_cast<uint8_t>((u[e] & 15) << (4 * (k / 2)));
    qh[32 * h + l] |= static_cast<uint8_t>((u[e] >> 4) << (2 * k));
  }
  ExpectBytes(b, 0, ql);
  ExpectBytes(b, 128, qh);
  for (int g = 0; g < 16; ++g) EXPECT_EQ(static_cast<int8_t>(b[192 + g]), sc[g]) << g;
  ExpectBytes(b, 208, {0x00, 0x14});  // d = f16(2^-10)
}

}  // namespace
}  // namespace promptcache
