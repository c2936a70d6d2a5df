#include "kv/kv_cache.h"

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

namespace promptcache {
namespace {

KvLayout SmallLayout(KvType type = KvType::kF32) {
  KvLayout l;
  l.n_layers = 2;
  l.n_kv_heads = 2;
  l.head_dim = 4;
  l.type = type;
  l.block_size = 4;
  return l;
}

std::vector<int32_t> Range(int begin, int end) {
  std::vector<int32_t> v(end - begin);
  std::iota(v.begin(), v.end(), begin);
  return v;
}

// Writes a recognisable value into every K/V element of token i: 1000 * layer + tag.
void Fill(KvSequence& seq, int i, float tag) {
  const KvLayout& l = seq.pool()->layout();
  for (int layer = 0; layer < l.n_layers; ++layer) {
    auto* k = reinterpret_cast<float*>(seq.SlotK(i, layer));
    auto* v = reinterpret_cast<float*>(seq.SlotV(i, layer));
    for (int d = 0; d < l.kv_dim(); ++d) {
      k[d] = 1000.0f * layer + tag;
      v[d] = -1000.0f * layer - tag;
    }
  }
}

float ReadK(KvSequence& seq, int i, int layer) {
  return reinterpret_cast<float*>(seq.SlotK(i, layer))[0];
}

TEST(KvLayout, BytesPerToken) {
  KvLayout l = SmallLayout(KvType::kF16);
  EXPECT_EQ(l.bytes_per_token(), 2u * 2 * 8 * 2);
  l.type = KvType::kF32;
  EXPECT_EQ(l.bytes_per_token(), 2u * 2 * 8 * 4);
}

TEST(KvSequence, AppendSpansBlocksAndKeepsPositions) {
  BlockPool pool(SmallLayout(), 0, false);
  KvSequence seq(&pool);
  ASSERT_TRUE(seq.Append(Range(10, 19)).ok());  // 9 tokens: blocks of 4, 4, 1
  EXPECT_EQ(seq.size(), 9);
  EXPECT_EQ(seq.spans().size(), 3u);
  EXPECT_EQ(pool.blocks_in_use(), 3);
  for (int i = 0; i < 9; ++i) EXPECT_EQ(seq.Position(i), 10 + i);
  ASSERT_TRUE(seq.Append(Range(40, 42)).ok());  // fills the partial block in place
  EXPECT_EQ(pool.blocks_in_use(), 3);
  EXPECT_EQ(seq.Position(10), 41);
  KvShape s = seq.shape();
  EXPECT_EQ(s.n_tokens, 11);
  EXPECT_EQ(seq.bytes(), 11 * pool.layout().bytes_per_token());
}

TEST(KvSequence, TruncateReleasesBlocks) {
  BlockPool pool(SmallLayout(), 0, false);
  KvSequence seq(&pool);
  ASSERT_TRUE(seq.Append(Range(0, 10)).ok());
  seq.Truncate(5);
  EXPECT_EQ(seq.size(), 5);
  EXPECT_EQ(pool.blocks_in_use(), 2);
  seq.Truncate(0);
  EXPECT_EQ(pool.blocks_in_use(), 0);
}

TEST(KvSequence, ForkSharesAndNewTokensNeverOverwriteShared) {
  BlockPool pool(SmallLayout(), 0, false);
  KvSequence a(&pool);
  ASSERT_TRUE(a.Append(Range(0, 6)).ok());
  for (int i = 0; i < 6; ++i) Fill(a, i, i);
  KvSequence b = a.Fork();
  EXPECT_EQ(pool.blocks_in_use(), 2);  // shared, not copied
  // b continues differently from a: its new token must go to a fresh block.
  ASSERT_TRUE(b.Append(Range(100, 101)).ok());
  Fill(b, 6, 77);
  ASSERT_TRUE(a.Append(Range(6, 7)).ok());
  Fill(a, 6, 6);
  EXPECT_EQ(ReadK(a, 6, 1), 1006.0f);
  EXPECT_EQ(ReadK(b, 6, 1), 1077.0f);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(ReadK(b, i, 0), float(i));
  b = KvSequence(&pool);
  a.Truncate(0);
  EXPECT_EQ(pool.blocks_in_use(), 0);
}

TEST(KvSequence, SegmentsFromTwoCachesKeepTheirPositionsAndData) {
  BlockPool pool(SmallLayout(), 0, false);
  KvSequence doc1(&pool), doc2(&pool);
  ASSERT_TRUE(doc1.Append(Range(0, 7)).ok());
  ASSERT_TRUE(doc2.Append(Range(50, 55)).ok());
  for (int i = 0; i < 7; ++i) Fill(doc1, i, 100 + i);
  for (int i = 0; i < 5; ++i) Fill(doc2, i, 200 + i);
  const int64_t blocks = pool.blocks_in_use();

  KvSequence prompt(&pool);
  prompt.AppendSegment(doc1, 2, 7);  // an unaligned part of a block, by reference
  prompt.AppendSegment(doc2, 0, 5);
  EXPECT_EQ(pool.blocks_in_use(), blocks);  // nothing copied
  ASSERT_EQ(prompt.size(), 10);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(prompt.Position(i), 2 + i);
    EXPECT_EQ(ReadK(prompt, i, 1), 1000.0f + 102 + i);
  }
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(prompt.Position(5 + i), 50 + i);
    EXPECT_EQ(ReadK(prompt, 5 + i, 0), 200.0f + i);
  }
  // New text after the segments lands in a new block and leaves the sources intact.
  ASSERT_TRUE(prompt.Append(Range(60, 62)).ok());
  Fill(prompt, 10, 9);
  Fill(prompt, 11, 9);
  EXPECT_EQ(ReadK(doc2, 4, 0), 204.0f);
  EXPECT_EQ(doc1.size(), 7);
}

TEST(BlockPool, StaticPoolRefusesBeyondCapacityAndRollsBack) {
  BlockPool pool(SmallLayout(), 64, true);
  EXPECT_EQ(pool.bytes_reserved(), 64 * pool.layout().bytes_per_block());
  KvSequence seq(&pool);
  ASSERT_TRUE(seq.Append(Range(0, 250)).ok());
  Status st = seq.Append(Range(250, 270));  // needs 5 more blocks, only 1 (partial) left
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(seq.size(), 250);
  EXPECT_EQ(pool.blocks_in_use(), 63);
  ASSERT_TRUE(seq.Append(Range(250, 256)).ok());
  EXPECT_EQ(pool.blocks_in_use(), 64);
}

TEST(BlockPool, RefCountsAndReuse) {
  BlockPool pool(SmallLayout(), 0, false);
  BlockId a = *pool.Allocate();
  pool.Ref(a);
  EXPECT_EQ(pool.RefCount(a), 2);
  pool.Unref(a);
  pool.Unref(a);
  EXPECT_EQ(pool.blocks_in_use(), 0);
  EXPECT_EQ(*pool.Allocate(), a);  // freed blocks are reused
}

}  // namespace
}  // namespace promptcache
