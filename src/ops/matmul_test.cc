// MatMul against MatMulReference for every supported weight type, many shapes and token counts,
// misaligned activations, several thread counts, and every Highway target this CPU supports.
//
// Tolerances. Weights convert to f32 exactly (f16/bf16 widen; a Q8_0/Q4_0 quant times its f16
// scale fits a float mantissa), so on the float-activation path the only error is summation:
// any order of float summation of n products is within about n u of sum |w x| (u = 2^-24), plus
// half an ulp for the reference's own rounding. Where MatMul quantizes x to Q8_0, the block dot
// products are exact integers and the same summation bound holds against the reference run on
// x quantized the same way (tight); against the float reference we add the quantization error
// itself, bounded by sum |w| |x - x_quantized| (loose).
#include "ops/matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "core/fp16.h"
#include "core/thread_pool.h"
#include "ops/matmul_internal.h"
#include "ops/quant.h"
#include "ops/targets.h"

namespace promptcache {
namespace {

constexpr double kU = 1.0 / (1 << 24);

const GgmlType kTypes[] = {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_0,
                           GgmlType::kQ4_0};

size_t BytesFor(GgmlType t, int64_t cols) {
  switch (t) {
    case GgmlType::kF32:
      return cols * 4;
    case GgmlType::kQ8_0:
      return cols / 32 * 34;
    case GgmlType::kQ4_0:
      return cols / 32 * 18;
    default:
      return cols * 2;
  }
}

struct TestMatrix {
  std::vector<uint8_t> bytes;
  std::vector<float> dequantized;  // [rows x cols]
  WeightMatrix w;
};

// A random matrix in `type`, with `pad` spare bytes at the end of each row (row_bytes larger than
// the data, as a strided view would have).
TestMatrix MakeMatrix(GgmlType type, int64_t rows, int64_t cols, uint32_t seed, size_t pad = 0) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 0.5f);
  TestMatrix m;
  const size_t rb = BytesFor(type, cols) + pad;
  m.bytes.assign(rb * rows + 1, 0xAB);
  m.dequantized.resize(rows * cols);
  std::vector<float> row(cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (auto& v : row) v = dist(rng);
    QuantizeRow(type, row.data(), cols, m.bytes.data() + r * rb);
    DequantizeRow(type, m.bytes.data() + r * rb, cols, m.dequantized.data() + r * cols);
  }
  m.w = {type, m.bytes.data(), rows, cols, rb};
  return m;
}

// Activations at an odd float offset inside their buffer, so SIMD loads are misaligned.
struct Activations {
  std::vector<float> buf;
  float* data() { return buf.data() + 1; }
};

Activations MakeActivations(int64_t n_tokens, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  Activations a;
  a.buf.resize(n_tokens * cols + 1);
  for (auto& v : a.buf) v = dist(rng);
  return a;
}

// sum_c |w[r, c] x[t, c]| for every output, the scale of the summation error.
std::vector<double> AbsDots(const TestMatrix& m, const float* x, int64_t n_tokens) {
  const int64_t rows = m.w.rows, cols = m.w.cols;
  std::vector<double> s(n_tokens * rows);
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t r = 0; r < rows; ++r) {
      double acc = 0;
      for (int64_t c = 0; c < cols; ++c) {
        acc += std::fabs(static_cast<double>(m.dequantized[r * cols + c]) * x[t * cols + c]);
      }
      s[t * rows + r] = acc;
    }
  }
  return s;
}

// Expected results and error bounds for one (matrix, activations) case.
struct Expectation {
  std::vector<float> want;
  std::vector<double> tol;
};

Expectation Expect(const TestMatrix& m, float* x, int64_t n_tokens) {
  const int64_t rows = m.w.rows, cols = m.w.cols;
  Expectation e;
  e.want.resize(n_tokens * rows);
  e.tol.resize(n_tokens * rows);
  std::vector<float> xq(x, x + n_tokens * cols);
  const bool quantized = MatMulQuantizesActivations(m.w.type, n_tokens);
  if (quantized) {
    std::vector<uint8_t> blocks(cols / 32 * 34);
    for (int64_t t = 0; t < n_tokens; ++t) {
      QuantizeRow(GgmlType::kQ8_0, x + t * cols, cols, blocks.data());
      DequantizeRow(GgmlType::kQ8_0, blocks.data(), cols, xq.data() + t * cols);
    }
  }
  MatMulReference(m.w, xq.data(), n_tokens, e.want.data());
  const auto abs_dots = AbsDots(m, xq.data(), n_tokens);
  for (size_t i = 0; i < e.tol.size(); ++i) {
    e.tol[i] = (cols + 8) * kU * abs_dots[i] + kU * std::fabs(e.want[i]) + 1e-30;
  }
  return e;
}

void ExpectNear(const std::vector<float>& got, const Expectation& e, const std::string& what) {
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], e.want[i], e.tol[i]) << what << " output " << i;
  }
}

std::string Describe(GgmlType t, int64_t rows, int64_t cols, int64_t n_tokens) {
  return "type " + std::to_string(static_cast<int>(t)) + " " + std::to_string(rows) + "x" +
         std::to_string(cols) + " tokens " + std::to_string(n_tokens);
}

// Runs MatMul on each target and with 1..3 threads, comparing with `e`; results must not depend
// on the thread count at all (each output is computed by one thread in a fixed order).
void CheckAllTargets(const TestMatrix& m, float* x, int64_t n_tokens, const Expectation& e,
                     const std::vector<ThreadPool*>& pools) {
  const std::string what = Describe(m.w.type, m.w.rows, m.w.cols, n_tokens);
  for (int64_t target : OpsTargets()) {
    ScopedOpsTarget scoped(target);
    std::vector<float> single(e.want.size(), NAN);
    MatMul(m.w, x, n_tokens, single.data(), nullptr);
    ExpectNear(single, e, what + " on " + OpsTargetName(target));
    for (ThreadPool* pool : pools) {
      std::vector<float> got(e.want.size(), NAN);
      MatMul(m.w, x, n_tokens, got.data(), pool);
      ASSERT_EQ(got, single) << what << " threads " << pool->size();
    }
  }
}

TEST(MatMul, SupportedTypes) {
  for (GgmlType t : kTypes) EXPECT_TRUE(MatMulSupports(t));
  EXPECT_FALSE(MatMulSupports(GgmlType::kQ4_K));
  EXPECT_FALSE(MatMulSupports(GgmlType::kI8));
}

TEST(MatMul, ReferenceByHand) {
  const float w[6] = {1, 2, 3, -1, 0.5f, 4};  // 2 x 3
  const float x[6] = {1, 1, 1, 2, 0, -1};     // 2 tokens
  WeightMatrix m{GgmlType::kF32, reinterpret_cast<const uint8_t*>(w), 2, 3, 12};
  float out[4];
  MatMulReference(m, x, 2, out);
  EXPECT_EQ(out[0], 6.0f);   // token 0, row 0
  EXPECT_EQ(out[1], 3.5f);   // token 0, row 1
  EXPECT_EQ(out[2], -1.0f);  // token 1, row 0
  EXPECT_EQ(out[3], -6.0f);  // token 1, row 1
  MatMul(m, x, 2, out, nullptr);
  EXPECT_EQ(out[0], 6.0f);
  EXPECT_EQ(out[3], -6.0f);
}

TEST(MatMul, ManyShapesAndTokenCounts) {
  ThreadPool pool2(2);
  const std::vector<ThreadPool*> pools = {&pool2};
  uint32_t seed = 10;
  for (GgmlType type : kTypes) {
    for (int64_t rows : {1, 3, 4, 5, 8, 13, 67}) {
      for (int64_t cols : {32, 96, 160}) {
        const TestMatrix m = MakeMatrix(type, rows, cols, ++seed);
        for (int64_t n_tokens : {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 31}) {
          Activations x = MakeActivations(n_tokens, cols, ++seed);
          const Expectation e = Expect(m, x.data(), n_tokens);
          CheckAllTargets(m, x.data(), n_tokens, e, pools);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

// Float types take any number of columns; the SIMD loops must finish odd remainders.
TEST(MatMul, OddColumnCountsForFloatTypes) {
  ThreadPool pool2(2);
  uint32_t seed = 100;
  for (GgmlType type : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16}) {
    for (int64_t cols : {1, 3, 7, 9, 15, 17, 33, 1029}) {
      const TestMatrix m = MakeMatrix(type, 7, cols, ++seed);
      for (int64_t n_tokens : {1, 2, 5}) {
        Activations x = MakeActivations(n_tokens, cols, ++seed);
        CheckAllTargets(m, x.data(), n_tokens, Expect(m, x.data(), n_tokens), {&pool2});
        if (HasFatalFailure()) return;
      }
    }
  }
}

// Large enough to split the columns into chunks (> 1024) and the tokens into several cache
// chunks, with padded rows (row_bytes beyond the data).
TEST(MatMul, ChunkedColumnsAndTokens) {
  ThreadPool pool2(2);
  uint32_t seed = 200;
  for (GgmlType type : kTypes) {
    const TestMatrix m = MakeMatrix(type, 11, 2080, ++seed, /*pad=*/6);
    for (int64_t n_tokens : {1, 70}) {
      Activations x = MakeActivations(n_tokens, 2080, ++seed);
      CheckAllTargets(m, x.data(), n_tokens, Expect(m, x.data(), n_tokens), {&pool2});
      if (HasFatalFailure()) return;
    }
  }
}

// Where x is quantized, the result must also be close to the float reference, within the error
// the quantization of x itself can cause.
TEST(MatMul, QuantizedActivationsStayCloseToFloatReference) {
  uint32_t seed = 300;
  for (GgmlType type : {GgmlType::kQ8_0, GgmlType::kQ4_0}) {
    ASSERT_TRUE(MatMulQuantizesActivations(type, 1));
    const int64_t rows = 9, cols = 576;
    const TestMatrix m = MakeMatrix(type, rows, cols, ++seed);
    Activations x = MakeActivations(1, cols, ++seed);
    std::vector<float> xq(cols);
    std::vector<uint8_t> blocks(cols / 32 * 34);
    QuantizeRow(GgmlType::kQ8_0, x.data(), cols, blocks.data());
    DequantizeRow(GgmlType::kQ8_0, blocks.data(), cols, xq.data());
    std::vector<float> want(rows), got(rows);
    MatMulReference(m.w, x.data(), 1, want.data());
    MatMul(m.w, x.data(), 1, got.data(), nullptr);
    const auto abs_dots = AbsDots(m, x.data(), 1);
    for (int64_t r = 0; r < rows; ++r) {
      double qerr = 0;
      for (int64_t c = 0; c < cols; ++c) {
        qerr += std::fabs(m.dequantized[r * cols + c]) * std::fabs(x.data()[c] - xq[c]);
      }
      const double tol = qerr + 2 * (cols + 8) * kU * abs_dots[r];
      EXPECT_NEAR(got[r], want[r], tol) << r;
      // The bound is meaningful: far below the size of the result's terms.
      EXPECT_LT(tol, 0.05 * abs_dots[r]) << r;
    }
  }
}

TEST(MatMul, MultiEqualsSeparateCalls) {
  ThreadPool pool2(2);
  uint32_t seed = 400;
  for (int64_t n_tokens : {1, 6}) {
    // Mixed types and row counts sharing one x, as Q/K/V projections would.
    std::vector<TestMatrix> ms;
    ms.push_back(MakeMatrix(GgmlType::kQ8_0, 64, 96, ++seed));
    ms.push_back(MakeMatrix(GgmlType::kQ8_0, 13, 96, ++seed));
    ms.push_back(MakeMatrix(GgmlType::kF16, 22, 96, ++seed));
    ms.push_back(MakeMatrix(GgmlType::kQ4_0, 5, 96, ++seed));
    Activations x = MakeActivations(n_tokens, 96, ++seed);
    std::vector<WeightMatrix> ws;
    std::vector<std::vector<float>> got, want;
    std::vector<float*> outs;
    for (auto& m : ms) {
      ws.push_back(m.w);
      got.emplace_back(n_tokens * m.w.rows, NAN);
      want.emplace_back(n_tokens * m.w.rows, NAN);
      MatMul(m.w, x.data(), n_tokens, want.back().data(), nullptr);
    }
    for (auto& g : got) outs.push_back(g.data());
    for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2}) {
      MatMulMulti(ws.data(), static_cast<int>(ws.size()), x.data(), n_tokens, outs.data(), pool);
      for (size_t i = 0; i < ms.size(); ++i) EXPECT_EQ(got[i], want[i]) << i;
    }
  }
}

// The kernels' own activation quantizer must agree bit for bit with QuantizeRow(kQ8_0), ties
// (which round away from zero) included, or the tight tolerance above would not hold.
TEST(MatMul, ActivationQuantizationMatchesQuantizeRow) {
  std::vector<float> x(96);
  for (int j = 0; j < 32; ++j) x[j] = (j % 2 ? 1 : -1) * (j + 0.5f);  // amax 31.5: no ties
  x[0] = 127.0f;                              // block 0: d = 1, so the half-integers are exact ties
  for (int j = 32; j < 64; ++j) x[j] = 0.0f;  // an all-zero block
  std::mt19937 rng(5);
  for (int j = 64; j < 96; ++j) x[j] = std::normal_distribution<float>(0.0f, 3.0f)(rng);
  std::vector<uint8_t> blocks(3 * 34);
  QuantizeRow(GgmlType::kQ8_0, x.data(), 96, blocks.data());
  for (int64_t target : OpsTargets()) {
    ScopedOpsTarget scoped(target);
    std::vector<int8_t> q(96);
    std::vector<float> d(3);
    internal::QuantizeActivations(x.data(), 96, q.data(), d.data());
    for (int b = 0; b < 3; ++b) {
      uint16_t h;
      std::memcpy(&h, blocks.data() + 34 * b, 2);
      EXPECT_EQ(d[b], F16ToF32(h)) << OpsTargetName(target) << " block " << b;
      for (int j = 0; j < 32; ++j) {
        ASSERT_EQ(q[32 * b + j], static_cast<int8_t>(blocks[34 * b + 2 + j]))
            << OpsTargetName(target) << " element " << 32 * b + j;
      }
    }
    EXPECT_EQ(q[1], 2);   // 1.5 rounds away from zero
    EXPECT_EQ(q[2], -3);  // -2.5 too
    // The float form the matrix-matrix path uses: exactly DequantizeRow(QuantizeRow(x)).
    std::vector<float> rounded(96), want(96);
    internal::RoundActivations(x.data(), 96, rounded.data());
    DequantizeRow(GgmlType::kQ8_0, blocks.data(), 96, want.data());
    EXPECT_EQ(rounded, want) << OpsTargetName(target);
  }
}

TEST(MatMul, EmptyInputsDoNothing) {
  const TestMatrix m = MakeMatrix(GgmlType::kQ8_0, 0, 64, 1);
  float out = 7.0f;
  Activations x = MakeActivations(1, 64, 2);
  MatMul(m.w, x.data(), 1, &out, nullptr);
  MatMul(MakeMatrix(GgmlType::kF32, 3, 64, 3).w, x.data(), 0, &out, nullptr);
  EXPECT_EQ(out, 7.0f);
}

}  // namespace
}  // namespace promptcache

namespace promptcache {
namespace {

// A token's result must not depend on how many tokens share the call (the matrix-vector and the
// matrix-matrix paths round activations the same way), or a KV cache filled token by token would
// drift from one filled by a batched prefill.
TEST(MatMul, ResultsDoNotDependOnTheBatch) {
  for (GgmlType type : {GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kF16, GgmlType::kF32}) {
    const int64_t rows = 37, cols = 256, n_tokens = 21;
    const TestMatrix m = MakeMatrix(type, rows, cols, 5);
    std::vector<float> x(n_tokens * cols);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * i) * (1 + (i % 7));
    std::vector<float> batched(n_tokens * rows), single(rows);
    ThreadPool pool(2);
    MatMul(m.w, x.data(), n_tokens, batched.data(), &pool);
    for (int64_t t = 0; t < n_tokens; ++t) {
      MatMul(m.w, x.data() + t * cols, 1, single.data(), &pool);
      for (int64_t r = 0; r < rows; ++r) {
        const float want = batched[t * rows + r];
        ASSERT_NEAR(single[r], want, 1e-5f * (1 + std::fabs(want)))
            << "type " << static_cast<int>(type) << " token " << t << " row " << r;
      }
    }
  }
}

}  // namespace
}  // namespace promptcache
