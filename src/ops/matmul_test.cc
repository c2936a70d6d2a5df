// MatMul against its references for every weight type, many shapes and token counts, misaligned
// activations, several thread counts, and every Highway target this CPU supports (AVX-512 with
// and without VNNI).
//
// Quantized weights: MatMul must equal MatMulIntFormReference (plain scalar code of the integer
// form) bit for bit, whatever the target, the thread count or the number of tokens. That
// reference must in turn be close to MatMulReference (float weights, unrounded x, double sums):
// within the rounding of x to 8 bits, bounded by sum |w| |x - x_rounded|.
//
// Float weights: summation order is the only error, so MatMul is within about n u of sum |w x|
// of MatMulReference (u = 2^-24), and independent of the batch bit for bit.
#include "ops/matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "core/fp16.h"
#include "core/thread_pool.h"
#include "ops/matmul_internal.h"
#include "ops/packed.h"
#include "ops/quant.h"
#include "ops/targets.h"
#include "ops/weight_types.h"

namespace promptcache {
namespace {

constexpr double kU = 1.0 / (1 << 24);

const GgmlType kQuantizedTypes[] = {
    GgmlType::kQ4_0,   GgmlType::kQ4_1,   GgmlType::kQ5_0,    GgmlType::kQ5_1,  GgmlType::kQ8_0,
    GgmlType::kIQ4_NL, GgmlType::kMXFP4,  GgmlType::kQ2_K,    GgmlType::kQ3_K,  GgmlType::kQ4_K,
    GgmlType::kQ5_K,   GgmlType::kQ6_K,   GgmlType::kIQ4_XS,  GgmlType::kIQ3_S, GgmlType::kIQ3_XXS,
    GgmlType::kIQ2_S,  GgmlType::kIQ2_XS, GgmlType::kIQ2_XXS, GgmlType::kIQ1_M, GgmlType::kIQ1_S};
const GgmlType kFloatTypes[] = {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16};

// Byte offsets of the f16 scales in a block of each quantized type.
std::vector<int> ScaleOffsets(GgmlType t) {
  switch (t) {
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_1:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
      return {0, 2};
    case GgmlType::kQ2_K:
      return {80, 82};
    case GgmlType::kQ3_K:
      return {108};
    case GgmlType::kQ6_K:
      return {208};
    default:
      return {0};
  }
}

struct TestMatrix {
  std::vector<uint8_t> bytes;
  std::shared_ptr<PackedMatrix> packed;
  WeightMatrix w;
};

// A random matrix: for quantized types random bytes (every quant and scale bit pattern, -128 in
// Q8_0 included) with finite f16 scales of varied size, packed unless `pack` is false; float types
// random normal values. `pad` spare bytes end each row (row_bytes larger than the data, as a
// strided view would have).
TestMatrix MakeMatrix(GgmlType type, int64_t rows, int64_t cols, uint32_t seed, size_t pad = 0,
                      bool pack = true) {
  std::mt19937 rng(seed);
  const WeightTypeInfo& info = *FindWeightType(type);
  const size_t rb = RowBytes(type, cols) + pad;
  TestMatrix m;
  m.bytes.resize(rb * rows + 1);
  if (info.act == ActFormat::kFloat) {
    std::normal_distribution<float> dist(0.0f, 0.5f);
    std::vector<float> row(cols);
    for (int64_t r = 0; r < rows; ++r) {
      for (auto& v : row) v = dist(rng);
      QuantizeRow(type, row.data(), cols, m.bytes.data() + r * rb);
    }
  } else {
    for (auto& b : m.bytes) b = static_cast<uint8_t>(rng());
    std::uniform_real_distribution<float> scale(-0.05f, 0.05f);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t b = 0; b < cols / info.block_elems; ++b) {
        uint8_t* blk = m.bytes.data() + r * rb + b * info.block_bytes;
        if (type == GgmlType::kIQ1_M) {
          // The f16 scale is the top nibbles of the four 16-bit scale words (bytes 48..55).
          const uint16_t h = F32ToF16(scale(rng));
          for (int k = 0; k < 4; ++k) {
            uint16_t w;
            std::memcpy(&w, blk + 48 + 2 * k, 2);
            w = static_cast<uint16_t>((w & 0x0FFF) | ((h >> (4 * k)) & 15) << 12);
            std::memcpy(blk + 48 + 2 * k, &w, 2);
          }
          continue;
        }
        if (type == GgmlType::kMXFP4) {
          // An E8M0 exponent: scales from 2^-32 to 2^23, beyond f16's range both ways (the
          // packed header must keep them exact).
          blk[0] = static_cast<uint8_t>(96 + rng() % 56);
          continue;
        }
        for (int off : ScaleOffsets(type)) {
          const uint16_t h = F32ToF16(scale(rng));
          std::memcpy(blk + off, &h, 2);
        }
      }
    }
  }
  m.w = {type, m.bytes.data(), rows, cols, rb};
  if (pack && info.act != ActFormat::kFloat) {
    m.packed = std::make_shared<PackedMatrix>(PackMatrix(m.w, nullptr));
    m.w.packed = m.packed.get();
  }
  return m;
}

// Activations at an odd float offset inside their buffer, so SIMD loads are misaligned; some
// tokens scaled far up or down, one all zero.
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
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float scale = t % 5 == 3 ? 1e-3f : (t % 5 == 4 ? 40.0f : 1.0f);
    for (int64_t c = 0; c < cols; ++c) a.data()[t * cols + c] *= t == 2 ? 0.0f : scale;
  }
  return a;
}

std::string Describe(GgmlType t, int64_t rows, int64_t cols, int64_t n_tokens) {
  return GgmlTypeName(t) + " " + std::to_string(rows) + "x" + std::to_string(cols) + " tokens " +
         std::to_string(n_tokens);
}

// Every target (and VNNI off, where the CPU has it), 1 and 2 threads: fn(result, label).
template <typename Fn>
void ForEachVariant(const WeightMatrix& w, const float* x, int64_t n_tokens, ThreadPool* pool,
                    Fn fn) {
  for (int64_t target : OpsTargets()) {
    ScopedOpsTarget scoped(target);
    for (bool vnni_off : {false, true}) {
      if (vnni_off && !internal::VnniEnabled()) continue;
      internal::SetVnniDisabledForTest(vnni_off);
      for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), pool}) {
        std::vector<float> got(n_tokens * w.rows, NAN);
        MatMul(w, x, n_tokens, got.data(), p);
        fn(got, OpsTargetName(target) + (vnni_off ? " (no VNNI)" : "") +
                    (p ? " 2 threads" : " 1 thread"));
      }
      internal::SetVnniDisabledForTest(false);
    }
  }
}

// Every variant's product of `m` and n_tokens rows of activations drawn from `seed` equals the
// scalar integer-form reference, bit for bit (a fatal failure at the first mismatch).
void ExpectVariantsEqualIntForm(const TestMatrix& m, int64_t n_tokens, uint32_t seed,
                                ThreadPool* pool) {
  const int64_t rows = m.w.rows, cols = m.w.cols;
  Activations x = MakeActivations(n_tokens, cols, seed);
  std::vector<float> want(n_tokens * rows);
  MatMulIntFormReference(m.w, x.data(), n_tokens, want.data());
  const std::string what = Describe(m.w.type, rows, cols, n_tokens);
  ForEachVariant(m.w, x.data(), n_tokens, pool, [&](const auto& got, const auto& how) {
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i], want[i]) << what << " on " << how << " output " << i;
    }
  });
}

TEST(MatMul, SupportedTypes) {
  for (GgmlType t : kQuantizedTypes) EXPECT_TRUE(MatMulSupports(t)) << GgmlTypeName(t);
  for (GgmlType t : kFloatTypes) EXPECT_TRUE(MatMulSupports(t));
  for (GgmlType t : {GgmlType::kTQ1_0, GgmlType::kTQ2_0, GgmlType::kI8}) {
    EXPECT_FALSE(MatMulSupports(t)) << GgmlTypeName(t);
  }
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

// The exact contract: quantized MatMul equals the scalar integer-form reference, bit for bit.
// Row counts around the 8- and 16-row panels (30: with AVX-512 VNNI, a pair of panels whose second
// is partly rows), columns past the 512-column decode chunk, token counts around the 4-token
// groups.
TEST(MatMul, QuantizedEqualsIntFormReferenceExactly) {
  ThreadPool pool(2);
  uint32_t seed = 10;
  for (GgmlType type : kQuantizedTypes) {
    const int block = FindWeightType(type)->block_elems;
    const std::vector<int64_t> col_counts =
        block == 32 ? std::vector<int64_t>{32, 96, 544, 1056} : std::vector<int64_t>{256, 768};
    for (int64_t rows : {1, 7, 16, 17, 30, 40}) {
      for (int64_t cols : col_counts) {
        const TestMatrix m = MakeMatrix(type, rows, cols, ++seed, /*pad=*/rows % 3);
        for (int64_t n_tokens : {1, 2, 3, 5, 9}) {
          ExpectVariantsEqualIntForm(m, n_tokens, ++seed, &pool);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

// The row widths real models have (SmolLM2, Qwen2.5, Llama, Mistral, Phi-3 ...), for every type
// whose block divides them: both paths (1 and 4 tokens: whole rows; 6: panels) against the
// reference, on every target.
TEST(MatMul, RealModelRowWidthsEqualIntFormReference) {
  ThreadPool pool(2);
  uint32_t seed = 700;
  for (int64_t cols : {576, 896, 960, 1536, 2048, 2560, 3072, 4096, 5632, 8192, 14336}) {
    for (GgmlType type : kQuantizedTypes) {
      if (cols % FindWeightType(type)->block_elems != 0) continue;
      const int64_t rows = 9;
      const TestMatrix m = MakeMatrix(type, rows, cols, ++seed, /*pad=*/1);
      for (int64_t n_tokens : {1, 4, 6}) {
        ExpectVariantsEqualIntForm(m, n_tokens, ++seed, &pool);
        if (HasFatalFailure()) return;
      }
    }
  }
}

// Packing keeps the integer form: every block of every row reads back as the original decodes.
TEST(MatMul, PackedMatrixReadsBackTheIntegerForm) {
  uint32_t seed = 900;
  for (GgmlType type : kQuantizedTypes) {
    const WeightTypeInfo& info = *FindWeightType(type);
    for (int64_t rows : {1, 8, 13}) {
      const TestMatrix m = MakeMatrix(type, rows, info.block_elems * 3, ++seed, /*pad=*/2);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t b = 0; b < 3; ++b) {
          IntBlock want, got;
          info.decode(m.w.data + r * m.w.row_bytes + b * info.block_bytes, &want);
          UnpackBlock(*m.packed, r, b, &got);
          const std::string what = GgmlTypeName(type) + " row " + std::to_string(r);
          ASSERT_EQ(got.d, want.d) << what;
          if (info.has_min) {
            ASSERT_EQ(got.m, want.m) << what;
          }
          for (int i = 0; i < info.block_elems; ++i) ASSERT_EQ(got.q[i], want.q[i]) << what;
          if (info.act == ActFormat::kQ8_K) {
            for (int i = 0; i < 16; ++i) {
              ASSERT_EQ(got.sc[i], want.sc[i]) << what;
              if (info.has_min) {
                ASSERT_EQ(got.mn[i], want.mn[i]) << what;
              }
            }
          }
        }
      }
    }
  }
}

// Without a packed form quantized matrices take a plain loop: the same results.
TEST(MatMul, UnpackedQuantizedEqualsIntFormReference) {
  uint32_t seed = 950;
  for (GgmlType type : kQuantizedTypes) {
    const int64_t rows = 11, cols = FindWeightType(type)->block_elems * 4;
    const TestMatrix m = MakeMatrix(type, rows, cols, ++seed, 0, /*pack=*/false);
    ASSERT_EQ(m.w.packed, nullptr);
    for (int64_t n_tokens : {1, 6}) {
      Activations x = MakeActivations(n_tokens, cols, ++seed);
      std::vector<float> want(n_tokens * rows), got(n_tokens * rows);
      MatMulIntFormReference(m.w, x.data(), n_tokens, want.data());
      MatMul(m.w, x.data(), n_tokens, got.data(), nullptr);
      EXPECT_EQ(got, want) << GgmlTypeName(type);
    }
  }
}

// The integer form computes the mathematics: close to the float reference within the rounding
// of x (8 bits per block), and that bound is meaningful (a small share of the terms' size).
TEST(MatMul, IntFormStaysCloseToFloatReference) {
  uint32_t seed = 300;
  for (GgmlType type : kQuantizedTypes) {
    const WeightTypeInfo& info = *FindWeightType(type);
    const int64_t rows = 9, cols = 512, n_tokens = 3;
    const TestMatrix m = MakeMatrix(type, rows, cols, ++seed);
    Activations x = MakeActivations(n_tokens, cols, ++seed);
    std::vector<float> want(n_tokens * rows), got(n_tokens * rows), w(cols), xr(cols);
    MatMulReference(m.w, x.data(), n_tokens, want.data());
    MatMulIntFormReference(m.w, x.data(), n_tokens, got.data());
    std::vector<int8_t> q(cols);
    std::vector<float> d(cols / 32);
    std::vector<int16_t> sums(cols / 16);
    std::vector<float> s(cols / 32);
    for (int64_t t = 0; t < n_tokens; ++t) {
      const float* xt = x.data() + t * cols;
      QuantizeActivationsReference(info.act, xt, cols, q.data(), d.data(), sums.data(), s.data());
      const int block = info.act == ActFormat::kQ8_0 ? 32 : 256;
      for (int64_t c = 0; c < cols; ++c) xr[c] = q[c] * d[c / block];
      for (int64_t r = 0; r < rows; ++r) {
        DequantizeRow(type, m.w.data + r * m.w.row_bytes, cols, w.data());
        double qerr = 0, size = 0;
        for (int64_t c = 0; c < cols; ++c) {
          qerr += std::fabs(w[c]) * std::fabs(xt[c] - xr[c]);
          size += std::fabs(w[c] * xt[c]);
        }
        const double tol = qerr + 4 * cols * kU * size + 1e-30;
        EXPECT_NEAR(got[t * rows + r], want[t * rows + r], tol) << GgmlTypeName(type) << " " << r;
        if (t != 2) {
          EXPECT_LT(tol, 0.05 * size) << GgmlTypeName(type) << " " << r;
        }
      }
    }
  }
}

// Float weights: within summation error of the reference on every target; any column count.
TEST(MatMul, FloatWeightsAgainstReference) {
  ThreadPool pool(2);
  uint32_t seed = 100;
  for (GgmlType type : kFloatTypes) {
    for (int64_t cols : {1, 7, 17, 96, 1029, 2080}) {
      for (int64_t rows : {1, 4, 13}) {
        const TestMatrix m = MakeMatrix(type, rows, cols, ++seed, /*pad=*/6);
        for (int64_t n_tokens : {1, 2, 5, 70}) {
          Activations x = MakeActivations(n_tokens, cols, ++seed);
          std::vector<float> want(n_tokens * rows), w(cols);
          MatMulReference(m.w, x.data(), n_tokens, want.data());
          std::vector<double> tol(want.size());
          for (int64_t r = 0; r < rows; ++r) {
            DequantizeRow(type, m.w.data + r * m.w.row_bytes, cols, w.data());
            for (int64_t t = 0; t < n_tokens; ++t) {
              double size = 0;
              for (int64_t c = 0; c < cols; ++c) size += std::fabs(w[c] * x.data()[t * cols + c]);
              tol[t * rows + r] = (cols + 8) * kU * size + 1e-30;
            }
          }
          const std::string what = Describe(type, rows, cols, n_tokens);
          ForEachVariant(m.w, x.data(), n_tokens, &pool, [&](const auto& got, const auto& how) {
            for (size_t i = 0; i < got.size(); ++i) {
              ASSERT_NEAR(got[i], want[i], tol[i]) << what << " on " << how << " output " << i;
            }
          });
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

// Many tokens run in groups of tokens (packed_run-inl.h: 101 tokens over 8192 columns, groups of
// 36, 36 and 29), and the main tiles of either width (two pairs of panels with AVX-512 VNNI;
// otherwise 256-bit vectors of one panel) over 12 or more tokens read each column chunk decoded
// once (73 rows: 4 or 5 panels per thread, the last partly rows; 23 tokens: tiles of 6 and one
// of 5, or of 4 and one of 3): every path against the reference.
TEST(MatMul, TokenGroupsAndDecodedChunksEqualIntFormReference) {
  ThreadPool pool(2);
  uint32_t seed = 900;
  for (GgmlType type : kQuantizedTypes) {
    for (const auto& [cols, n_tokens] : {std::pair<int64_t, int64_t>{8192, 101}, {2048, 23}}) {
      const TestMatrix m = MakeMatrix(type, /*rows=*/73, cols, ++seed, /*pad=*/1);
      ExpectVariantsEqualIntForm(m, n_tokens, ++seed, &pool);
      if (HasFatalFailure()) return;
    }
  }
}

// A token's result is the same bit for bit whether it is multiplied alone or among others, for
// every type and target: what lets a KV cache filled token by token equal a batched prefill.
TEST(MatMul, ResultsDoNotDependOnTheBatch) {
  std::vector<GgmlType> types(std::begin(kQuantizedTypes), std::end(kQuantizedTypes));
  types.insert(types.end(), std::begin(kFloatTypes), std::end(kFloatTypes));
  ThreadPool pool(2);
  uint32_t seed = 500;
  for (GgmlType type : types)
    for (int64_t cols : {64, 172, 256, 1280, 1283}) {
      if (cols % FindWeightType(type)->block_elems != 0) continue;
      const int64_t rows = 37, n_tokens = 21;
      const TestMatrix m = MakeMatrix(type, rows, cols, ++seed);
      Activations x = MakeActivations(n_tokens, cols, ++seed);
      for (int64_t target : OpsTargets()) {
        ScopedOpsTarget scoped(target);
        std::vector<float> batched(n_tokens * rows), single(rows);
        MatMul(m.w, x.data(), n_tokens, batched.data(), &pool);
        for (int64_t t = 0; t < n_tokens; ++t) {
          MatMul(m.w, x.data() + t * cols, 1, single.data(), t % 2 ? &pool : nullptr);
          for (int64_t r = 0; r < rows; ++r) {
            ASSERT_EQ(single[r], batched[t * rows + r])
                << GgmlTypeName(type) << " cols " << cols << " on " << OpsTargetName(target)
                << " token " << t << " row " << r;
          }
        }
      }
    }
}

TEST(MatMul, MultiEqualsSeparateCalls) {
  ThreadPool pool2(2);
  uint32_t seed = 400;
  for (int64_t n_tokens : {1, 6}) {
    // Mixed types, activation forms and row counts sharing one x, as Q/K/V projections would.
    std::vector<TestMatrix> ms;
    ms.push_back(MakeMatrix(GgmlType::kQ4_K, 64, 512, ++seed));
    ms.push_back(MakeMatrix(GgmlType::kQ8_0, 13, 512, ++seed));
    ms.push_back(MakeMatrix(GgmlType::kF16, 22, 512, ++seed));
    ms.push_back(MakeMatrix(GgmlType::kQ6_K, 5, 512, ++seed));
    Activations x = MakeActivations(n_tokens, 512, ++seed);
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

// MatMulGrouped (mixture-of-experts layers: each expert on its own tokens) gives each matrix's
// rows exactly what MatMul gives them alone, whatever the thread count: with groups below and
// above the dynamic split's 16 tokens, an empty group, and two matrices sharing rows.
TEST(MatMul, GroupedEqualsSeparateCalls) {
  ThreadPool pool2(2), pool3(3);
  uint32_t seed = 500;
  std::vector<TestMatrix> ms;
  ms.push_back(MakeMatrix(GgmlType::kQ4_K, 48, 512, ++seed));
  ms.push_back(MakeMatrix(GgmlType::kQ4_K, 48, 512, ++seed));
  ms.push_back(MakeMatrix(GgmlType::kQ8_0, 40, 512, ++seed));
  ms.push_back(MakeMatrix(GgmlType::kF32, 24, 512, ++seed));
  ms.push_back(MakeMatrix(GgmlType::kQ6_K, 33, 512, ++seed));
  for (int64_t big : {3, 21}) {
    const std::vector<int64_t> first = {0, 0, 2, 2 + big, 2 + big};
    const std::vector<int64_t> rows = {2, 2, big, 0, 5};
    const int64_t x_rows = 7 + big;
    Activations x = MakeActivations(x_rows, 512, ++seed);
    std::vector<WeightMatrix> ws;
    std::vector<std::vector<float>> got, want;
    for (size_t i = 0; i < ms.size(); ++i) {
      ws.push_back(ms[i].w);
      want.emplace_back(rows[i] * ms[i].w.rows, NAN);
      MatMul(ms[i].w, x.data() + first[i] * 512, rows[i], want.back().data(), nullptr);
    }
    for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2, &pool3}) {
      got.clear();
      std::vector<float*> outs;
      for (size_t i = 0; i < ms.size(); ++i) got.emplace_back(rows[i] * ms[i].w.rows, NAN);
      for (auto& g : got) outs.push_back(g.data());
      MatMulGrouped(ws.data(), static_cast<int>(ws.size()), first.data(), rows.data(), x.data(),
                    x_rows, outs.data(), pool);
      for (size_t i = 0; i < ms.size(); ++i) EXPECT_EQ(got[i], want[i]) << i << " big " << big;
    }
  }
}

// The kernels' activation quantizers agree bit for bit with the reference, ties included: both
// forms round half to even (and in the Q8_K form the positive of two equal magnitudes sets the
// scale).
TEST(MatMul, ActivationQuantizationMatchesReference) {
  std::vector<float> x(512);
  std::mt19937 rng(5);
  for (auto& v : x) v = std::normal_distribution<float>(0.0f, 3.0f)(rng);
  x[0] = 127.0f;  // block 0 (Q8_0 form): scale 1, so half-integers are exact ties
  x[1] = 1.5f;
  x[2] = -2.5f;
  for (int j = 32; j < 64; ++j) x[j] = 0.0f;                   // an all-zero 32-block
  for (int j = 256; j < 512; ++j) x[j] = (j % 3 - 1) * 0.25f;  // ties for the Q8_K scale
  x[300] = -127.0f;
  x[301] = 127.0f;
  for (ActFormat f : {ActFormat::kQ8_0, ActFormat::kQ8_K}) {
    std::vector<int8_t> q0(512), q1(512);
    std::vector<float> d0(16), d1(16);
    std::vector<int16_t> s0(32), s1(32);
    std::vector<float> o0(16), o1(16);
    QuantizeActivationsReference(f, x.data(), 512, q0.data(), d0.data(), s0.data(), o0.data());
    for (int64_t target : OpsTargets()) {
      ScopedOpsTarget scoped(target);
      internal::QuantizeActivations(f, x.data(), 512, q1.data(), d1.data(), s1.data(), o1.data());
      const int nd = f == ActFormat::kQ8_0 ? 16 : 2, ns = f == ActFormat::kQ8_0 ? 16 : 32;
      EXPECT_EQ(q1, q0) << OpsTargetName(target);
      EXPECT_TRUE(std::equal(d0.begin(), d0.begin() + nd, d1.begin())) << OpsTargetName(target);
      EXPECT_TRUE(std::equal(s0.begin(), s0.begin() + ns, s1.begin())) << OpsTargetName(target);
      if (f == ActFormat::kQ8_0) {
        EXPECT_EQ(o0, o1) << OpsTargetName(target);
      }
    }
    if (f == ActFormat::kQ8_0) {
      EXPECT_EQ(q0[1], 2);   // 1.5 rounds half to even
      EXPECT_EQ(q0[2], -2);  // -2.5 too
      EXPECT_EQ(d0[1], 0.0f);
      EXPECT_EQ(o0[0], F16ToF32(F32ToF16(q0[0] + q0[1] + q0[2] + [&] {
                  int rest = 0;
                  for (int j = 3; j < 32; ++j) rest += q0[j];
                  return rest;
                }())));
    } else {
      EXPECT_EQ(q0[301], -127);  // +127 and -127 tie: the positive one maps to -127
      EXPECT_EQ(d1[1], -1.0f);
    }
  }
}

// The kernel names follow the target, VNNI and packing, as the dispatch does (expected here from
// the target names, not from the code that chooses).
TEST(MatMul, KernelNamesFollowTheDispatch) {
  const bool has_vnni = internal::VnniEnabled();
  for (int64_t target : OpsTargets()) {
    ScopedOpsTarget scoped(target);
    const std::string name = OpsTargetName(target);
    const bool avx3 = name.rfind("AVX3", 0) == 0, x86_int8 = avx3 || name == "AVX2";
    for (bool vnni_off : {false, true}) {
      internal::SetVnniDisabledForTest(vnni_off);
      for (GgmlType t : kQuantizedTypes) {
        // Signed: every type whose quants are values (Q8_0) or a table's (IQ*, MXFP4).
        const bool is_signed =
            t == GgmlType::kQ8_0 || GgmlTypeName(t).rfind("IQ", 0) == 0 || t == GgmlType::kMXFP4;
        std::string want = "packed_int8_portable";
        if (avx3 && has_vnni && !vnni_off) {
          want = "packed_int8_vpdpbusd";
        } else if (x86_int8) {
          want = is_signed ? "packed_int8_maddubs_sign" : "packed_int8_maddubs";
        }
        const TestMatrix packed = MakeMatrix(t, 8, 256, 1);
        EXPECT_EQ(MatMulKernelName(packed.w), want) << name << " " << GgmlTypeName(t);
        const TestMatrix plain = MakeMatrix(t, 8, 256, 1, 0, /*pack=*/false);
        EXPECT_EQ(std::string(MatMulKernelName(plain.w)), "unpacked_int8_loop") << name;
      }
      for (GgmlType t : kFloatTypes) {
        std::string want = "float_scalar";
        if (x86_int8) want = "float_fma_256";  // capped at 256 bits also on AVX-512
        if (name == "SSE4") want = "float_muladd_128";
        EXPECT_EQ(MatMulKernelName(MakeMatrix(t, 2, 64, 1).w), want) << name << GgmlTypeName(t);
      }
    }
    internal::SetVnniDisabledForTest(false);
  }
  EXPECT_EQ(std::string(MatMulKernelName({GgmlType::kTQ1_0})), "unsupported");
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
