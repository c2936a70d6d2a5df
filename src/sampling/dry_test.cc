// DRY: the breakers found in a real vocabulary, and the penalty on a repeat by hand (its
// numbers against llama.cpp are SamplerReference.MatchesLlamaCpp's DRY cases).
#include "sampling/dry.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tokenizer/tokenizer_test_util.h"

namespace promptcache {
namespace {

const std::string kGpt2 = std::string(PC_SHARED_DIR) + "/tokenizers/ggml-vocab-gpt-2.gguf";

TEST(DryBreakers, EveryTokenHoldingTheStringAndEveryTokenStartingIt) {
  LoadedTokenizer l = LoadTokenizer(kGpt2);
  ASSERT_TRUE(l.tok);
  const Tokenizer& tok = *l.tok;
  const std::vector<std::vector<int32_t>> seqs = DryBreakerSequences(tok, {":", "User:"});
  // ":" alone: every token whose text holds a colon, each a sequence of one.
  int colons = 0;
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    colons += tok.TokenBytes(id, true).find(':') != std::string::npos;
  }
  ASSERT_GT(colons, 10);
  int singles = 0;
  for (const auto& s : seqs) {
    if (s.size() == 1 && tok.TokenBytes(s[0], true).find(':') != std::string::npos) ++singles;
  }
  EXPECT_GE(singles, colons);  // "User:" adds the tokens holding all of it again
  // "User:": the token "User" followed by the tokens of ":" is one of its sequences, and every
  // multi-token sequence's text ends in "User:".
  const std::vector<int32_t> user = tok.EncodeContinuation("User");
  ASSERT_EQ(user.size(), 1u);
  const std::vector<int32_t> colon = tok.EncodeContinuation(":");
  std::vector<int32_t> expected = user;
  expected.insert(expected.end(), colon.begin(), colon.end());
  EXPECT_NE(std::find(seqs.begin(), seqs.end(), expected), seqs.end());
  for (const auto& s : seqs) {
    if (s.size() < 2) continue;
    const std::string text = tok.Decode(s, true);
    EXPECT_TRUE(text.size() >= 5 && text.compare(text.size() - 5, 5, "User:") == 0) << text;
  }
  EXPECT_TRUE(DryBreakerSequences(tok, {""}).empty());
}

SamplingParams Dry(float multiplier, float base, int allowed) {
  SamplingParams p;
  p.dry_multiplier = multiplier;
  p.dry_base = base;
  p.dry_allowed_length = allowed;
  return p;
}

TEST(DryPenalty, TheTokenThatWouldContinueTheLongestRepeat) {
  // "5 6 7 8 9 | 1 2 3 4 | 5 6 7": 8 would make "5 6 7" a repeat of 4. Breaker: token 0.
  SamplingParams p = Dry(1.0f, 2.0f, 2);
  p.dry_breakers = {{0}};
  std::vector<int32_t> history = {5, 6, 7, 8, 9, 1, 2, 3, 4, 5, 6, 7};
  std::vector<float> logits(10, 0.0f);
  DryState state;
  ApplyDry(p, history, logits.data(), 10, &state);
  for (int t = 0; t < 10; ++t) {
    EXPECT_FLOAT_EQ(logits[t], t == 8 ? -2.0f : 0.0f) << t;  // 1 * 2^(3 - 2)
  }
  // "3 0 5 6 7 8 9 3 0 5 6 7": without breakers 8 would continue a repeat of 5, "3 0 5 6 7";
  // with 0 a breaker the repeat counts only the 3 tokens after it.
  history = {3, 0, 5, 6, 7, 8, 9, 3, 0, 5, 6, 7};
  std::fill(logits.begin(), logits.end(), 0.0f);
  DryState fresh;
  ApplyDry(p, history, logits.data(), 10, &fresh);
  EXPECT_FLOAT_EQ(logits[8], -2.0f);  // 2^(3 - 2)
  p.dry_breakers.clear();
  std::fill(logits.begin(), logits.end(), 0.0f);
  DryState unbroken;
  ApplyDry(p, history, logits.data(), 10, &unbroken);
  EXPECT_FLOAT_EQ(logits[8], -8.0f);  // 2^(5 - 2)
  // The window: with the last 5 tokens only, "5 6 7 8" is out of sight.
  p.dry_penalty_last_n = 5;
  history = {5, 6, 7, 8, 9, 1, 2, 3, 4, 5, 6, 7};
  std::fill(logits.begin(), logits.end(), 0.0f);
  DryState windowed;
  ApplyDry(p, history, logits.data(), 10, &windowed);
  EXPECT_FLOAT_EQ(logits[8], 0.0f);
}

}  // namespace
}  // namespace promptcache
