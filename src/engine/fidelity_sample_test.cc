// Fidelity in production (EngineOptions::fidelity_sample) through the engine, on stories260K:
// a request that reused segments is evaluated after it has answered, and the metrics then hold
// what CompareWithFullRecompute reports for the same run computed here directly (from the logits
// the test captured itself); at segment recompute 1 (exact) agreement is 1 and the KL 0; a
// prefix hit is never sampled; N = 2 samples every second eligible request; the evaluation waits
// while any request runs (the response does not wait for it), and samples past the queue's
// bound are dropped and counted.
//
// Mutations tried (each alone, each failing the test named): Pick sampling every eligible request
// (`% 1`: EveryNthEligibleRequestIsSampled); any cached token counted as approximate, a prefix
// hit included (SampleFidelity: APlainPrefixHitIsNeverSampled); Idle() always true
// (EvaluationWaitsForServingAndDropsPastTheQueue: evaluated while B runs); the queue bound one
// larger (the same test: 5 pending, none dropped); the first token's logits not kept, so that
// each step is compared with the next step's logits
// (SampledSegmentRequestIsEvaluatedAfterItAndMatchesTheDirectComparison).
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <numeric>
#include <thread>

#include "engine/fidelity.h"
#include "engine/test_models.h"
#include "promptcache/engine.h"

namespace promptcache {
namespace {

std::unique_ptr<Engine> Make(int sample, int parallel = 4) {
  EngineOptions o;
  o.model_path = kStories;
  o.threads = 1;
  o.parallel = parallel;
  o.kv_type = KvType::kF32;
  o.segment_cache = true;
  o.segment_min_tokens = 16;
  o.fidelity_sample = sample;
  auto e = Engine::Create(o);
  if (!e.ok()) ADD_FAILURE() << e.status().message();
  PC_CHECK(e.ok());
  return std::move(e).value();
}


// BOS, a short text, the documents `docs` (each a segment), then `tail`.
CompletionRequest Rag(const Engine& e, const std::vector<int>& docs, const std::string& tail,
                      int max_tokens = 8) {
  const Tokenizer& tok = e.model().tokenizer();
  CompletionRequest r;
  r.prompt = {tok.bos()};
  for (int32_t t : tok.Encode(" Once upon a time, there was a park.", false)) r.prompt.push_back(t);
  for (int d : docs) {
    const int begin = static_cast<int>(r.prompt.size());
    for (int32_t t : tok.Encode(kStoryDocs[d], false)) r.prompt.push_back(t);
    r.segments.push_back({begin, static_cast<int>(r.prompt.size())});
  }
  for (int32_t t : tok.Encode(tail, false)) r.prompt.push_back(t);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  r.ignore_eos = true;
  return r;
}

CompletionResult Serve(Engine& e, CompletionRequest r) {
  auto h = e.Submit(std::move(r));
  PC_CHECK(h.ok());
  CompletionResult res = (*h)->Wait();
  EXPECT_TRUE(res.status.ok()) << res.status.message();
  return res;
}

// Every request the sampler took: evaluated, waiting, dropped or failed.
uint64_t Taken(const FidelityStats& f) {
  return f.Total().samples + uint64_t(f.pending) + f.dropped + f.failed;
}

// Polls until `samples` evaluations are counted (a liveness bound, not a timing).
FidelityStats AwaitSamples(Engine& e, uint64_t samples) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  FidelityStats f = e.Stats().fidelity;
  while (f.Total().samples < samples && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    f = e.Stats().fidelity;
  }
  EXPECT_EQ(f.Total().samples, samples) << "the evaluation did not come within 60 s";
  return f;
}

// The request stores docs 0 and 1 (missed: nothing approximate, not sampled); the next reuses
// them behind other text (doc 2 first) and is sampled; its tally is the direct comparison's.
void CheckSampleMatchesDirect(double recompute, FidelityTally* out) {
  auto e = Make(1);
  EXPECT_EQ(Serve(*e, Rag(*e, {0, 1}, "\nOne day,")).segment_hits, 0);
  EXPECT_EQ(Taken(e->Stats().fidelity), 0u);
  CompletionRequest r = Rag(*e, {2, 1, 0}, "\nThen", kFidelitySampleSteps + 4);
  r.segment_recompute = recompute;
  std::vector<std::vector<float>> logits;
  r.on_logits = [&](std::span<const float> l) { logits.emplace_back(l.begin(), l.end()); };
  const std::vector<int32_t> prompt = r.prompt;
  const CompletionResult res = Serve(*e, std::move(r));
  EXPECT_EQ(res.segment_hits, 2);
  const FidelityStats f = AwaitSamples(*e, 1);
  EXPECT_EQ(f.modules.samples, 0u);
  EXPECT_EQ(f.segments.samples, 1u);
  EXPECT_EQ(f.dropped + f.failed + uint64_t(f.pending), 0u);
  // The same comparison, computed here: the same tokens at 0..n-1, teacher-forced on the
  // request's first kFidelitySampleSteps tokens (greedy: each is its logits' top-1).
  ExpandedPrompt x;
  x.tokens = prompt;
  x.positions.resize(prompt.size());
  std::iota(x.positions.begin(), x.positions.end(), 0);
  x.end = static_cast<int>(prompt.size());
  const std::vector<int32_t> tokens(res.tokens.begin(), res.tokens.begin() + kFidelitySampleSteps);
  logits.resize(kFidelitySampleSteps);
  RunnerOptions ro;
  ro.threads = 1;
  ro.kv_type = KvType::kF32;
  const Result<FidelityReport> rep = CompareWithFullRecompute(e->model(), x, tokens, logits, ro);
  ASSERT_TRUE(rep.ok()) << rep.status().message();
  const FidelityTally& t = f.segments;
  EXPECT_EQ(t.steps, uint64_t(rep->steps));
  EXPECT_EQ(t.steps, uint64_t(kFidelitySampleSteps));
  EXPECT_EQ(t.agreements, uint64_t(rep->agreements));
  EXPECT_EQ(t.margin_steps, uint64_t(rep->margin_steps));
  EXPECT_EQ(t.margin_agreements, uint64_t(rep->margin_agreements));
  EXPECT_NEAR(t.first_token_kl_sum, rep->first_token_kl, 1e-9 + 1e-6 * rep->first_token_kl);
  EXPECT_EQ(t.first_token_kl_max, t.first_token_kl_sum);
  EXPECT_NEAR(t.mean_kl_sum, rep->mean_kl, 1e-9 + 1e-6 * rep->mean_kl);
  *out = t;
}

TEST(FidelitySample, SampledSegmentRequestIsEvaluatedAfterItAndMatchesTheDirectComparison) {
  FidelityTally t;
  CheckSampleMatchesDirect(0.0, &t);
  EXPECT_GT(t.first_token_kl_sum, 0);  // reused without repair: not the full computation
}

TEST(FidelitySample, AtSegmentRecomputeOneAgreementIsOneAndKlZero) {
  FidelityTally t;
  CheckSampleMatchesDirect(1.0, &t);
  EXPECT_EQ(t.agreements, t.steps);
  EXPECT_EQ(t.margin_agreements, t.margin_steps);
  EXPECT_GT(t.margin_steps, 0u);
  EXPECT_LT(t.first_token_kl_max, 1e-9);
  EXPECT_LT(t.mean_kl_sum, 1e-9);
}

TEST(FidelitySample, APlainPrefixHitIsNeverSampled) {
  auto e = Make(1);
  CompletionRequest r = Rag(*e, {0, 1}, "\nOne day,");
  r.segments.clear();  // a plain prompt: its second run is a prefix hit, exact
  EXPECT_EQ(Serve(*e, r).cached_tokens, 0);
  EXPECT_GT(Serve(*e, r).cached_tokens, 0);
  // A sample is queued before its request answers: none now means none taken.
  EXPECT_EQ(Taken(e->Stats().fidelity), 0u);
}

TEST(FidelitySample, EveryNthEligibleRequestIsSampled) {
  auto e = Make(2);
  Serve(*e, Rag(*e, {0, 1}, "\nOne day,"));  // stores; not eligible
  EXPECT_EQ(Taken(e->Stats().fidelity), 0u);
  const char* tails[] = {"\nThen", "\nLater", "\nSoon", "\nAt last"};
  const uint64_t expected[] = {1, 1, 2, 2};  // the first eligible one, then every second
  for (int i = 0; i < 4; ++i) {
    EXPECT_GT(Serve(*e, Rag(*e, {1, 0}, tails[i])).segment_hits, 0);
    EXPECT_EQ(Taken(e->Stats().fidelity), expected[i]) << i;
  }
  AwaitSamples(*e, 2);
}

// While request B runs (held in its text callback once the others have answered), sampled
// requests answer at once and their evaluations wait; the queue keeps kFidelityQueue and drops
// the rest. Once B ends, the engine is idle and the evaluations run.
TEST(FidelitySample, EvaluationWaitsForServingAndDropsPastTheQueue) {
  constexpr int kSampled = kFidelityQueue + 1;
  auto e = Make(1, kSampled + 1);
  Serve(*e, Rag(*e, {0, 1}, "\nOne day,"));
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::shared_ptr<RequestHandle>> sampled;
  bool release = false, holding = false;
  CompletionRequest b = Rag(*e, {}, "\nA long story:", 400);
  b.segments.clear();
  b.on_text = [&](const std::string&) {
    std::unique_lock<std::mutex> lock(mu);
    if (sampled.size() < size_t(kSampled)) return true;
    for (auto& h : sampled) {
      if (!h->WaitFor(0)) return true;
    }
    holding = true;
    cv.notify_all();
    cv.wait(lock, [&] { return release; });
    return false;  // B ends (cancelled)
  };
  auto hb = e->Submit(std::move(b));
  ASSERT_TRUE(hb.ok());
  {
    std::lock_guard<std::mutex> lock(mu);
    const char* tails[] = {"\nThen", "\nLater", "\nSoon", "\nAt last", "\nAfter", "\nNext"};
    for (int i = 0; i < kSampled; ++i) {
      auto h = e->Submit(Rag(*e, {1, 0}, tails[i], 4));
      ASSERT_TRUE(h.ok());
      sampled.push_back(*h);
    }
  }
  for (auto& h : sampled) {
    const CompletionResult r = h->Wait();  // answered: nothing waits for the evaluation
    EXPECT_GT(r.segment_hits, 0);
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return holding; }));
  }
  // B runs (held): for two seconds nothing is evaluated.
  for (int i = 0; i < 20; ++i) {
    const FidelityStats f = e->Stats().fidelity;
    EXPECT_EQ(f.Total().samples, 0u);
    EXPECT_EQ(f.pending, kFidelityQueue);
    EXPECT_EQ(f.dropped, uint64_t(kSampled - kFidelityQueue));
    if (f.Total().samples != 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  EXPECT_EQ((*hb)->Wait().finish_reason, "cancelled");
  const FidelityStats f = AwaitSamples(*e, kFidelityQueue);
  EXPECT_EQ(f.segments.samples, uint64_t(kFidelityQueue));
  EXPECT_EQ(f.dropped, uint64_t(kSampled - kFidelityQueue));
  EXPECT_EQ(f.pending, 0);
}

}  // namespace
}  // namespace promptcache
