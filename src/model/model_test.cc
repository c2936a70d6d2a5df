// The forward pass against the reference vectors of stories260K, and cached against uncached
// computation: with the KV cache, every way of feeding the same tokens at the same positions
// must give the logits of one full recompute.
#include "model/model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>

#include "core/fp16.h"
#include "core/temp_files.h"
#include "model/kv_rows.h"
#include "model/kv_shift.h"
#include "model/model_test_util.h"
#include "model/synth.h"
#include "tokenizer/tokenizer_test_util.h"

namespace promptcache {
namespace {

TEST(ModelConfig, ContextBeyondTrainingIsRefusedUnlessScalingOrAllowed) {
  ModelConfig c;
  c.context_length = 2048;
  EXPECT_TRUE(CheckContext(c, 2048, false).ok());
  const Status beyond = CheckContext(c, 4096, false);
  EXPECT_EQ(beyond.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(beyond.message().find("context 4096 is more than the 2048 tokens"), std::string::npos);
  EXPECT_TRUE(CheckContext(c, 4096, true).ok());
  c.rope_scaled_context = 8192;  // linear RoPE scaling: original context × factor
  EXPECT_TRUE(CheckContext(c, 8192, false).ok());
  EXPECT_FALSE(CheckContext(c, 8193, false).ok());
}

TEST(Stories260K, ReferenceTokensAndLogits) {
  auto m = LoadOrDie(kStories);
  EXPECT_EQ(m->config().n_layers, 5);
  EXPECT_EQ(m->config().n_kv_heads, 4);
  const std::vector<int32_t> ids = m->tokenizer().Encode("Once upon a time", true);
  ASSERT_EQ(ids, (std::vector<int32_t>{1, 403, 407, 261, 378}));
  Runner r(*m, KvType::kF32);
  KvSequence seq(r.blocks());
  const std::vector<float> logits = r.Run(&seq, ids, Iota(5), 0, 5, false);
  const float expect0[8] = {-10.13658f, -5.32946f,  -10.13809f, -10.13686f,
                            -10.13721f, -10.13833f, -10.13727f, -10.13764f};
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(logits[i], expect0[i], 1e-3) << i;
  const std::pair<int, float> top[5] = {
      {432, 17.79940f}, {383, 14.28126f}, {322, 9.70965f}, {353, 9.58729f}, {323, 9.13424f}};
  std::vector<int> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + 5, order.end(),
                    [&](int a, int b) { return logits[a] > logits[b]; });
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(order[i], top[i].first);
    EXPECT_NEAR(logits[top[i].first], top[i].second, 1e-3);
  }
}

// The hidden states Forward writes (want_hidden) are exactly what the output matrix multiplies:
// multiplied by it they give the logits bit for bit; asked for alone (no logits computed) they
// are the same. (Mutation tried: the output norm left out of the hidden rows fails both.)
TEST(Stories260K, HiddenStatesAreTheOutputMatrixInput) {
  std::unique_ptr<Model> m = LoadOrDie(kStories);
  const ModelConfig& c = m->config();
  const std::vector<int32_t> tokens = m->tokenizer().Encode("Once upon a time, a girl", true);
  const int n = static_cast<int>(tokens.size());
  ThreadPool pool(2);
  BlockPool blocks(m->MakeKvLayout(KvType::kF16, 16), 0, false);
  ForwardScratch scratch;
  auto run = [&](bool logits_too, std::vector<float>* logits) {
    KvSequence seq(&blocks);
    std::vector<BatchToken> batch;
    for (int i = 0; i < n; ++i) batch.push_back({tokens[i], i, &seq, logits_too, -1, true});
    std::vector<float> hidden(size_t(n) * c.n_embd);
    logits->assign(logits_too ? size_t(n) * c.n_vocab : 0, 0.0f);
    PC_CHECK(
        m->Forward(batch, logits_too ? logits->data() : nullptr, &pool, &scratch, 0, hidden.data())
            .ok());
    return hidden;
  };
  std::vector<float> logits, none;
  const std::vector<float> hidden = run(true, &logits);
  EXPECT_EQ(run(false, &none), hidden);
  const WeightMatrix* output = m->Matrices().front().second;  // the output matrix comes first
  std::vector<float> product(size_t(n) * c.n_vocab);
  MatMul(*output, hidden.data(), n, product.data(), &pool);
  EXPECT_EQ(product, logits);
}

TEST(Stories260K, GreedyContinuationMatchesReference) {
  const std::vector<int32_t>& expected = kStoriesGreedyIds;
  auto m = LoadOrDie(kStories);
  for (KvType kv : {KvType::kF32, KvType::kF16}) {
    Runner r(*m, kv);
    KvSequence seq(r.blocks());
    std::vector<int32_t> tokens(expected.begin(), expected.begin() + 5);
    std::vector<float> logits = r.Run(&seq, tokens, Iota(5), 0, 5, false);
    while (tokens.size() < expected.size()) {
      const int32_t next =
          static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      tokens.push_back(next);
      logits = r.Run(&seq, tokens, Iota(tokens.size()), tokens.size() - 1, tokens.size(), false);
    }
    EXPECT_EQ(tokens, expected) << (kv == KvType::kF32 ? "f32" : "f16");
    EXPECT_EQ(m->tokenizer().Decode(std::vector<int32_t>(tokens.begin() + 1, tokens.end())),
              kStoriesGreedyText);
  }
}

// "stories" (F32 weights) or a synthetic model of the named weight type.
struct CacheCase {
  std::string model;
  KvType kv;
  // For the shifted-positions comparison, which is not exact (RoPE rounds): the largest logit
  // difference, or for quantized K/V the mean KL of the distributions (see the cases).
  float bound;
};

void PrintTo(const CacheCase& c, std::ostream* os) {
  *os << c.model << " " << KvTypeName(c.kv) << " bound " << c.bound;
}

// Split a prompt's prefill anywhere, or decode it token by token: every token's logits are the
// same floats as one forward pass over the whole prompt gives (with the same KV storage), for
// every weight type: each kernel's arithmetic for a token is independent of the batch.
class CachedEqualsUncached : public ::testing::TestWithParam<CacheCase> {
 protected:
  void SetUp() override {
    const CacheCase& c = GetParam();
    model_ = LoadOrDie(CaseModelPath(c.model));
    const int n_vocab = model_->config().n_vocab;
    tokens_.resize(40);
    for (size_t i = 0; i < tokens_.size(); ++i) tokens_[i] = (i * 7919 + 13) % n_vocab;
  }
  std::unique_ptr<Model> model_;
  std::vector<int32_t> tokens_;
};

// Prefill a prefix, then decode the rest one token at a time; each step's logits must equal the
// full recompute's row for that token.
TEST_P(CachedEqualsUncached, PrefillThenDecode) {
  Runner r(*model_, GetParam().kv);
  const size_t n = tokens_.size(), V = model_->config().n_vocab;
  const std::vector<int32_t> pos = Iota(n);
  Runner full_runner(*model_, GetParam().kv);
  const std::vector<float> full = full_runner.Full(tokens_, pos);
  KvSequence seq(r.blocks());
  std::vector<float> step = r.Run(&seq, tokens_, pos, 0, 9, false);
  ExpectSameBits(step.data(), &full[8 * V], V, "prefill");
  for (size_t i = 9; i < n; ++i) {
    step = r.Run(&seq, tokens_, pos, i, i + 1, false);
    ExpectSameBits(step.data(), &full[i * V], V, "token " + std::to_string(i));
    if (HasFatalFailure()) return;
  }
}

TEST_P(CachedEqualsUncached, PrefillInChunks) {
  const size_t n = tokens_.size(), V = model_->config().n_vocab;
  const std::vector<int32_t> pos = Iota(n);
  Runner full_runner(*model_, GetParam().kv);
  const std::vector<float> full = full_runner.Full(tokens_, pos);
  for (size_t chunk : {1, 2, 3, 5, 7, 16, 17}) {
    Runner r(*model_, GetParam().kv);
    KvSequence seq(r.blocks());
    for (size_t b = 0; b < n; b += chunk) {
      const size_t e = std::min(n, b + chunk);
      const std::vector<float> got = r.Run(&seq, tokens_, pos, b, e, true);
      for (size_t i = b; i < e; ++i) {
        ExpectSameBits(&got[(i - b) * V], &full[i * V], V,
                       "chunk " + std::to_string(chunk) + " token " + std::to_string(i));
        if (HasFatalFailure()) return;
      }
    }
  }
}

// Positions with gaps: cached decoding equals the full recompute at the same gapped positions,
// and both equal the same relative layout shifted to start elsewhere (RoPE sees only position
// differences).
TEST_P(CachedEqualsUncached, PositionsWithGaps) {
  const size_t n = tokens_.size(), V = model_->config().n_vocab;
  std::vector<int32_t> gapped(n);
  for (size_t i = 0; i < n; ++i)
    gapped[i] = static_cast<int32_t>(i + (i >= 10 ? 25 : 0) + (i >= 25 ? 60 : 0));
  std::vector<int32_t> shifted = gapped;
  for (int32_t& p : shifted) p += 131;
  Runner full_runner(*model_, GetParam().kv);
  const std::vector<float> full = full_runner.Full(tokens_, gapped);
  const std::vector<float> full_shifted = full_runner.Full(tokens_, shifted);
  if (KvTypeQuantized(GetParam().kv)) {
    EXPECT_LE(MeanKl(full, full_shifted, V), GetParam().bound);
  } else {
    EXPECT_LE(MaxAbsDiff(full.data(), full_shifted.data(), full.size()), GetParam().bound);
  }
  Runner r(*model_, GetParam().kv);
  KvSequence seq(r.blocks());
  r.Run(&seq, tokens_, gapped, 0, 12, false);
  for (size_t i = 12; i < n; ++i) {
    const std::vector<float> step = r.Run(&seq, tokens_, gapped, i, i + 1, false);
    ExpectSameBits(step.data(), &full[i * V], V, "token " + std::to_string(i));
    if (HasFatalFailure()) return;
  }
}

// The shifted bound: shifted positions round differently in RoPE, and a rounding difference
// can move an activation across a quantization step of the activations (Q8_0, Q4_0: one such
// step moves logits by about 5e-3; measured 0 on f32 K/V here, bounded by two steps). Measured
// (AVX-512, 2026-11; bound about 3x, or the former bound where that was already closer):
// stories f32 7.9e-6, f16 0.029; F16 f32 1.8e-7, f16 7.7e-6; the quantized-weight fixtures
// 0.0045 to 0.036 with f16 K/V. Mutation caught: RoPE's angles in float instead of double
// (ops/vec.cc) moves gemma3 f32 by 0.014, over its bound of 0.01 (formerly 0.02).
INSTANTIATE_TEST_SUITE_P(
    Models, CachedEqualsUncached,
    ::testing::Values(
        CacheCase{"stories", KvType::kF32, 3e-5f}, CacheCase{"stories", KvType::kF16, 5e-2f},
        CacheCase{"F16", KvType::kF32, 1e-6f}, CacheCase{"F16", KvType::kF16, 3e-5f},
        CacheCase{"Q8_0", KvType::kF32, 1e-2f}, CacheCase{"Q8_0", KvType::kF16, 2e-2f},
        CacheCase{"Q4_0", KvType::kF32, 1e-2f}, CacheCase{"Q4_0", KvType::kF16, 2e-2f},
        CacheCase{"qwen2", KvType::kF16, 2e-2f}, CacheCase{"qwen3", KvType::kF16, 2e-2f},
        CacheCase{"gemma2", KvType::kF16, 5e-2f}, CacheCase{"gemma3", KvType::kF16, 5e-2f},
        CacheCase{"gemma3", KvType::kF32, 1e-2f}, CacheCase{"phi3", KvType::kF16, 2e-2f},
        CacheCase{"mistral", KvType::kF16, 2e-2f},
        // Mixtures of experts: routing is per token, each expert's rows computed as alone. Shifted
        // positions measured 0.044 (qwen3moe; qwen3 0.018: the router's weights follow the
        // rounding of its input too), 0.016 (mixtral) and 0.010 (qwen2moe).
        CacheCase{"qwen3moe", KvType::kF16, 0.13f}, CacheCase{"mixtral", KvType::kF16, 5e-2f},
        CacheCase{"qwen2moe", KvType::kF16, 3e-2f},
        // Quantized K/V (four heads of 8 per block in stories260K, two of 16 in the Q8_0
        // fixture, 64 and 128): the same invariance, bounded by mean KL. A key rotated
        // differently rounds differently, and where heads share a block its loudest head sets
        // every head's step: stories260K's shifted q4_0 run differs from the unshifted one as
        // two independent q4_0 roundings do (KL 0.35, single logits by up to 7.8 of its ~18;
        // against f16, one rounding gives 0.24), q8_0 0.010. The others measure 5e-7 (Q8_0
        // fixture, q8_0) to 4.6e-4 (qwen3, q4_0).
        CacheCase{"stories", KvType::kQ8_0, 3e-2f}, CacheCase{"stories", KvType::kQ4_0, 1.0f},
        CacheCase{"Q8_0", KvType::kQ8_0, 2e-6f}, CacheCase{"qwen2", KvType::kQ8_0, 2e-5f},
        CacheCase{"gemma3", KvType::kQ8_0, 2e-4f}, CacheCase{"qwen3", KvType::kQ4_0, 2e-3f},
        CacheCase{"mistral", KvType::kQ4_0, 3e-4f}),
    [](const auto& info) { return info.param.model + "_" + KvTypeName(info.param.kv); });

TEST(ModelLoad, BadFilesGiveOneLineErrors) {
  Result<std::unique_ptr<Model>> missing = Model::Load("/nonexistent/model.gguf");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/model.gguf"), std::string::npos);
  // A vocabulary-only file is a valid GGUF but no model.
  Result<std::unique_ptr<Model>> vocab =
      Model::Load(std::string(PC_SHARED_DIR) + "/tokenizers/ggml-vocab-gpt-2.gguf");
  ASSERT_FALSE(vocab.ok());
  EXPECT_EQ(vocab.status().message().find('\n'), std::string::npos);
}

// A file of an architecture the engine does not run: one line naming it and what is supported.
TEST(ModelLoad, UnsupportedArchitectureIsNamed) {
  std::ifstream in(kStories, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string key = "general.architecture";
  const size_t at = bytes.find(key);
  ASSERT_NE(at, std::string::npos);
  // The value follows the key: a u32 type (8: string), a u64 length (5), "llama".
  const size_t value = at + key.size() + 4 + 8;
  ASSERT_EQ(bytes.substr(value, 5), "llama");
  bytes.replace(value, 5, "mamba");
  const std::string path =
      (std::filesystem::temp_directory_path() / ("pc_mamba_" + std::to_string(getpid()) + ".gguf"))
          .string();
  std::ofstream(path, std::ios::binary) << bytes;
  Result<std::unique_ptr<Model>> m = Model::Load(path);
  std::filesystem::remove(path);
  ASSERT_FALSE(m.ok());
  const std::string msg = m.status().message();
  EXPECT_NE(msg.find("unsupported architecture 'mamba'"), std::string::npos) << msg;
  for (const char* name :
       {"llama", "qwen2", "qwen2moe", "qwen3", "qwen3moe", "gemma2", "gemma3", "phi3", "gpt-oss"}) {
    EXPECT_NE(msg.find(name), std::string::npos) << msg;
  }
  EXPECT_EQ(msg.find('\n'), std::string::npos);
}

TEST(ModelLoad, FingerprintDependsOnWeights) {
  auto a = LoadOrDie(kStories);
  auto b = LoadOrDie(kStories);
  EXPECT_EQ(a->fingerprint(), b->fingerprint());
  auto c = LoadOrDie(SyntheticModelPath());
  EXPECT_NE(a->fingerprint(), c->fingerprint());
  // Same shape and metadata, other weights.
  const std::string other = SynthesizeTiny(8);
  auto d = LoadOrDie(other);
  EXPECT_NE(c->fingerprint(), d->fingerprint());
  std::filesystem::remove(other);
  EXPECT_EQ(a->fingerprint().size(), 32u);
}

}  // namespace
}  // namespace promptcache
