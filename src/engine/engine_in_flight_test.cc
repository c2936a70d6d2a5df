// Concurrent requests that share a prefix compute it once (engine/prefix_sharing.cc): a burst of
// prompts admitted together computes each shared block once, by counts; greedy outputs equal a
// cache-less reference token for token; a cancelled leader's follower takes over; the shared part
// is computed first, and a request that shares nothing is delayed no more than the documented
// bound; namespaces share nothing; modules are encoded once for a burst; sliding windows too.
// Prompts with segments: segment_in_flight_test.cc. The Gate and the other helpers:
// in_flight_test_util.h.
#include "engine/in_flight_test_util.h"

namespace promptcache {
namespace {

using namespace in_flight_test;  // NOLINT(build/namespaces): the tests' own helpers

// Identical and overlapping prompts arriving together: each request computes only what no
// earlier request of the burst computes (a follower of a follower included), its cached_tokens
// count what it took in flight (shared_tokens: all of it, the cache being cold), and every answer
// is the cache-less reference. Mutations: with AttachPrefix never waiting, every request computes
// its whole prompt and the counts fail; counting shared blocks as computed fails them too.
TEST(InFlight, ABurstComputesEachSharedBlockOnce) {
  auto e = MakeBurstEngine();
  const auto P = Ids(160, 1), Q = Ids(64, 2);
  std::vector<std::unique_ptr<Probe>> burst;
  auto add = [&](std::vector<int32_t> prompt, std::string ns = "", int n = 1) {
    burst.push_back(std::make_unique<Probe>());
    burst.back()->prompt = std::move(prompt);
    burst.back()->ns = std::move(ns);
    burst.back()->n = n;
  };
  add(Cat(P, Ids(8, 10)));              // the leader
  add(Cat(P, Ids(8, 11)), "", 2);       // a follower with two choices
  add(Cat(P, Ids(8, 10)));              // identical to the leader
  add(Cat(Cat(P, Q), Ids(8, 12)));      // follows the leader for P, computes Q
  add(Cat(Cat(P, Q), Ids(8, 13)));      // follows the one before for P and Q
  add(Cat(P, Ids(8, 10)), "tenant-b");  // another namespace: shares nothing
  add(Ids(40, 50));                     // shares nothing
  {
    Gate gate(*e);
    for (auto& p : burst) Submit(*e, gate, *p);
    gate.Open();
    for (auto& p : burst) ASSERT_NO_FATAL_FAILURE(Finish(*p));
  }
  int computed = 0, naive = 0, shared = 0;
  for (size_t i = 0; i < burst.size(); ++i) {
    const Probe& p = *burst[i];
    const int n = static_cast<int>(p.prompt.size());
    EXPECT_EQ(p.result.cached_tokens, ExpectedCached(burst, i)) << "request " << i;
    EXPECT_EQ(p.result.computed_tokens, n - p.result.cached_tokens) << "request " << i;
    EXPECT_EQ(p.result.shared_tokens, p.result.cached_tokens) << "request " << i;
    const std::vector<int32_t> want = Reference(e->model(), p.prompt, 12, /*ignore_eos=*/true);
    ASSERT_EQ(p.result.choices.size(), size_t(p.n));
    for (const CompletionChoice& c : p.result.choices) {
      EXPECT_EQ(c.tokens, want) << "request " << i;
    }
    computed += p.result.computed_tokens;
    shared += p.result.shared_tokens;
    naive += n;
  }
  // The shared 160 tokens once, P and Q once: leader 168, follower tails 8 + 8, Q's 72 and 8,
  // the other namespace's 168 and the unrelated 40.
  EXPECT_EQ(computed, 168 + 8 + 8 + 72 + 8 + 168 + 40);
  EXPECT_EQ(naive - computed, 160 * 3 + 224);
  const EngineStats st = e->Stats();
  EXPECT_EQ(st.shared_in_flight_tokens, uint64_t(shared));
  EXPECT_EQ(st.prompt_tokens - st.cached_tokens, uint64_t(computed + 8));  // + the gate's prompt
}

// The leader is cancelled after its first chunk: the first follower takes over from the block
// that chunk completed, the second follows it, and both answer as they would alone. Mutation:
// with Finish not releasing the leader's claims, the followers wait until their bound and then
// compute everything (the counts fail).
TEST(InFlight, ACancelledLeadersFollowerTakesOver) {
  auto e = MakeBurstEngine();
  const auto P = Ids(160, 1);
  Probe leader, f1, f2;
  leader.prompt = Cat(P, Ids(8, 10));
  f1.prompt = Cat(P, Ids(8, 11));
  f2.prompt = Cat(P, Ids(8, 12));
  {
    Gate gate(*e, [&](int step) {
      if (step == 1) leader.h->Cancel();  // after its first chunk: 31 tokens beside the gate's
    });
    Submit(*e, gate, leader);
    Submit(*e, gate, f1);
    Submit(*e, gate, f2);
    gate.Open();
    ASSERT_TRUE(leader.h->WaitFor(kLiveness));
    EXPECT_EQ(leader.h->Wait().finish_reason, "cancelled");
    ASSERT_NO_FATAL_FAILURE(Finish(f1));
    ASSERT_NO_FATAL_FAILURE(Finish(f2));
  }
  const int first_chunk = (32 - 1) / kBlock * kBlock;
  EXPECT_EQ(f1.result.cached_tokens, first_chunk);  // what the leader completed
  EXPECT_EQ(f1.result.shared_tokens, first_chunk);
  EXPECT_EQ(f2.result.cached_tokens, 160);  // from the follower that took over
  EXPECT_EQ(f2.result.shared_tokens, 160);
  EXPECT_EQ(f1.result.tokens, Reference(e->model(), f1.prompt, 12, /*ignore_eos=*/true));
  EXPECT_EQ(f2.result.tokens, Reference(e->model(), f2.prompt, 12, /*ignore_eos=*/true));
  // The followers' waits are a phase of their own: prefill_ms is timed from the wake, so the
  // two fit in prompt_ms (mutation: prefill_start left at admission counts the wait twice and
  // fails it). Orders of magnitude apart: a wait spans the leader's forward passes.
  for (const Probe* f : {&f1, &f2}) {
    EXPECT_GT(f->result.wait_ms, 0);
    EXPECT_LE(f->result.wait_ms + f->result.prefill_ms, f->result.prompt_ms + 1e-6);
  }
}

// A long request that shares nothing (X) arrives just before a burst: the burst's leader, which
// three others wait for, gets each step's prefill room first, so the shared prefix is cached
// after the steps its 160 tokens take at 31 a step (the gate decodes the 32nd); X is then served
// in its turn and is delayed by no more than those steps (docs/server.md, "Reading
// cached_tokens"). Mutations: oldest-first order (no priority) leaves the shared prefix uncached
// at that step; priority kept for the leader's whole prefill (its own 64-token question too)
// delays X past the bound.
TEST(InFlight, TheSharedPartGoesFirstAndARequestSharingNothingWaitsBoundedly) {
  auto e = MakeBurstEngine();
  const auto P = Ids(160, 1);
  Probe x, leader, f[3];
  x.prompt = Ids(200, 60);
  leader.prompt = Cat(P, Ids(64, 3));
  for (int i = 0; i < 3; ++i) f[i].prompt = Cat(P, Ids(8, 20 + i));
  const int room = 32 - 1;
  const int shared_steps = (160 + room - 1) / room;  // 6
  const int x_steps = (200 + room - 1) / room;       // 7
  int cached_at = -1;
  {
    Gate gate(*e, [&](int step) {
      // Before this step's forward pass: what the earlier steps published.
      if (step == shared_steps + 1) cached_at = e->LookupCache(f[0].prompt, "").ram;
    });
    ASSERT_NO_FATAL_FAILURE(RunBurst(*e, gate, {&x, &leader, &f[0], &f[1], &f[2]}));
  }
  EXPECT_GE(cached_at, 160) << "the shared prefix is computed first";
  EXPECT_LE(x.first_step, x_steps + shared_steps) << "X is delayed by the shared part at most";
  for (Probe& p : f) EXPECT_EQ(p.result.cached_tokens, 160);
  EXPECT_EQ(x.result.tokens, Reference(e->model(), x.prompt, 12, /*ignore_eos=*/true));
  EXPECT_EQ(f[1].result.tokens, Reference(e->model(), f[1].prompt, 12, /*ignore_eos=*/true));
}

// Sliding windows (tiny-gemma3, windows of 24 tokens, trimmed as the window passes): followers
// take the leader's blocks with their windows complete, and answer as the reference does.
TEST(InFlight, SlidingWindowFollowersMatchTheReference) {
  auto e = MakeBurstEngine({}, SlidingModel());
  const auto P = Ids(160, 1);
  std::vector<std::unique_ptr<Probe>> burst;
  for (int i = 0; i < 3; ++i) {
    burst.push_back(std::make_unique<Probe>());
    burst.back()->prompt = Cat(P, Ids(8 + 8 * i, 30 + i));
  }
  {
    Gate gate(*e);
    for (auto& p : burst) Submit(*e, gate, *p);
    gate.Open();
    for (auto& p : burst) ASSERT_NO_FATAL_FAILURE(Finish(*p));
  }
  for (size_t i = 0; i < burst.size(); ++i) {
    EXPECT_EQ(burst[i]->result.cached_tokens, i == 0 ? 0 : 160) << "request " << i;
    EXPECT_EQ(burst[i]->result.tokens,
              Reference(e->model(), burst[i]->prompt, 12, /*ignore_eos=*/true))
        << "request " << i;
  }
}

// Without the prefix cache nothing is shared, and nobody waits.
TEST(InFlight, NothingIsSharedWithoutThePrefixCache) {
  EngineOptions o;
  o.prefix_cache = false;
  auto e = MakeBurstEngine(o);
  const auto P = Ids(160, 1);
  Probe a, b;
  a.prompt = Cat(P, Ids(8, 10));
  b.prompt = Cat(P, Ids(8, 11));
  {
    Gate gate(*e);
    ASSERT_NO_FATAL_FAILURE(RunBurst(*e, gate, {&a, &b}));
  }
  EXPECT_EQ(a.result.cached_tokens + b.result.cached_tokens, 0);
  EXPECT_EQ(b.result.tokens, Reference(e->model(), b.prompt, 12, /*ignore_eos=*/true));
}

// Modules: a schema registered without encoding, two prompts for it arriving together. Encoding
// runs on the engine thread one piece at a time to the end, so a piece is never half encoded
// when the next prompt looks: the burst encodes each piece once, as one prompt alone does.
TEST(InFlight, ModulesOfABurstAreEncodedOnce) {
  const std::string schema = std::string(PC_SOURCE_DIR) + "/examples/story/story.xml";
  const char* lily = R"(<prompt schema="story"><lily/><park/><![CDATA[
One day,]]></prompt>)";
  const char* lily2 = R"(<prompt schema="story"><lily/><park/><![CDATA[
The next day,]]></prompt>)";
  SchemaLoadOptions lo;
  lo.encode = false;
  lo.persist = false;
  int alone = 0;
  {
    auto e = MakeBurstEngine();
    ASSERT_TRUE(e->LoadSchemaFile(schema, lo).ok());
    CompletionRequest r;
    r.max_tokens = 4;
    auto h = e->SubmitPml(lily, r);
    ASSERT_TRUE(h.ok());
    alone = (*h)->Wait().encoded_tokens;
    ASSERT_GT(alone, 0);
  }
  auto e = MakeBurstEngine();
  ASSERT_TRUE(e->LoadSchemaFile(schema, lo).ok());
  std::shared_ptr<RequestHandle> a, b;
  {
    Gate gate(*e);
    CompletionRequest r;
    r.max_tokens = 4;
    a = *e->SubmitPml(lily, r);
    b = *e->SubmitPml(lily2, r);
    gate.Open();
    ASSERT_TRUE(a->WaitFor(kLiveness) && b->WaitFor(kLiveness));
  }
  const CompletionResult ra = a->Wait(), rb = b->Wait();
  ASSERT_TRUE(ra.status.ok() && rb.status.ok());
  EXPECT_EQ(ra.encoded_tokens + rb.encoded_tokens, alone);
  EXPECT_EQ(rb.encoded_tokens, 0);
}

}  // namespace
}  // namespace promptcache
