// CompareWithFullRecompute's figures on stories260K, checked against a teacher-forced full run
// of our own: a "modular" run that is the full run itself agrees everywhere with KL 0, and one
// whose token at one step is the full recompute's second choice disagrees there alone, by the
// margin between the two logits.
#include "engine/fidelity.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <numeric>

namespace promptcache {
namespace {

const std::string kStories = std::string(PC_SHARED_DIR) + "/models/stories260K.gguf";

class Fidelity : public testing::Test {
 protected:
  void SetUp() override {
    auto m = Model::Load(kStories);
    ASSERT_TRUE(m.ok()) << m.status().message();
    model_ = std::move(m).value();
    prompt_.tokens = model_->tokenizer().Encode("Once upon a time, there was a little dog", true);
    prompt_.positions.resize(prompt_.tokens.size());
    std::iota(prompt_.positions.begin(), prompt_.positions.end(), 0);
    prompt_.end = static_cast<int>(prompt_.tokens.size());
    runner_.threads = 2;
  }

  // The full recompute teacher-forced on `tokens`: its logits at every step.
  std::vector<std::vector<float>> Forced(const std::vector<int32_t>& tokens) {
    FullRunOptions o;
    o.runner = runner_;
    o.forced = tokens;
    o.keep_logits = true;
    auto r = RunFull(*model_, prompt_, o);
    PC_CHECK(r.ok());
    return r->logits;
  }

  // A greedy run of 12 tokens, past any end-of-generation token, without a repeat penalty.
  FullRunOptions Greedy(bool keep_logits) const {
    FullRunOptions o;
    o.runner = runner_;
    o.max_tokens = 12;
    o.ignore_eos = true;
    o.sampling.temperature = 0;
    o.sampling.repeat_penalty = 1;
    o.keep_logits = keep_logits;
    return o;
  }

  // Steps of `logits` whose two best logits are at least kNearTieMargin apart (by a sort, not by
  // TopTwoMargin).
  static std::vector<bool> Clear(const std::vector<std::vector<float>>& logits) {
    std::vector<bool> out;
    for (std::vector<float> l : logits) {
      std::partial_sort(l.begin(), l.begin() + 2, l.end(), std::greater<float>());
      out.push_back(l[0] - l[1] >= kNearTieMargin);
    }
    return out;
  }

  std::unique_ptr<Model> model_;
  ExpandedPrompt prompt_;
  RunnerOptions runner_;
};

TEST_F(Fidelity, TheFullRunItselfAgreesEverywhere) {
  auto greedy = RunFull(*model_, prompt_, Greedy(/*keep_logits=*/true));
  ASSERT_TRUE(greedy.ok());
  auto rep = CompareWithFullRecompute(*model_, prompt_, greedy->tokens, greedy->logits, runner_);
  ASSERT_TRUE(rep.ok());
  EXPECT_EQ(rep->steps, 12);
  EXPECT_EQ(rep->agreements, 12);
  const std::vector<bool> clear = Clear(greedy->logits);
  EXPECT_EQ(rep->margin_steps, std::count(clear.begin(), clear.end(), true));
  EXPECT_EQ(rep->margin_agreements, rep->margin_steps);
  EXPECT_EQ(rep->margin_top1_agreement, 1);
  EXPECT_TRUE(rep->disagreement_margins.empty());
  EXPECT_EQ(rep->mean_kl, 0);
  EXPECT_TRUE(rep->greedy_equal);
}

TEST_F(Fidelity, ASecondChoiceIsOneDisagreementByItsMargin) {
  auto greedy = RunFull(*model_, prompt_, Greedy(/*keep_logits=*/false));
  ASSERT_TRUE(greedy.ok());
  // Step 5 takes the full recompute's second-best token; the later steps follow it greedily.
  std::vector<int32_t> tokens(greedy->tokens.begin(), greedy->tokens.begin() + 5);
  std::vector<int32_t> probe = tokens;
  probe.push_back(greedy->tokens[5]);
  const std::vector<float> at5 = Forced(probe)[5];
  std::vector<int> order(at5.size());
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + 2, order.end(),
                    [&](int a, int b) { return at5[a] > at5[b]; });
  ASSERT_EQ(order[0], greedy->tokens[5]);
  tokens.push_back(order[1]);
  while (tokens.size() < 12) {
    probe = tokens;
    probe.push_back(0);
    tokens.push_back(ArgMax(Forced(probe)[tokens.size()]));
  }
  // The modular side's logits are the full run's own, so the KL is 0 at every step.
  const std::vector<std::vector<float>> logits = Forced(tokens);
  auto rep = CompareWithFullRecompute(*model_, prompt_, tokens, logits, runner_);
  ASSERT_TRUE(rep.ok());
  EXPECT_EQ(rep->agreements, 11);
  // Margin-aware: step 5 counts only when the full recompute's top two were clearly apart.
  const std::vector<bool> clear = Clear(logits);
  const int clear_steps = static_cast<int>(std::count(clear.begin(), clear.end(), true));
  EXPECT_EQ(rep->margin_steps, clear_steps);
  EXPECT_EQ(rep->margin_agreements, clear_steps - (clear[5] ? 1 : 0));
  EXPECT_DOUBLE_EQ(rep->margin_top1_agreement, double(rep->margin_agreements) / clear_steps);
  ASSERT_EQ(rep->disagreement_margins.size(), 1u);
  EXPECT_EQ(rep->disagreement_margins[0], at5[order[0]] - at5[order[1]]);
  EXPECT_GT(rep->disagreement_margins[0], 0);
  EXPECT_EQ(rep->mean_kl, 0);
  EXPECT_FALSE(rep->greedy_equal);
}

}  // namespace
}  // namespace promptcache
