// Quantized KV types (q8_0, q4_0) in the cache module: their sizes, the flag's parsing and the
// row-size rule, and their blocks in the cache tiers: a block record (the disk tier's file, the
// remote tier's value) round-trips byte for byte, is never read into a pool of another type, and
// the disk tier keeps each type in a folder of its own.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "kv/block_cache.h"
#include "kv/disk_tier.h"
#include "kv/remote_tier.h"
#include "kv/testing_blocks.h"

namespace promptcache {
namespace {

namespace fs = std::filesystem;

// Two layers, two KV heads of 64, blocks of 4 tokens.
KvLayout Layout(KvType type) { return testing_blocks::Layout(type, 2, 64); }

// A sequence of `tokens` whose every K/V byte is derived from its token, layer and offset (any
// bytes are a valid block of either quantized type).
KvSequence Filled(BlockPool* pool, const std::vector<int32_t>& tokens) {
  KvSequence seq(pool);
  std::vector<int32_t> pos(tokens.size());
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>(i);
  PC_CHECK(seq.Append(pos).ok());
  const size_t row = pool->layout().row_bytes();
  for (size_t i = 0; i < tokens.size(); ++i) {
    for (int l = 0; l < 2; ++l) {
      for (size_t b = 0; b < row; ++b) {
        seq.SlotK(i, l)[b] = static_cast<uint8_t>(tokens[i] * 7 + l * 3 + b);
        seq.SlotV(i, l)[b] = static_cast<uint8_t>(tokens[i] * 5 + l + b * 11);
      }
    }
  }
  return seq;
}

std::vector<uint8_t> Bytes(const KvSequence& seq) {
  std::vector<uint8_t> out;
  const size_t row = seq.pool()->layout().row_bytes();
  for (int i = 0; i < seq.size(); ++i) {
    for (int l = 0; l < 2; ++l) {
      out.insert(out.end(), seq.SlotK(i, l), seq.SlotK(i, l) + row);
      out.insert(out.end(), seq.SlotV(i, l), seq.SlotV(i, l) + row);
    }
  }
  return out;
}

TEST(QuantizedKv, BytesPerToken) {
  // Per token: 2 (K, V) x 2 layers x 2 heads x (64 values: 128 bytes in f16, 2 blocks of 34 in
  // q8_0, 2 blocks of 18 in q4_0).
  EXPECT_EQ(Layout(KvType::kF16).bytes_per_token(), 1024u);
  EXPECT_EQ(Layout(KvType::kF32).bytes_per_token(), 2048u);
  EXPECT_EQ(Layout(KvType::kQ8_0).bytes_per_token(), 544u);
  EXPECT_EQ(Layout(KvType::kQ4_0).bytes_per_token(), 288u);
  EXPECT_EQ(Layout(KvType::kQ8_0).row_bytes(), 136u);
  EXPECT_EQ(Layout(KvType::kQ4_0).bytes_per_block(), 288u * 4);
  // Heads start where their first value's block does: the second head of 64 at block 2.
  EXPECT_EQ(Layout(KvType::kQ8_0).head_offset(1), 68u);
  EXPECT_EQ(Layout(KvType::kF16).head_offset(1), 128u);
  EXPECT_EQ(Layout(KvType::kQ8_0).head_column(1), 0);
  // stories260K's shape: four heads of 8 share one block of 32 per row.
  KvLayout small = Layout(KvType::kQ4_0);
  small.n_kv_heads = 4;
  small.head_dim = 8;
  EXPECT_EQ(small.row_bytes(), 18u);
  EXPECT_EQ(small.bytes_per_token(), 2u * 2 * 18);
  EXPECT_EQ(small.head_offset(3), 0u);
  EXPECT_EQ(small.head_column(3), 24);
}

TEST(QuantizedKv, ParseAndHeadSizeRule) {
  for (KvType t : {KvType::kF16, KvType::kF32, KvType::kQ8_0, KvType::kQ4_0}) {
    Result<KvType> back = ParseKvType(KvTypeName(t));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, t);
  }
  const Status bad = ParseKvType("q8").status();
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("f16, f32, q8_0 or q4_0"), std::string::npos) << bad.message();
  EXPECT_TRUE(CheckKvType(KvType::kQ8_0, 64).ok());
  EXPECT_TRUE(CheckKvType(KvType::kQ8_0, 32).ok());  // stories260K: 4 KV heads of 8
  EXPECT_TRUE(CheckKvType(KvType::kF16, 24).ok());
  const Status odd = CheckKvType(KvType::kQ4_0, 24);
  EXPECT_EQ(odd.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(odd.message().find("blocks of 32 values"), std::string::npos) << odd.message();
  EXPECT_NE(odd.message().find("have 24"), std::string::npos) << odd.message();
}

TEST(QuantizedKv, RemoteKeysNameTheType) {
  const std::string q8 = RemoteKeyPrefix("fp", KvType::kQ8_0, 16);
  EXPECT_NE(q8.find(":q8_0:"), std::string::npos) << q8;
  EXPECT_NE(q8, RemoteKeyPrefix("fp", KvType::kF16, 16));
  EXPECT_NE(q8, RemoteKeyPrefix("fp", KvType::kQ4_0, 16));
}

TEST(QuantizedKv, RecordsRoundTripAndAreNeverReadAsAnotherType) {
  const std::vector<KvType> types = {KvType::kF16, KvType::kF32, KvType::kQ8_0, KvType::kQ4_0};
  const auto tokens = testing_blocks::Tokens(4);
  const BlockKey key{5, 6}, parent{1, 1};
  for (KvType t : {KvType::kQ8_0, KvType::kQ4_0}) {
    SCOPED_TRACE(KvTypeName(t));
    BlockPool pool(Layout(t), 0, false);
    KvSequence seq = Filled(&pool, tokens);
    const BlockRecord r{key, parent, tokens, {0, 1, 2, 3}};
    const std::string v = EncodeBlock(r, "fp", pool, seq.spans()[0].block, 0);
    KvSequence back(&pool);
    back.AppendBlock(*pool.Allocate(), 0, 4);
    pool.Unref(back.spans()[0].block);  // AppendBlock took its own reference
    ASSERT_TRUE(DecodeBlock(v, key, "fp", &pool, back.spans()[0].block).ok());
    EXPECT_EQ(Bytes(back), Bytes(seq));
    for (KvType other : types) {
      if (other == t) continue;
      BlockPool foreign(Layout(other), 0, false);
      const BlockId b = *foreign.Allocate();
      const Result<BlockRecord> got = DecodeBlock(v, key, "fp", &foreign, b);
      EXPECT_EQ(got.status().code(), StatusCode::kDataLoss) << KvTypeName(other);
      foreign.Unref(b);
      // And a block of the other type is not read into this pool either.
      KvSequence theirs = Filled(&foreign, tokens);
      const std::string w = EncodeBlock(r, "fp", foreign, theirs.spans()[0].block, 0);
      const BlockId mine = *pool.Allocate();
      EXPECT_FALSE(DecodeBlock(w, key, "fp", &pool, mine).ok()) << KvTypeName(other);
      pool.Unref(mine);
    }
  }
}

class QuantizedDiskTier : public testing_blocks::ScratchDirTest {
 protected:
  QuantizedDiskTier() : ScratchDirTest("pc_quantized_disk_") {}

  std::unique_ptr<BlockCache> Open(BlockPool* pool) {
    auto disk = DiskTier::Open(dir_.string(), "fp", pool->layout(), 1 << 20);
    PC_CHECK(disk.ok());
    BlockCacheOptions o;
    o.ram_bytes = 0;  // everything spills to disk
    return std::make_unique<BlockCache>(pool, "fp", o, std::move(disk).value());
  }
};

// Blocks spilled to disk come back byte for byte after a restart; a tier of another type on the
// same --cache-dir finds none of them (its own folder) and reports no errors.
TEST_F(QuantizedDiskTier, RoundTripAfterRestartAndTypesKeptApart) {
  const auto a = testing_blocks::Tokens(12);
  std::vector<uint8_t> want;
  {
    BlockPool pool(Layout(KvType::kQ8_0), 0, false);
    auto cache = Open(&pool);
    KvSequence seq = Filled(&pool, a);
    want = Bytes(seq);
    cache->InsertPrefix(a, seq);
    seq.Clear();
    cache->Maintain();
    EXPECT_EQ(cache->Stats().disk_writes, 3u);
  }
  EXPECT_TRUE(fs::is_directory(dir_ / "fp-q8_0"));
  for (KvType other : {KvType::kF16, KvType::kQ4_0}) {
    BlockPool pool(Layout(other), 0, false);
    auto cache = Open(&pool);
    KvSequence miss(&pool);
    EXPECT_EQ(cache->LookupPrefix(a, 12, &miss), 0) << KvTypeName(other);
    EXPECT_EQ(cache->Stats().disk_errors, 0u) << KvTypeName(other);
  }
  BlockPool pool(Layout(KvType::kQ8_0), 0, false);
  auto cache = Open(&pool);
  KvSequence hit(&pool);
  EXPECT_EQ(cache->LookupPrefix(a, 12, &hit), 12);
  EXPECT_EQ(cache->Stats().disk_loads, 3u);
  EXPECT_EQ(Bytes(hit), want);
  // A q8_0 file copied into the f16 folder (a foreign block where a same-named f16 one would
  // be) is refused and counted, not read.
  fs::create_directories(dir_ / "fp");
  for (const auto& e : fs::directory_iterator(dir_ / "fp-q8_0")) {
    if (e.path().extension() == ".kvb") fs::copy(e.path(), dir_ / "fp" / e.path().filename());
  }
  BlockPool f16(Layout(KvType::kF16), 0, false);
  auto f16_cache = Open(&f16);
  KvSequence miss(&f16);
  EXPECT_EQ(f16_cache->LookupPrefix(a, 12, &miss), 0);
  EXPECT_GE(f16_cache->Stats().disk_errors, 1u);
}

}  // namespace
}  // namespace promptcache
