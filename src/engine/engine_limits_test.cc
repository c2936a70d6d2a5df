// The engine's bounds against hostile or careless callers, on the real stories260K model: pins
// stay within their quotas (and say when they stop short), K/V reservations leave room for a
// full pin quota, a request cancelled while queued never starts, and the heartbeat shows a
// step that does not end.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <optional>
#include <thread>

#include "engine/engine_impl.h"
#include "engine/engine_test_util.h"

namespace promptcache {
namespace {

// Stats once the engine thread has finished the step that answered the last request (a task
// runs between steps).
EngineStats Settled(Engine& e) {
  e.ListPins();
  return e.Stats();
}

size_t BlockBytes() { return Make()->model().MakeKvLayout(KvType::kF16).bytes_per_block(); }

// Byte budgets counted in K/V blocks; those left unset keep their defaults.
struct BlockBudgets {
  // Default initializers, so that designated initializers may leave members out.
  std::optional<size_t> kv_ram = {}, cache_ram = {}, pin_ram = {}, tenant_pin_ram = {};
};
EngineOptions InBlocks(size_t block, const BlockBudgets& b) {
  EngineOptions o;
  if (b.kv_ram) o.kv_ram_bytes = *b.kv_ram * block;
  if (b.cache_ram) o.cache_ram_bytes = *b.cache_ram * block;
  if (b.pin_ram) o.pin_ram_bytes = *b.pin_ram * block;
  if (b.tenant_pin_ram) o.tenant_pin_ram_bytes = *b.tenant_pin_ram * block;
  return o;
}

// A request asking to pin its whole prompt gets as many blocks as the quotas leave, and says
// it stopped short; the engine's pinned bytes never pass the quota, and the operator can list
// the pins and drop them. (Mutation tried: Finish not passing the request's tenant makes the
// tenant's pin take the whole rest of the total quota and fails.)
TEST(EngineLimits, PinsStayWithinTheirQuotasAndSaySo) {
  const size_t block = BlockBytes();
  auto e = Make(InBlocks(block, {.pin_ram = 3, .tenant_pin_ram = 1}));
  const auto prompt = e->model().tokenizer().Encode(std::string(kStory) + " " + kStory, true);
  ASSERT_GT(prompt.size(), 5u * 16);
  CompletionRequest r = Greedy(prompt, 2);
  r.pin_tokens = -1;
  CompletionResult res = (*e->Submit(r))->Wait();
  ASSERT_TRUE(res.status.ok());
  EXPECT_EQ(res.pinned_tokens, 3 * 16);
  EXPECT_TRUE(res.pin_limited);
  EXPECT_EQ(Settled(*e).cache_pinned_bytes, 3 * block);
  EXPECT_EQ(Settled(*e).pins_limited, 1u);

  // A tenant, in a namespace of its own, gets its quota's worth: one block.
  ASSERT_TRUE(e->DropCache("", /*force=*/true).ok());
  EXPECT_EQ(Settled(*e).cache_pinned_bytes, 0u);
  r.tenant = "alice";
  r.cache_namespace = "alice-ns";
  r.pin_tokens = 0;
  r.timed_pins = {{static_cast<int>(prompt.size()), 300}};
  res = (*e->Submit(r))->Wait();
  EXPECT_EQ(res.pinned_tokens, 16);
  EXPECT_TRUE(res.pin_limited);
  // A pin within the quota is not limited.
  CompletionRequest small = Greedy(prompt, 2);
  small.pin_tokens = 2 * 16;
  res = (*e->Submit(small))->Wait();
  EXPECT_EQ(res.pinned_tokens, 2 * 16);
  EXPECT_FALSE(res.pin_limited);
  EXPECT_EQ(Settled(*e).cache_pinned_bytes, 3 * block);

  std::vector<PinInfo> pins = e->ListPins();
  ASSERT_EQ(pins.size(), 2u);
  std::sort(pins.begin(), pins.end(),
            [](const auto& a, const auto& b) { return a.tokens < b.tokens; });
  EXPECT_EQ(pins[0].tenant, "alice");
  EXPECT_FALSE(pins[0].namespace_key.empty());
  EXPECT_EQ(pins[0].counted_pins, 0);
  EXPECT_GT(pins[0].expires_in_seconds, 290);
  EXPECT_EQ(pins[1].tenant, "");
  EXPECT_EQ(pins[1].tokens, 32);
  EXPECT_EQ(pins[1].bytes, 2 * block);
  EXPECT_EQ(pins[1].counted_pins, 1);
  EXPECT_GT(pins[1].expires_in_seconds, 3500);  // the default pin_ttl_seconds, 3600
  // The explicit pin API is bounded the same way.
  PinOutcome out;
  ASSERT_TRUE(e->PinPrefix(prompt, true, "", "", &out).ok());
  EXPECT_EQ(out.tokens, 32);
  EXPECT_TRUE(out.limited);
  ASSERT_TRUE(e->Unpin(pins[0].key).ok());
  EXPECT_EQ(e->ListPins().size(), 1u);
  EXPECT_EQ(e->DropCache(pins[1].key).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(e->DropCache(pins[1].key, /*force=*/true).ok());
}

// Pins count against kv_ram_bytes: a request is refused when it could not fit beside a full
// pin quota (it could wait for ever), served when it could. Quotas past the cache's budget are
// refused at creation.
TEST(EngineLimits, KvRamLeavesRoomForAFullPinQuota) {
  const size_t block = BlockBytes();
  auto e = Make(InBlocks(block, {.kv_ram = 8, .pin_ram = 4}));
  const auto prompt = e->model().tokenizer().Encode("Once upon a time", true);  // 5 tokens
  auto too_big = e->Submit(Greedy(prompt, 5 * 16 - 5));                         // 5 blocks
  ASSERT_FALSE(too_big.ok());
  EXPECT_NE(too_big.status().message().find("--pin-ram"), std::string::npos);
  auto fits = e->Submit(Greedy(prompt, 4 * 16 - 5));
  ASSERT_TRUE(fits.ok());
  EXPECT_TRUE((*fits)->Wait().status.ok());

  EngineOptions bad = InBlocks(block, {.cache_ram = 4, .pin_ram = 5});
  bad.model_path = kStories;
  EXPECT_FALSE(Engine::Create(bad).ok());
  bad.pin_ram_bytes = 2 * block;
  bad.tenant_pin_ram_bytes = 3 * block;
  EXPECT_FALSE(Engine::Create(bad).ok());
}

// A request cancelled while it waits in the queue is answered at once, without starting; the
// heartbeat shows a step held up (here by a callback that blocks) and clears once it ends.
// (Mutations tried: not skipping cancelled queued requests leaves the second one waiting
// behind the first and fails WaitFor; BeginWork not called leaves step_seconds 0.)
TEST(EngineLimits, CancelledQueuedRequestsNeverStartAndTheHeartbeatShowsAStuckStep) {
  EngineOptions o;
  o.parallel = 1;
  auto e = Make(o);
  const auto prompt = e->model().tokenizer().Encode("Once upon a time", true);
  // The slow request's first piece holds the engine thread until `release`, its second until
  // `release_again`.
  std::promise<void> running, release, release_again;
  std::shared_future<void> released = release.get_future().share();
  std::shared_future<void> released_again = release_again.get_future().share();
  std::atomic<int> pieces{0};
  CompletionRequest slow = Greedy(prompt, 200);
  slow.ignore_eos = true;
  slow.on_text = [&](const std::string&) {
    const int n = pieces++;
    if (n == 0) {
      running.set_value();
      released.wait();
    } else if (n == 1) {
      released_again.wait();
    }
    return true;
  };
  auto h1 = e->Submit(slow);
  ASSERT_TRUE(h1.ok());
  running.get_future().wait();
  auto h2 = e->Submit(Greedy(prompt, 4));
  ASSERT_TRUE(h2.ok());
  // The engine thread is held inside a step: the heartbeat sees it.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_GE(e->Stats().step_seconds, 0.25);
  (*h2)->Cancel();
  EXPECT_FALSE((*h2)->WaitFor(0.05));  // the thread is still held: nothing has looked yet
  release.set_value();
  // Answered while the first request still runs (held at its second piece): never started.
  ASSERT_TRUE((*h2)->WaitFor(10));
  const CompletionResult cancelled = (*h2)->Wait();
  EXPECT_EQ(cancelled.finish_reason, "cancelled");
  EXPECT_TRUE(cancelled.tokens.empty());
  EXPECT_FALSE((*h1)->WaitFor(0)) << "the first request is still running";
  (*h1)->Cancel();
  release_again.set_value();
  EXPECT_EQ((*h1)->Wait().finish_reason, "cancelled");
  const EngineStats s = Settled(*e);
  EXPECT_EQ(s.requests_cancelled, 2u);
  EXPECT_GE(s.step_max_seconds, 0.25);
  // Idle again: no step runs.
  for (int i = 0; i < 100 && e->Stats().step_seconds > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(e->Stats().step_seconds, 0);
}

}  // namespace
}  // namespace promptcache
