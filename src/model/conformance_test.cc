// Conformance with llama.cpp on the files its own quantizer wrote: ../shared/models/conformance/
// holds one small Llama-architecture model per weight type family that real downloads use (in
// the mixes real files use, e.g. Q4_K_M's Q4_K + Q6_K) and llama.cpp's logits for 64 tokens
// evaluated in one batch. Reading the blocks right and multiplying them right reproduces those
// logits within the fixtures' bounds: 0.03 at every position and vocabulary entry, 0.005 on
// average. What remains is where the two engines round an activation to 8 bits differently: the
// integer sums are the same, but a last-bit difference in float order (attention above all)
// can move a value across a rounding boundary, and that one step travels on to the logits.
// (With the weights dequantized to F32 by llama.cpp's own quantizer, the engines agree within
// 3e-4.)
//
// The same 64 tokens fed in other batch splits, and one at a time through the KV cache, must
// give the one-batch logits bit for bit: the kernels compute every token the same way.
//
// A second reference (testdata/llama3-tied) covers F16 and BF16 weights, a tied embedding and
// Llama-3's RoPE frequency factors, with llama.cpp's logits at positions past 8192.
//
// A third (testdata/architectures) covers every other architecture: synth's tiny file of each
// (qwen2, qwen3, gemma2, gemma3, phi3 with short and long LongRoPE factors, Mistral-style
// llama), against llama.cpp or, for what it cannot run, its fork ik_llama.cpp; sliding windows
// shorter than the prompt, soft-caps that bite.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "model/model.h"
#include "model/synth.h"

namespace promptcache {
namespace {

const std::string kDir = std::string(PC_SHARED_DIR) + "/models/conformance/";

// stories260K's tokenization of the fixtures' text, BOS first, cut at 64 (their README).
const std::vector<int32_t> kIds = {1,   403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421,
                                   395, 317, 426, 338, 401, 396, 267, 337, 410, 408, 419, 292, 411,
                                   322, 265, 282, 295, 433, 335, 311, 374, 274, 287, 426, 385, 328,
                                   432, 366, 394, 261, 370, 352, 266, 268, 388, 318, 264, 285, 261,
                                   259, 276, 411, 426, 317, 336, 432, 278, 316, 318, 419, 337};

struct Fixture {
  const char* name;
  std::vector<GgmlType> types;  // the weight types the file holds besides F32 norms
};

const Fixture kFixtures[] = {
    {"tiny-q4_0", {GgmlType::kQ4_0, GgmlType::kQ6_K}},
    {"tiny-q4_1", {GgmlType::kQ4_1, GgmlType::kQ6_K}},
    {"tiny-q5_0", {GgmlType::kQ5_0, GgmlType::kQ6_K}},
    {"tiny-q5_1", {GgmlType::kQ5_1, GgmlType::kQ6_K}},
    {"tiny-q2_k", {GgmlType::kQ2_K, GgmlType::kQ3_K, GgmlType::kQ6_K}},
    {"tiny-q3_k_m", {GgmlType::kQ3_K, GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K}},
    {"tiny-q4_k_m", {GgmlType::kQ4_K, GgmlType::kQ6_K}},
    {"tiny-q5_k_m", {GgmlType::kQ5_K, GgmlType::kQ6_K}},
    {"tiny-q6_k", {GgmlType::kQ6_K}},
    {"tiny-iq4_nl", {GgmlType::kIQ4_NL, GgmlType::kQ6_K}},
    {"tiny-iq4_xs", {GgmlType::kIQ4_XS, GgmlType::kQ6_K}},
};

std::vector<float> ReadFloats(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << path;
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), v.size() * 4);
  return v;
}

// Feeds kIds into a fresh sequence in batches of the given sizes (summing to 64); all logits.
std::vector<float> Evaluate(const Model& m, const std::vector<int>& splits, ThreadPool* pool) {
  BlockPool blocks(m.MakeKvLayout(KvType::kF16, 16), 0, false);
  KvSequence seq(&blocks);
  ForwardScratch scratch;
  const int n_vocab = m.config().n_vocab;
  std::vector<float> logits(kIds.size() * n_vocab);
  size_t done = 0;
  for (int n : splits) {
    std::vector<BatchToken> batch;
    for (size_t i = done; i < done + n; ++i) {
      batch.push_back({kIds[i], static_cast<int32_t>(i), &seq, true});
    }
    const Status st = m.Forward(batch, logits.data() + done * n_vocab, pool, &scratch);
    EXPECT_TRUE(st.ok()) << st.message();
    done += n;
  }
  EXPECT_EQ(done, kIds.size());
  return logits;
}

class Conformance : public testing::TestWithParam<Fixture> {};

TEST_P(Conformance, MatchesLlamaCppLogits) {
  const Fixture& fx = GetParam();
  Result<std::unique_ptr<Model>> m = Model::Load(kDir + fx.name + ".gguf");
  ASSERT_TRUE(m.ok()) << m.status().message();
  // The file holds the types its README says: the test covers what it claims to.
  std::vector<GgmlType> seen;
  for (const GgufTensorInfo& t : (*m)->file().tensors()) {
    if (t.type != GgmlType::kF32 && std::find(seen.begin(), seen.end(), t.type) == seen.end()) {
      seen.push_back(t.type);
    }
  }
  std::sort(seen.begin(), seen.end());
  std::vector<GgmlType> want = fx.types;
  std::sort(want.begin(), want.end());
  EXPECT_EQ(seen, want);

  ThreadPool pool(2);
  const std::vector<float> got = Evaluate(**m, {64}, &pool);
  const std::vector<float> ref = ReadFloats(kDir + fx.name + ".logits.f32");
  ASSERT_EQ(got.size(), ref.size());
  double sum = 0, max = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs(double{got[i]} - ref[i]);
    sum += d;
    max = std::max(max, d);
  }
  const double mean = sum / got.size();
  EXPECT_LE(max, 0.03) << fx.name;
  EXPECT_LE(mean, 0.005) << fx.name;
  std::printf("%s: max %.4f, mean %.5f\n", fx.name, max, mean);

  // Any split of the same tokens, and one token at a time, with 1 or 2 threads: the same bits.
  EXPECT_EQ(Evaluate(**m, {5, 27, 1, 31}, &pool), got) << fx.name;
  EXPECT_EQ(Evaluate(**m, std::vector<int>(64, 1), nullptr), got) << fx.name;
}

// The long reference: synth's tiny-256-llama3 written as F16, BF16 and Q4_0; 8,256 tokens
// (kIds, then kIds after BOS over and over) evaluated in batches of 512; the last 16 rows of
// logits against llama.cpp's (testdata/llama3-tied/README.md: how they were made, and why the
// F16 bound is tight enough to notice the frequency factors missing).
struct LongFixture {
  GgmlType type;
  const char* name;
  double max_diff, mean_diff;
};

class LongReference : public testing::TestWithParam<LongFixture> {};

TEST_P(LongReference, MatchesLlamaCppPastTheOriginalContext) {
  const LongFixture& fx = GetParam();
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("pc_llama3_tied_" + std::string(fx.name) + ".gguf");
  SynthOptions so;
  so.preset = "tiny-256-llama3";
  so.vocab_path = std::string(PC_SHARED_DIR) + "/models/stories260K.gguf";
  so.type = fx.type;
  so.out_path = path.string();
  ASSERT_TRUE(Synthesize(so).ok());
  Result<std::unique_ptr<Model>> m = Model::Load(path.string());
  std::filesystem::remove(path);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ((*m)->config().rope_scaling, "llama3");
  EXPECT_EQ((*m)->file().FindTensor("output.weight"), nullptr);  // tied

  constexpr int kTokens = 8256, kKeep = 16;
  std::vector<int32_t> ids(kIds.begin(), kIds.end());
  while (ids.size() < kTokens) ids.push_back(kIds[1 + (ids.size() - 1) % (kIds.size() - 1)]);
  BlockPool blocks((*m)->MakeKvLayout(KvType::kF16, 16), 0, false);
  KvSequence seq(&blocks);
  ForwardScratch scratch;
  ThreadPool pool(2);
  const int n_vocab = (*m)->config().n_vocab;
  std::vector<float> got;
  for (int s = 0; s < kTokens; s += 512) {
    std::vector<BatchToken> batch;
    for (int i = s; i < std::min(kTokens, s + 512); ++i) {
      batch.push_back({ids[i], i, &seq, i >= kTokens - kKeep});
    }
    std::vector<float> logits(batch.size() * n_vocab);
    ASSERT_TRUE((*m)->Forward(batch, logits.data(), &pool, &scratch).ok());
    // Rows come only for the tokens that want them, in batch order.
    size_t rows = 0;
    for (const BatchToken& t : batch) rows += t.want_logits;
    got.insert(got.end(), logits.begin(), logits.begin() + rows * n_vocab);
  }
  const std::vector<float> ref = ReadFloats(
      std::string(PC_SOURCE_DIR) + "/src/model/testdata/llama3-tied/" + fx.name + ".logits.f32");
  ASSERT_EQ(got.size(), ref.size());
  double sum = 0, max = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs(double{got[i]} - ref[i]);
    sum += d;
    max = std::max(max, d);
  }
  EXPECT_LE(max, fx.max_diff) << fx.name;
  EXPECT_LE(sum / got.size(), fx.mean_diff) << fx.name;
  std::printf("%s at positions 8240..8255: max %.4f, mean %.5f\n", fx.name, max, sum / got.size());
}

INSTANTIATE_TEST_SUITE_P(Llama3Tied, LongReference,
                         testing::Values(LongFixture{GgmlType::kF16, "F16", 0.003, 0.0005},
                                         LongFixture{GgmlType::kBF16, "BF16", 0.015, 0.003},
                                         LongFixture{GgmlType::kQ4_0, "Q4_0", 0.03, 0.005}),
                         [](const testing::TestParamInfo<LongFixture>& info) {
                           return std::string(info.param.name);
                         });

// testdata/architectures/README.md: how the references were made.
struct ArchFixture {
  const char* preset;
  const char* reference;
  int context;  // what the reference engine ran with (LongRoPE picks its factors by it)
};

class Architectures : public testing::TestWithParam<ArchFixture> {};

TEST_P(Architectures, MatchLlamaCppLogits) {
  const ArchFixture& fx = GetParam();
  const std::filesystem::path path = std::filesystem::temp_directory_path() /
                                     ("pc_arch_" + std::to_string(getpid()) + fx.reference);
  SynthOptions so;
  so.preset = fx.preset;
  so.vocab_path = std::string(PC_SHARED_DIR) + "/models/stories260K.gguf";
  so.type = GgmlType::kF32;
  so.out_path = path.string();
  ASSERT_TRUE(Synthesize(so).ok());
  Result<std::unique_ptr<Model>> m = Model::Load(path.string());
  std::filesystem::remove(path);
  ASSERT_TRUE(m.ok()) << m.status().message();
  (*m)->UseContext(fx.context);

  ThreadPool pool(2);
  const std::vector<float> got = Evaluate(**m, {64}, &pool);
  const std::vector<float> ref =
      ReadFloats(std::string(PC_SOURCE_DIR) + "/src/model/testdata/architectures/" + fx.reference +
                 ".logits.f32");
  const size_t n_vocab = (*m)->config().n_vocab;
  ASSERT_EQ(ref.size(), 32 * n_vocab);  // positions 32..63
  double sum = 0, max = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = std::fabs(double{got[32 * n_vocab + i]} - ref[i]);
    sum += d;
    max = std::max(max, d);
  }
  EXPECT_LE(max, 0.003) << fx.reference;
  EXPECT_LE(sum / ref.size(), 0.0003) << fx.reference;
  std::printf("%s: max %.5f, mean %.6f\n", fx.reference, max, sum / ref.size());

  // Windows, soft-caps and per-layer frequencies keep the kernels' batch invariance.
  EXPECT_EQ(Evaluate(**m, {5, 27, 1, 31}, &pool), got) << fx.reference;
  EXPECT_EQ(Evaluate(**m, std::vector<int>(64, 1), nullptr), got) << fx.reference;
}

INSTANTIATE_TEST_SUITE_P(AllArchitectures, Architectures,
                         testing::Values(ArchFixture{"tiny-qwen2", "qwen2", 512},
                                         ArchFixture{"tiny-qwen3", "qwen3", 512},
                                         ArchFixture{"tiny-gemma2", "gemma2", 512},
                                         ArchFixture{"tiny-gemma3", "gemma3", 512},
                                         ArchFixture{"tiny-phi3", "phi3-long", 512},
                                         ArchFixture{"tiny-phi3", "phi3-short", 80},
                                         ArchFixture{"tiny-mistral", "mistral", 512}),
                         [](const testing::TestParamInfo<ArchFixture>& info) {
                           std::string n = info.param.reference;
                           for (char& c : n)
                             c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return n;
                         });

INSTANTIATE_TEST_SUITE_P(AllTypes, Conformance, testing::ValuesIn(kFixtures),
                         [](const testing::TestParamInfo<Fixture>& info) {
                           std::string n = info.param.name;
                           for (char& c : n)
                             c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return n;
                         });

}  // namespace
}  // namespace promptcache
