// Exact reuse is exact, on every weight type and architecture: a prompt's logits are the same
// floats whether its prefix was computed now, found in RAM, read back from disk or decoded in a
// batch, and whether a sliding-window model's K/V was trimmed as the window passed or kept.
// (The serving behaviour around reuse: engine_test.cc.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "core/temp_files.h"
#include "engine/engine_impl.h"
#include "engine/engine_test_util.h"
#include "model/synth.h"

namespace promptcache {
namespace {

namespace fs = std::filesystem;

// The model file of a bitwise case: stories260K (F32 weights), a tiny synthetic model of the
// weight type, or synth's tiny fixture of another architecture in Q8_0 (windows of 24 tokens,
// shorter than the prompts), written once per test process.
std::string BitwiseModel(const std::string& name) {
  if (name == "F32") return kStories;
  const fs::path p = RemoveAtExit(
      (fs::temp_directory_path() /
       ("pc_engine_test_" + std::to_string(getpid()) + "_" + name + ".gguf"))
          .string());
  if (!fs::exists(p)) {
    SynthOptions o;
    const bool type = name == "F16" || name == "Q8_0" || name == "Q4_0" || name == "MXFP4";
    o.preset = type ? "tiny-test" : "tiny-" + name;
    o.vocab_path =
        type ? std::string(PC_SHARED_DIR) + "/tokenizers/ggml-vocab-gpt-2.gguf" : kStories;
    o.type = name == "F16"     ? GgmlType::kF16
             : name == "Q4_0"  ? GgmlType::kQ4_0
             : name == "MXFP4" ? GgmlType::kMXFP4
                               : GgmlType::kQ8_0;
    o.out_path = p.string();
    PC_CHECK(Synthesize(o).ok());
  }
  return p.string();
}

// Logits of every step of a greedy request, and its result.
struct Logged {
  CompletionResult result;
  std::vector<std::vector<float>> logits;
};

std::shared_ptr<RequestHandle> SubmitLogged(Engine& e, std::vector<int32_t> prompt, Logged* out) {
  CompletionRequest r = Greedy(std::move(prompt), 6);
  r.ignore_eos = true;
  r.on_logits = [out](std::span<const float> l) { out->logits.emplace_back(l.begin(), l.end()); };
  auto h = e.Submit(std::move(r));
  PC_CHECK(h.ok());
  return *h;
}

Logged RunLogged(Engine& e, const std::vector<int32_t>& prompt) {
  Logged out;
  out.result = SubmitLogged(e, prompt, &out)->Wait();
  return out;
}

class BitwiseReuse : public ::testing::TestWithParam<std::string> {};

// Exact reuse is exact: a prompt's logits at every step are the same floats whether its prefix
// was computed now, found in RAM, or read back from disk after a restart, and whether its decode
// steps ran alone or batched with another sequence's. (The kernels' arithmetic for a token does
// not depend on the batch; see model_test's CachedEqualsUncached for split prefills.)
// A case is a model name, or "MODEL:KVTYPE" for K/V stored in another type than f16.
TEST_P(BitwiseReuse, PrefixHitsDiskReloadsAndBatchedDecode) {
  const std::string model = GetParam().substr(0, GetParam().find(':'));
  std::string name = GetParam();
  std::replace(name.begin(), name.end(), ':', '_');
  const fs::path dir =
      fs::temp_directory_path() / ("pc_engine_bitwise_" + std::to_string(getpid()) + "_" + name);
  fs::remove_all(dir);
  EngineOptions o;
  o.model_path = BitwiseModel(model);
  if (model != GetParam()) {
    Result<KvType> kv = ParseKvType(GetParam().substr(model.size() + 1));
    ASSERT_TRUE(kv.ok());
    o.kv_type = *kv;
  }
  o.threads = 2;
  o.cache_dir = dir.string();
  o.parallel = 2;
  std::vector<int32_t> prompt, other;
  Logged cold, other_alone;
  {
    auto e = Engine::Create(o);
    ASSERT_TRUE(e.ok()) << e.status().message();
    const int v = (*e)->model().config().n_vocab;
    for (int i = 0; i < 53; ++i) prompt.push_back((i * 7919 + 13) % v);
    other = prompt;
    other.resize(37);
    for (int i = 0; i < 9; ++i) other.push_back((i * 104729 + 7) % v);
    cold = RunLogged(**e, prompt);
    ASSERT_EQ(cold.result.cached_tokens, 0);
    ASSERT_EQ(cold.logits.size(), 6u);
    const Logged hit = RunLogged(**e, prompt);
    EXPECT_GT(hit.result.cached_tokens, 0);
    EXPECT_EQ(hit.logits, cold.logits) << "prefix hit from RAM";
    other_alone = RunLogged(**e, other);
    EXPECT_GT(other_alone.result.cached_tokens, 0);  // shares 32 tokens with `prompt`
    // Both at once: their decode steps run as one batch.
    Logged a, b;
    auto ha = SubmitLogged(**e, prompt, &a);
    auto hb = SubmitLogged(**e, other, &b);
    ha->Wait();
    hb->Wait();
    EXPECT_EQ(a.logits, cold.logits) << "batched with another sequence";
    EXPECT_EQ(b.logits, other_alone.logits) << "batched with another sequence";
  }  // saves the cache to disk
  {
    auto e = Engine::Create(o);
    ASSERT_TRUE(e.ok());
    const Logged reloaded = RunLogged(**e, prompt);
    EXPECT_GT(reloaded.result.cached_tokens, 0);
    EXPECT_GT((*e)->Stats().disk_loads, 0u);
    EXPECT_EQ(reloaded.logits, cold.logits) << "prefix read back from disk";
  }
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Types, BitwiseReuse,
                         ::testing::Values("F32", "F16", "Q8_0", "Q4_0", "MXFP4"));
INSTANTIATE_TEST_SUITE_P(Architectures, BitwiseReuse,
                         ::testing::Values("qwen2", "qwen3", "gemma2", "gemma3", "phi3", "mistral",
                                           "gpt-oss", "qwen2moe"));
// Quantized K/V: blocks hit in RAM, read back from disk and batched give the same floats too.
INSTANTIATE_TEST_SUITE_P(QuantizedKv, BitwiseReuse,
                         ::testing::Values("F32:q8_0", "F16:q4_0", "qwen2:q8_0", "gemma3:q8_0",
                                           "mistral:q4_0"));

// Sliding windows (EngineOptions::trim_sliding_kv): the fixtures' windows are 24 tokens
// (tiny-gemma3, on 7 of its 8 layers) and 20 (tiny-mistral-w20, every layer), so prompts of a
// few hundred tokens are many windows long.

std::vector<int32_t> LongPrompt(const Engine& e, int n, int salt) {
  const int v = e.model().config().n_vocab;
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(int32_t((uint64_t(i + 1) * 7919 + salt * 104729) % v));
  return p;
}

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::unique_ptr<Engine> MakeSliding(const std::string& model, EngineOptions o) {
  o.model_path = BitwiseModel(model);
  o.threads = 2;
  o.batch_size = 32;  // prefills in chunks, trimmed between them
  auto e = Engine::Create(o);
  PC_CHECK(e.ok());
  return std::move(e).value();
}

class SlidingTrim
    : public ::testing::TestWithParam<std::tuple<std::string, KvType, bool /*prefix cache*/>> {};

// Trimming changes no result: the logits of every step of a prompt several windows long,
// prefilled in chunks and then decoded, and of a second prompt sharing most of it (a prefix hit
// with the cache on), are the same floats with the sliding parts released as the window passes
// as with every layer of every token kept.
TEST_P(SlidingTrim, LogitsEqualKeepingEverything) {
  const auto& [model, kv_type, prefix_cache] = GetParam();
  EngineOptions o;
  o.kv_type = kv_type;
  o.prefix_cache = prefix_cache;
  o.trim_sliding_kv = false;
  auto full = MakeSliding(model, o);
  o.trim_sliding_kv = true;
  auto trim = MakeSliding(model, o);
  const std::vector<int32_t> prompt = LongPrompt(*full, 150, 0);
  const std::vector<int32_t> other =
      Concat(std::vector<int32_t>(prompt.begin(), prompt.begin() + 100), LongPrompt(*full, 30, 1));
  const Logged want = RunLogged(*full, prompt), got = RunLogged(*trim, prompt);
  ASSERT_EQ(want.logits.size(), 6u);
  EXPECT_EQ(got.logits, want.logits);
  const Logged want2 = RunLogged(*full, other), got2 = RunLogged(*trim, other);
  EXPECT_EQ(got2.logits, want2.logits);
  EXPECT_EQ(got2.result.cached_tokens, want2.result.cached_tokens);
  if (prefix_cache) {
    EXPECT_EQ(got2.result.cached_tokens, 96);
  } else {
    // Nothing else holds them: the trimmed engine never had every layer of the prompt.
    EXPECT_LT(trim->Stats().kv_bytes_peak, full->Stats().kv_bytes_peak / 2);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SlidingTrim,
                         ::testing::Combine(::testing::Values("gemma3", "mistral-w20"),
                                            ::testing::Values(KvType::kF16, KvType::kF32),
                                            ::testing::Bool()));

// What a long sequence holds: every token's global layers, and the sliding layers of about a
// window and a chunk of tokens.
TEST(EngineSliding, ALongSequenceHoldsAboutAWindowOfSlidingLayers) {
  EngineOptions o;
  o.prefix_cache = false;  // the cache would keep what the sequence gives up
  auto trim = MakeSliding("gemma3", o);
  o.trim_sliding_kv = false;
  auto full = MakeSliding("gemma3", o);
  const std::vector<int32_t> prompt = LongPrompt(*trim, 400, 2);
  RunLogged(*trim, prompt);
  RunLogged(*full, prompt);
  const KvLayout l = trim->model().MakeKvLayout(KvType::kF16);
  ASSERT_EQ(l.n_sliding(), 7);
  const size_t blocks = (400 + 6 + 15) / 16;
  const size_t window_blocks = (24 - 1 + 32 + 15) / 16 + 2;
  EXPECT_LE(trim->Stats().kv_bytes_peak,
            blocks * l.global_bytes_per_block() + window_blocks * l.sliding_bytes_per_block());
  EXPECT_EQ(full->Stats().kv_bytes_peak, blocks * l.bytes_per_block());
  EXPECT_EQ(trim->Stats().kv_bytes_in_use, 0u);  // all given back
}

// Under --kv-ram a trimming request reserves what it holds at once: one that could never fit
// with every layer kept is served.
TEST(EngineSliding, KvRamCountsWhatATrimmingSequenceHolds) {
  EngineOptions o;
  o.kv_ram_bytes = size_t(2) << 20;  // 26 blocks of 128 KiB would need 3.25 MiB
  auto trim = MakeSliding("gemma3", o);
  const std::vector<int32_t> prompt = LongPrompt(*trim, 400, 3);
  const Logged ok = RunLogged(*trim, prompt);
  EXPECT_TRUE(ok.result.status.ok()) << ok.result.status.message();
  o.trim_sliding_kv = false;
  auto full = MakeSliding("gemma3", o);
  auto refused = full->Submit(Greedy(prompt, 6));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("--kv-ram"), std::string::npos);
}

// A system prompt S shared by requests stays reusable when the first request runs many windows
// past it: request 2 (S + other text) reuses S's whole blocks and its logits equal a cold run's,
// also after a restart (from the disk tier). With a cache too small to keep S's window whole,
// the hit is shorter, and still exact.
TEST(EngineSliding, ASharedPrefixStaysReusableAfterALongRequest) {
  const fs::path dir =
      fs::temp_directory_path() / ("pc_engine_sliding_" + std::to_string(getpid()));
  fs::remove_all(dir);
  EngineOptions cold_options;
  cold_options.prefix_cache = false;
  auto cold = MakeSliding("gemma3", cold_options);
  const std::vector<int32_t> system = LongPrompt(*cold, 56, 4);
  const std::vector<int32_t> first = Concat(system, LongPrompt(*cold, 300, 5));
  const std::vector<int32_t> second = Concat(system, LongPrompt(*cold, 40, 6));
  const std::vector<int32_t> third = Concat(system, LongPrompt(*cold, 20, 7));
  const Logged want2 = RunLogged(*cold, second), want3 = RunLogged(*cold, third);
  EngineOptions o;
  o.cache_dir = dir.string();
  {
    auto e = MakeSliding("gemma3", o);
    RunLogged(*e, first);
    const Logged got = RunLogged(*e, second);
    EXPECT_EQ(got.result.cached_tokens, 48);  // S in whole blocks
    EXPECT_EQ(got.logits, want2.logits);
  }  // saves the cache to disk
  {
    auto e = MakeSliding("gemma3", o);
    const Logged got = RunLogged(*e, third);
    EXPECT_EQ(got.result.cached_tokens, 48);
    EXPECT_GT(e->Stats().disk_loads, 0u);
    EXPECT_EQ(got.logits, want3.logits);
  }
  fs::remove_all(dir);
  // No disk, and room for about ten blocks: S's sliding parts go while the first request runs.
  EngineOptions small;
  small.cache_ram_bytes = 10 * cold->model().MakeKvLayout(KvType::kF16).global_bytes_per_block();
  auto e = MakeSliding("gemma3", small);
  RunLogged(*e, first);
  const Logged got = RunLogged(*e, second);
  EXPECT_LT(got.result.cached_tokens, 48);
  EXPECT_EQ(got.logits, want2.logits);
}

}  // namespace
}  // namespace promptcache
