// Conformance with llama.cpp on the files its own quantizer wrote: ../shared/models/conformance/
// holds one small Llama-architecture model per weight type family that real downloads use (in
// the mixes real files use, e.g. Q4_K_M's Q4_K + Q6_K) and llama.cpp's logits for 64 tokens
// evaluated in one batch. Reading the blocks right and multiplying them right reproduces those
// logits within each fixture's bound: the distance between llama.cpp and its fork ik_llama.cpp
// on the same file (kFixtures has the table), what two engines that both read the format right
// differ by. What remains is where engines round an activation to 8 bits differently: the
// integer sums are the same, but a last-bit difference in float order (attention above all)
// can move a value across a rounding boundary, and that one step travels on to the logits.
// (With the weights dequantized to F32 by llama.cpp's own quantizer, the engines agree within
// 3e-4.) An error of one unit in one table entry hides in that noise; the decoders are checked
// value for value against llama.cpp's own dequantization in src/ops/ggml_reference_test.cc.
//
// The same 64 tokens fed in other batch splits, and one at a time through the KV cache, must
// give the one-batch logits bit for bit: the kernels compute every token the same way.
//
// A second reference (testdata/llama3-tied) covers F16 and BF16 weights, a tied embedding and
// Llama-3's RoPE frequency factors, with llama.cpp's logits at positions past 8192.
//
// A third (testdata/architectures) covers every other architecture: synth's tiny file of each
// (qwen2, qwen3, gemma2, gemma3, phi3 with short and long LongRoPE factors, Mistral-style
// llama, the mixtures of experts qwen3moe, Mixtral and gpt-oss), against llama.cpp or, for what
// it cannot run, its fork ik_llama.cpp; sliding windows
// shorter than the prompt, soft-caps that bite, attention sharp enough that a RoPE error shows.
// A fourth (testdata/q8_0) covers Q8_0 weights, which no conformance fixture holds.
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
#include "ops/ops_test_util.h"

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
  double max_diff, mean_diff;   // ik_llama.cpp's distance from llama.cpp on this file
};

// The bounds: ik_llama.cpp 8337e4cd's logits for the same file and ids (its defaults: flash
// attention on, f16 K/V; 2 threads, context 512, one batch) against llama.cpp's, measured
// 2026-11-27 and rounded up in the third significant digit (flash attention off moves them by
// under 0.0012). This engine's distance from llama.cpp is 0.65 to 0.88 of them on the max and
// 0.61 to 0.83 on the mean:
//
//   fixture      this engine - llama.cpp    ik_llama.cpp - llama.cpp    this engine - ik
//                max       mean             max       mean              max       mean
//   q4_0         0.01770   0.003332         0.02357   0.004245          0.02357   0.004306
//   q4_1         0.01784   0.003384         0.02429   0.004097          0.02238   0.004040
//   q5_0         0.01835   0.003247         0.02085   0.004022          0.02708   0.004024
//   q5_1         0.01826   0.003297         0.02576   0.004247          0.02812   0.004144
//   q2_k         0.02257   0.004085         0.03457   0.006447          0.03208   0.006292
//   q3_k_m       0.02200   0.003890         0.02818   0.005439          0.02716   0.005411
//   q4_k_m       0.02115   0.004002         0.02763   0.004936          0.02991   0.004930
//   q5_k_m       0.02136   0.003899         0.02548   0.004797          0.02548   0.004858
//   q6_k         0.02255   0.003819         0.03164   0.006202          0.03645   0.006125
//   iq4_nl       0.01749   0.003150         0.02338   0.004013          0.02209   0.004120
//   iq4_xs       0.02046   0.003845         0.03093   0.006282          0.03433   0.006453
//
// (The shared bounds these replace were 0.03 and 0.005.) kIQ4Values[7] changed from -10 to -9
// gives iq4_nl max 0.0293, mean 0.00522 (over these bounds by 1.25x and 1.30x) and iq4_xs 0.0314,
// 0.00586 (over the max by 1.01x, under the mean); ggml_reference_test fails on both at every
// value that uses the entry.
const Fixture kFixtures[] = {
    {"tiny-q4_0", {GgmlType::kQ4_0, GgmlType::kQ6_K}, 0.0236, 0.00425},
    {"tiny-q4_1", {GgmlType::kQ4_1, GgmlType::kQ6_K}, 0.0243, 0.00410},
    {"tiny-q5_0", {GgmlType::kQ5_0, GgmlType::kQ6_K}, 0.0209, 0.00403},
    {"tiny-q5_1", {GgmlType::kQ5_1, GgmlType::kQ6_K}, 0.0258, 0.00425},
    {"tiny-q2_k", {GgmlType::kQ2_K, GgmlType::kQ3_K, GgmlType::kQ6_K}, 0.0346, 0.00645},
    {"tiny-q3_k_m",
     {GgmlType::kQ3_K, GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K},
     0.0282,
     0.00544},
    {"tiny-q4_k_m", {GgmlType::kQ4_K, GgmlType::kQ6_K}, 0.0277, 0.00494},
    {"tiny-q5_k_m", {GgmlType::kQ5_K, GgmlType::kQ6_K}, 0.0255, 0.00480},
    {"tiny-q6_k", {GgmlType::kQ6_K}, 0.0317, 0.00621},
    {"tiny-iq4_nl", {GgmlType::kIQ4_NL, GgmlType::kQ6_K}, 0.0234, 0.00402},
    {"tiny-iq4_xs", {GgmlType::kIQ4_XS, GgmlType::kQ6_K}, 0.0310, 0.00629},
};

// The largest and the mean absolute difference between `got` and `ref` (of ref's size).
struct Distance {
  double max = 0, mean = 0;
};
Distance Compare(const float* got, const std::vector<float>& ref) {
  Distance d;
  double sum = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double e = std::fabs(double{got[i]} - ref[i]);
    sum += e;
    d.max = std::max(d.max, e);
  }
  d.mean = sum / ref.size();
  return d;
}

// Writes synth's `preset` with stories260K's vocabulary (seed 1) in `type`, attention sharpened
// by `sharpen`, to a temporary file and loads it.
std::unique_ptr<Model> SynthModel(const std::string& preset, GgmlType type, float sharpen) {
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() /
      ("pc_conformance_" + std::to_string(getpid()) + "_" + preset + ".gguf");
  SynthOptions so;
  so.preset = preset;
  so.vocab_path = std::string(PC_SHARED_DIR) + "/models/stories260K.gguf";
  so.type = type;
  so.attn_sharpen = sharpen;
  so.out_path = path.string();
  const Status st = Synthesize(so);
  EXPECT_TRUE(st.ok()) << st.message();
  if (!st.ok()) return nullptr;
  Result<std::unique_ptr<Model>> m = Model::Load(path.string());
  std::filesystem::remove(path);
  EXPECT_TRUE(m.ok()) << m.status().message();
  return m.ok() ? std::move(*m) : nullptr;
}

// Feeds kIds into a fresh sequence in batches of the given sizes (summing to 64); all logits.
std::vector<float> Evaluate(const Model& m, const std::vector<int>& splits, ThreadPool* pool,
                            KvType kv = KvType::kF16) {
  BlockPool blocks(m.MakeKvLayout(kv, 16), 0, false);
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
  const Distance d = Compare(got.data(), ref);
  EXPECT_LE(d.max, fx.max_diff) << fx.name;
  EXPECT_LE(d.mean, fx.mean_diff) << fx.name;
  std::printf("%s: max %.4f, mean %.5f\n", fx.name, d.max, d.mean);

  // Any split of the same tokens, and one token at a time, with 1 or 2 threads: the same bits.
  EXPECT_EQ(Evaluate(**m, {5, 27, 1, 31}, &pool), got) << fx.name;
  EXPECT_EQ(Evaluate(**m, std::vector<int>(64, 1), nullptr), got) << fx.name;
}

// The long reference: synth's tiny-256-llama3 written as F16, BF16 and Q4_0; 8,256 tokens
// (kIds, then kIds after BOS over and over) evaluated in batches of 512; the last 16 rows of
// logits against llama.cpp's (testdata/llama3-tied/README.md: how they were made). The F16 file
// has its attention sharpened x4 (synth.h: attn_sharpen), so that positions matter: measured,
// this engine is within max 0.00093, mean 0.00016 of llama.cpp there, while a RoPE base 1% off
// (config.cc: base *= 1.01) gives max 0.052, mean 0.0093 (17x and 19x the bounds), queries
// rotated one position ahead of keys 0.067, 0.013 (22x, 25x), and the frequency factors ignored
// 0.47, 0.087. (Unsharpened, the distance with the base error was 0.0008, under the bound of
// 0.003.) ik_llama.cpp is as far from llama.cpp on the sharpened file (0.00093, 0.000155) and
// within 0.00002 of this engine.
struct LongFixture {
  GgmlType type;
  const char* name;
  float sharpen;
  double max_diff, mean_diff;
};

class LongReference : public testing::TestWithParam<LongFixture> {};

TEST_P(LongReference, MatchesLlamaCppPastTheOriginalContext) {
  const LongFixture& fx = GetParam();
  std::unique_ptr<Model> m = SynthModel("tiny-256-llama3", fx.type, fx.sharpen);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->config().rope_scaling, "llama3");
  EXPECT_EQ(m->file().FindTensor("output.weight"), nullptr);  // tied

  constexpr int kTokens = 8256, kKeep = 16;
  std::vector<int32_t> ids(kIds.begin(), kIds.end());
  while (ids.size() < kTokens) ids.push_back(kIds[1 + (ids.size() - 1) % (kIds.size() - 1)]);
  BlockPool blocks(m->MakeKvLayout(KvType::kF16, 16), 0, false);
  KvSequence seq(&blocks);
  ForwardScratch scratch;
  ThreadPool pool(2);
  const int n_vocab = m->config().n_vocab;
  std::vector<float> got;
  for (int s = 0; s < kTokens; s += 512) {
    std::vector<BatchToken> batch;
    for (int i = s; i < std::min(kTokens, s + 512); ++i) {
      batch.push_back({ids[i], i, &seq, i >= kTokens - kKeep});
    }
    std::vector<float> logits(batch.size() * n_vocab);
    ASSERT_TRUE(m->Forward(batch, logits.data(), &pool, &scratch).ok());
    // Rows come only for the tokens that want them, in batch order.
    size_t rows = 0;
    for (const BatchToken& t : batch) rows += t.want_logits;
    got.insert(got.end(), logits.begin(), logits.begin() + rows * n_vocab);
  }
  const std::vector<float> ref = ReadFloats(
      std::string(PC_SOURCE_DIR) + "/src/model/testdata/llama3-tied/" + fx.name + ".logits.f32");
  ASSERT_EQ(got.size(), ref.size());
  const Distance d = Compare(got.data(), ref);
  EXPECT_LE(d.max, fx.max_diff) << fx.name;
  EXPECT_LE(d.mean, fx.mean_diff) << fx.name;
  std::printf("%s at positions 8240..8255: max %.5f, mean %.6f\n", fx.name, d.max, d.mean);
}

INSTANTIATE_TEST_SUITE_P(Llama3Tied, LongReference,
                         testing::Values(LongFixture{GgmlType::kF16, "F16", 4, 0.003, 0.0005},
                                         LongFixture{GgmlType::kBF16, "BF16", 1, 0.015, 0.003},
                                         LongFixture{GgmlType::kQ4_0, "Q4_0", 1, 0.03, 0.005}),
                         [](const testing::TestParamInfo<LongFixture>& info) {
                           return std::string(info.param.name);
                         });

// synth's tiny file of an architecture (or in a weight type) against a peer's logits for kIds
// at positions 32 to 63 (testdata/architectures/README.md and testdata/q8_0/README.md: how they
// were made).
//
// The architecture files have their attention sharpened (synth.h: attn_sharpen): with random
// weights attention is nearly uniform and a RoPE error barely moves the logits (a RoPE base 1%
// off moved the unsharpened files' by 0.00007 to 0.0014, under the old bound of 0.003). x7 scales
// the scores (about 0.1) by 49; Qwen 3's and Gemma 3's per-head Q/K norms make theirs about 1
// already, so they get x3 and x2. The files llama.cpp runs are compared with f32 K/V in both
// engines: with f16 K/V llama.cpp rounds the queries and the attention weights to f16, a noise
// that sharpening amplifies as much as a RoPE error (qwen2 x7, f16 on both sides: 0.00069
// against 0.0064 for the base error). ik_llama.cpp keeps V in f16 (f32 needs its flash
// attention, which takes f16 only), so qwen3 and gemma3 run with f16 K/V on both sides, as
// before. Measured 2026-11-27, this engine against the reference, then with each mutation
// (config.cc: the RoPE base times 1.01; forward.cc: queries rotated at pos + 1, keys at pos),
// max / mean:
//
//   fixture     sharpen K/V  peer        distance            base x1.01         query pos + 1
//   qwen2       x7      f32  llama.cpp   0.000004 / 2e-7     0.0065 / 0.00080   0.30 / 0.051
//   qwen3       x3      f16  ik          0.00072 / 0.000095  0.16 / 0.0099      1.44 / 0.25
//   gemma2      x7      f32  llama.cpp   0.00142 / 0.000241  0.026 / 0.0027     0.73 / 0.16
//   gemma3      x2      f16  ik          0.00160 / 0.000234  0.083 / 0.011 (*)  1.49 / 0.28
//   phi3-long   x7      f32  llama.cpp   0.000029 / 3e-6     0.10 / 0.011       1.49 / 0.27
//   phi3-short  x7      f32  llama.cpp   0.000021 / 2e-6     0.15 / 0.016       1.38 / 0.26
//   mistral     x7      f32  llama.cpp   0.000011 / 1e-6     0.15 / 0.012       1.45 / 0.25
//
// Every bound is at least 10x below both mutations' max (qwen2's 21x, gemma2's 10.4x) and above
// the measured distance (gemma2's by 1.76x: llama.cpp computes GELU from a table of f16 inputs,
// this engine exactly, and 26 layers of sharpened attention carry that on; the same distance on
// AVX2 and SSE4 kernels). (*) The error in Gemma 3's sliding layers' base (10000, from
// freq_base_swa, in architectures.cc). On its one global layer (base 1e6 with linear scaling x4)
// a 1% error moves the logits by 0.00163, no more than the distance, at positions under 64: it
// is not caught; the scaling left out there is (0.48). For comparison, llama.cpp and
// ik_llama.cpp on the same sharpened files, each with its default f16 K/V: qwen2 0.0007, gemma2
// 0.0036, phi3-long 0.021, phi3-short 0.016, mistral 0.0053 (max); llama.cpp with f32 K/V
// against ik_llama.cpp with f32 K and f16 V: 0.0003, 0.0022, 0.0048, 0.0034, 0.0021.
struct SynthFixture {
  const char* preset;
  const char* reference;  // testdata/<dir>/<reference>.logits.f32
  const char* dir;
  GgmlType type;
  float sharpen;
  KvType kv;    // the peer's K/V cache type
  int context;  // what the peer ran with (LongRoPE picks its factors by it)
  double max_diff, mean_diff;
};

class SynthReference : public testing::TestWithParam<SynthFixture> {};

TEST_P(SynthReference, MatchesPeerLogits) {
  const SynthFixture& fx = GetParam();
  std::unique_ptr<Model> m = SynthModel(fx.preset, fx.type, fx.sharpen);
  ASSERT_NE(m, nullptr);
  m->UseContext(fx.context);
  // Every matrix in the fixture's type (norms are F32): the test covers what it claims to.
  for (const GgufTensorInfo& t : m->file().tensors()) {
    if (t.dims.size() > 1) {
      EXPECT_EQ(t.type, fx.type) << t.name;
    }
  }

  ThreadPool pool(2);
  const std::vector<float> got = Evaluate(*m, {64}, &pool, fx.kv);
  const std::vector<float> ref = ReadFloats(std::string(PC_SOURCE_DIR) + "/src/model/testdata/" +
                                            fx.dir + "/" + fx.reference + ".logits.f32");
  const size_t n_vocab = m->config().n_vocab;
  ASSERT_EQ(ref.size(), 32 * n_vocab);  // positions 32..63
  const Distance d = Compare(got.data() + 32 * n_vocab, ref);
  EXPECT_LE(d.max, fx.max_diff) << fx.reference;
  EXPECT_LE(d.mean, fx.mean_diff) << fx.reference;
  std::printf("%s: max %.6f, mean %.7f\n", fx.reference, d.max, d.mean);

  // Windows, soft-caps and per-layer frequencies keep the kernels' batch invariance.
  EXPECT_EQ(Evaluate(*m, {5, 27, 1, 31}, &pool, fx.kv), got) << fx.reference;
  EXPECT_EQ(Evaluate(*m, std::vector<int>(64, 1), nullptr, fx.kv), got) << fx.reference;
}

std::string FixtureName(const testing::TestParamInfo<SynthFixture>& info) {
  std::string n = info.param.reference;
  for (char& c : n) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return n;
}

constexpr double kMax = 0.0003, kMean = 0.00003;  // the f32 K/V fixtures but gemma2

INSTANTIATE_TEST_SUITE_P(
    Architectures, SynthReference,
    testing::Values(SynthFixture{"tiny-qwen2", "qwen2", "architectures", GgmlType::kF32, 7,
                                 KvType::kF32, 512, kMax, kMean},
                    SynthFixture{"tiny-qwen3", "qwen3", "architectures", GgmlType::kF32, 3,
                                 KvType::kF16, 512, 0.005, 0.0008},
                    SynthFixture{"tiny-gemma2", "gemma2", "architectures", GgmlType::kF32, 7,
                                 KvType::kF32, 512, 0.0025, 0.0004},
                    SynthFixture{"tiny-gemma3", "gemma3", "architectures", GgmlType::kF32, 2,
                                 KvType::kF16, 512, 0.008, 0.001},
                    SynthFixture{"tiny-phi3", "phi3-long", "architectures", GgmlType::kF32, 7,
                                 KvType::kF32, 512, kMax, kMean},
                    SynthFixture{"tiny-phi3", "phi3-short", "architectures", GgmlType::kF32, 7,
                                 KvType::kF32, 80, kMax, kMean},
                    SynthFixture{"tiny-mistral", "mistral", "architectures", GgmlType::kF32, 7,
                                 KvType::kF32, 512, kMax, kMean},
                    // Mixtures of experts (README: ik_llama.cpp's Mixtral graph drops the residual,
                    // so mixtral has llama.cpp alone). Weights not renormalized, an expert's
                    // matrices or its down projection taken from the next expert: 0.63 to 1.26.
                    SynthFixture{"tiny-qwen3moe", "qwen3moe", "architectures", GgmlType::kF32, 3,
                                 KvType::kF16, 512, 0.005, 0.0008},
                    // Qwen2-MoE against ik_llama.cpp (f16 K/V, its defaults): measured 0.000019 /
                    // 0.0000029. Its nearest mutation, the RoPE base 1% off, gives 0.013 /
                    // 0.00046; the routed weights renormalized 0.038 / 0.0068; the shared
                    // expert's gate ignored, or the shared expert dropped, 0.13 / 0.022 (README).
                    SynthFixture{"tiny-qwen2moe", "qwen2moe", "architectures", GgmlType::kF32, 4,
                                 KvType::kF16, 512, 0.0001, 0.00001},
                    SynthFixture{"tiny-mixtral", "mixtral", "architectures", GgmlType::kF32, 7,
                                 KvType::kF32, 512, kMax, kMean},
                    // gpt-oss against ik_llama.cpp (f16 K/V, flash attention, its defaults):
                    // measured 0.000003 / 0.0000002. Its nearest mutations, the YaRN factor or the
                    // RoPE base 1% off, give 0.00012 / 0.000013 and 0.0003 / 0.00002; sinks
                    // ignored, the clamp removed, YaRN's magnitude left out, windows on the odd
                    // layers, a bias ignored: 0.27 to 1.37 (README).
                    SynthFixture{"tiny-gpt-oss", "gpt-oss", "architectures", GgmlType::kF32, 4,
                                 KvType::kF16, 512, 0.00005, 0.000005}),
    FixtureName);

// Q8_0 weights, which no conformance fixture holds: tiny-256 as synth writes it in Q8_0 (the
// same tensor bytes as llama.cpp's quantizer makes of the F32 file), f16 K/V as by default. The
// bound is ik_llama.cpp's distance from llama.cpp on that file, as for the conformance fixtures:
// max 0.02109, mean 0.003610 (this engine: 0.01738, 0.003135; this engine from ik_llama.cpp:
// 0.01864, 0.003534).
INSTANTIATE_TEST_SUITE_P(WeightTypes, SynthReference,
                         testing::Values(SynthFixture{"tiny-256", "q8_0", "q8_0", GgmlType::kQ8_0,
                                                      1, KvType::kF16, 512, 0.0211, 0.00362}),
                         FixtureName);

INSTANTIATE_TEST_SUITE_P(AllTypes, Conformance, testing::ValuesIn(kFixtures),
                         [](const testing::TestParamInfo<Fixture>& info) {
                           std::string n = info.param.name;
                           for (char& c : n)
                             c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return n;
                         });

}  // namespace
}  // namespace promptcache
