// The engine's log-probabilities as values: every reported logprob and top alternative equals a
// log-softmax written here, over the logits a fresh Runner computes for the prompt and the
// generated tokens in one batch (what `promptcache logits` writes), to 1e-4: generated tokens,
// prompt tokens (echo), n > 1 choices, and prompts whose prefix came from the cache (whose
// values the engine never recomputed). The first step is also anchored to stories260K's
// published reference logits (../shared/models/README.md).
//
// Mutation these tests caught: 0.05 nats added to the log-sum-exp in sampling/logprobs.cc (every
// case; EngineLogprobs' sign and ordering checks passed with it).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "engine/engine_impl.h"
#include "engine/engine_test_util.h"
#include "engine/runner.h"

namespace promptcache {
namespace {

const std::string kStories = std::string(PC_SHARED_DIR) + "/models/stories260K.gguf";
constexpr double kTolerance = 1e-4;

std::unique_ptr<Engine> MakeEngine(KvType kv_type = KvType::kF16) {
  EngineOptions o;
  o.model_path = kStories;
  o.kv_type = kv_type;
  o.threads = 2;
  auto e = Engine::Create(o);
  PC_CHECK(e.ok());
  return std::move(e).value();
}

// Logits of every position of `tokens`, evaluated in one batch at positions 0..n-1 by a Runner
// of its own (no engine, no cache; K/V stored as the engine's), as rows of n_vocab.
std::vector<float> AllLogits(const Engine& e, const std::vector<int32_t>& tokens) {
  const Model& m = e.model();
  RunnerOptions so;
  so.threads = 2;
  so.kv_type = e.options().kv_type;
  so.batch_size = static_cast<int>(tokens.size());
  Runner s(m, so);
  std::vector<BatchToken> batch(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    batch[i] = {tokens[i], static_cast<int32_t>(i), s.sequence(), true};
  }
  std::vector<float> logits(tokens.size() * m.config().n_vocab);
  PC_CHECK(s.EvalBatch(batch, logits.data()).ok());
  return logits;
}

// log-softmax of one row, in double: x - max - log(sum(exp(x - max))).
std::vector<double> LogSoftmax(const float* row, int n) {
  const double max = *std::max_element(row, row + n);
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += std::exp(row[i] - max);
  const double log_sum = std::log(sum);
  std::vector<double> out(n);
  for (int i = 0; i < n; ++i) out[i] = row[i] - max - log_sum;
  return out;
}

// `got` is `token`'s entry computed from `row`: its value and its alternatives (ids best first,
// values) equal the log-softmax's. Ids are compared only where the next value is not a tie.
void ExpectEntry(const TokenLogprob& got, const float* row, int n_vocab, int32_t token, int top,
                 const std::string& what) {
  const std::vector<double> want = LogSoftmax(row, n_vocab);
  EXPECT_EQ(got.token, token) << what;
  EXPECT_NEAR(got.logprob, want[token], kTolerance) << what;
  std::vector<int32_t> order(n_vocab);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return want[a] > want[b]; });
  ASSERT_EQ(got.top.size(), static_cast<size_t>(top)) << what;
  for (int k = 0; k < top; ++k) {
    EXPECT_NEAR(got.top[k].second, want[order[k]], kTolerance) << what << ", alternative " << k;
    const bool tie = std::abs(want[order[k]] - want[order[k + 1]]) < 1e-5 ||
                     (k > 0 && std::abs(want[order[k]] - want[order[k - 1]]) < 1e-5);
    if (!tie) {
      EXPECT_EQ(got.top[k].first, order[k]) << what << ", alternative " << k;
    }
  }
}

// Every generated token of `choice` (after `prompt`) against the reference.
void ExpectGenerated(const Engine& e, const std::vector<int32_t>& prompt,
                     const CompletionChoice& choice, int top, const std::string& what) {
  ASSERT_FALSE(choice.tokens.empty()) << what;
  ASSERT_EQ(choice.logprobs.size(), choice.tokens.size()) << what;
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), choice.tokens.begin(), choice.tokens.end());
  const int V = e.model().config().n_vocab;
  const std::vector<float> logits = AllLogits(e, all);
  for (size_t i = 0; i < choice.tokens.size(); ++i) {
    const float* row = &logits[(prompt.size() - 1 + i) * V];
    ExpectEntry(choice.logprobs[i], row, V, choice.tokens[i], top,
                what + ", generated token " + std::to_string(i));
  }
}

// Every prompt token from the second on (echo) against the reference.
void ExpectPrompt(const Engine& e, const std::vector<int32_t>& prompt, const CompletionResult& r,
                  int top, const std::string& what) {
  ASSERT_EQ(r.prompt_logprobs.size(), prompt.size() - 1) << what;
  const int V = e.model().config().n_vocab;
  const std::vector<float> logits = AllLogits(e, prompt);
  for (size_t i = 0; i + 1 < prompt.size(); ++i) {
    ExpectEntry(r.prompt_logprobs[i], &logits[i * V], V, prompt[i + 1], top,
                what + ", prompt token " + std::to_string(i + 1));
  }
}

CompletionRequest Request(std::vector<int32_t> prompt, int max_tokens, int logprobs) {
  CompletionRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.logprobs = logprobs;
  r.sampling.temperature = 0;
  r.ignore_eos = true;
  return r;
}

const char* kStory =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
    "park. One day, she saw a big, red ball. She wanted to play with it, but it was too high.";

// Greedy, n = 1 and n = 3, with f32 K/V as the README's reference was computed: the first step
// is its reference position (its top two logits, 17.79940 and 14.28126, differ by 3.51814: so
// do their log-probabilities).
TEST(EngineLogprobValues, GreedyGeneratedTokensAndChoices) {
  auto e = MakeEngine(KvType::kF32);
  const Model& m = e->model();
  const std::vector<int32_t> prompt = m.tokenizer().Encode("Once upon a time", true);
  ASSERT_EQ(prompt, (std::vector<int32_t>{1, 403, 407, 261, 378}));
  CompletionRequest r = Request(prompt, 12, 5);
  const CompletionResult one = Complete(*e, r);
  ASSERT_TRUE(one.status.ok()) << one.status.message();
  ExpectGenerated(*e, prompt, one.choices[0], 5, "n=1");
  const TokenLogprob& first = one.choices[0].logprobs[0];
  EXPECT_EQ(first.top[0].first, 432);
  EXPECT_EQ(first.top[1].first, 383);
  EXPECT_NEAR(first.top[0].second - first.top[1].second, 17.79940 - 14.28126, kTolerance);
  r.n = 3;
  const CompletionResult three = Complete(*e, r);
  ASSERT_EQ(three.choices.size(), 3u);
  for (int i = 0; i < 3; ++i) ExpectGenerated(*e, prompt, three.choices[i], 5, "greedy choice");
}

// Sampled choices take different tokens, each scored by the model's distribution.
TEST(EngineLogprobValues, SampledChoicesForkedFromOnePrefill) {
  auto e = MakeEngine();
  const Model& m = e->model();
  const std::vector<int32_t> prompt = m.tokenizer().Encode(kStory, true);
  CompletionRequest r = Request(prompt, 10, 3);
  r.n = 3;
  r.sampling.temperature = 1.0f;
  r.sampling.top_k = 0;
  r.sampling.top_p = 1.0f;
  r.sampling.min_p = 0.0f;
  r.sampling.seed = 11;
  const CompletionResult res = Complete(*e, r);
  ASSERT_TRUE(res.status.ok()) << res.status.message();
  ASSERT_EQ(res.choices.size(), 3u);
  EXPECT_TRUE(res.choices[1].tokens != res.choices[0].tokens ||
              res.choices[2].tokens != res.choices[0].tokens);
  for (int i = 0; i < 3; ++i) {
    ExpectGenerated(*e, prompt, res.choices[i], 3, "sampled choice " + std::to_string(i));
  }
}

// Echo: the prompt's tokens, computed, then with most of the prompt from the cache (a second
// request sharing the story, and the very same prompt again), and the tokens generated after.
TEST(EngineLogprobValues, PromptTokensComputedAndFromTheCache) {
  auto e = MakeEngine();
  const Model& m = e->model();
  int request = 0;
  for (const char* ending : {" Her mom", " The dog barked", " The dog barked"}) {
    const std::string what = std::string("request ") + std::to_string(request) + ending;
    const std::vector<int32_t> prompt = m.tokenizer().Encode(std::string(kStory) + ending, true);
    CompletionRequest r = Request(prompt, 4, 2);
    r.prompt_logprobs = true;
    const CompletionResult res = Complete(*e, r);
    ASSERT_TRUE(res.status.ok()) << res.status.message();
    if (request++ == 0) {
      EXPECT_EQ(res.cached_tokens, 0);
    } else {
      EXPECT_GE(res.cached_tokens, 48) << what;  // the story's whole blocks
    }
    ExpectPrompt(*e, prompt, res, 2, what);
    ExpectGenerated(*e, prompt, res.choices[0], 2, what);
  }
}

}  // namespace
}  // namespace promptcache
