// The drafter's guesses: where they come from (the prediction followed from its start, picked up
// again after an edit, the sequence's own repeats), their bounds, and the adaptive length.
// Whether drafting changes an output at all is the engine's test (engine_draft_test.cc).
#include "sampling/draft.h"

#include <gtest/gtest.h>

namespace promptcache {
namespace {

using Tokens = std::vector<int32_t>;

TEST(FindRepeat, FirstFromThePointElseTheLastBeforeIt) {
  const Tokens hay = {1, 2, 9, 1, 2, 8, 1, 2, 7, 1, 2};
  const Tokens key = {1, 2};
  EXPECT_EQ(FindRepeat(hay, key, 0), 0);
  EXPECT_EQ(FindRepeat(hay, key, 1), 3);
  EXPECT_EQ(FindRepeat(hay, key, 4), 6);
  // At 9 the key ends the hay: nothing follows it, so the last usable one is 6.
  EXPECT_EQ(FindRepeat(hay, key, 7), 6);
  EXPECT_EQ(FindRepeat(hay, key, hay.size()), 6);
  EXPECT_EQ(FindRepeat(hay, Tokens{2, 8}, 0), 4);
  EXPECT_EQ(FindRepeat(hay, Tokens{7, 1, 2}, 0), -1);  // only at the end
  EXPECT_EQ(FindRepeat(hay, Tokens{3}, 0), -1);
  EXPECT_EQ(FindRepeat(Tokens{1, 2}, key, 0), -1);
  EXPECT_EQ(FindRepeat(Tokens{}, key, 0), -1);
}

TEST(Drafter, FollowsThePredictionFromItsStart) {
  Drafter d({4, 2, 3}, {10, 11, 12, 13, 14, 15});
  const Tokens prompt = {1, 2, 3};
  Tokens text = prompt;
  EXPECT_EQ(d.Propose(text, 0, 100), (Tokens{10, 11, 12, 13}));
  text.push_back(10);
  EXPECT_EQ(d.Propose(text, 1, 100), (Tokens{11, 12, 13, 14}));
  EXPECT_EQ(d.Propose(text, 1, 2), (Tokens{11, 12}));  // the caller's limit
  for (int32_t t : {11, 12, 13, 14, 15}) text.push_back(t);
  // The prediction is used up; nothing of the text repeats.
  EXPECT_EQ(d.Propose(text, 6, 100), Tokens{});
}

TEST(Drafter, PicksThePredictionUpAgainAfterAnEdit) {
  // The output replaces 12 by 99, then goes on as predicted: once its last tokens (one is
  // enough) appear in the prediction, what followed them there is the guess.
  Drafter d({4, 2, 3}, {10, 11, 12, 13, 14, 15, 16});
  Tokens text = {1, 10, 11, 99};
  EXPECT_EQ(d.Propose(text, 3, 100), Tokens{});  // "11 99" is not in the prediction
  text.push_back(13);
  // "13" alone is: a prediction is trusted down to one token.
  EXPECT_EQ(d.Propose(text, 4, 100), (Tokens{14, 15, 16}));
  text.push_back(14);
  EXPECT_EQ(d.Propose(text, 5, 100), (Tokens{15, 16}));
}

TEST(Drafter, PromptLookupTakesTheLongestMostRecentRepeat) {
  Drafter d({3, 2, 3}, {});
  // "5 6" occurs twice: the most recent occurrence wins; "4 5 6" (longer) beats it.
  EXPECT_EQ(d.Propose(Tokens{5, 6, 1, 1, 5, 6, 2, 2, 5, 6}, 0, 100), (Tokens{2, 2, 5}));
  EXPECT_EQ(d.Propose(Tokens{4, 5, 6, 7, 5, 6, 8, 4, 5, 6}, 0, 100), (Tokens{7, 5, 6}));
  // A single repeated token is not trusted (ngram_min 2).
  EXPECT_EQ(d.Propose(Tokens{5, 7, 8, 5}, 0, 100), Tokens{});
  // The guesses run up to the end of the text, no further.
  EXPECT_EQ(d.Propose(Tokens{1, 2, 3, 1, 2}, 0, 100), (Tokens{3, 1, 2}));
}

// The next proposal's size, after any pause.
size_t NextSize(Drafter& d, const Tokens& text) {
  for (int i = 0; i <= kMaxDraftPause; ++i) {
    const std::vector<int32_t> p = d.Propose(text, 0, 100);
    if (!p.empty()) return p.size();
  }
  return 0;
}

TEST(Drafter, LengthAdaptsToWhatWasConfirmed) {
  Drafter d({8, 2, 2}, {});
  const Tokens text = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 1, 2};
  EXPECT_EQ(NextSize(d, text), 8u);
  d.Observe(8, 4);  // four confirmed: five next
  EXPECT_EQ(NextSize(d, text), 5u);
  d.Observe(5, 5);
  EXPECT_EQ(NextSize(d, text), 8u);  // doubled, at most max
  d.Observe(8, 0);                   // nothing confirmed: one guess next (after a pause)
  EXPECT_EQ(NextSize(d, text), 1u);
  d.Observe(1, 1);
  EXPECT_EQ(NextSize(d, text), 2u);
  d.Observe(2, 2);
  d.Observe(4, 4);
  EXPECT_EQ(NextSize(d, text), 8u);
}

TEST(Drafter, WrongGuessesPauseDraftingLongerEachTime) {
  Drafter d({8, 2, 2}, {});
  const Tokens text = {1, 2, 3, 4, 1, 2};
  const auto pause = [&] {
    int steps = 0;
    while (d.Propose(text, 0, 100).empty()) ++steps;
    return steps;
  };
  EXPECT_EQ(pause(), 0);
  d.Observe(2, 1);
  EXPECT_EQ(pause(), 0);
  d.Observe(1, 0);
  EXPECT_EQ(pause(), 1);
  d.Observe(1, 0);
  EXPECT_EQ(pause(), 3);
  d.Observe(1, 0);
  EXPECT_EQ(pause(), 7);
  d.Observe(1, 0);
  EXPECT_EQ(pause(), kMaxDraftPause);
  d.Observe(2, 2);  // confirmed guesses end the pauses
  EXPECT_EQ(pause(), 0);
  d.Observe(1, 0);
  EXPECT_EQ(pause(), 1);
}

TEST(Drafter, OffProposesNothing) {
  Drafter off;
  EXPECT_FALSE(off.enabled());
  EXPECT_EQ(off.Propose(Tokens{1, 2, 1, 2}, 0, 10), Tokens{});
  Drafter zero({0, 2, 4}, {1, 2, 3});
  EXPECT_EQ(zero.Propose(Tokens{1, 2, 1, 2}, 0, 10), Tokens{});
}

}  // namespace
}  // namespace promptcache
