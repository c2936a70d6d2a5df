// Concurrent requests that carry the same new segment compute it once (segment_admission.cc, "In
// flight"): a burst of prompts with one document at different positions computes the document
// once, stores it once, and answers as the same requests run one after another once it is
// cached; a cancelled leader's waiter computes the segment itself and the next waiter follows
// it; namespaces never wait for each other's segments; the leader's prefill goes first and a
// request sharing nothing is delayed no more than the documented bound; a prompt with segments
// shares its exact prefix in flight with plain prompts, and nothing past it. The Gate and the
// other helpers: in_flight_test_util.h.
#include <cmath>

#include "engine/in_flight_test_util.h"

namespace promptcache {
namespace {

using namespace in_flight_test;  // NOLINT(build/namespaces): the tests' own helpers

constexpr int kDoc = 48;         // the shared document's tokens: three blocks
constexpr int kBorder = 4;       // EngineOptions::segment_border_tokens' default
constexpr double kShare = 0.15;  // EngineOptions::segment_recompute's default

EngineOptions SegmentOptions(SegmentEncoding encoding = SegmentEncoding::kInContext) {
  EngineOptions o;
  o.segment_cache = true;
  o.segment_min_tokens = 16;
  o.segment_encoding = encoding;
  return o;
}

// A prompt `before` + the document + `after`, the document marked as a segment.
void Carry(Probe& p, const std::vector<int32_t>& doc, int before, int after, int salt,
           std::string ns = "") {
  p.prompt = Cat(Cat(Ids(before, salt), doc), Ids(after, salt + 100));
  p.segments = {{before, before + static_cast<int>(doc.size())}};
  p.ns = std::move(ns);
}

// Serves p alone (no gate) and returns its result.
CompletionResult Alone(Engine& e, const Probe& p, int max_tokens = 12) {
  CompletionRequest r;
  r.prompt = p.prompt;
  r.segments = p.segments;
  r.cache_namespace = p.ns;
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  r.sampling.temperature = 0;
  auto h = e.Submit(std::move(r));
  PC_CHECK(h.ok());
  CompletionResult res = (*h)->Wait();
  EXPECT_TRUE(res.status.ok()) << res.status.message();
  return res;
}

// Four prompts carrying the same new document behind texts of their own, arriving together:
// the first computes and stores it (in context: from its K/V at its first token; alone: encoded
// again after the preamble, then), the three others wait for that store and reuse it (each
// computing its own text and the repaired tokens only), and every answer equals the same request
// served after the others, one at a time, the document cached by the first. Mutation:
// AwaitSegments never waiting (return false) has all four compute and store the document:
// the stores, hits, waits and token counts fail (both encodings).
void ABurstComputesTheDocumentOnce(SegmentEncoding encoding) {
  const auto D = Ids(kDoc, 3);
  std::vector<std::unique_ptr<Probe>> burst;
  for (int i = 0; i < 4; ++i) {
    burst.push_back(std::make_unique<Probe>());
    Carry(*burst.back(), D, 8 + 8 * i, 8, 40 + i);
  }
  auto e = MakeBurstEngine(SegmentOptions(encoding));
  {
    Gate gate(*e);
    for (auto& p : burst) Submit(*e, gate, *p);
    gate.Open();
    for (auto& p : burst) ASSERT_NO_FATAL_FAILURE(Finish(*p));
  }
  int computed = 0, own = 0, repaired = 0, stores = 0;
  for (size_t i = 0; i < burst.size(); ++i) {
    const CompletionResult& r = burst[i]->result;
    const int n = static_cast<int>(burst[i]->prompt.size());
    EXPECT_EQ(r.segment_lookups, 1) << "request " << i;
    EXPECT_EQ(r.segment_hits, i == 0 ? 0 : 1) << "request " << i;
    EXPECT_EQ(r.computed_tokens, n - r.cached_tokens) << "request " << i;
    if (i > 0) {  // the document reused, less its repaired tokens
      EXPECT_EQ(r.cached_tokens, kDoc - r.recomputed_tokens) << "request " << i;
      EXPECT_GE(r.recomputed_tokens, kBorder) << "request " << i;
      EXPECT_LE(r.recomputed_tokens, kBorder + std::ceil(kShare * kDoc)) << "request " << i;
    }
    computed += r.computed_tokens;
    own += n - kDoc;
    repaired += r.recomputed_tokens;
    stores += r.segment_stores;
  }
  EXPECT_EQ(computed, kDoc + own + repaired);  // the document once
  EXPECT_EQ(stores, 1);
  const EngineStats st = e->Stats();
  EXPECT_EQ(st.segment_stores, 1u);
  EXPECT_EQ(st.segment_hits, 3u);
  EXPECT_EQ(st.in_flight_segment_waits, 3u);
  // One after another on a fresh engine: the first stores the document, the others reuse the
  // same K/V, so each answer and count is the burst's.
  auto seq = MakeBurstEngine(SegmentOptions(encoding));
  for (size_t i = 0; i < burst.size(); ++i) {
    const CompletionResult r = Alone(*seq, *burst[i]);
    EXPECT_EQ(r.tokens, burst[i]->result.tokens) << "request " << i;
    EXPECT_EQ(r.cached_tokens, burst[i]->result.cached_tokens) << "request " << i;
    EXPECT_EQ(r.segment_hits, burst[i]->result.segment_hits) << "request " << i;
  }
  EXPECT_EQ(seq->Stats().in_flight_segment_waits, 0u);
}

TEST(SegmentsInFlight, ABurstCarryingANewDocumentComputesItOnce) {
  ABurstComputesTheDocumentOnce(SegmentEncoding::kInContext);
}

TEST(SegmentsInFlight, ABurstCarryingANewDocumentComputesItOnceEncodedAlone) {
  ABurstComputesTheDocumentOnce(SegmentEncoding::kAlone);
}

// The leader is cancelled after its first prefill chunk, before it stores the document: the
// first waiter is woken, computes the document itself (its answer is the cache-less
// reference) and stores it; the second, finding it claimed by the first, goes on waiting and
// reuses it, answering as it does after the first alone. Nobody fails. Mutation: Finish not
// releasing the segment claims (decode.cc) leaves both waiting until their bound, then computing
// the document each: the hits, stores and waits fail.
TEST(SegmentsInFlight, ACancelledLeadersWaiterComputesTheSegment) {
  const auto D = Ids(kDoc, 3);
  Probe leader, f1, f2;
  Carry(leader, D, 100, 8, 41);  // 156 tokens: five steps of prefill at 31 a step
  Carry(f1, D, 8, 8, 42);
  Carry(f2, D, 16, 8, 43);
  auto e = MakeBurstEngine(SegmentOptions());
  {
    Gate gate(*e, [&](int step) {
      if (step == 1) leader.h->Cancel();  // after its first chunk
    });
    for (Probe* p : {&leader, &f1, &f2}) Submit(*e, gate, *p);
    gate.Open();
    ASSERT_TRUE(leader.h->WaitFor(kLiveness));
    EXPECT_EQ(leader.h->Wait().finish_reason, "cancelled");
    EXPECT_EQ(leader.h->Wait().segment_stores, 0);
    ASSERT_NO_FATAL_FAILURE(Finish(f1));
    ASSERT_NO_FATAL_FAILURE(Finish(f2));
  }
  EXPECT_EQ(HitsAndStores(f1), std::pair(0, 1));
  EXPECT_EQ(f1.result.cached_tokens, 0);
  EXPECT_EQ(f1.result.tokens, Reference(e->model(), f1.prompt, 12, /*ignore_eos=*/true));
  EXPECT_EQ(HitsAndStores(f2), std::pair(1, 0));
  // f1 and f2 waited for the leader; f2 went on waiting once f1 had claimed the segment.
  EXPECT_EQ(e->Stats().in_flight_segment_waits, 2u);
  EXPECT_EQ(e->Stats().segment_stores, 1u);
  auto seq = MakeBurstEngine(SegmentOptions());
  Alone(*seq, f1);
  const CompletionResult r2 = Alone(*seq, f2);
  EXPECT_EQ(r2.tokens, f2.result.tokens);
  EXPECT_EQ(r2.cached_tokens, f2.result.cached_tokens);
}

// The same document in two namespaces is two segments: a request of one never waits for the
// other's (each computes and stores its own copy), while a second request of the second
// namespace waits for that namespace's producer and reuses its copy. Mutation: the claims keyed
// without the namespace (segments_->Keys(..., BlockKey{}) in AdmitSegments and AwaitSegments)
// has the second namespace's first request wait for the first namespace's store, then miss
// and store anyway: the waits fail.
TEST(SegmentsInFlight, NamespacesNeverWaitForEachOthersSegments) {
  const auto D = Ids(kDoc, 3);
  Probe a, b, c;
  Carry(a, D, 8, 8, 44);
  Carry(b, D, 16, 8, 45, "tenant-b");
  Carry(c, D, 24, 8, 46, "tenant-b");
  auto e = MakeBurstEngine(SegmentOptions());
  {
    Gate gate(*e);
    ASSERT_NO_FATAL_FAILURE(RunBurst(*e, gate, {&a, &b, &c}));
  }
  EXPECT_EQ(HitsAndStores(a), std::pair(0, 1));
  EXPECT_EQ(HitsAndStores(b), std::pair(0, 1));
  EXPECT_EQ(b.result.tokens, Reference(e->model(), b.prompt, 12, /*ignore_eos=*/true));
  EXPECT_EQ(HitsAndStores(c), std::pair(1, 0));
  EXPECT_EQ(e->Stats().in_flight_segment_waits, 1u);  // c, for b
}

// A long plain request (X) arrives just before a burst whose leader carries a new document that
// three others wait for: the leader's prefill goes first, so the document is stored after the
// steps its 72 tokens take at 31 a step (the gate decodes the 32nd), and X, served in its turn,
// is delayed by no more than those steps (docs/server.md, "Concurrent requests share a prefix in
// flight"). Mutation: PrefillOrder without the segment waiters' weights (oldest first) leaves
// the document unstored at that step.
TEST(SegmentsInFlight, TheLeaderGoesFirstAndARequestSharingNothingWaitsBoundedly) {
  const auto D = Ids(kDoc, 3);
  Probe x, leader, w[3];
  x.prompt = Ids(200, 60);
  Carry(leader, D, 16, 8, 47);
  for (int i = 0; i < 3; ++i) Carry(w[i], D, 8 + 8 * i, 8, 50 + i);
  const int room = 32 - 1;
  const int leader_steps = (72 + room - 1) / room;  // 3
  const int x_steps = (200 + room - 1) / room;      // 7
  auto e = MakeBurstEngine(SegmentOptions());
  int stored_at = -1;
  {
    Gate gate(*e, [&](int step) {
      // Before this step's prompts take their logits: what the earlier steps stored.
      if (step == leader_steps + 1) {
        stored_at = e->LookupCache(w[0].prompt, "", w[0].segments).segments;
      }
    });
    ASSERT_NO_FATAL_FAILURE(RunBurst(*e, gate, {&x, &leader, &w[0], &w[1], &w[2]}));
  }
  EXPECT_EQ(stored_at, kDoc) << "the awaited document is computed first";
  EXPECT_LE(x.first_step, x_steps + leader_steps) << "X is delayed by the leader at most";
  EXPECT_EQ(x.result.tokens, Reference(e->model(), x.prompt, 12, /*ignore_eos=*/true));
  for (Probe& p : w) EXPECT_EQ(p.result.segment_hits, 1);
  EXPECT_EQ(e->Stats().in_flight_segment_waits, 3u);
}

// A prompt with segments shares its exact prefix (up to its first reused segment) in flight as
// a plain prompt does, and nothing past it. With segment G cached beforehand: `seg` waits for a
// plain leader computing its first 160 tokens and takes them from it; `seg2` reuses G behind a
// new Q, computing Q at admission (repair), and publishes Q's blocks at once; a plain prompt with
// the same Q + G takes Q from it but not G's blocks (approximate: reused behind other text), and
// answers as the cache-less reference. Mutations: prompts with segments never waiting for a prefix
// (may_wait false for them in Admit) leaves seg's shared_tokens 0; PublishPrefill without its
// exact-prefix cap publishes seg2's reused G as a prefix: the cache lookup at step 1 finds 64
// tokens, the plain prompt takes them and its answer differs from the reference.
TEST(SegmentsInFlight, APromptWithSegmentsSharesOnlyItsExactPrefix) {
  const auto P = Ids(160, 1), Q = Ids(32, 7), G = Ids(32, 3);
  auto e = MakeBurstEngine(SegmentOptions());
  Probe warm;
  Carry(warm, G, 8, 8, 5);
  ASSERT_EQ(Alone(*e, warm).segment_stores, 1);
  Probe leader, seg, seg2, plain;
  leader.prompt = Cat(P, Ids(8, 10));
  seg.prompt = Cat(Cat(P, G), Ids(8, 11));
  seg.segments = {{160, 192}};
  seg2.prompt = Cat(Cat(Q, G), Ids(8, 12));
  seg2.segments = {{32, 64}};
  plain.prompt = Cat(Cat(Q, G), Ids(8, 13));
  int cached_at_start = -1;
  {
    Gate gate(*e, [&](int step) {
      // Before any prefill of the burst is published: what admissions published.
      if (step == 1) cached_at_start = e->LookupCache(Cat(Cat(Q, G), Ids(8, 14)), "").ram;
    });
    ASSERT_NO_FATAL_FAILURE(RunBurst(*e, gate, {&leader, &seg, &seg2, &plain}));
  }
  EXPECT_EQ(seg.result.shared_tokens, 160);  // from the leader, in flight
  // Its wait for the leader's prefix is not part of gathering its segment nor of its prefill:
  // the three phases fit in prompt_ms (mutation: gather_ms from admission counts the wait).
  const CompletionResult& sr = seg.result;
  EXPECT_GT(sr.wait_ms, 0);
  EXPECT_GT(sr.gather_ms, 0);
  EXPECT_LE(sr.wait_ms + sr.gather_ms + sr.prefill_ms, sr.prompt_ms + 1e-6);
  EXPECT_EQ(leader.result.wait_ms, 0);
  EXPECT_EQ(seg.result.segment_hits, 1);
  EXPECT_EQ(seg.result.cached_tokens, 160 + 32 - seg.result.recomputed_tokens);
  EXPECT_EQ(seg2.result.segment_hits, 1);
  EXPECT_EQ(cached_at_start, 32) << "seg2's exact prefix, and only it";
  EXPECT_EQ(plain.result.cached_tokens, 32);
  EXPECT_EQ(plain.result.shared_tokens, 32);  // seg2 was computing it
  EXPECT_EQ(plain.result.tokens, Reference(e->model(), plain.prompt, 12, /*ignore_eos=*/true));
  EXPECT_EQ(leader.result.tokens, Reference(e->model(), leader.prompt, 12, /*ignore_eos=*/true));
}

}  // namespace
}  // namespace promptcache
