// The serving engine on the real stories260K model: prefix reuse is exact, concurrent sequences
// share cached blocks, cache namespaces share none, and the disk tier survives a restart.
// (Choices, log-probabilities and grammars: engine_choices_test.cc; log-probability values:
// engine_logprobs_test.cc.)
#include <gtest/gtest.h>
#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <thread>

#include "core/temp_files.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "model/synth.h"
#include "engine/engine_impl.h"
#include "engine/fidelity.h"
#include "engine/engine_test_util.h"

namespace promptcache {
namespace {

namespace fs = std::filesystem;

TEST(Engine, SharedPrefixIsReusedAndOutputUnchanged) {
  auto e = Make();
  const Tokenizer& tok = e->model().tokenizer();
  const auto first = tok.Encode(std::string(kStory) + " Her mom", true);
  const auto second = tok.Encode(std::string(kStory) + " The dog", true);
  const CompletionResult a = Complete(*e, Greedy(first));
  EXPECT_EQ(a.cached_tokens, 0);
  const CompletionResult b = Complete(*e, Greedy(second));
  size_t shared = 0;
  while (first[shared] == second[shared]) ++shared;
  EXPECT_EQ(b.cached_tokens, static_cast<int>(shared / 16 * 16));
  EXPECT_GT(b.cached_tokens, 0);
  EXPECT_EQ(b.computed_tokens, static_cast<int>(second.size()) - b.cached_tokens);
  EXPECT_EQ(b.tokens, Reference(e->model(), second, 24));
  EXPECT_EQ(a.tokens, Reference(e->model(), first, 24));
  // The very same prompt again: everything but the last token comes from the cache.
  const CompletionResult c = Complete(*e, Greedy(second));
  EXPECT_EQ(c.cached_tokens, static_cast<int>((second.size() - 1) / 16 * 16));
  EXPECT_EQ(c.tokens, b.tokens);
  EXPECT_EQ(e->Stats().cache_hits, 2u);
}

TEST(Engine, ConcurrentRequestsBatchAndShareBlocks) {
  EngineOptions o;
  o.parallel = 8;
  auto e = Make(o);
  const Tokenizer& tok = e->model().tokenizer();
  const auto system = tok.Encode(kStory, true);
  Complete(*e, Greedy(system, 1));  // warm the shared prefix
  const size_t blocks_before = e->Stats().cache_ram_bytes;
  std::vector<std::vector<int32_t>> prompts;
  const char* endings[] = {" Tim", " The cat", " A bird", " Mom", " Dad", " Sue", " Ben", " Max"};
  for (const char* end : endings) prompts.push_back(tok.Encode(std::string(kStory) + end, true));
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (auto& p : prompts) handles.push_back(*e->Submit(Greedy(p, 16)));
  for (size_t i = 0; i < handles.size(); ++i) {
    const CompletionResult r = handles[i]->Wait();
    ASSERT_TRUE(r.status.ok());
    EXPECT_GE(r.cached_tokens, static_cast<int>((system.size() - 1) / 16 * 16));
    EXPECT_EQ(r.tokens, Reference(e->model(), prompts[i], 16)) << "client " << i;
  }
  // The shared system prompt's blocks exist once: 8 clients added only their own tails.
  const size_t block = e->model().MakeKvLayout(KvType::kF16).bytes_per_block();
  EXPECT_LE(e->Stats().cache_ram_bytes, blocks_before + 8 * 3 * block);
}

// Under kv_ram_bytes a request that does not fit beside the running ones waits for them: its
// text starts after the first one's ended. Without the bound the two are decoded together and
// their text interleaves (the control). a's first piece holds the engine thread until b is in the
// queue: otherwise, on a loaded machine, the test thread could lose its core between the two
// submits for as long as a takes to finish, and the control would see a alone.
std::vector<char> TextOrder(const EngineOptions& base) {
  auto e = Make(base);
  const auto prompt = e->model().tokenizer().Encode("Once upon a time", true);
  std::mutex mu;
  std::vector<char> order;
  std::promise<void> b_queued;
  std::shared_future<void> b_queued_future = b_queued.get_future().share();
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (char id : {'a', 'b'}) {
    CompletionRequest r = Greedy(prompt, 48);
    r.ignore_eos = true;
    r.on_text = [&mu, &order, id, b_queued_future](const std::string&) {
      if (id == 'a') b_queued_future.wait();
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(id);
      return true;
    };
    auto h = e->Submit(std::move(r));
    PC_CHECK(h.ok());
    handles.push_back(*h);
  }
  b_queued.set_value();
  for (auto& h : handles) EXPECT_TRUE(h->Wait().status.ok());
  return order;
}

TEST(Engine, KvRamBudgetQueuesWhatDoesNotFitAndRefusesWhatNeverCould) {
  EngineOptions o;
  o.parallel = 2;
  const std::vector<char> together = TextOrder(o);
  const size_t block = Make()->model().MakeKvLayout(KvType::kF16).bytes_per_block();
  // 5 prompt tokens + 48 generated: 4 blocks of 16 each; room for one request, not two. No pins
  // (a request must fit beside a full pin quota: engine_limits_test.cc).
  o.kv_ram_bytes = 6 * block;
  o.pin_ram_bytes = 0;
  const std::vector<char> bounded = TextOrder(o);
  auto first_b = [](const std::vector<char>& v) { return std::find(v.begin(), v.end(), 'b'); };
  auto last_a = [](const std::vector<char>& v) { return std::find(v.rbegin(), v.rend(), 'a'); };
  ASSERT_NE(first_b(together), together.end());
  EXPECT_LT(first_b(together) - together.begin(), last_a(together).base() - together.begin())
      << "without the bound the two run together";
  ASSERT_NE(first_b(bounded), bounded.end());
  EXPECT_GE(first_b(bounded) - bounded.begin(), last_a(bounded).base() - bounded.begin())
      << "with it, b waits for a";

  auto e = Make(o);
  const auto prompt = e->model().tokenizer().Encode("Once upon a time", true);
  auto too_big = e->Submit(Greedy(prompt, 200));
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_big.status().message().find("--kv-ram"), std::string::npos);
  // What the reservations leave bounds the cache too.
  const auto long_prompt = e->model().tokenizer().Encode(kStory, true);
  Complete(*e, Greedy(long_prompt, 8));
  EXPECT_LE(e->Stats().cache_ram_bytes, o.kv_ram_bytes);
}

// A finished request gives its reservation back (EngineImpl::RemoveFinished): under a kv_ram_bytes
// that one request's reservation fills, what the cache may keep afterwards is all of it again, so
// the prompt's blocks stay cached for the same prompt once more. (Mutation: dropping the
// `reserved_ -= s->reserved` left the cache a budget of 0, and the second request a miss.)
TEST(Engine, AFinishedRequestGivesBackItsReservation) {
  EngineOptions o;
  o.parallel = 1;
  o.pin_ram_bytes = 0;
  const size_t block = Make()->model().MakeKvLayout(KvType::kF16).bytes_per_block();
  o.kv_ram_bytes = 4 * block;  // 48 prompt tokens + 8 generated: 4 blocks of 16
  auto e = Make(o);
  auto prompt = e->model().tokenizer().Encode(kStory, true);
  ASSERT_GE(prompt.size(), 48u);
  prompt.resize(48);
  const CompletionResult first = Complete(*e, Greedy(prompt, 8));
  ASSERT_TRUE(first.status.ok()) << first.status.message();
  const CompletionResult again = Complete(*e, Greedy(prompt, 8));
  ASSERT_TRUE(again.status.ok()) << again.status.message();
  EXPECT_EQ(again.cached_tokens, 32);  // the full blocks before the last prompt token
  EXPECT_EQ(again.tokens, first.tokens);
}

// An allocation that fails on the engine thread fails its request, not the process: in a child
// process (gtest's death-test fork) whose address space is capped just above what the engine
// holds once started, a prompt whose K/V needs more than the cap gets an error status, and the
// engine then serves a small request. The child is a fresh run of this binary ("threadsafe"
// style), not a fork: a fork inherits the heap of the tests that ran before it in this process,
// whose free space can hold the prompt's K/V without growing the data segment, so the cap would
// not bite (it did not, run after the other engine tests in one process).
TEST(Engine, AllocationFailureFailsTheRequestNotTheProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        // Buffers above 64 KiB come from mmap (glibc would otherwise raise the threshold and
        // serve them from heap it has already reserved), so the cap bites.
        mallopt(M_MMAP_THRESHOLD, 64 << 10);
        EngineOptions o;
        o.parallel = 1;
        auto e = Make(o);
        const Tokenizer& tok = e->model().tokenizer();
        const auto small = tok.Encode("Once upon a time", true);
        Complete(*e, Greedy(small, 4));  // every thread and arena is up
        std::vector<int32_t> big;
        while (big.size() < 2000) {
          const auto more = tok.Encode(kStory, false);
          big.insert(big.end(), more.begin(), more.end());
        }
        big.resize(2000);
        // RLIMIT_DATA counts the heap's growth too (mprotect within glibc's reserved arenas),
        // which RLIMIT_AS does not see.
        rlimit cap{};
        getrlimit(RLIMIT_DATA, &cap);
        std::ifstream status("/proc/self/status");
        size_t data_kib = 0;
        for (std::string line; std::getline(status, line);) {
          if (line.rfind("VmData:", 0) == 0) data_kib = std::stoul(line.substr(7));
        }
        cap.rlim_cur = (data_kib + 256) << 10;
        setrlimit(RLIMIT_DATA, &cap);
        CompletionRequest r = Greedy(big, 4);
        auto h = e->Submit(std::move(r));
        const bool failed = h.ok() && !(*h)->Wait().status.ok();
        cap.rlim_cur = RLIM_INFINITY;
        setrlimit(RLIMIT_DATA, &cap);
        const bool recovered = Complete(*e, Greedy(small, 4)).status.ok();
        std::fprintf(stderr, "failed %d recovered %d\n", failed, recovered);
        std::exit(failed && recovered ? 0 : 1);
      },
      testing::ExitedWithCode(0), "failed 1 recovered 1");
}

TEST(Engine, CancelAndQueueLimit) {
  EngineOptions o;
  o.parallel = 1;
  o.max_queue = 1;
  auto e = Make(o);
  const auto prompt = e->model().tokenizer().Encode("Once upon a time", true);
  CompletionRequest slow = Greedy(prompt, 200);
  slow.ignore_eos = true;
  // The first piece holds the engine thread until the queue has been checked, so the slow
  // request is still running then however fast the machine is; after 5 pieces the client goes.
  std::promise<void> running, checked;
  std::shared_future<void> checked_future = checked.get_future().share();
  std::atomic<int> pieces{0};
  slow.on_text = [&](const std::string&) {
    if (pieces == 0) {
      running.set_value();
      checked_future.wait();
    }
    return ++pieces < 5;
  };
  auto h1 = e->Submit(slow);
  ASSERT_TRUE(h1.ok());
  running.get_future().wait();
  auto h2 = e->Submit(Greedy(prompt, 200));
  auto h3 = e->Submit(Greedy(prompt, 200));
  checked.set_value();
  ASSERT_TRUE(h2.ok());
  ASSERT_FALSE(h3.ok());  // one running, one queued: the third is refused
  EXPECT_EQ(h3.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(e->Stats().requests_rejected, 1u);
  EXPECT_EQ((*h1)->Wait().finish_reason, "cancelled");
  (*h2)->Cancel();
  EXPECT_EQ((*h2)->Wait().finish_reason, "cancelled");
  EXPECT_FALSE(e->Submit(Greedy({})).ok());
  CompletionRequest bad = Greedy(prompt);
  bad.sampling.top_p = 2;
  EXPECT_FALSE(e->Submit(bad).ok());
}

TEST(Engine, DiskTierSurvivesRestartAndCorruptionIsAMiss) {
  const fs::path dir = EmptyTempPathAtExit("pc_engine_test");
  EngineOptions o;
  o.cache_dir = dir.string();
  const auto prompt = [&] {
    auto e = Make(o);
    auto p = e->model().tokenizer().Encode(kStory, true);
    Complete(*e, Greedy(p, 4));
    return p;
  }();  // the engine saves its cache on shutdown
  std::vector<int32_t> expected;
  {
    auto e = Make(o);
    const CompletionResult r = Complete(*e, Greedy(prompt, 8));
    EXPECT_EQ(r.cached_tokens, static_cast<int>((prompt.size() - 1) / 16 * 16));
    EXPECT_GT(e->Stats().disk_loads, 0u);
    expected = Reference(e->model(), prompt, 8);
    EXPECT_EQ(r.tokens, expected);
  }
  for (const auto& f : fs::recursive_directory_iterator(dir)) {
    if (f.is_regular_file()) fs::resize_file(f.path(), 100);
  }
  {
    auto e = Make(o);
    const CompletionResult r = Complete(*e, Greedy(prompt, 8));
    EXPECT_EQ(r.cached_tokens, 0);
    EXPECT_EQ(r.tokens, expected);
  }
  fs::remove_all(dir);
}

// Cache namespaces (tenants, cache_salt): the same tokens in two namespaces share no block and
// no cached token, in RAM and through the disk tier after a restart; the same namespace hits.
// (Mutation caught: NamespaceKey returning the default key for every namespace.)
TEST(Engine, NamespacesShareNoBlocksInRamOrOnDisk) {
  const fs::path dir = fs::temp_directory_path() / ("pc_engine_ns_" + std::to_string(getpid()));
  fs::remove_all(dir);
  EngineOptions o;
  o.cache_dir = dir.string();
  auto run = [](Engine& e, const std::vector<int32_t>& p, const std::string& ns) {
    CompletionRequest r = Greedy(p, 4);
    r.cache_namespace = ns;
    const CompletionResult res = Complete(e, std::move(r));
    EXPECT_TRUE(res.status.ok()) << res.status.message();
    return res;
  };
  std::vector<int32_t> prompt;
  int full = 0;
  {
    auto e = Make(o);
    prompt = e->model().tokenizer().Encode(kStory, true);
    full = static_cast<int>((prompt.size() - 1) / 16 * 16);
    EXPECT_EQ(run(*e, prompt, "alice").cached_tokens, 0);
    const size_t alice_blocks = e->ListCacheBlocks().size();
    ASSERT_GT(alice_blocks, 0u);
    EXPECT_GE(e->LookupCache(prompt, "alice").ram, full);
    EXPECT_EQ(e->LookupCache(prompt, "bob").ram, 0);
    EXPECT_EQ(e->LookupCache(prompt, "").ram, 0);
    const CompletionResult bob = run(*e, prompt, "bob");
    EXPECT_EQ(bob.cached_tokens, 0);
    // Bob's blocks are his own: twice as many, no key in common.
    const std::vector<CacheBlockInfo> blocks = e->ListCacheBlocks();
    EXPECT_EQ(blocks.size(), 2 * alice_blocks);
    std::set<std::string> keys;
    for (const CacheBlockInfo& b : blocks) keys.insert(b.key);
    EXPECT_EQ(keys.size(), blocks.size());
    const CompletionResult alice = run(*e, prompt, "alice");
    EXPECT_EQ(alice.cached_tokens, full);
    EXPECT_EQ(alice.tokens, bob.tokens);              // isolation changes no output
    EXPECT_EQ(run(*e, prompt, "").cached_tokens, 0);  // the default namespace is one more
  }  // saves alice's, bob's and the default's blocks to disk
  {
    auto e = Make(o);
    EXPECT_EQ(run(*e, prompt, "carol").cached_tokens, 0);
    EXPECT_EQ(e->Stats().disk_loads, 0u);
    EXPECT_EQ(e->LookupCache(prompt, "carol").disk, 0);
    EXPECT_GE(e->LookupCache(prompt, "bob").disk, full);
    EXPECT_EQ(run(*e, prompt, "bob").cached_tokens, full);
    EXPECT_GT(e->Stats().disk_loads, 0u);
  }
  fs::remove_all(dir);
}

// A request whose callback throws fails with a message; the engine goes on serving.
TEST(Engine, ThrowingCallbackFailsOnlyItsRequest) {
  auto e = Make();
  const auto prompt = e->model().tokenizer().Encode(kStory, true);
  CompletionRequest bad = Greedy(prompt, 8);
  bad.on_text = [](const std::string&) -> bool { throw std::runtime_error("client bug"); };
  const CompletionResult r = Complete(*e, std::move(bad));
  EXPECT_FALSE(r.status.ok());
  EXPECT_NE(r.status.message().find("client bug"), std::string::npos) << r.status.message();
  CompletionRequest logits = Greedy(prompt, 8);
  logits.on_logits = [](std::span<const float>) { throw std::bad_alloc(); };
  EXPECT_FALSE(Complete(*e, std::move(logits)).status.ok());
  const CompletionResult ok = Complete(*e, Greedy(prompt, 8));
  EXPECT_TRUE(ok.status.ok());
  EXPECT_EQ(ok.tokens, Reference(e->model(), prompt, 8));
}

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
    const bool type = name == "F16" || name == "Q8_0" || name == "Q4_0";
    o.preset = type ? "tiny-test" : "tiny-" + name;
    o.vocab_path =
        type ? std::string(PC_SHARED_DIR) + "/tokenizers/ggml-vocab-gpt-2.gguf" : kStories;
    o.type = name == "F16" ? GgmlType::kF16 : name == "Q4_0" ? GgmlType::kQ4_0 : GgmlType::kQ8_0;
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

INSTANTIATE_TEST_SUITE_P(Types, BitwiseReuse, ::testing::Values("F32", "F16", "Q8_0", "Q4_0"));
INSTANTIATE_TEST_SUITE_P(Architectures, BitwiseReuse,
                         ::testing::Values("qwen2", "qwen3", "gemma2", "gemma3", "phi3",
                                           "mistral"));
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
