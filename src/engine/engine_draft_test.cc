// Speculative decoding (EngineOptions::draft_max) changes nothing but the number of forward
// passes: on the real stories260K and on tiny fixtures of other architectures (sliding windows,
// mixture of experts), greedy and seeded sampling, with log-probabilities, stop strings and
// several choices, the output and its log-probabilities are the same floats with drafts as
// without; a prediction that is the output is confirmed token after token, a wrong one costs
// nothing but its rows; and what a drafted request leaves in the prefix cache is exact.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/engine_test_util.h"
#include "model/model.h"

namespace promptcache {
namespace {

EngineOptions Options(const std::string& model, int draft_max) {
  EngineOptions o;
  o.model_path = ModelPath(model);
  o.draft_max = draft_max;
  return o;
}

void ExpectSameLogprobs(const std::vector<TokenLogprob>& a, const std::vector<TokenLogprob>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].token, b[i].token) << i;
    EXPECT_EQ(a[i].logprob, b[i].logprob) << i;  // the same floats
    EXPECT_EQ(a[i].top, b[i].top) << i;
  }
}

void ExpectSameOutput(const CompletionResult& a, const CompletionResult& b) {
  ASSERT_TRUE(a.status.ok()) << a.status.message();
  ASSERT_TRUE(b.status.ok()) << b.status.message();
  ASSERT_EQ(a.choices.size(), b.choices.size());
  for (size_t c = 0; c < a.choices.size(); ++c) {
    SCOPED_TRACE("choice " + std::to_string(c));
    EXPECT_EQ(a.choices[c].tokens, b.choices[c].tokens);
    EXPECT_EQ(a.choices[c].text, b.choices[c].text);
    EXPECT_EQ(a.choices[c].finish_reason, b.choices[c].finish_reason);
    ExpectSameLogprobs(a.choices[c].logprobs, b.choices[c].logprobs);
  }
}

// A story that repeats itself: prompt lookup finds guesses in it.
const char* kRepeating =
    "Tom had a red ball. Tom had a red ball and a blue hat. Lily had a red ball and a blue hat. "
    "Tom and Lily had a red ball and a blue hat. They played in the park with the red ball and";

class DraftTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    plain_ = Make(Options(GetParam(), 0));
    drafted_ = Make(Options(GetParam(), 8));
    prompt_ = plain_->model().tokenizer().Encode(kRepeating, true);
  }

  std::unique_ptr<Engine> plain_, drafted_;
  std::vector<int32_t> prompt_;
};

TEST_P(DraftTest, GreedyAndSampledOutputsAreTheSame) {
  std::vector<CompletionRequest> requests;
  CompletionRequest greedy = Greedy(prompt_, 48);
  greedy.ignore_eos = true;
  greedy.logprobs = 3;
  requests.push_back(greedy);
  CompletionRequest sampled = greedy;
  sampled.sampling.temperature = 0.8f;
  sampled.sampling.seed = 42;
  sampled.sampling.top_k = 20;
  sampled.sampling.repeat_penalty = 1.1f;
  requests.push_back(sampled);
  CompletionRequest choices = sampled;
  choices.n = 3;
  choices.sampling.temperature = 0.3f;
  requests.push_back(choices);
  int drafted = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    const CompletionResult a = Complete(*plain_, requests[i]);
    const CompletionResult b = Complete(*drafted_, requests[i]);
    ExpectSameOutput(a, b);
    EXPECT_EQ(a.draft_tokens, 0);
    drafted += b.draft_tokens;
  }
  EXPECT_GT(drafted, 0) << "the repeating prompt offered no guess: the test checks nothing";
}

TEST_P(DraftTest, APredictionIsConfirmedAndAWrongOneChangesNothing) {
  CompletionRequest r = Greedy(prompt_, 40);
  r.ignore_eos = true;
  r.sampling.temperature = 0.7f;
  r.sampling.seed = 7;
  const CompletionResult expected = Complete(*plain_, r);
  ASSERT_EQ(expected.tokens.size(), 40u);

  CompletionRequest right = r;
  right.prediction = expected.tokens;
  const CompletionResult b = Complete(*drafted_, right);
  ExpectSameOutput(expected, b);
  // Each step after the first token feeds its pending token and up to 8 guesses: every guess is
  // the output's next token, so all are confirmed and about 40 / 9 steps generate the rest.
  EXPECT_EQ(b.accepted_draft_tokens, b.draft_tokens);
  EXPECT_GE(b.accepted_draft_tokens, 30);

  // An edit in the middle: the output differs from the prediction there and the prediction is
  // picked up again after it.
  CompletionRequest edited = r;
  edited.prediction = expected.tokens;
  for (int i = 15; i < 18; ++i) edited.prediction[i] = (edited.prediction[i] + 11) % 200 + 3;
  const CompletionResult c = Complete(*drafted_, edited);
  ExpectSameOutput(expected, c);
  EXPECT_LT(c.accepted_draft_tokens, c.draft_tokens);
  EXPECT_GE(c.accepted_draft_tokens, 20);

  CompletionRequest wrong = r;
  wrong.prediction.assign(expected.tokens.rbegin(), expected.tokens.rend());
  ExpectSameOutput(expected, Complete(*drafted_, wrong));
}

TEST_P(DraftTest, EndingOnARejectedGuessLeavesTheCacheExact) {
  // The request ends (a stop string) on a token its guess got wrong, with later guesses' rows
  // unread: the sequence then holds K/V of guesses that are not its tokens, from that token on,
  // which must go before the cache takes the sequence over. The token ends a block, so the
  // block is whole only if they stay; a later prompt extending the output past it reuses what
  // the cache holds, and its logits must be those of an engine that computes everything.
  CompletionRequest r = Greedy(prompt_, 48);
  r.ignore_eos = true;
  r.sampling.temperature = 0.7f;  // greedy, some fixtures repeat one token
  r.sampling.seed = 3;
  const CompletionResult full = Complete(*plain_, r);
  ASSERT_EQ(full.tokens.size(), 48u);
  const int n_prompt = static_cast<int>(prompt_.size());
  // Token m ends a block (n_prompt + m + 1 is a multiple of 16); with every guess confirmed, a
  // step keeps 9 tokens (from the first token on), and token m must not come from a step's last
  // row, so that guesses after it are in the sequence when it ends the request.
  int m = 16 + (15 - n_prompt % 16 + 16) % 16;
  if (m % 9 == 0) m += 16;
  // The shortest end of the text up to token m that occurs nowhere before: the stop string.
  CompletionRequest upto = r;
  upto.max_tokens = m + 1;
  const std::string text = Complete(*plain_, upto).text;
  upto.max_tokens = m;
  const size_t before = Complete(*plain_, upto).text.size();
  ASSERT_LT(before, text.size());
  std::string stop;
  for (size_t len = text.size() - before; len <= text.size() && stop.empty(); ++len) {
    const std::string tail = text.substr(text.size() - len);
    if (text.find(tail) == text.size() - len) stop = tail;
  }
  ASSERT_FALSE(stop.empty());
  r.stop = {stop};
  r.prediction = full.tokens;
  r.prediction[m] = full.tokens[m] == 5 ? 6 : 5;  // guess m is wrong
  const CompletionResult a = Complete(*plain_, r);
  const CompletionResult b = Complete(*drafted_, r);
  ExpectSameOutput(a, b);
  ASSERT_EQ(b.finish_reason, "stop");
  ASSERT_EQ(b.tokens.size(), size_t(m + 1));
  EXPECT_GT(b.accepted_draft_tokens, 0);
  EXPECT_LT(b.accepted_draft_tokens, b.draft_tokens);

  std::vector<int32_t> next = prompt_;
  next.insert(next.end(), full.tokens.begin(), full.tokens.begin() + m + 5);
  std::vector<std::vector<float>> cached, computed;
  CompletionRequest follow = Greedy(next, 4);
  follow.ignore_eos = true;
  follow.on_logits = [&](std::span<const float> l) { cached.emplace_back(l.begin(), l.end()); };
  const CompletionResult reused = Complete(*drafted_, follow);
  EXPECT_GE(reused.cached_tokens, n_prompt);
  EngineOptions o = Options(GetParam(), 0);
  o.prefix_cache = false;
  auto fresh = Make(o);
  follow.on_logits = [&](std::span<const float> l) { computed.emplace_back(l.begin(), l.end()); };
  Complete(*fresh, follow);
  EXPECT_EQ(cached, computed);
}

INSTANTIATE_TEST_SUITE_P(Models, DraftTest,
                         ::testing::Values("stories", "gemma3", "mixtral", "qwen3"));

TEST(Draft, ConcurrentRequestsWithGuessesDecodeAsAlone) {
  // Several sequences' guesses in one batch, beside another's prefill.
  auto plain = Make(Options("stories", 0));
  EngineOptions o = Options("stories", 8);
  o.parallel = 4;
  auto drafted = Make(o);
  const Tokenizer& tok = plain->model().tokenizer();
  std::vector<CompletionRequest> requests;
  for (int i = 0; i < 4; ++i) {
    CompletionRequest r =
        Greedy(tok.Encode(std::string(kRepeating) + std::string(i, '!'), true), 24 + 8 * i);
    r.sampling.temperature = 0.5f * i;
    r.sampling.seed = 100 + i;
    r.logprobs = 2;
    requests.push_back(r);
  }
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (const CompletionRequest& r : requests) handles.push_back(*drafted->Submit(r));
  int drafts = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const CompletionResult b = handles[i]->Wait();
    ExpectSameOutput(Complete(*plain, requests[i]), b);
    drafts += b.draft_tokens;
  }
  EXPECT_GT(drafts, 0);
  EXPECT_EQ(drafted->Stats().draft_tokens, static_cast<uint64_t>(drafts));
}

TEST(Draft, PredictionTokensOutsideTheVocabularyAreRefused) {
  auto e = Make(Options("stories", 8));
  CompletionRequest r = Greedy(e->model().tokenizer().Encode("Once", true), 4);
  r.prediction = {1, 2, 1 << 20};
  auto h = e->Submit(r);
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("prediction token id 1048576"), std::string::npos);
}

}  // namespace
}  // namespace promptcache
