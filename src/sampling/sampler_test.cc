#include "sampling/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "sampling/sampler_test_util.h"

namespace promptcache {
namespace {

SamplingParams NoTruncation(float temperature, uint64_t seed) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = seed;
  return p;
}

std::vector<float> RandomLogits(int n, uint64_t seed, float scale = 3.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> logits(n);
  for (float& l : logits) l = dist(rng);
  return logits;
}

std::vector<int> Histogram(Sampler& sampler, const std::vector<float>& logits, int draws) {
  std::vector<int> counts(logits.size(), 0);
  for (int i = 0; i < draws; ++i) {
    counts[sampler.Sample(logits.data(), static_cast<int32_t>(logits.size()), {})]++;
  }
  return counts;
}

int32_t Argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

TEST(SamplingParams, DefaultsAreValid) { EXPECT_TRUE(SamplingParams().Validate().ok()); }

TEST(SamplingParams, RejectsOutOfRangeFieldsByName) {
  struct Case {
    void (*mutate)(SamplingParams&);
    const char* field;
  };
  const Case cases[] = {
      {[](SamplingParams& p) { p.temperature = -0.1f; }, "temperature"},
      {[](SamplingParams& p) { p.temperature = NAN; }, "temperature"},
      {[](SamplingParams& p) { p.temperature = INFINITY; }, "temperature"},
      {[](SamplingParams& p) { p.top_k = -1; }, "top_k"},
      {[](SamplingParams& p) { p.top_p = 0.0f; }, "top_p"},
      {[](SamplingParams& p) { p.top_p = 1.01f; }, "top_p"},
      {[](SamplingParams& p) { p.min_p = -0.01f; }, "min_p"},
      {[](SamplingParams& p) { p.min_p = 1.5f; }, "min_p"},
      {[](SamplingParams& p) { p.repeat_penalty = 0.0f; }, "repeat_penalty"},
      {[](SamplingParams& p) { p.repeat_penalty = -1.0f; }, "repeat_penalty"},
      {[](SamplingParams& p) { p.repeat_last_n = -2; }, "repeat_last_n"},
      {[](SamplingParams& p) { p.presence_penalty = NAN; }, "presence_penalty"},
      {[](SamplingParams& p) { p.frequency_penalty = INFINITY; }, "frequency_penalty"},
  };
  for (const Case& c : cases) {
    SamplingParams p;
    c.mutate(p);
    const Status s = p.Validate();
    ASSERT_FALSE(s.ok()) << c.field;
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(s.message().rfind(c.field, 0), 0u) << s.message();
  }
  SamplingParams edge;
  edge.temperature = 0;
  edge.top_k = 0;
  edge.top_p = 1;
  edge.min_p = 1;
  edge.repeat_last_n = -1;
  edge.presence_penalty = -2;
  EXPECT_TRUE(edge.Validate().ok());
}

TEST(Sampler, GreedyPicksArgmaxWithTiesToLowestId) {
  Sampler sampler(NoTruncation(0.0f, 1));
  const std::vector<float> logits = RandomLogits(50000, 7);
  EXPECT_EQ(sampler.Sample(logits.data(), 50000, {}), Argmax(logits));
  const std::vector<float> ties = {0.5f, 2.0f, -1.0f, 2.0f, 2.0f};
  EXPECT_EQ(sampler.Sample(ties.data(), 5, {}), 1);
}

TEST(Sampler, TopKOneIsGreedyAtAnyTemperature) {
  for (float t : {0.1f, 1.0f, 5.0f, 100.0f}) {
    SamplingParams p = NoTruncation(t, 42);
    p.top_k = 1;
    Sampler sampler(p);
    for (int round = 0; round < 20; ++round) {
      const std::vector<float> logits = RandomLogits(4096, round, 0.5f);
      ASSERT_EQ(sampler.Sample(logits.data(), 4096, {}), Argmax(logits)) << t;
    }
    const std::vector<float> ties = {1.0f, 3.0f, 3.0f};
    EXPECT_EQ(sampler.Sample(ties.data(), 3, {}), 1);
  }
}

TEST(Sampler, TopKKeepsOnlyTheKBestWithTiesToLowestIds) {
  SamplingParams p = NoTruncation(1.0f, 3);
  p.top_k = 2;
  Sampler sampler(p);
  const std::vector<float> flat(100, 0.5f);
  std::set<int32_t> seen;
  for (int i = 0; i < 500; ++i) seen.insert(sampler.Sample(flat.data(), 100, {}));
  EXPECT_EQ(seen, (std::set<int32_t>{0, 1}));

  p.top_k = 5;
  Sampler sampler5(p);
  const std::vector<float> logits = RandomLogits(30000, 11, 1.0f);
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + 5, order.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  const std::set<int32_t> top5(order.begin(), order.begin() + 5);
  seen.clear();
  for (int i = 0; i < 2000; ++i) seen.insert(sampler5.Sample(logits.data(), 30000, {}));
  EXPECT_EQ(seen, top5);
}

TEST(Sampler, TopPCutsTiesAtTheLowestIds) {
  // Ten equal logits: 0.25 of the mass needs three tokens, and with ties those are ids 0-2 on
  // the unsorted whole-vocabulary path; after top-k 5, 0.25 of the mass needs two (ids 0-1).
  const std::vector<float> flat(10, 1.0f);
  for (int top_k : {0, 5}) {
    SamplingParams p = NoTruncation(1.0f, 17);
    p.top_k = top_k;
    p.top_p = 0.25f;
    Sampler sampler(p);
    std::set<int32_t> seen;
    for (int i = 0; i < 300; ++i) seen.insert(sampler.Sample(flat.data(), 10, {}));
    const std::set<int32_t> expected =
        top_k == 0 ? std::set<int32_t>{0, 1, 2} : std::set<int32_t>{0, 1};
    EXPECT_EQ(seen, expected) << top_k;
  }
  // A large flat vocabulary exercises the quickselect's tie handling.
  const std::vector<float> wide(5000, 0.0f);
  SamplingParams p = NoTruncation(1.0f, 18);
  p.top_p = 0.02f;  // 100 tokens
  Sampler sampler(p);
  for (int i = 0; i < 300; ++i) ASSERT_LT(sampler.Sample(wide.data(), 5000, {}), 100);
}

TEST(Sampler, FixedSeedGivesTheSameSequence) {
  const std::vector<float> logits = RandomLogits(32000, 5, 1.0f);
  auto run = [&](uint64_t seed) {
    SamplingParams p;  // defaults: temperature, top-k, top-p and min-p all active
    p.temperature = 1.5f;
    p.seed = seed;
    Sampler sampler(p);
    std::vector<int32_t> out;
    for (int i = 0; i < 200; ++i) out.push_back(sampler.Sample(logits.data(), 32000, out));
    return out;
  };
  const std::vector<int32_t> a = run(1234);
  EXPECT_EQ(a, run(1234));
  EXPECT_NE(a, run(1235));
  EXPECT_GT(std::set<int32_t>(a.begin(), a.end()).size(), 3u);  // really sampling

  Sampler random_seed(NoTruncation(1.0f, 0));
  EXPECT_NE(random_seed.seed(), 0u);
  Sampler replay(NoTruncation(1.0f, random_seed.seed()));
  for (int i = 0; i < 50; ++i) {
    ASSERT_EQ(random_seed.Sample(logits.data(), 32000, {}),
              replay.Sample(logits.data(), 32000, {}));
  }
}

TEST(Sampler, TopPKeepsTheSmallestNucleus) {
  // Probabilities 0.5, 0.3, 0.15, 0.05: 0.5 < 0.7 <= 0.8, so top_p 0.7 keeps {0, 1}.
  SamplingParams p = NoTruncation(1.0f, 9);
  p.top_p = 0.7f;
  Sampler sampler(p);
  const std::vector<int> counts = Histogram(sampler, LogitsOf({0.5, 0.3, 0.15, 0.05}), 4000);
  EXPECT_GT(counts[0], 0);
  EXPECT_GT(counts[1], 0);
  EXPECT_EQ(counts[2], 0);
  EXPECT_EQ(counts[3], 0);
  // Renormalized over the nucleus: 0.5 / 0.8 = 0.625.
  EXPECT_NEAR(counts[0] / 4000.0, 0.625, 0.04);
}

TEST(Sampler, TopPOverAWholeLargeVocabulary) {
  // No top-k, a flat-ish distribution: the nucleus holds hundreds of tokens, so the chunked
  // partial sort has to grow several times.
  const int n = 20000;
  const std::vector<float> logits = RandomLogits(n, 21, 2.0f);
  SamplingParams p = NoTruncation(1.0f, 77);
  p.top_p = 0.5f;
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  std::vector<double> w(n);
  double total = 0;
  for (int i = 0; i < n; ++i) total += w[i] = std::exp(double{logits[i]} - logits[order[0]]);
  std::set<int32_t> nucleus;
  double cumulative = 0;
  for (int32_t id : order) {
    nucleus.insert(id);
    cumulative += w[id];
    if (cumulative >= 0.5 * total) break;
  }
  ASSERT_GT(nucleus.size(), 300u);
  Sampler sampler(p);
  std::set<int32_t> seen;
  for (int i = 0; i < 1000; ++i) {
    const int32_t id = sampler.Sample(logits.data(), n, {});
    ASSERT_TRUE(nucleus.count(id)) << id;
    seen.insert(id);
  }
  EXPECT_GT(seen.size(), nucleus.size() / 4);
}

TEST(Sampler, MinPDropsTokensBelowAFractionOfTheTopOne) {
  // Relative to the top probability 0.4: 0.07 / 0.4 = 0.175 stays, 0.03 / 0.4 = 0.075 goes.
  const std::vector<float> logits = LogitsOf({0.4, 0.3, 0.2, 0.07, 0.03});
  SamplingParams p = NoTruncation(1.0f, 13);
  p.min_p = 0.1f;
  Sampler sampler(p);
  std::vector<int> counts = Histogram(sampler, logits, 5000);
  for (int i = 0; i < 4; ++i) EXPECT_GT(counts[i], 0) << i;
  EXPECT_EQ(counts[4], 0);
  // min-p applies to the temperature-scaled distribution: at temperature 2 the ratio becomes
  // sqrt(0.075) = 0.27, above the cut.
  p.temperature = 2.0f;
  Sampler hot(p);
  counts = Histogram(hot, logits, 5000);
  EXPECT_GT(counts[4], 0);
  // min_p = 1 keeps only the top token.
  p.min_p = 1.0f;
  Sampler strict(p);
  counts = Histogram(strict, logits, 500);
  EXPECT_EQ(counts[0], 500);
}

TEST(Sampler, RepetitionPenaltyChangesTheArgmax) {
  SamplingParams p = NoTruncation(0.0f, 1);
  p.repeat_penalty = 1.1f;
  p.repeat_last_n = 2;
  Sampler sampler(p);
  // Positive logits are divided: 2.0 / 1.1 = 1.82 < 1.9.
  const std::vector<float> pos = {2.0f, 1.9f, -3.0f, -3.0f};
  const std::vector<int32_t> recent = {0};
  EXPECT_EQ(sampler.Sample(pos.data(), 4, recent), 1);
  // Negative logits are multiplied: -1.0 * 1.1 = -1.1 < -1.05.
  const std::vector<float> neg = {-1.0f, -1.05f, -3.0f, -3.0f};
  EXPECT_EQ(sampler.Sample(neg.data(), 4, recent), 1);
  // Only the last repeat_last_n tokens count: token 0 is three tokens back.
  const std::vector<int32_t> old = {0, 3, 2};
  EXPECT_EQ(sampler.Sample(pos.data(), 4, old), 0);
  p.repeat_last_n = -1;  // whole history
  Sampler whole(p);
  EXPECT_EQ(whole.Sample(pos.data(), 4, old), 1);
  p.repeat_last_n = 0;  // penalties off
  Sampler off(p);
  EXPECT_EQ(off.Sample(pos.data(), 4, recent), 0);
}

TEST(Sampler, PresenceAndFrequencyPenaltiesSubtract) {
  const std::vector<float> logits = {1.0f, 0.5f, 0.0f};
  const std::vector<int32_t> history = {0, 2, 0, 0};
  SamplingParams p = NoTruncation(0.0f, 1);
  p.frequency_penalty = 0.2f;  // 1.0 - 3 * 0.2 = 0.4 < 0.5
  EXPECT_EQ(Sampler(p).Sample(logits.data(), 3, history), 1);
  p.frequency_penalty = 0.1f;  // 0.7 > 0.5
  EXPECT_EQ(Sampler(p).Sample(logits.data(), 3, history), 0);
  p.frequency_penalty = 0;
  p.presence_penalty = 0.6f;  // once per distinct token: 0.4 < 0.5
  EXPECT_EQ(Sampler(p).Sample(logits.data(), 3, history), 1);
  p.presence_penalty = -1.2f;  // negative encourages repetition: token 2 rises to 1.2 > 1.0
  const std::vector<int32_t> only_two = {2};
  EXPECT_EQ(Sampler(p).Sample(logits.data(), 3, only_two), 2);
}

// Frequencies of `draws` samples against `expected` probabilities: every count within 5
// standard deviations, and Pearson's chi-square below a generous bound. Deterministic, since the
// seed is fixed; a wrong temperature or a truncation bug moves counts by many sigmas.
void ExpectMatches(const std::vector<int>& counts, const std::vector<double>& expected, int draws) {
  double chi2 = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    const double mean = expected[i] * draws;
    const double sigma = std::sqrt(draws * expected[i] * (1 - expected[i]));
    EXPECT_NEAR(counts[i], mean, 5 * sigma + 1e-9) << "token " << i;
    if (mean > 0) chi2 += (counts[i] - mean) * (counts[i] - mean) / mean;
  }
  // 99.99th percentile of chi-square with <= 15 degrees of freedom is about 42.
  EXPECT_LT(chi2, 42.0);
}

std::vector<double> Softmax(const std::vector<float>& logits, double temperature, int keep) {
  std::vector<double> p(logits.size(), 0.0);
  std::vector<float> sorted = logits;
  std::sort(sorted.rbegin(), sorted.rend());
  const float cut = sorted[keep - 1];
  double sum = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] >= cut) sum += p[i] = std::exp(logits[i] / temperature);
  }
  for (double& v : p) v /= sum;
  return p;
}

TEST(Sampler, EmpiricalDistributionMatchesSoftmax) {
  const std::vector<float> logits = {1.0f, 0.2f, -0.5f, 2.0f, 0.0f, -2.0f, 1.5f, 0.7f, -1.0f, 0.3f};
  const int draws = 200000;
  for (float t : {1.0f, 0.6f, 1.7f}) {
    Sampler sampler(NoTruncation(t, 2024));
    ExpectMatches(Histogram(sampler, logits, draws), Softmax(logits, t, 10), draws);
  }
  // The top-k path (sorted candidates) renormalizes over the k best.
  SamplingParams p = NoTruncation(1.0f, 99);
  p.top_k = 4;
  Sampler topk(p);
  ExpectMatches(Histogram(topk, logits, draws), Softmax(logits, 1.0, 4), draws);
}

TEST(SamplingParams, RejectsBadLogitBiasByName) {
  SamplingParams p;
  p.logit_bias = {{3, 100.0f}, {0, -100.0f}};
  EXPECT_TRUE(p.Validate().ok());
  const auto rejects = [](std::vector<LogitBias> bias, const std::string& what) {
    SamplingParams q;
    q.logit_bias = std::move(bias);
    const Status s = q.Validate();
    ASSERT_FALSE(s.ok()) << what;
    EXPECT_EQ(s.message().rfind("logit_bias", 0), 0u) << s.message();
    EXPECT_NE(s.message().find(what), std::string::npos) << s.message();
  };
  rejects({{3, 100.5f}}, "[-100, 100]");
  rejects({{3, -101.0f}}, "[-100, 100]");
  rejects({{3, NAN}}, "[-100, 100]");
  rejects({{-1, 1.0f}}, "negative");
  rejects({{7, 1.0f}, {2, 0.0f}, {7, -1.0f}}, "token 7 twice");
  std::vector<LogitBias> many(kMaxLogitBias + 1);
  for (size_t i = 0; i < many.size(); ++i) many[i] = {static_cast<int32_t>(i), 1.0f};
  rejects(many, "at most 1024");
  many.pop_back();
  p.logit_bias = many;
  EXPECT_TRUE(p.Validate().ok());
}

TEST(Sampler, LogitBiasMovesTheGreedyChoice) {
  const std::vector<float> logits = RandomLogits(5000, 17, 1.0f);
  const int32_t best = Argmax(logits);
  std::vector<float> without_best = logits;
  without_best[best] = -INFINITY;
  const int32_t second = Argmax(without_best);
  SamplingParams p = NoTruncation(0.0f, 1);
  // Lifting the runner-up just past the best flips the argmax; just short of it does not.
  const float gap = logits[best] - logits[second];
  p.logit_bias = {{second, gap * 1.01f + 1e-4f}};
  EXPECT_EQ(Sampler(p).Sample(logits.data(), 5000, {}), second);
  p.logit_bias = {{second, gap * 0.99f}};
  EXPECT_EQ(Sampler(p).Sample(logits.data(), 5000, {}), best);
  // -100 bans the argmax; 100 forces the least likely token, at any temperature.
  p.logit_bias = {{best, -100.0f}};
  EXPECT_EQ(Sampler(p).Sample(logits.data(), 5000, {}), second);
  const int32_t worst =
      static_cast<int32_t>(std::min_element(logits.begin(), logits.end()) - logits.begin());
  SamplingParams hot = NoTruncation(1.0f, 5);
  hot.logit_bias = {{worst, 100.0f}};
  Sampler forced(hot);
  for (int i = 0; i < 200; ++i) ASSERT_EQ(forced.Sample(logits.data(), 5000, {}), worst);
  // The bias comes before the penalties: a repeat penalty then divides the biased logit.
  const std::vector<float> two = {1.0f, 0.5f};
  SamplingParams r = NoTruncation(0.0f, 1);
  r.logit_bias = {{1, 2.5f}};  // 3.0 / 4 = 0.75 < 1.0 (a penalty first: 0.125 + 2.5 > 1.0)
  r.repeat_penalty = 4.0f;
  const std::vector<int32_t> history = {1};
  EXPECT_EQ(Sampler(r).Sample(two.data(), 2, history), 0);
  // The caller's logits stay as they were.
  EXPECT_EQ(Argmax(logits), best);
}

TEST(Sampler, SeededDrawsFollowTheBiasedDistribution) {
  const std::vector<float> logits = LogitsOf({0.4, 0.3, 0.2, 0.1});
  SamplingParams p = NoTruncation(1.0f, 77);
  // log(3) on token 3 and -log(2) on token 0: weights 0.2, 0.3, 0.2, 0.3.
  p.logit_bias = {{3, static_cast<float>(std::log(3.0))}, {0, static_cast<float>(-std::log(2.0))}};
  const int draws = 100000;
  Sampler sampler(p);
  ExpectMatches(Histogram(sampler, logits, draws), {0.2, 0.3, 0.2, 0.3}, draws);
  // At temperature 0.5 the biased logits are what gets sharpened: weights squared.
  p.temperature = 0.5f;
  Sampler sharp(p);
  ExpectMatches(Histogram(sharp, logits, draws), {4 / 26.0, 9 / 26.0, 4 / 26.0, 9 / 26.0}, draws);
}

TEST(Sampler, NanAndInfiniteLogits) {
  const float inf = INFINITY;
  const std::vector<float> logits = {NAN, -inf, 0.5f, NAN, 0.25f};
  Sampler sampler(NoTruncation(1.0f, 5));
  std::vector<int> counts = Histogram(sampler, logits, 2000);
  EXPECT_EQ(counts[0] + counts[1] + counts[3], 0);
  EXPECT_GT(counts[2], 0);
  EXPECT_GT(counts[4], 0);
  Sampler greedy(NoTruncation(0.0f, 5));
  EXPECT_EQ(greedy.Sample(logits.data(), 5, {}), 2);
  const std::vector<float> forced = {0.0f, inf, 3.0f};
  EXPECT_EQ(sampler.Sample(forced.data(), 3, {}), 1);
}

TEST(Sampler, DefaultParamsOnALargeVocabularyStayInThePenalizedTopK) {
  const int n = 128000;
  const std::vector<float> logits = RandomLogits(n, 3, 1.0f);
  SamplingParams p;
  p.seed = 8;
  p.repeat_penalty = 1.3f;
  p.repeat_last_n = 16;
  Sampler sampler(p);
  std::vector<int32_t> history;
  std::set<int32_t> distinct;
  for (int step = 0; step < 100; ++step) {
    // The 40 best after the repetition penalty on the last 16 tokens.
    std::vector<float> penalized = logits;
    const size_t from = history.size() > 16 ? history.size() - 16 : 0;
    const std::set<int32_t> recent(history.begin() + static_cast<ptrdiff_t>(from), history.end());
    for (int32_t id : recent) {
      penalized[id] = penalized[id] <= 0 ? penalized[id] * 1.3f : penalized[id] / 1.3f;
    }
    std::vector<int32_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + 40, order.end(),
                      [&](int32_t a, int32_t b) { return penalized[a] > penalized[b]; });
    const std::set<int32_t> top40(order.begin(), order.begin() + 40);
    const int32_t id = sampler.Sample(logits.data(), n, history);
    ASSERT_TRUE(top40.count(id)) << "step " << step << " token " << id;
    history.push_back(id);
    distinct.insert(id);
  }
  EXPECT_GT(distinct.size(), 20u);  // the penalty keeps pushing recent tokens out
}

}  // namespace
}  // namespace promptcache
