// MatMul's `before` hook (TokenRowsFn): the forward pass hands MatMul a callback that writes x's
// token rows (residual add + RMS norm) inside the job that then quantizes them, so MatMul must
// call it for every row exactly once and before it reads (quantizes or multiplies) that row.
//
// Here x holds stale values until `before` copies the real rows in, and the product is checked
// against a scalar reference computed in this file from the real rows (dequantized weights times
// x in double), within the rounding of x to 8 bits for the quantized types; quantized products are
// also checked bit for bit against MatMulIntFormReference on the real rows. The stale values are
// large (about 100), so a row quantized or multiplied before `before` wrote it is far off.
//
// Mutations seen to fail here: QuantizeInputs calling `before` after quantizing a range fails every
// quantized case (Q8_0 and Q4_K alone and in MatMulMulti, every token and thread count), on both
// the scalar and the integer-form check; float weights cannot see that order, as they read x only
// in the multiply, after every `before` has run. Skipping `before` for the last range fails every
// case, float ones included, and the per-row call counts.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "ops/matmul.h"
#include "ops/packed.h"
#include "ops/quant.h"
#include "ops/weight_types.h"

namespace promptcache {
namespace {

constexpr int64_t kCols = 512;  // a whole number of blocks for Q8_0 (32) and Q4_K (256)
// 1: the decode path; 3: a few; 37: past kMinDynamicTokens (16), prefill's dynamic chunks, and
// several rows per `before` range on 2 and 3 threads.
constexpr int64_t kTokenCounts[] = {1, 3, 37};

// A matrix quantized from random normal values by the type's own quantizer (packed when the type
// quantizes activations, as a loaded model's are), and its rows dequantized for the reference.
struct Matrix {
  std::vector<uint8_t> bytes;
  std::shared_ptr<PackedMatrix> packed;
  std::vector<float> values;  // rows x kCols, as the weights decode
  WeightMatrix w;
};

Matrix MakeMatrix(GgmlType type, int64_t rows, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 0.5f);
  Matrix m;
  const size_t rb = RowBytes(type, kCols);
  m.bytes.resize(rb * rows);
  m.values.resize(rows * kCols);
  std::vector<float> row(kCols);
  for (int64_t r = 0; r < rows; ++r) {
    for (auto& v : row) v = dist(rng);
    QuantizeRow(type, row.data(), kCols, m.bytes.data() + r * rb);
    DequantizeRow(type, m.bytes.data() + r * rb, kCols, m.values.data() + r * kCols);
  }
  m.w = {type, m.bytes.data(), rows, kCols, rb};
  if (MatMulQuantizesActivations(type)) {
    m.packed = std::make_shared<PackedMatrix>(PackMatrix(m.w, nullptr));
    m.w.packed = m.packed.get();
  }
  return m;
}

// The real rows (normal, each token scaled differently) and the stale ones x starts with.
std::vector<float> MakeRows(int64_t n_tokens, uint32_t seed, float offset) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(n_tokens * kCols);
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t c = 0; c < kCols; ++c) x[t * kCols + c] = offset + dist(rng) * (1 + t % 3);
  }
  return x;
}

// Runs MatMulMulti on `ms` with x stale and a `before` that copies the real rows in, counting its
// calls per row; fills outs (one per matrix) and calls (one per token).
struct HookRun {
  std::vector<std::vector<float>> outs;
  std::vector<int> calls;
  int bad_ranges = 0;  // ranges not inside [0, n_tokens) or empty
};

HookRun RunWithBefore(const std::vector<const Matrix*>& ms, const std::vector<float>& real,
                      int64_t n_tokens, ThreadPool* pool) {
  std::vector<float> x = MakeRows(n_tokens, 99, 100.0f);  // stale: far from the real rows
  std::vector<std::atomic<int>> calls(n_tokens);
  std::atomic<int> bad{0};
  const TokenRowsFn before = [&](int64_t t0, int64_t t1) {
    if (t0 < 0 || t1 > n_tokens || t0 >= t1) {
      bad.fetch_add(1);
      return;
    }
    std::copy(real.begin() + t0 * kCols, real.begin() + t1 * kCols, x.begin() + t0 * kCols);
    for (int64_t t = t0; t < t1; ++t) calls[t].fetch_add(1);
  };
  HookRun run;
  std::vector<WeightMatrix> ws;
  std::vector<float*> outs;
  for (const Matrix* m : ms) {
    ws.push_back(m->w);
    run.outs.emplace_back(n_tokens * m->w.rows, NAN);
  }
  for (auto& o : run.outs) outs.push_back(o.data());
  if (ms.size() == 1) {
    MatMul(ws[0], x.data(), n_tokens, outs[0], pool, &before);
  } else {
    MatMulMulti(ws.data(), static_cast<int>(ws.size()), x.data(), n_tokens, outs.data(), pool,
                &before);
  }
  for (auto& c : calls) run.calls.push_back(c.load());
  run.bad_ranges = bad.load();
  return run;
}

// `got` (m times the real rows) against the scalar reference: sum_c w[r, c] x[t, c] in double.
// Quantized types round x to 8 bits per block (Q8_0 form: 32 values, scale stored in f16; Q8_K
// form: 256), each value by at most amax / 254 (plus amax / 2048 for the f16 scale): the bound
// is sum_c |w| amax / 200 with amax the largest |x| of c's block. Float types: summation order
// only. Also, quantized: equal bit for bit to MatMulIntFormReference on the real rows.
void ExpectMatchesReference(const Matrix& m, const std::vector<float>& real, int64_t n_tokens,
                            const std::vector<float>& got, const std::string& what) {
  const int64_t rows = m.w.rows;
  const bool quantized = MatMulQuantizesActivations(m.w.type);
  const int64_t block = m.w.type == GgmlType::kQ8_0 ? 32 : 256;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* xt = real.data() + t * kCols;
    std::vector<double> err(kCols, 0.0);  // the most x[c] may move when rounded
    for (int64_t b = 0; quantized && b < kCols; b += block) {
      double amax = 0;
      for (int64_t c = b; c < b + block; ++c) amax = std::max(amax, std::fabs(double(xt[c])));
      for (int64_t c = b; c < b + block; ++c) err[c] = amax / 200;
    }
    for (int64_t r = 0; r < rows; ++r) {
      const float* wr = m.values.data() + r * kCols;
      double sum = 0, size = 0, bound = 0;
      for (int64_t c = 0; c < kCols; ++c) {
        sum += double(wr[c]) * xt[c];
        size += std::fabs(double(wr[c]) * xt[c]);
        bound += std::fabs(double(wr[c])) * err[c];
      }
      ASSERT_NEAR(got[t * rows + r], sum, bound + 1e-5 * size + 1e-6)
          << what << ": " << GgmlTypeName(m.w.type) << " token " << t << " row " << r;
    }
  }
  if (quantized) {
    std::vector<float> want(n_tokens * rows);
    MatMulIntFormReference(m.w, real.data(), n_tokens, want.data());
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(got[i], want[i]) << what << ": " << GgmlTypeName(m.w.type) << " (int form) output "
                                 << i;
    }
  }
}

std::string Label(const std::vector<const Matrix*>& ms, int64_t n_tokens, ThreadPool* pool) {
  std::string s;
  for (const Matrix* m : ms) s += GgmlTypeName(m->w.type) + " ";
  return s + "tokens " + std::to_string(n_tokens) + " threads " +
         std::to_string(pool ? pool->size() : 1);
}

// Every token count on 1, 2 and 3 threads: fn(run, real rows, n_tokens, label).
template <typename Fn>
void ForEachRun(const std::vector<const Matrix*>& ms, Fn fn) {
  ThreadPool pool2(2), pool3(3);
  uint32_t seed = 1;
  for (int64_t n_tokens : kTokenCounts) {
    for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2, &pool3}) {
      const std::vector<float> real = MakeRows(n_tokens, ++seed, 0.0f);
      fn(RunWithBefore(ms, real, n_tokens, pool), real, n_tokens, Label(ms, n_tokens, pool));
    }
  }
}

// 264 rows x 512: enough multiply-adds (over 2^17) for even one token to be split over threads.
constexpr int64_t kRows = 264;

TEST(MatMulBefore, SingleMatrixEqualsReferenceOnTheRowsBeforeWrites) {
  uint32_t seed = 10;
  for (GgmlType type : {GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kF16, GgmlType::kF32}) {
    const Matrix m = MakeMatrix(type, kRows, ++seed);
    ForEachRun({&m}, [&](const HookRun& run, const auto& real, int64_t n_tokens, const auto& what) {
      ExpectMatchesReference(m, real, n_tokens, run.outs[0], what);
    });
  }
}

// Two and three matrices of mixed activation forms (Q8_0 form, Q8_K form, float) on one x, as
// the Q/K/V and gate/up projections are: one `before` serves them all.
TEST(MatMulBefore, MultiEqualsReferenceOnTheRowsBeforeWrites) {
  const Matrix q8 = MakeMatrix(GgmlType::kQ8_0, 40, 20);
  const Matrix q4k = MakeMatrix(GgmlType::kQ4_K, kRows, 21);
  const Matrix f16 = MakeMatrix(GgmlType::kF16, 24, 22);
  const Matrix f32 = MakeMatrix(GgmlType::kF32, 8, 23);
  const std::vector<std::vector<const Matrix*>> sets = {{&q4k, &f32}, {&q8, &q4k, &f16}};
  for (const auto& ms : sets) {
    ForEachRun(ms, [&](const HookRun& run, const auto& real, int64_t n_tokens, const auto& what) {
      for (size_t i = 0; i < ms.size(); ++i) {
        ExpectMatchesReference(*ms[i], real, n_tokens, run.outs[i], what);
      }
    });
  }
}

// `before` covers [0, n_tokens) exactly: every row written once (not once per matrix, not
// twice by overlapping ranges), no range outside it, quantized and float weights alike.
TEST(MatMulBefore, CalledExactlyOncePerTokenRow) {
  const Matrix q8 = MakeMatrix(GgmlType::kQ8_0, kRows, 30);
  const Matrix q4k = MakeMatrix(GgmlType::kQ4_K, kRows, 31);
  const Matrix f16 = MakeMatrix(GgmlType::kF16, kRows, 32);
  const Matrix f32 = MakeMatrix(GgmlType::kF32, kRows, 33);
  const std::vector<std::vector<const Matrix*>> sets = {{&q8},  {&q4k},       {&f16},
                                                        {&f32}, {&q4k, &f32}, {&q8, &q4k, &f16}};
  for (const auto& ms : sets) {
    ForEachRun(ms, [&](const HookRun& run, const auto&, int64_t n_tokens, const auto& what) {
      EXPECT_EQ(run.bad_ranges, 0) << what;
      ASSERT_EQ(static_cast<int64_t>(run.calls.size()), n_tokens) << what;
      for (int64_t t = 0; t < n_tokens; ++t) {
        EXPECT_EQ(run.calls[t], 1) << what << " token " << t;
      }
    });
  }
}

}  // namespace
}  // namespace promptcache
