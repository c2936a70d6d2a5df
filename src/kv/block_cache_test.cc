#include "kv/block_cache.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "core/hash.h"
#include "kv/testing_blocks.h"

namespace promptcache {
namespace {

namespace fs = std::filesystem;

using testing_blocks::Computed;
using testing_blocks::Layout;
using testing_blocks::Tokens;

float KAt(KvSequence& seq, int i) { return reinterpret_cast<float*>(seq.SlotK(i, 1))[3]; }

BlockCacheOptions Options(size_t ram_blocks) {
  BlockCacheOptions o;
  o.ram_bytes = ram_blocks * Layout().bytes_per_block();
  return o;
}

TEST(BlockCache, LongestPrefixInWholeBlocksSharedNotCopied) {
  BlockPool pool(Layout(), 0, false);
  BlockCache cache(&pool, "fp", Options(100), nullptr);
  const auto a = Tokens(10);
  {
    KvSequence seq = Computed(&pool, a);
    cache.InsertPrefix(a, seq);
  }
  EXPECT_EQ(cache.Stats().ram_blocks, 2u);  // 2 full blocks; the partial third is not cached
  auto b = Tokens(14);                      // same first 10 tokens, longer
  KvSequence hit(&pool);
  EXPECT_EQ(cache.LookupPrefix(b, b.size() - 1, &hit), 8);
  EXPECT_EQ(hit.size(), 8);
  EXPECT_EQ(KAt(hit, 7), 107.5f);
  EXPECT_EQ(hit.Position(7), 7);
  EXPECT_EQ(pool.RefCount(hit.spans()[0].block), 2);  // the cache's and this sequence's
  // A prompt differing inside the second block reuses only the first.
  auto c = Tokens(12);
  c[5] = 9;
  KvSequence partial(&pool);
  EXPECT_EQ(cache.LookupPrefix(c, c.size() - 1, &partial), 4);
  // The last token is always left to compute.
  KvSequence capped(&pool);
  EXPECT_EQ(cache.LookupPrefix(Tokens(8), 7, &capped), 4);
  EXPECT_EQ(cache.Stats().hits, 3u);
}

// A shifted span's keys are not those of its positions: a sequence holding one is cached only
// up to it.
TEST(BlockCache, PrefixStopsAtAShiftedSpan) {
  BlockPool pool(Layout(), 0, false);
  BlockCache cache(&pool, "fp", Options(100), nullptr);
  const auto a = Tokens(12);
  KvSequence computed = Computed(&pool, a);
  KvSequence moved(&pool);
  moved.AppendSegment(computed, 0, 4);
  moved.AppendSegment(computed, 4, 12, /*shift=*/0);
  KvSequence shifted(&pool);
  shifted.AppendSegment(computed, 0, 4);
  shifted.AppendSegment(computed, 4, 12, /*shift=*/3);
  cache.InsertPrefix(a, shifted);
  EXPECT_EQ(cache.Stats().ram_blocks, 1u);
  cache.InsertPrefix(a, moved);
  EXPECT_EQ(cache.Stats().ram_blocks, 3u);
}

TEST(BlockCache, EvictsLeastRecentlyUsedLeavesFirstAndNeverBlocksInUse) {
  BlockPool pool(Layout(), 0, false);
  BlockCache cache(&pool, "fp", Options(3), nullptr);
  const auto a = Tokens(12, 1), b = Tokens(8, 2);
  KvSequence in_use = Computed(&pool, b);
  cache.InsertPrefix(b, in_use);  // 2 blocks, still held by a running sequence
  {
    KvSequence seq = Computed(&pool, a);
    cache.InsertPrefix(a, seq);  // 3 blocks
  }
  cache.Maintain();
  // Over budget by 2: a's leaves go (its third block, then its second); b's are in use.
  EXPECT_EQ(cache.Stats().ram_blocks, 3u);
  EXPECT_EQ(cache.Stats().evictions, 2u);
  KvSequence probe(&pool);
  EXPECT_EQ(cache.LookupPrefix(a, 12, &probe), 4);
  KvSequence probe_b(&pool);
  EXPECT_EQ(cache.LookupPrefix(b, 8, &probe_b), 8);
}

TEST(BlockCache, PinnedPrefixSurvivesEvictionUntilUnpinned) {
  BlockPool pool(Layout(), 0, false);
  BlockCache cache(&pool, "fp", Options(0), nullptr);
  const auto a = Tokens(8);
  {
    KvSequence seq = Computed(&pool, a);
    cache.InsertPrefix(a, seq);
  }
  EXPECT_EQ(cache.PinPrefix(a, true), 8);
  cache.Maintain();
  EXPECT_EQ(cache.Stats().ram_blocks, 2u);
  EXPECT_EQ(cache.Stats().pinned_blocks, 2u);
  cache.PinPrefix(a, false);
  cache.Maintain();
  EXPECT_EQ(cache.Stats().ram_blocks, 0u);
  EXPECT_EQ(pool.blocks_in_use(), 0);
}

TEST(BlockCache, MinTokensAndGranularity) {
  BlockPool pool(Layout(), 0, false);
  BlockCacheOptions o = Options(100);
  o.min_tokens = 10;
  o.granularity = 8;
  BlockCache cache(&pool, "fp", o, nullptr);
  {
    KvSequence seq = Computed(&pool, Tokens(8));
    cache.InsertPrefix(Tokens(8), seq);  // shorter than min_tokens: not cached
  }
  EXPECT_EQ(cache.Stats().ram_blocks, 0u);
  {
    KvSequence seq = Computed(&pool, Tokens(13));
    cache.InsertPrefix(Tokens(13), seq);
  }
  KvSequence hit(&pool);
  EXPECT_EQ(cache.LookupPrefix(Tokens(20), 19, &hit), 8);  // 12 cached, reused in steps of 8
}

TEST(BlockCache, TtlExpiresIdleEntries) {
  BlockPool pool(Layout(), 0, false);
  BlockCacheOptions o = Options(100);
  o.ttl_seconds = 1e-9;
  BlockCache cache(&pool, "fp", o, nullptr);
  {
    KvSequence seq = Computed(&pool, Tokens(8));
    cache.InsertPrefix(Tokens(8), seq);
  }
  cache.Maintain();
  EXPECT_EQ(cache.Stats().ram_blocks, 0u);
  EXPECT_EQ(cache.Stats().expirations, 2u);
}

// Timed pins (cache_control TTLs) on a clock the test moves: pinned until the TTL passes,
// renewed by each hit, and apart from counted pins.
TEST(BlockCache, TimedPinsHoldUntilTheirTtlAndHitsRenewThem) {
  BlockPool pool(Layout(), 0, false);
  BlockCache cache(&pool, "fp", Options(0), nullptr);  // no RAM budget: unpinned blocks go
  auto now = BlockCache::Clock::time_point() + std::chrono::hours(1);
  cache.SetClockForTesting([&now] { return now; });
  const auto a = Tokens(8), b = Tokens(12);
  {
    KvSequence seq = Computed(&pool, b);
    cache.InsertPrefix(b, seq);
  }
  EXPECT_EQ(cache.PinPrefixFor(a, 300), 8);
  cache.Maintain();
  EXPECT_EQ(cache.Stats().ram_blocks, 2u);  // the third block was not pinned
  EXPECT_EQ(cache.Stats().pinned_blocks, 2u);
  EXPECT_TRUE(cache.Drop("").ok());
  EXPECT_EQ(cache.Stats().ram_blocks, 2u);

  now += std::chrono::seconds(200);
  {
    KvSequence hit(&pool);
    EXPECT_EQ(cache.LookupPrefix(b, 11, &hit), 8);  // renews the pin: 300 s from now
  }
  now += std::chrono::seconds(200);  // 400 s after pinning, 200 after the hit
  cache.Maintain();
  EXPECT_EQ(cache.Stats().ram_blocks, 2u);
  now += std::chrono::seconds(101);
  cache.Maintain();
  EXPECT_EQ(cache.Stats().ram_blocks, 0u);
  EXPECT_EQ(pool.blocks_in_use(), 0);

  // A counted pin outlives a timed one; the timed one outlives an unpin.
  {
    KvSequence seq = Computed(&pool, a);
    cache.InsertPrefix(a, seq);
  }
  EXPECT_EQ(cache.PinPrefix(a, true), 8);
  EXPECT_EQ(cache.PinPrefixFor(a, 10), 8);
  now += std::chrono::seconds(11);
  cache.Maintain();
  EXPECT_EQ(cache.Stats().pinned_blocks, 2u);
  EXPECT_EQ(cache.PinPrefixFor(a, 3600), 8);
  cache.PinPrefix(a, false);
  now += std::chrono::seconds(3599);
  cache.Maintain();
  EXPECT_EQ(cache.Stats().ram_blocks, 2u);
  now += std::chrono::seconds(2);
  cache.Maintain();
  EXPECT_EQ(cache.Stats().ram_blocks, 0u);
}

// Pins are bounded: a pin stops at the last block that fits the total quota, or its owner's,
// and says so; blocks it holds already cost nothing. (Mutations tried: ignoring the owner's
// quota, and charging blocks pinned already, each fail a line below.)
TEST(BlockCache, PinQuotasStopAPinAtTheLastBlockThatFits) {
  BlockPool pool(Layout(), 0, false);
  BlockCacheOptions o = Options(100);
  const size_t block = Layout().bytes_per_block();
  o.pin_bytes = 3 * block;
  o.owner_pin_bytes = 1 * block;
  BlockCache cache(&pool, "fp", o, nullptr);
  const auto a = Tokens(20), b = Tokens(12, 1), c = Tokens(8, 2);
  for (const auto* t : {&a, &b, &c}) {
    KvSequence seq = Computed(&pool, *t);
    cache.InsertPrefix(*t, seq);
  }
  bool limited = false;
  EXPECT_EQ(cache.PinPrefix(a, true, {}, "", &limited), 12);  // 3 of its 5 blocks
  EXPECT_TRUE(limited);
  EXPECT_EQ(cache.Stats().pinned_bytes, 3 * block);
  EXPECT_EQ(cache.PinPrefix(a, true, {}, "", &limited), 12);  // the same 3, renewed
  EXPECT_TRUE(limited);
  EXPECT_EQ(cache.PinPrefix(Tokens(8), true, {}, "", &limited), 8);  // held already: free
  EXPECT_FALSE(limited);
  EXPECT_EQ(cache.Stats().pins_limited, 2u);
  // The total is full: nothing more for anyone.
  EXPECT_EQ(cache.PinPrefixFor(b, 300, {}, "alice", &limited), 0);
  EXPECT_TRUE(limited);
  // Room again (unpinned): a named owner gets its own quota's worth, one block.
  cache.PinPrefix(a, false);
  cache.PinPrefix(a, false);
  cache.PinPrefix(Tokens(8), false);
  EXPECT_EQ(cache.Stats().pinned_bytes, 0u);
  EXPECT_EQ(cache.PinPrefixFor(b, 300, {}, "alice", &limited), 4);
  EXPECT_TRUE(limited);
  EXPECT_EQ(cache.PinPrefix(c, true, {}, "bob", &limited), 4);
  EXPECT_TRUE(limited);
  EXPECT_EQ(cache.PinPrefix(a, true, {}, "", &limited), 4);  // the default: the total's rest
  EXPECT_TRUE(limited);
  EXPECT_EQ(cache.Stats().pinned_bytes, 3 * block);
  // Maintain keeps the pinned blocks and evicts the rest down to a budget of 3 blocks.
  cache.SetRamBudget(3 * block);
  cache.Maintain();
  EXPECT_EQ(cache.Stats().ram_bytes, 3 * block);
}

// Every pin lapses: counted pins max_pin_seconds after they were last set or hit, timed pins
// at their TTL cut to it.
TEST(BlockCache, PinsLapseAfterTheMaximumAndHitsRenewThem) {
  BlockPool pool(Layout(), 0, false);
  BlockCacheOptions o = Options(0);  // no budget: what is not pinned goes
  o.max_pin_seconds = 100;
  BlockCache cache(&pool, "fp", o, nullptr);
  auto now = BlockCache::Clock::time_point() + std::chrono::hours(1);
  cache.SetClockForTesting([&now] { return now; });
  const auto a = Tokens(8), b = Tokens(8, 1);
  for (const auto* t : {&a, &b}) {
    KvSequence seq = Computed(&pool, *t);
    cache.InsertPrefix(*t, seq);
  }
  EXPECT_EQ(cache.PinPrefix(a, true), 8);
  EXPECT_EQ(cache.PinPrefixFor(b, 3600), 8);  // cut to 100 s
  now += std::chrono::seconds(60);
  {
    KvSequence hit(&pool);
    EXPECT_EQ(cache.LookupPrefix(a, 8, &hit), 8);  // renews a's counted pin: 100 s from now
  }
  now += std::chrono::seconds(50);  // 110 s after pinning
  cache.Maintain();
  EXPECT_EQ(cache.Stats().ram_blocks, 2u);  // b's timed pin lapsed at 100 s; a holds
  now += std::chrono::seconds(51);
  cache.Maintain();
  EXPECT_EQ(cache.Stats().ram_blocks, 0u);
  EXPECT_EQ(pool.blocks_in_use(), 0);
}

// An operator sees every pin (whose, how long, how much) and lifts them, one chain or all; a
// forced drop removes pinned entries, which a plain one refuses.
TEST(BlockCache, ListPinsUnpinAndForcedDrop) {
  BlockPool pool(Layout(), 0, false);
  BlockCacheOptions o = Options(100);
  o.max_pin_seconds = 100;
  BlockCache cache(&pool, "fp", o, nullptr);
  auto now = BlockCache::Clock::time_point() + std::chrono::hours(1);
  cache.SetClockForTesting([&now] { return now; });
  const BlockKey ns{7, 9};
  const auto a = Tokens(12), b = Tokens(8, 1);
  {
    KvSequence seq = Computed(&pool, a);
    cache.InsertPrefix(a, seq, ns);
    KvSequence other = Computed(&pool, b);
    cache.InsertPrefix(b, other);
  }
  EXPECT_EQ(cache.PinPrefix(a, true, ns, "alice"), 12);
  EXPECT_EQ(cache.PinPrefixFor(b, 30), 8);
  now += std::chrono::seconds(10);
  std::vector<PinnedPrefixInfo> pins = cache.ListPins();
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
  EXPECT_EQ(cache.Drop(pins[1].key.Hex()).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(cache.Drop(cache.ChainKeys(b, {})[0].Hex(), /*force=*/true).ok());
  EXPECT_EQ(cache.Stats().ram_blocks, 3u);
  // Unpinning a's middle block lifts its whole chain; the blocks stay cached.
  const std::vector<BlockKey> keys = cache.ChainKeys(a, ns);
  Result<int> n = cache.Unpin(keys[1].Hex());
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 3);
  EXPECT_TRUE(cache.ListPins().empty());
  EXPECT_EQ(cache.Stats().ram_blocks, 3u);
  EXPECT_EQ(cache.Unpin("nonsense").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(cache.Unpin(std::string(32, '0')).status().code(), StatusCode::kNotFound);
  // Everything pinned, then lifted at once; a forced drop of all empties the cache.
  EXPECT_EQ(cache.PinPrefix(a, true, ns), 12);
  EXPECT_EQ(*cache.Unpin(""), 3);
  EXPECT_EQ(cache.PinPrefix(a, true, ns), 12);
  EXPECT_TRUE(cache.Drop("").ok());
  EXPECT_EQ(cache.Stats().ram_blocks, 3u);
  EXPECT_TRUE(cache.Drop("", /*force=*/true).ok());
  EXPECT_EQ(cache.Stats().ram_blocks, 0u);
}

class DiskTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("pc_disk_tier_" + std::to_string(getpid()));
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<BlockCache> Open(BlockPool* pool, const std::string& fp = "fingerprint-a",
                                   size_t disk_bytes = 1 << 20) {
    auto disk = DiskTier::Open(dir_.string(), fp, Layout(), disk_bytes);
    PC_CHECK(disk.ok());
    return std::make_unique<BlockCache>(pool, fp, Options(0), std::move(disk).value());
  }
  // Caches the prefix `a` and writes it to the disk tier, in a process of its own (as it were).
  void SaveToDisk(const std::vector<int32_t>& a) {
    BlockPool pool(Layout(), 0, false);
    auto cache = Open(&pool);
    KvSequence seq = Computed(&pool, a);
    cache->InsertPrefix(a, seq);
    seq.Clear();
    ASSERT_TRUE(cache->SaveAll().ok());
  }
  // The block files on disk, sorted.
  std::vector<fs::path> BlockFiles() const {
    std::vector<fs::path> files;
    for (const auto& e : fs::recursive_directory_iterator(dir_)) {
      if (e.is_regular_file() && e.path().extension() == ".kvb") files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    return files;
  }
  fs::path dir_;
};

TEST_F(DiskTierTest, EvictedBlocksComeBackAfterRestart) {
  const auto a = Tokens(12);
  {
    BlockPool pool(Layout(), 0, false);
    auto cache = Open(&pool);
    KvSequence seq = Computed(&pool, a);
    cache->InsertPrefix(a, seq);
    seq.Clear();
    cache->Maintain();  // budget 0: everything spills to disk
    EXPECT_EQ(cache->Stats().ram_blocks, 0u);
    EXPECT_EQ(cache->Stats().disk_writes, 3u);
  }
  BlockPool pool(Layout(), 0, false);
  auto cache = Open(&pool);  // a new process, same directory
  EXPECT_EQ(cache->Stats().disk_files, 3u);
  KvSequence hit(&pool);
  EXPECT_EQ(cache->LookupPrefix(a, 12, &hit), 12);
  EXPECT_EQ(cache->Stats().disk_loads, 3u);
  for (int i = 0; i < 12; ++i) {
    EXPECT_EQ(KAt(hit, i), a[i] + 0.5f);
    EXPECT_EQ(hit.Position(i), i);
  }
}

// --cache-disk: beyond its byte budget the oldest files go. RAM spills leaves first, so the
// prefix's first blocks are written last and are what stays.
TEST_F(DiskTierTest, OldestFilesGoBeyondTheByteBudget) {
  size_t file_bytes = 0;
  {
    BlockPool pool(Layout(), 0, false);
    auto cache = Open(&pool);
    KvSequence seq = Computed(&pool, Tokens(4));
    cache->InsertPrefix(Tokens(4), seq);
    ASSERT_TRUE(cache->SaveAll().ok());
    file_bytes = cache->Stats().disk_bytes;
  }
  fs::remove_all(dir_);
  ASSERT_GT(file_bytes, 0u);
  const auto a = Tokens(20);
  BlockPool pool(Layout(), 0, false);
  auto cache = Open(&pool, "fingerprint-a", file_bytes * 2 + file_bytes / 2);
  KvSequence seq = Computed(&pool, a);
  cache->InsertPrefix(a, seq);
  seq.Clear();
  cache->Maintain();  // RAM budget 0: all five blocks spill to disk, two fit
  EXPECT_EQ(cache->Stats().disk_writes, 5u);
  EXPECT_EQ(cache->Stats().disk_files, 2u);
  EXPECT_LE(cache->Stats().disk_bytes, file_bytes * 2 + file_bytes / 2);
  KvSequence hit(&pool);
  EXPECT_EQ(cache->LookupPrefix(a, 20, &hit), 8);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(KAt(hit, i), a[i] + 0.5f);
}

// The prefix tree lists blocks held by the disk tier only, from their headers: chained by
// parent with depths, tokens as written; a block whose parent file is gone starts a chain.
TEST_F(DiskTierTest, DiskOnlyBlocksAreListedWithParentsAndDepths) {
  const auto a = Tokens(12);
  SaveToDisk(a);
  BlockPool pool(Layout(), 0, false);
  auto cache = Open(&pool);
  std::vector<CachedBlockInfo> blocks = cache->ListBlocks();
  ASSERT_EQ(blocks.size(), 3u);
  std::sort(blocks.begin(), blocks.end(),
            [](const auto& x, const auto& y) { return x.depth < y.depth; });
  for (int i = 0; i < 3; ++i) {
    EXPECT_FALSE(blocks[i].in_ram);
    EXPECT_TRUE(blocks[i].on_disk);
    EXPECT_EQ(blocks[i].depth, 4 * i);
    EXPECT_EQ(blocks[i].tokens, std::vector<int32_t>(a.begin() + 4 * i, a.begin() + 4 * i + 4));
    if (i > 0) EXPECT_EQ(blocks[i].parent, blocks[i - 1].key);
  }
  EXPECT_TRUE(blocks[0].parent.empty());
  EXPECT_EQ(cache->ListBlocks(/*max_disk_only=*/1).size(), 1u);

  // The first block's file goes: the second now starts a chain of its own, the third follows.
  cache->disk()->Remove(blocks[0].key);
  std::vector<CachedBlockInfo> rest = cache->ListBlocks();
  ASSERT_EQ(rest.size(), 2u);
  std::sort(rest.begin(), rest.end(),
            [](const auto& x, const auto& y) { return x.depth < y.depth; });
  EXPECT_EQ(rest[0].key, blocks[1].key);
  EXPECT_TRUE(rest[0].parent.empty());
  EXPECT_EQ(rest[0].depth, 0);
  EXPECT_EQ(rest[1].parent, blocks[1].key);
  EXPECT_EQ(rest[1].depth, 4);

  // A hit loads the chain into RAM: listed once, in RAM.
  cache.reset();
  SaveToDisk(a);  // the first block back
  auto reopened = Open(&pool);
  KvSequence hit(&pool);
  EXPECT_EQ(reopened->LookupPrefix(a, 12, &hit), 12);
  for (const CachedBlockInfo& b : reopened->ListBlocks()) EXPECT_TRUE(b.in_ram);
  EXPECT_EQ(reopened->ListBlocks().size(), 3u);
}

TEST_F(DiskTierTest, CorruptTruncatedOrForeignFilesAreSkipped) {
  const auto a = Tokens(8);
  ASSERT_NO_FATAL_FAILURE(SaveToDisk(a));
  const std::vector<fs::path> files = BlockFiles();
  ASSERT_EQ(files.size(), 2u);
  // Flip one byte of data in every file: the checksum catches it.
  for (const auto& f : files) {
    std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(-3, std::ios::end);
    io.put('\x7f');
  }
  {
    BlockPool pool(Layout(), 0, false);
    auto cache = Open(&pool);
    KvSequence miss(&pool);
    EXPECT_EQ(cache->LookupPrefix(a, 8, &miss), 0);
    EXPECT_GE(cache->Stats().disk_errors, 1u);
  }
  // Another model's directory is another namespace: nothing is found there.
  BlockPool pool(Layout(), 0, false);
  auto other = Open(&pool, "fingerprint-b");
  KvSequence miss(&pool);
  EXPECT_EQ(other->LookupPrefix(a, 8, &miss), 0);
}

TEST_F(DiskTierTest, TruncatedFileIsAMiss) {
  const auto a = Tokens(4);
  ASSERT_NO_FATAL_FAILURE(SaveToDisk(a));
  for (const fs::path& f : BlockFiles()) fs::resize_file(f, fs::file_size(f) / 2);
  BlockPool pool(Layout(), 0, false);
  auto cache = Open(&pool);
  KvSequence miss(&pool);
  EXPECT_EQ(cache->LookupPrefix(a, 4, &miss), 0);
  EXPECT_EQ(cache->Stats().disk_files, 0u);  // the bad file was removed
}

// Something else where a block file should be: a directory or a FIFO named like one at start-up
// is ignored (start-up used to fail on the directory), and a FIFO that replaces an indexed file
// is a miss (reading it used to block forever).
TEST_F(DiskTierTest, DirectoriesAndFifosNamedLikeBlockFilesAreNotRead) {
  const auto a = Tokens(8);
  ASSERT_NO_FATAL_FAILURE(SaveToDisk(a));
  const std::vector<fs::path> files = BlockFiles();
  ASSERT_EQ(files.size(), 2u);
  const fs::path tier = files[0].parent_path();
  fs::create_directory(tier / (std::string(32, 'a') + ".kvb"));
  ASSERT_EQ(mkfifo((tier / (std::string(32, 'b') + ".kvb")).c_str(), 0600), 0);
  BlockPool pool(Layout(), 0, false);
  auto cache = Open(&pool);  // starts
  EXPECT_EQ(cache->Stats().disk_files, 2u);
  EXPECT_EQ(cache->Stats().disk_errors, 2u);  // the directory and the FIFO, skipped and counted
  // Both real files become FIFOs after start-up: the lookup misses instead of hanging.
  for (const fs::path& f : files) {
    fs::remove(f);
    ASSERT_EQ(mkfifo(f.c_str(), 0600), 0);
  }
  KvSequence miss(&pool);
  EXPECT_EQ(cache->LookupPrefix(a, 8, &miss), 0);
  EXPECT_GE(cache->Stats().disk_errors, 1u);
}

// Files of format 1 (before sliding parts: no flags ahead of the tokens) still load, as complete
// blocks.
TEST_F(DiskTierTest, FormatOneFilesStillLoad) {
  const auto a = Tokens(8);
  ASSERT_NO_FATAL_FAILURE(SaveToDisk(a));
  // The header: magic[8], version, fingerprint[32], 4 keys, 5 layout fields, count,
  // payload_bytes, checksum (packed), then the payload.
  constexpr size_t kVersionAt = 8, kPayloadBytesAt = 100, kChecksumAt = 108, kHeader = 116;
  for (const fs::path& f : BlockFiles()) {
    std::ifstream in(f, std::ios::binary);
    std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    in.close();
    ASSERT_GT(data.size(), kHeader + 4);
    std::string payload = data.substr(kHeader + 4);  // without the flags
    const uint32_t version = 1;
    const uint64_t bytes = payload.size(), checksum = Hash64(payload.data(), payload.size());
    data.replace(kVersionAt, 4, reinterpret_cast<const char*>(&version), 4);
    data.replace(kPayloadBytesAt, 8, reinterpret_cast<const char*>(&bytes), 8);
    data.replace(kChecksumAt, 8, reinterpret_cast<const char*>(&checksum), 8);
    std::ofstream(f, std::ios::binary | std::ios::trunc) << data.substr(0, kHeader) << payload;
  }
  BlockPool pool(Layout(), 0, false);
  auto cache = Open(&pool);
  KvSequence hit(&pool);
  EXPECT_EQ(cache->LookupPrefix(a, 8, &hit), 8);
  EXPECT_EQ(cache->Stats().disk_errors, 0u);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(KAt(hit, i), a[i] + 0.5f);
}

// Two tiers on one folder would each apply their own budget and miss each other's deletes: the
// second Open is refused, naming the folder, until the first is closed.
TEST_F(DiskTierTest, OneOpenTierPerFolder) {
  auto first = DiskTier::Open(dir_.string(), "fp", Layout(), 1 << 20);
  ASSERT_TRUE(first.ok());
  auto second = DiskTier::Open(dir_.string(), "fp", Layout(), 1 << 20);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("is in use by another process"), std::string::npos);
  EXPECT_TRUE(DiskTier::Open(dir_.string(), "other-model", Layout(), 1 << 20).ok());
  first->reset();
  EXPECT_TRUE(DiskTier::Open(dir_.string(), "fp", Layout(), 1 << 20).ok());
}

TEST(BlockCache, DropRemovesAnEntryAndItsContinuations) {
  BlockPool pool(Layout(), 0, false);
  BlockCache cache(&pool, "fp", Options(100), nullptr);
  const auto a = Tokens(12);
  {
    KvSequence seq = Computed(&pool, a);
    cache.InsertPrefix(a, seq);
  }
  auto list = cache.List();
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].tokens, 12);
  EXPECT_FALSE(cache.Drop("00000000000000000000000000000000").ok());
  EXPECT_FALSE(cache.Drop("nonsense").ok());
  ASSERT_TRUE(cache.Drop("").ok());
  EXPECT_EQ(cache.Stats().ram_blocks, 0u);
  EXPECT_EQ(pool.blocks_in_use(), 0);
}

// Layout() with layer 0 sliding, a window of 6 positions: a query at L sees positions above
// L - 6, so a hit of L tokens needs the sliding parts of its last two blocks (of 4).
KvLayout SlidingLayout() {
  KvLayout l = Layout();
  l.layer_sliding = {1, 0};
  l.sliding_window = 6;
  return l;
}

// The sequence as a trimming request leaves it: sliding parts given up where a query at `next`
// no longer sees them.
void Trim(KvSequence* seq, int next) { seq->ReleaseSliding(seq->SlidingDeadTokens(next)); }

TEST(BlockCacheSliding, HitsHandOutGlobalReferencesBeforeTheWindow) {
  BlockPool pool(SlidingLayout(), 0, false);
  BlockCache cache(&pool, "fp", Options(100), nullptr);
  const auto a = Tokens(16);
  {
    KvSequence seq = Computed(&pool, a);
    cache.InsertPrefix(a, seq);
  }
  KvSequence hit(&pool);
  ASSERT_EQ(cache.LookupPrefix(a, 15, &hit), 12);
  // A query at 12 sees positions 7..11: blocks 4-7 and 8-11 come whole, block 0-3 global.
  EXPECT_FALSE(hit.spans()[0].sliding);
  EXPECT_TRUE(hit.spans()[1].sliding);
  EXPECT_TRUE(hit.spans()[2].sliding);
  EXPECT_EQ(pool.SlidingRefCount(hit.spans()[0].block), 1);  // the cache's
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
  BlockPool pool(SlidingLayout(), 0, false);
  BlockCache cache(&pool, "fp", Options(100), nullptr);
  const auto a = Tokens(16);
  {
    KvSequence seq = Computed(&pool, a);
    Trim(&seq, 16);  // blocks 0 and 1 (positions < 10)
    cache.InsertPrefix(a, seq);
  }
  EXPECT_EQ(cache.Stats().ram_bytes, 4 * pool.layout().global_bytes_per_block() +
                                         2 * pool.layout().sliding_bytes_per_block());
  KvSequence hit(&pool);
  EXPECT_EQ(cache.LookupPrefix(a, 15, &hit), 0);  // a hit of 4 or 8 needs block 0 or 1 whole
  {
    KvSequence again = Computed(&pool, a);
    cache.InsertPrefix(a, again);
  }
  EXPECT_EQ(cache.Stats().ram_bytes, 4 * pool.layout().bytes_per_block());
  EXPECT_EQ(cache.LookupPrefix(a, 15, &hit), 12);
  EXPECT_EQ(KAt(hit, 9), 109.5f);
}

TEST_F(DiskTierTest, GlobalOnlyBlocksAreWrittenSoAndStrippedOnesComeBackWhole) {
  const auto a = Tokens(20);
  auto open = [&](BlockPool* pool) {
    auto disk = DiskTier::Open(dir_.string(), "fp", SlidingLayout(), 1 << 20);
    PC_CHECK(disk.ok());
    return std::make_unique<BlockCache>(pool, "fp", Options(100), std::move(disk).value());
  };
  {
    BlockPool pool(SlidingLayout(), 0, false);
    auto cache = open(&pool);
    KvSequence running = Computed(&pool, a);
    cache->InsertPrefix(std::span(a).first(4), running);  // block 0 whole
    Trim(&running, 14);                                   // blocks 0 and 1 (positions <= 8)
    cache->InsertPrefix(a, running);  // block 1 global-only, blocks 2 to 4 whole
    // Over budget while the sequence runs: block 0's sliding part, which only the cache holds,
    // goes (to disk first, whole).
    cache->SetRamBudget(cache->Stats().ram_bytes - 1);
    cache->Maintain();
    EXPECT_EQ(cache->Stats().sliding_evictions, 1u);
    EXPECT_EQ(cache->Stats().disk_writes, 1u);
    EXPECT_FALSE(pool.Complete(running.spans()[0].block));
    // A hit of 4 needs block 0 whole: its sliding part comes back from the file.
    KvSequence hit(&pool);
    EXPECT_EQ(cache->LookupPrefix(std::span(a).first(5), 4, &hit), 4);
    EXPECT_EQ(cache->Stats().disk_loads, 1u);
    EXPECT_EQ(reinterpret_cast<float*>(hit.SlotK(2, 0))[0], 102.0f);  // a sliding layer
    hit.Clear();
    running.Clear();
    cache->SetRamBudget(1 << 20);
    ASSERT_TRUE(cache->SaveAll().ok());  // block 1 global-only, the rest whole
  }
  BlockPool pool(SlidingLayout(), 0, false);
  auto cache = open(&pool);
  KvSequence hit(&pool);
  // A hit of 16 sees positions above 10: blocks 2 and 3 whole; block 1 comes global-only.
  EXPECT_EQ(cache->LookupPrefix(a, 19, &hit), 16);
  EXPECT_FALSE(pool.Complete(hit.spans()[1].block));
  EXPECT_TRUE(pool.Complete(hit.spans()[2].block));
  EXPECT_EQ(KAt(hit, 5), 105.5f);
  EXPECT_EQ(reinterpret_cast<float*>(hit.SlotK(9, 0))[0], 109.0f);
  hit.Clear();
  EXPECT_EQ(cache->LookupPrefix(a, 8, &hit), 4);  // a hit of 8 would need block 1 whole
}

}  // namespace
}  // namespace promptcache
