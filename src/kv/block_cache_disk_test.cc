// The block cache's disk tier: blocks spilled and saved come back after a restart, the byte
// budget, listing disk-only blocks, bad files skipped, old formats, one open tier per folder,
// and sliding-window blocks written global-only or whole.

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "core/hash.h"
#include "kv/block_cache.h"
#include "kv/block_cache_test_util.h"

namespace promptcache::block_cache_test {
namespace {

namespace fs = std::filesystem;

class DiskTierTest : public testing_blocks::ScratchDirTest {
 protected:
  DiskTierTest() : ScratchDirTest("pc_disk_tier_") {}

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
    if (i > 0) {
      EXPECT_EQ(blocks[i].parent, blocks[i - 1].key);
    }
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
}  // namespace promptcache::block_cache_test
