// The block cache in RAM: prefix hits in whole blocks, eviction, granularity, TTLs, drops, and
// sliding-window entries. Pins: block_cache_pin_test.cc; the disk tier: block_cache_disk_test.cc.

#include "kv/block_cache.h"

#include <gtest/gtest.h>

#include "kv/block_cache_test_util.h"

namespace promptcache::block_cache_test {
namespace {

TEST(BlockCache, LongestPrefixInWholeBlocksSharedNotCopied) {
  const auto a = Tokens(10);
  RamCache rc(Options(100), {a});
  EXPECT_EQ(rc.cache.Stats().ram_blocks, 2u);  // 2 full blocks; the partial third is not cached
  auto b = Tokens(14);                         // same first 10 tokens, longer
  KvSequence hit(&rc.pool);
  EXPECT_EQ(rc.cache.LookupPrefix(b, b.size() - 1, &hit), 8);
  EXPECT_EQ(hit.size(), 8);
  EXPECT_EQ(KAt(hit, 7), 107.5f);
  EXPECT_EQ(hit.Position(7), 7);
  EXPECT_EQ(rc.pool.RefCount(hit.spans()[0].block), 2);  // the cache's and this sequence's
  // A prompt differing inside the second block reuses only the first.
  auto c = Tokens(12);
  c[5] = 9;
  KvSequence partial(&rc.pool);
  EXPECT_EQ(rc.cache.LookupPrefix(c, c.size() - 1, &partial), 4);
  // The last token is always left to compute.
  KvSequence capped(&rc.pool);
  EXPECT_EQ(rc.cache.LookupPrefix(Tokens(8), 7, &capped), 4);
  EXPECT_EQ(rc.cache.Stats().hits, 3u);
}

// A shifted span's keys are not those of its positions: a sequence holding one is cached only
// up to it.
TEST(BlockCache, PrefixStopsAtAShiftedSpan) {
  RamCache rc(Options(100));
  const auto a = Tokens(12);
  KvSequence computed = Computed(&rc.pool, a);
  KvSequence moved(&rc.pool);
  moved.AppendSegment(computed, 0, 4);
  moved.AppendSegment(computed, 4, 12, /*shift=*/0);
  KvSequence shifted(&rc.pool);
  shifted.AppendSegment(computed, 0, 4);
  shifted.AppendSegment(computed, 4, 12, /*shift=*/3);
  rc.cache.InsertPrefix(a, shifted);
  EXPECT_EQ(rc.cache.Stats().ram_blocks, 1u);
  rc.cache.InsertPrefix(a, moved);
  EXPECT_EQ(rc.cache.Stats().ram_blocks, 3u);
}

TEST(BlockCache, EvictsLeastRecentlyUsedLeavesFirstAndNeverBlocksInUse) {
  RamCache rc(Options(3));
  const auto a = Tokens(12, 1), b = Tokens(8, 2);
  KvSequence in_use = Computed(&rc.pool, b);
  rc.cache.InsertPrefix(b, in_use);       // 2 blocks, still held by a running sequence
  CacheFinished(&rc.cache, &rc.pool, a);  // 3 blocks
  rc.cache.Maintain();
  // Over budget by 2: a's leaves go (its third block, then its second); b's are in use.
  EXPECT_EQ(rc.cache.Stats().ram_blocks, 3u);
  EXPECT_EQ(rc.cache.Stats().evictions, 2u);
  KvSequence probe(&rc.pool);
  EXPECT_EQ(rc.cache.LookupPrefix(a, 12, &probe), 4);
  KvSequence probe_b(&rc.pool);
  EXPECT_EQ(rc.cache.LookupPrefix(b, 8, &probe_b), 8);
}

TEST(BlockCache, MinTokensAndGranularity) {
  BlockCacheOptions o = Options(100);
  o.min_tokens = 10;
  o.granularity = 8;
  RamCache rc(o);
  CacheFinished(&rc.cache, &rc.pool, Tokens(8));  // shorter than min_tokens: not cached
  EXPECT_EQ(rc.cache.Stats().ram_blocks, 0u);
  CacheFinished(&rc.cache, &rc.pool, Tokens(13));
  KvSequence hit(&rc.pool);
  EXPECT_EQ(rc.cache.LookupPrefix(Tokens(20), 19, &hit), 8);  // 12 cached, reused in steps of 8
}

TEST(BlockCache, TtlExpiresIdleEntries) {
  BlockCacheOptions o = Options(100);
  o.ttl_seconds = 1e-9;
  RamCache rc(o, {Tokens(8)});
  rc.cache.Maintain();
  EXPECT_EQ(rc.cache.Stats().ram_blocks, 0u);
  EXPECT_EQ(rc.cache.Stats().expirations, 2u);
}

TEST(BlockCache, DropRemovesAnEntryAndItsContinuations) {
  const auto a = Tokens(12);
  RamCache rc(Options(100), {a});
  auto list = rc.cache.List();
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].tokens, 12);
  EXPECT_FALSE(rc.cache.Drop("00000000000000000000000000000000").ok());
  EXPECT_FALSE(rc.cache.Drop("nonsense").ok());
  ASSERT_TRUE(rc.cache.Drop("").ok());
  EXPECT_EQ(rc.cache.Stats().ram_blocks, 0u);
  EXPECT_EQ(rc.pool.blocks_in_use(), 0);
}

TEST(BlockCacheSliding, HitsHandOutGlobalReferencesBeforeTheWindow) {
  const auto a = Tokens(16);
  RamCache rc(Options(100), {a}, SlidingLayout());
  KvSequence hit(&rc.pool);
  ASSERT_EQ(rc.cache.LookupPrefix(a, 15, &hit), 12);
  // A query at 12 sees positions 7..11: blocks 4-7 and 8-11 come whole, block 0-3 global.
  EXPECT_FALSE(hit.spans()[0].sliding);
  EXPECT_TRUE(hit.spans()[1].sliding);
  EXPECT_TRUE(hit.spans()[2].sliding);
  EXPECT_EQ(rc.pool.SlidingRefCount(hit.spans()[0].block), 1);  // the cache's
  EXPECT_EQ(KAt(hit, 1), 101.5f);
}

// A long request registers its prefix as it trims (the engine does), so the cache keeps those
// blocks whole while the sequence keeps only their global parts; over budget, the cache then
// frees the sliding parts only it holds, oldest first, and a hit whose window lost one is
// shortened to one that is whole, never served with missing K/V.
TEST(BlockCacheSliding, SlidingPartsGoOnTheirOwnAndHitsWalkBack) {
  BlockPool pool(SlidingLayout(), 0, false);
  const KvLayout& l = pool.layout();
  BlockCacheOptions o;
  o.ram_bytes = 100 * l.bytes_per_block();
  BlockCache cache(&pool, "fp", o, nullptr);
  const auto a = Tokens(24);
  KvSequence running = Computed(&pool, a);
  cache.InsertPrefix(std::span(a).first(20), running);  // blocks 0..4
  Trim(&running, 24);                                   // releases blocks 0..3 (positions < 19)
  EXPECT_EQ(pool.sliding_parts_in_use(), 6);            // the cache holds them
  EXPECT_EQ(cache.Stats().ram_bytes, 5 * l.bytes_per_block());
  // Room for the global parts and three sliding parts: the oldest two go, blocks 0 and 1.
  cache.SetRamBudget(5 * l.global_bytes_per_block() + 3 * l.sliding_bytes_per_block());
  cache.Maintain();
  EXPECT_EQ(cache.Stats().sliding_evictions, 2u);
  EXPECT_EQ(cache.Stats().evictions, 0u);  // the running sequence holds every global part
  EXPECT_EQ(cache.Stats().ram_blocks, 5u);
  EXPECT_EQ(pool.sliding_parts_in_use(), 4);
  KvSequence hit(&pool);
  EXPECT_EQ(cache.LookupPrefix(a, 23, &hit), 20);  // window blocks 3, 4: whole
  hit.Clear();
  EXPECT_EQ(cache.LookupPrefix(a, 8, &hit), 0);  // a hit of 8 needs blocks 0 and 1
  EXPECT_EQ(cache.Stats().window_misses, 1u);
  // Once the sequence is gone, whole blocks go too, leaves first, oldest first.
  running.Clear();
  cache.SetRamBudget(0);
  cache.Maintain();
  EXPECT_EQ(pool.blocks_in_use(), 0);
  EXPECT_EQ(pool.sliding_parts_in_use(), 0);
}

// A sequence that trimmed before its prefix was registered (or whose entries were evicted
// meanwhile) leaves global-only entries; a later complete copy of the same tokens replaces them.
TEST(BlockCacheSliding, GlobalOnlyEntriesAreCompletedByALaterCopy) {
  RamCache rc(Options(100), {}, SlidingLayout());
  const auto a = Tokens(16);
  {
    KvSequence seq = Computed(&rc.pool, a);
    Trim(&seq, 16);  // blocks 0 and 1 (positions < 10)
    rc.cache.InsertPrefix(a, seq);
  }
  EXPECT_EQ(rc.cache.Stats().ram_bytes, 4 * rc.pool.layout().global_bytes_per_block() +
                                            2 * rc.pool.layout().sliding_bytes_per_block());
  KvSequence hit(&rc.pool);
  EXPECT_EQ(rc.cache.LookupPrefix(a, 15, &hit), 0);  // a hit of 4 or 8 needs block 0 or 1 whole
  CacheFinished(&rc.cache, &rc.pool, a);
  EXPECT_EQ(rc.cache.Stats().ram_bytes, 4 * rc.pool.layout().bytes_per_block());
  EXPECT_EQ(rc.cache.LookupPrefix(a, 15, &hit), 12);
  EXPECT_EQ(KAt(hit, 9), 109.5f);
}

}  // namespace
}  // namespace promptcache::block_cache_test
