// Compares every vec.h kernel against its scalar reference (vec_reference.h) for many lengths,
// including odd ones and misaligned pointers, on every Highway target this CPU supports.
#include "ops/vec.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/fp16.h"
#include "ops/for_each_target.h"
#include "ops/targets.h"
#include "ops/vec_reference.h"

namespace promptcache {
namespace {

constexpr float kU = 1.0f / (1 << 24);  // unit roundoff of float
const int64_t kSizes[] = {0, 1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 576, 1537};
const int kOffsets[] = {0, 1, 3};  // in elements: misaligns the vectors

std::vector<float> Random(int64_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

std::vector<uint16_t> ToF16(const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = F32ToF16(v[i]);
  return h;
}

TEST(Vec, CompiledForSeveralTargets) {
  // The scalar fallback plus at least one SIMD target on any x86 CPU this project targets.
  EXPECT_GE(OpsTargets().size(), 2u);
}

TEST(Vec, RmsNorm) {
  ForEachTarget([] {
    std::mt19937 rng(1);
    for (int64_t n : kSizes) {
      if (n == 0) continue;
      for (int off : kOffsets) {
        auto x = Random(n + off, rng, 2.0f), w = Random(n + off, rng);
        std::vector<float> got(n + off), want(n + off);
        RmsNorm(x.data() + off, w.data() + off, n, 1e-5f, got.data() + off);
        reference::RmsNorm(x.data() + off, w.data() + off, n, 1e-5f, want.data() + off);
        for (int64_t i = off; i < n + off; ++i) {
          // Relative: the float sum of squares has error below n u; a few more u for the rest.
          ASSERT_NEAR(got[i], want[i], (n + 8) * kU * std::fabs(want[i]) + 1e-30f) << n;
        }
        // In place (out aliases x).
        RmsNorm(x.data() + off, w.data() + off, n, 1e-5f, x.data() + off);
        for (int64_t i = off; i < n + off; ++i) ASSERT_EQ(x[i], got[i]);
      }
    }
  });
}

TEST(Vec, Rope) {
  ForEachTarget([] {
    std::mt19937 rng(2);
    for (int head_dim : {2, 4, 8, 16, 32, 64, 128}) {
      for (int n_heads : {1, 3, 9}) {
        std::vector<float> inv_freq(head_dim / 2);
        for (int i = 0; i < head_dim / 2; ++i) {
          inv_freq[i] = std::pow(10000.0f, -2.0f * i / head_dim);
        }
        for (float pos : {0.0f, 1.0f, 17.0f, 4095.0f}) {
          auto x = Random(n_heads * head_dim + 1, rng);
          auto want = x;
          Rope(x.data() + 1, n_heads, head_dim, pos, inv_freq.data());
          reference::Rope(want.data() + 1, n_heads, head_dim, pos, inv_freq.data());
          for (size_t i = 1; i < x.size(); ++i) {
            // Float cos/sin (each within u) and two products: a few u of the pair's magnitude.
            const size_t pair = (i - 1) & ~size_t{1};
            const float mag = std::fabs(want[1 + pair]) + std::fabs(want[2 + pair]);
            ASSERT_NEAR(x[i], want[i], 8 * kU * mag) << head_dim << " " << pos;
          }
        }
      }
    }
  });
}

TEST(Vec, RopeHalves) {
  ForEachTarget([] {
    std::mt19937 rng(3);
    for (int head_dim : {2, 4, 8, 16, 32, 40, 64, 128, 256}) {
      for (int n_heads : {1, 3, 9}) {
        std::vector<float> inv_freq(head_dim / 2);
        for (int i = 0; i < head_dim / 2; ++i) {
          inv_freq[i] = std::pow(1000000.0f, -2.0f * i / head_dim);
        }
        for (float pos : {0.0f, 1.0f, 17.0f, 4095.0f, 40000.0f}) {
          auto x = Random(n_heads * head_dim + 1, rng);
          auto want = x;
          RopeHalves(x.data() + 1, n_heads, head_dim, pos, inv_freq.data());
          reference::RopeHalves(want.data() + 1, n_heads, head_dim, pos, inv_freq.data());
          const int half = head_dim / 2;
          for (size_t i = 1; i < x.size(); ++i) {
            // The pair is (i, i + half) within the head.
            const int in_head = static_cast<int>((i - 1) % head_dim);
            const size_t base = i - in_head + (in_head % half);
            const float mag = std::fabs(want[base]) + std::fabs(want[base + half]);
            ASSERT_NEAR(x[i], want[i], 8 * kU * mag) << head_dim << " " << pos;
          }
        }
      }
    }
  });
}

// Rope keeps its last rotation table; changing inv_freq in place (same pointer, same position)
// must not reuse it.
TEST(Vec, RopeTableFollowsInputs) {
  std::vector<float> inv_freq(32, 0.5f);
  std::vector<float> x(64, 1.0f), want(64, 1.0f);
  Rope(x.data(), 1, 64, 3.0f, inv_freq.data());
  for (int i = 0; i < 32; ++i) inv_freq[i] = 0.01f * i;
  x.assign(64, 1.0f);
  Rope(x.data(), 1, 64, 3.0f, inv_freq.data());
  reference::Rope(want.data(), 1, 64, 3.0f, inv_freq.data());
  for (int i = 0; i < 64; ++i) ASSERT_NEAR(x[i], want[i], 1e-6f) << i;
  // Same table again, a different head count: still right.
  std::vector<float> x2(128, 1.0f), want2(128, 1.0f);
  Rope(x2.data(), 2, 64, 3.0f, inv_freq.data());
  reference::Rope(want2.data(), 2, 64, 3.0f, inv_freq.data());
  for (int i = 0; i < 128; ++i) ASSERT_NEAR(x2[i], want2[i], 1e-6f) << i;
}

TEST(Vec, Softmax) {
  ForEachTarget([] {
    std::mt19937 rng(3);
    for (int64_t n : kSizes) {
      for (int off : kOffsets) {
        auto x = Random(n + off, rng, 5.0f);
        auto want = x;
        Softmax(x.data() + off, n);
        reference::Softmax(want.data() + off, n);
        double total = 0.0;
        for (int64_t i = off; i < n + off; ++i) {
          // Highway's Exp is within a few ulp; the sum adds n u relative.
          ASSERT_NEAR(x[i], want[i], (n + 16) * kU * want[i] + 1e-30f) << n;
          total += x[i];
        }
        if (n > 0) {
          EXPECT_NEAR(total, 1.0, 1e-5);
        }
      }
    }
    // Large and equal values: no overflow, uniform result.
    std::vector<float> big(37, 1000.0f);
    Softmax(big.data(), 37);
    for (float v : big) ASSERT_NEAR(v, 1.0f / 37, 1e-6f);
  });
}

// Random gate values (Random's `scale`) with -200 and 200 at `off` when n > 2: exp(200)
// overflows and tanh saturates there, yet silu and gelu must go to 0 and g, not NaN.
std::vector<float> GateWithExtremes(int64_t n, int off, std::mt19937& rng, float scale) {
  std::vector<float> g = Random(n + off, rng, scale);
  if (n > 2) {
    g[off] = -200.0f;
    g[off + 1] = 200.0f;
  }
  return g;
}

TEST(Vec, SwiGlu) {
  ForEachTarget([] {
    std::mt19937 rng(4);
    for (int64_t n : kSizes) {
      for (int off : kOffsets) {
        auto g = GateWithExtremes(n, off, rng, 4.0f), up = Random(n + off, rng);
        auto want = g;
        SwiGlu(g.data() + off, up.data() + off, n);
        reference::SwiGlu(want.data() + off, up.data() + off, n);
        for (int64_t i = off; i < n + off; ++i) {
          ASSERT_FALSE(std::isnan(g[i]));
          ASSERT_NEAR(g[i], want[i], 16 * kU * std::fabs(want[i]) + 1e-30f) << n;
        }
      }
    }
  });
}

TEST(Vec, GeluGluAndSoftcap) {
  ForEachTarget([] {
    std::mt19937 rng(14);
    for (int64_t n : kSizes) {
      for (int off : kOffsets) {
        auto g = GateWithExtremes(n, off, rng, 6.0f), up = Random(n + off, rng);
        auto want = g, capped = g, capped_want = g;
        GeluGlu(g.data() + off, up.data() + off, n);
        reference::GeluGlu(want.data() + off, up.data() + off, n);
        Softcap(capped.data() + off, n, 3.0f);
        reference::Softcap(capped_want.data() + off, n, 3.0f);
        for (int64_t i = off; i < n + off; ++i) {
          ASSERT_FALSE(std::isnan(g[i]));
          ASSERT_NEAR(g[i], want[i], 1e-5f * std::fabs(up[i]) * (1 + std::fabs(g[i]))) << n;
          ASSERT_NEAR(capped[i], capped_want[i], 1e-6f * 3.0f) << n;
        }
      }
    }
    // An element's result does not depend on where it falls (a vector or the remainder).
    const auto g = Random(1537, rng, 6.0f), up = Random(1537, rng);
    auto whole = g;
    GeluGlu(whole.data(), up.data(), 1537);
    for (int64_t n : {1, 3, 17, 100}) {
      auto part = g;
      GeluGlu(part.data() + 5, up.data() + 5, n);
      for (int64_t i = 5; i < 5 + n; ++i) ASSERT_EQ(part[i], whole[i]) << n;
    }
  });
}

TEST(Vec, AddAndAxpy) {
  ForEachTarget([] {
    std::mt19937 rng(5);
    for (int64_t n : kSizes) {
      for (int off : kOffsets) {
        const auto x = Random(n + off, rng);
        const auto xh = ToF16(x);
        const auto y0 = Random(n + off, rng);
        auto got = y0, want = y0;
        Add(got.data() + off, x.data() + off, n);
        reference::Add(want.data() + off, x.data() + off, n);
        ASSERT_EQ(got, want);
        for (bool half : {false, true}) {
          got = y0;
          want = y0;
          const float alpha = -0.37f;
          if (half) {
            AxpyF16(alpha, xh.data() + off, got.data() + off, n);
            reference::AxpyF16(alpha, xh.data() + off, want.data() + off, n);
          } else {
            AxpyF32(alpha, x.data() + off, got.data() + off, n);
            reference::AxpyF32(alpha, x.data() + off, want.data() + off, n);
          }
          for (int64_t i = off; i < n + off; ++i) {
            // A fused multiply-add rounds once where the reference rounds twice.
            ASSERT_NEAR(got[i], want[i], 2 * kU * (std::fabs(y0[i]) + std::fabs(alpha * x[i])));
          }
        }
      }
    }
  });
}

TEST(Vec, Dots) {
  ForEachTarget([] {
    std::mt19937 rng(6);
    for (int64_t n : kSizes) {
      for (int off : kOffsets) {
        const auto a = Random(n + off, rng), b = Random(n + off, rng);
        const auto bh = ToF16(b);
        double abs_sum = 0.0, abs_sum_h = 0.0;
        for (int64_t i = off; i < n + off; ++i) {
          abs_sum += std::fabs(a[i] * b[i]);
          abs_sum_h += std::fabs(a[i] * F16ToF32(bh[i]));
        }
        // Any order of float summation is within (n + 1) u of the sum of magnitudes.
        EXPECT_NEAR(DotF32(a.data() + off, b.data() + off, n),
                    reference::DotF32(a.data() + off, b.data() + off, n),
                    (n + 2) * kU * abs_sum + 1e-30)
            << n;
        EXPECT_NEAR(DotF32F16(a.data() + off, bh.data() + off, n),
                    reference::DotF32F16(a.data() + off, bh.data() + off, n),
                    (n + 2) * kU * abs_sum_h + 1e-30)
            << n;
      }
    }
  });
}

// The batched attention forms against row-by-row references, with strides beyond the row (one
// head of several in a cache row) and row counts around the 4-row unroll.
TEST(Vec, DotAndAxpyRows) {
  ForEachTarget([] {
    std::mt19937 rng(8);
    for (int64_t dim : {1, 7, 8, 9, 16, 64, 100, 128}) {
      for (int64_t n_rows : {0, 1, 3, 4, 5, 8, 17}) {
        const int64_t stride = dim * 3 + 1;
        const auto q = Random(dim + 1, rng), kv = Random(n_rows * stride + 1, rng);
        const auto kvh = ToF16(kv);
        const auto w = Random(n_rows + 1, rng), y0 = Random(dim + 1, rng);
        for (bool half : {false, true}) {
          std::vector<float> got(n_rows + 1, NAN), want(n_rows + 1, NAN);
          // Pointers one element in: misaligned.
          if (half) {
            DotF32F16Rows(q.data() + 1, kvh.data() + 1, stride, n_rows, dim, got.data());
            reference::DotF32F16Rows(q.data() + 1, kvh.data() + 1, stride, n_rows, dim,
                                     want.data());
          } else {
            DotF32Rows(q.data() + 1, kv.data() + 1, stride, n_rows, dim, got.data());
            reference::DotF32Rows(q.data() + 1, kv.data() + 1, stride, n_rows, dim, want.data());
          }
          for (int64_t i = 0; i < n_rows; ++i) {
            double abs_sum = 0;
            for (int64_t j = 0; j < dim; ++j) {
              const float kj = half ? F16ToF32(kvh[1 + i * stride + j]) : kv[1 + i * stride + j];
              abs_sum += std::fabs(q[1 + j] * kj);
            }
            ASSERT_NEAR(got[i], want[i], (dim + 2) * kU * abs_sum + 1e-30)
                << dim << " " << n_rows << " " << half;
          }
          EXPECT_TRUE(std::isnan(got[n_rows]));  // nothing written past n_rows

          auto ygot = y0, ywant = y0;
          if (half) {
            AxpyF16Rows(w.data(), kvh.data() + 1, stride, n_rows, dim, ygot.data() + 1);
            reference::AxpyF16Rows(w.data(), kvh.data() + 1, stride, n_rows, dim, ywant.data() + 1);
          } else {
            AxpyF32Rows(w.data(), kv.data() + 1, stride, n_rows, dim, ygot.data() + 1);
            reference::AxpyF32Rows(w.data(), kv.data() + 1, stride, n_rows, dim, ywant.data() + 1);
          }
          EXPECT_EQ(ygot[0], y0[0]);  // nothing written before y
          for (int64_t j = 0; j < dim; ++j) {
            double abs_sum = std::fabs(y0[1 + j]);
            for (int64_t i = 0; i < n_rows; ++i) {
              const float vj = half ? F16ToF32(kvh[1 + i * stride + j]) : kv[1 + i * stride + j];
              abs_sum += std::fabs(w[i] * vj);
            }
            // n_rows + 1 sequential float additions.
            ASSERT_NEAR(ygot[1 + j], ywant[1 + j], (n_rows + 2) * kU * abs_sum + 1e-30)
                << dim << " " << n_rows << " " << half;
          }
        }
      }
    }
  });
}

TEST(Vec, HalfConversionsAreExact) {
  ForEachTarget([] {
    // Every half value, from an odd offset so the SIMD loop sees misaligned data.
    std::vector<uint16_t> h(65536 + 1);
    for (int i = 0; i < 65536; ++i) h[i + 1] = static_cast<uint16_t>(i);
    std::vector<float> f(65536 + 1);
    F16ToF32Row(h.data() + 1, f.data() + 1, 65536);
    for (int i = 0; i < 65536; ++i) {
      const float want = F16ToF32(static_cast<uint16_t>(i));
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(f[i + 1])) << i;
      } else {
        ASSERT_EQ(f[i + 1], want) << i;
      }
    }
    // Floats near every rounding boundary: ties, subnormals, overflow.
    std::mt19937 rng(7);
    std::vector<float> x;
    for (int i = 0; i < 65536; i += 7) {
      uint32_t bits;
      const float base = F16ToF32(static_cast<uint16_t>(i));
      std::memcpy(&bits, &base, 4);
      for (int32_t delta : {-1, 0, 1, 0x1000, 0xfff, 0x1001}) {
        const uint32_t b = bits + delta;
        float v;
        std::memcpy(&v, &b, 4);
        x.push_back(v);
      }
    }
    for (float v : {65504.0f, 65520.0f, 65519.99f, 1e10f, -1e-10f, 5.96e-8f, 2.98e-8f, 2.99e-8f}) {
      x.push_back(v);
    }
    for (int i = 0; i < 1000; ++i) x.push_back(std::normal_distribution<float>(0, 100)(rng));
    std::vector<uint16_t> got(x.size());
    F32ToF16Row(x.data(), got.data(), static_cast<int64_t>(x.size()));
    for (size_t i = 0; i < x.size(); ++i) {
      if (std::isnan(x[i])) continue;
      ASSERT_EQ(got[i], F32ToF16(x[i])) << x[i];
    }
  });
}

}  // namespace
}  // namespace promptcache
