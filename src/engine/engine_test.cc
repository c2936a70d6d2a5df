// The serving engine on the real stories260K model: prefix reuse is exact, concurrent sequences
// share cached blocks, cache namespaces share none, and the disk tier survives a restart.
// (Logits bit-identical across reuse paths, types, architectures and sliding-window trimming:
// engine_exact_test.cc; choices, log-probabilities and grammars: engine_choices_test.cc;
// log-probability values: engine_logprobs_test.cc.)
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

}  // namespace
}  // namespace promptcache
