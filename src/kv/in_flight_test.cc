// InFlightBlocks: claims by key, skipping keys another producer holds; ready marks only by the
// holder; releasing frees every claim of one owner (a waiter then takes over).
#include "kv/in_flight.h"

#include <gtest/gtest.h>

#include <vector>

namespace promptcache {
namespace {

std::vector<BlockKey> Keys(int n, uint64_t salt) {
  std::vector<BlockKey> k;
  for (int i = 0; i < n; ++i) k.push_back({salt, uint64_t(i + 1)});
  return k;
}

TEST(InFlightBlocks, ClaimsSkipOthersKeysAndReadyIsTheHoldersToMark) {
  InFlightBlocks f;
  const auto a = Keys(4, 1);
  EXPECT_EQ(f.Claim(7, a), 4);
  EXPECT_EQ(f.Claim(7, a), 4);  // its own claims count again, once stored
  EXPECT_EQ(f.size(), 4u);
  // Another producer with an overlapping run claims only the keys nobody holds.
  std::vector<BlockKey> b = {a[2], a[3], {9, 9}};
  EXPECT_EQ(f.Claim(8, b), 1);
  EXPECT_EQ(f.Find(a[2]).owner, 7u);
  EXPECT_EQ(f.Find({9, 9}).owner, 8u);
  EXPECT_TRUE(f.ComputedByOther(a[0], 8));
  EXPECT_FALSE(f.ComputedByOther(a[0], 7));    // its own
  EXPECT_FALSE(f.ComputedByOther({5, 5}, 8));  // nobody's
  f.MarkReady(8, a[0]);                        // not its key: ignored
  EXPECT_FALSE(f.Find(a[0]).ready);
  f.MarkReady(7, a[0]);
  EXPECT_TRUE(f.Find(a[0]).ready);
  EXPECT_FALSE(f.ComputedByOther(a[0], 8));  // ready: usable
  EXPECT_TRUE(f.ComputedByOther(a[1], 8));
}

TEST(InFlightBlocks, ReleasingOneOwnerLeavesTheOthersAndLetsAWaiterTakeOver) {
  InFlightBlocks f;
  const auto a = Keys(3, 1);
  f.Claim(1, a);
  f.Claim(2, Keys(2, 2));
  f.ReleaseAll(1);
  EXPECT_EQ(f.size(), 2u);
  EXPECT_EQ(f.Find(a[1]).owner, 0u);
  EXPECT_FALSE(f.ComputedByOther(a[1], 3));
  EXPECT_EQ(f.Claim(3, a), 3);  // the waiter claims what the producer left
  EXPECT_EQ(f.Find(a[0]).owner, 3u);
  f.ReleaseAll(3);
  f.ReleaseAll(2);
  f.ReleaseAll(42);  // nothing held: nothing to do
  EXPECT_EQ(f.size(), 0u);
}

}  // namespace
}  // namespace promptcache
