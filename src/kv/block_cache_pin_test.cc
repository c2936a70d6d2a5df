// The block cache's pins: counted and timed pins, their quotas and lapses, and the operator's
// ListPins, Unpin and forced Drop.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>

#include "kv/block_cache.h"
#include "kv/block_cache_test_util.h"

namespace promptcache::block_cache_test {
namespace {

TEST(BlockCache, PinnedPrefixSurvivesEvictionUntilUnpinned) {
  const auto a = Tokens(8);
  RamCache rc(Options(0), {a});
  EXPECT_EQ(rc.cache.PinPrefix(a, true), 8);
  rc.cache.Maintain();
  EXPECT_EQ(rc.cache.Stats().ram_blocks, 2u);
  EXPECT_EQ(rc.cache.Stats().pinned_blocks, 2u);
  rc.cache.PinPrefix(a, false);
  rc.cache.Maintain();
  EXPECT_EQ(rc.cache.Stats().ram_blocks, 0u);
  EXPECT_EQ(rc.pool.blocks_in_use(), 0);
}

// Timed pins (cache_control TTLs) on a clock the test moves: pinned until the TTL passes,
// renewed by each hit, and apart from counted pins.
TEST(BlockCache, TimedPinsHoldUntilTheirTtlAndHitsRenewThem) {
  RamCache rc(Options(0));  // no RAM budget: unpinned blocks go
  auto now = BlockCache::Clock::time_point() + std::chrono::hours(1);
  rc.cache.SetClockForTesting([&now] { return now; });
  const auto a = Tokens(8), b = Tokens(12);
  CacheFinished(&rc.cache, &rc.pool, b);
  EXPECT_EQ(rc.cache.PinPrefixFor(a, 300), 8);
  rc.cache.Maintain();
  EXPECT_EQ(rc.cache.Stats().ram_blocks, 2u);  // the third block was not pinned
  EXPECT_EQ(rc.cache.Stats().pinned_blocks, 2u);
  EXPECT_TRUE(rc.cache.Drop("").ok());
  EXPECT_EQ(rc.cache.Stats().ram_blocks, 2u);

  now += std::chrono::seconds(200);
  {
    KvSequence hit(&rc.pool);
    EXPECT_EQ(rc.cache.LookupPrefix(b, 11, &hit), 8);  // renews the pin: 300 s from now
  }
  now += std::chrono::seconds(200);  // 400 s after pinning, 200 after the hit
  rc.cache.Maintain();
  EXPECT_EQ(rc.cache.Stats().ram_blocks, 2u);
  now += std::chrono::seconds(101);
  rc.cache.Maintain();
  EXPECT_EQ(rc.cache.Stats().ram_blocks, 0u);
  EXPECT_EQ(rc.pool.blocks_in_use(), 0);

  // A counted pin outlives a timed one; the timed one outlives an unpin.
  CacheFinished(&rc.cache, &rc.pool, a);
  EXPECT_EQ(rc.cache.PinPrefix(a, true), 8);
  EXPECT_EQ(rc.cache.PinPrefixFor(a, 10), 8);
  now += std::chrono::seconds(11);
  rc.cache.Maintain();
  EXPECT_EQ(rc.cache.Stats().pinned_blocks, 2u);
  EXPECT_EQ(rc.cache.PinPrefixFor(a, 3600), 8);
  rc.cache.PinPrefix(a, false);
  now += std::chrono::seconds(3599);
  rc.cache.Maintain();
  EXPECT_EQ(rc.cache.Stats().ram_blocks, 2u);
  now += std::chrono::seconds(2);
  rc.cache.Maintain();
  EXPECT_EQ(rc.cache.Stats().ram_blocks, 0u);
}

// Pins are bounded: a pin stops at the last block that fits the total quota, or its owner's,
// and says so; blocks it holds already cost nothing. (Mutations tried: ignoring the owner's
// quota, and charging blocks pinned already, each fail a line below.)
TEST(BlockCache, PinQuotasStopAPinAtTheLastBlockThatFits) {
  BlockCacheOptions o = Options(100);
  const size_t block = Layout().bytes_per_block();
  o.pin_bytes = 3 * block;
  o.owner_pin_bytes = 1 * block;
  RamCache rc(o);
  const auto a = Tokens(20), b = Tokens(12, 1), c = Tokens(8, 2);
  for (const auto* t : {&a, &b, &c}) {
    KvSequence seq = Computed(&rc.pool, *t);
    rc.cache.InsertPrefix(*t, seq);
  }
  bool limited = false;
  EXPECT_EQ(rc.cache.PinPrefix(a, true, {}, "", &limited), 12);  // 3 of its 5 blocks
  EXPECT_TRUE(limited);
  EXPECT_EQ(rc.cache.Stats().pinned_bytes, 3 * block);
  EXPECT_EQ(rc.cache.PinPrefix(a, true, {}, "", &limited), 12);  // the same 3, renewed
  EXPECT_TRUE(limited);
  EXPECT_EQ(rc.cache.PinPrefix(Tokens(8), true, {}, "", &limited), 8);  // held already: free
  EXPECT_FALSE(limited);
  EXPECT_EQ(rc.cache.Stats().pins_limited, 2u);
  // The total is full: nothing more for anyone.
  EXPECT_EQ(rc.cache.PinPrefixFor(b, 300, {}, "alice", &limited), 0);
  EXPECT_TRUE(limited);
  // Room again (unpinned): a named owner gets its own quota's worth, one block.
  rc.cache.PinPrefix(a, false);
  rc.cache.PinPrefix(a, false);
  rc.cache.PinPrefix(Tokens(8), false);
  EXPECT_EQ(rc.cache.Stats().pinned_bytes, 0u);
  EXPECT_EQ(rc.cache.PinPrefixFor(b, 300, {}, "alice", &limited), 4);
  EXPECT_TRUE(limited);
  EXPECT_EQ(rc.cache.PinPrefix(c, true, {}, "bob", &limited), 4);
  EXPECT_TRUE(limited);
  EXPECT_EQ(rc.cache.PinPrefix(a, true, {}, "", &limited), 4);  // the default: the total's rest
  EXPECT_TRUE(limited);
  EXPECT_EQ(rc.cache.Stats().pinned_bytes, 3 * block);
  // Maintain keeps the pinned blocks and evicts the rest down to a budget of 3 blocks.
  rc.cache.SetRamBudget(3 * block);
  rc.cache.Maintain();
  EXPECT_EQ(rc.cache.Stats().ram_bytes, 3 * block);
}

// Every pin lapses: counted pins max_pin_seconds after they were last set or hit, timed pins
// at their TTL cut to it.
TEST(BlockCache, PinsLapseAfterTheMaximumAndHitsRenewThem) {
  BlockCacheOptions o = Options(0);  // no budget: what is not pinned goes
  o.max_pin_seconds = 100;
  RamCache rc(o);
  auto now = BlockCache::Clock::time_point() + std::chrono::hours(1);
  rc.cache.SetClockForTesting([&now] { return now; });
  const auto a = Tokens(8), b = Tokens(8, 1);
  for (const auto* t : {&a, &b}) {
    KvSequence seq = Computed(&rc.pool, *t);
    rc.cache.InsertPrefix(*t, seq);
  }
  EXPECT_EQ(rc.cache.PinPrefix(a, true), 8);
  EXPECT_EQ(rc.cache.PinPrefixFor(b, 3600), 8);  // cut to 100 s
  now += std::chrono::seconds(60);
  {
    KvSequence hit(&rc.pool);
    EXPECT_EQ(rc.cache.LookupPrefix(a, 8, &hit), 8);  // renews a's counted pin: 100 s from now
  }
  now += std::chrono::seconds(50);  // 110 s after pinning
  rc.cache.Maintain();
  EXPECT_EQ(rc.cache.Stats().ram_blocks, 2u);  // b's timed pin lapsed at 100 s; a holds
  now += std::chrono::seconds(51);
  rc.cache.Maintain();
  EXPECT_EQ(rc.cache.Stats().ram_blocks, 0u);
  EXPECT_EQ(rc.pool.blocks_in_use(), 0);
}

// An operator sees every pin (whose, how long, how much) and lifts them, one chain or all; a
// forced drop removes pinned entries, which a plain one refuses.
TEST(BlockCache, ListPinsUnpinAndForcedDrop) {
  BlockCacheOptions o = Options(100);
  o.max_pin_seconds = 100;
  RamCache rc(o);
  auto now = BlockCache::Clock::time_point() + std::chrono::hours(1);
  rc.cache.SetClockForTesting([&now] { return now; });
  const BlockKey ns{7, 9};
  const auto a = Tokens(12), b = Tokens(8, 1);
  {
    KvSequence seq = Computed(&rc.pool, a);
    rc.cache.InsertPrefix(a, seq, ns);
    KvSequence other = Computed(&rc.pool, b);
    rc.cache.InsertPrefix(b, other);
  }
  EXPECT_EQ(rc.cache.PinPrefix(a, true, ns, "alice"), 12);
  EXPECT_EQ(rc.cache.PinPrefixFor(b, 30), 8);
  now += std::chrono::seconds(10);
  std::vector<PinnedPrefixInfo> pins = rc.cache.ListPins();
  ASSERT_EQ(pins.size(), 2u);
  std::sort(pins.begin(), pins.end(),
            [](const auto& x, const auto& y) { return x.tokens > y.tokens; });
  EXPECT_EQ(pins[0].owner, "alice");
  EXPECT_EQ(pins[0].ns, ns);
  EXPECT_EQ(pins[0].tokens, 12);
  EXPECT_EQ(pins[0].bytes, 3 * Layout().bytes_per_block());
  EXPECT_EQ(pins[0].counted, 1);
  EXPECT_DOUBLE_EQ(pins[0].expires_in_seconds, 90);
  EXPECT_EQ(pins[1].owner, "");
  EXPECT_EQ(pins[1].tokens, 8);
  EXPECT_EQ(pins[1].counted, 0);
  EXPECT_DOUBLE_EQ(pins[1].expires_in_seconds, 20);

  // A pinned chain: a plain drop refuses, a forced one removes it.
  EXPECT_EQ(rc.cache.Drop(pins[1].key.Hex()).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(rc.cache.Drop(rc.cache.ChainKeys(b, {})[0].Hex(), /*force=*/true).ok());
  EXPECT_EQ(rc.cache.Stats().ram_blocks, 3u);
  // Unpinning a's middle block lifts its whole chain; the blocks stay cached.
  const std::vector<BlockKey> keys = rc.cache.ChainKeys(a, ns);
  Result<int> n = rc.cache.Unpin(keys[1].Hex());
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 3);
  EXPECT_TRUE(rc.cache.ListPins().empty());
  EXPECT_EQ(rc.cache.Stats().ram_blocks, 3u);
  EXPECT_EQ(rc.cache.Unpin("nonsense").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(rc.cache.Unpin(std::string(32, '0')).status().code(), StatusCode::kNotFound);
  // Everything pinned, then lifted at once; a forced drop of all empties the cache.
  EXPECT_EQ(rc.cache.PinPrefix(a, true, ns), 12);
  EXPECT_EQ(*rc.cache.Unpin(""), 3);
  EXPECT_EQ(rc.cache.PinPrefix(a, true, ns), 12);
  EXPECT_TRUE(rc.cache.Drop("").ok());
  EXPECT_EQ(rc.cache.Stats().ram_blocks, 3u);
  EXPECT_TRUE(rc.cache.Drop("", /*force=*/true).ok());
  EXPECT_EQ(rc.cache.Stats().ram_blocks, 0u);
}

}  // namespace
}  // namespace promptcache::block_cache_test
