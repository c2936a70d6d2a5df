#include "kv/kv_cache.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <numeric>
#include <set>

#include "kv/testing_blocks.h"

namespace promptcache {
namespace {

// Two layers, two KV heads of 4, blocks of 4 tokens.
KvLayout SmallLayout(KvType type = KvType::kF32) { return testing_blocks::Layout(type, 2); }

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

// Resident memory of this process, from /proc/self/statm.
size_t ResidentBytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  long pages = 0, resident = 0;
  if (f != nullptr) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return size_t(resident) * 4096;
}

// Prefault grows the pool and makes its memory resident; blocks then come from it without
// growing, and max_blocks caps it.
TEST(BlockPool, PrefaultReservesResidentMemory) {
  KvLayout l = SmallLayout();
  l.n_layers = 8;
  l.n_kv_heads = 8;
  l.head_dim = 64;  // 64 KiB per block of 4 tokens (f32)
  BlockPool pool(l, 0, false);
  const size_t before = ResidentBytes();
  ASSERT_TRUE(pool.Prefault(1024).ok());  // 64 MiB
  const size_t reserved = pool.bytes_reserved();
  EXPECT_GE(pool.blocks_allocated(), 1024);
  EXPECT_GE(reserved, size_t(1024) * l.bytes_per_block());
  EXPECT_EQ(pool.blocks_in_use(), 0);
  EXPECT_GE(ResidentBytes() - before, reserved * 9 / 10) << "the pages were touched";
  for (int i = 0; i < 1024; ++i) ASSERT_TRUE(pool.Allocate().ok());
  EXPECT_EQ(pool.bytes_reserved(), reserved) << "no growth while prefaulted blocks are free";

  BlockPool capped(SmallLayout(), 100, false);
  ASSERT_TRUE(capped.Prefault(1000).ok());
  EXPECT_LE(capped.blocks_allocated(), 128);  // whole chunks of 64, up to the cap
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

// A segment appended with a shift is read at its positions + shift with the same rows (no
// copy); shifts compose through forks and further segments; and new tokens never go into a
// shifted span's block, even one the sequence holds alone (their keys would be computed for
// their own positions, in a span whose keys are read as rotated by the shift).
TEST(KvSequence, ShiftedSegmentsMoveWithoutCopying) {
  BlockPool pool(SmallLayout(), 0, false);
  KvSequence doc(&pool);
  ASSERT_TRUE(doc.Append(Range(50, 53)).ok());  // 3 of a block's 4 slots
  for (int i = 0; i < 3; ++i) Fill(doc, i, 300 + i);
  KvSequence prompt(&pool);
  ASSERT_TRUE(prompt.Append(Range(0, 2)).ok());
  prompt.AppendSegment(doc, 0, 3, /*shift=*/-48);
  EXPECT_EQ(pool.blocks_in_use(), 2);
  EXPECT_FALSE(doc.HasShifts());
  EXPECT_TRUE(prompt.HasShifts());
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(prompt.Position(2 + i), 2 + i);
    EXPECT_EQ(prompt.Locate(2 + i).shift, -48);
    EXPECT_EQ(ReadK(prompt, 2 + i, 1), 1000.0f + 300 + i);
  }
  KvSequence fork = prompt.Fork(), again(&pool);
  EXPECT_EQ(fork.Position(4), 4);
  again.AppendSegment(prompt, 2, 5, /*shift=*/10);
  EXPECT_EQ(again.Position(0), 12);
  EXPECT_EQ(again.Locate(0).shift, -38);
  fork = KvSequence(&pool);
  again = KvSequence(&pool);
  doc = KvSequence(&pool);  // the prompt now holds the doc's block alone
  ASSERT_EQ(pool.RefCount(prompt.Locate(2).block), 1);
  const int64_t before = pool.blocks_in_use();
  ASSERT_TRUE(prompt.Append(Range(5, 6)).ok());
  EXPECT_EQ(pool.blocks_in_use(), before + 1);
  EXPECT_NE(prompt.Locate(5).block, prompt.Locate(4).block);
  EXPECT_EQ(prompt.Locate(5).shift, 0);
  EXPECT_EQ(prompt.Position(5), 5);
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

// Three layers, the middle one global, the others sliding with a window of 6 positions.
KvLayout SlidingLayout() {
  KvLayout l = SmallLayout();
  l.n_layers = 3;
  l.layer_sliding = {1, 0, 1};
  l.sliding_window = 6;
  return l;
}

TEST(BlockPool, SlidingLayersLiveInAPartOfTheirOwn) {
  const KvLayout l = SlidingLayout();
  EXPECT_EQ(l.n_sliding(), 2);
  EXPECT_EQ(l.global_bytes_per_block() + l.sliding_bytes_per_block(), l.bytes_per_block());
  EXPECT_EQ(l.sliding_bytes_per_block(), 2 * l.global_bytes_per_block());
  BlockPool pool(l, 0, false);
  const BlockId a = *pool.Allocate();
  EXPECT_TRUE(pool.Complete(a));
  EXPECT_EQ(pool.bytes_in_use(), l.bytes_per_block());
  // Each layer has rows of its own, in the part of its kind.
  std::set<const uint8_t*> planes;
  for (int layer = 0; layer < 3; ++layer) {
    planes.insert(pool.K(a, layer));
    planes.insert(pool.V(a, layer));
  }
  EXPECT_EQ(planes.size(), 6u);
  pool.Ref(a, /*sliding=*/false);  // a holder of the global part only
  EXPECT_EQ(pool.RefCount(a), 2);
  EXPECT_EQ(pool.SlidingRefCount(a), 1);
  pool.ReleaseSliding(a);  // the full reference becomes a global one: the part is freed
  EXPECT_FALSE(pool.Complete(a));
  EXPECT_EQ(pool.sliding_parts_in_use(), 0);
  EXPECT_EQ(pool.bytes_in_use(), l.global_bytes_per_block());
  EXPECT_EQ(pool.peak_bytes_in_use(), l.bytes_per_block());
  EXPECT_NE(pool.K(a, 1), nullptr);            // the global layer is still there
  EXPECT_DEATH(pool.K(a, 0), "check failed");  // a sliding layer is not
  // Its part serves the next block.
  const BlockId b = *pool.Allocate();
  EXPECT_EQ(pool.sliding_parts_in_use(), 1);
  EXPECT_EQ(pool.bytes_reserved(), 64 * l.bytes_per_block());
  pool.Unref(a, false);
  pool.Unref(a, false);
  pool.Unref(b);
  EXPECT_EQ(pool.blocks_in_use(), 0);
  EXPECT_EQ(pool.bytes_in_use(), 0u);
}

TEST(BlockPool, WithoutSlidingLayersNothingChanges) {
  BlockPool pool(SmallLayout(), 0, false);
  EXPECT_FALSE(pool.layout().has_sliding());
  EXPECT_EQ(pool.layout().sliding_bytes_per_block(), 0u);
  const BlockId a = *pool.Allocate();
  pool.ReleaseSliding(a);  // nothing to release
  EXPECT_TRUE(pool.Complete(a));
  EXPECT_EQ(pool.sliding_parts_in_use(), 0);
  EXPECT_EQ(pool.bytes_in_use(), pool.layout().bytes_per_block());
  EXPECT_EQ(pool.bytes_reserved(), 64 * pool.layout().bytes_per_block());
  pool.Unref(a);
}

// Mistral: every layer slides, so a block's global part is empty (positions only).
TEST(BlockPool, EveryLayerSliding) {
  KvLayout l = SmallLayout();
  l.layer_sliding = {1, 1};
  l.sliding_window = 4;
  BlockPool pool(l, 0, false);
  EXPECT_EQ(l.global_bytes_per_block(), 0u);
  KvSequence seq(&pool);
  ASSERT_TRUE(seq.Append(Range(0, 12)).ok());
  for (int i = 0; i < 12; ++i) Fill(seq, i, i);
  EXPECT_EQ(seq.SlidingDeadTokens(12), 8);  // positions <= 8 are out of every later window
  seq.ReleaseSliding(8);
  EXPECT_EQ(pool.bytes_in_use(), l.sliding_bytes_per_block());
  EXPECT_EQ(seq.Position(0), 0);  // positions stay with the block
  EXPECT_EQ(ReadK(seq, 9, 1), 1009.0f);
}

TEST(KvSequence, ReleasesSlidingPartsNoLaterQuerySees) {
  BlockPool pool(SlidingLayout(), 0, false);
  KvSequence seq(&pool);
  ASSERT_TRUE(seq.Append(Range(0, 14)).ok());  // blocks 0-3, 4-7, 8-11, 12-13
  for (int i = 0; i < 14; ++i) Fill(seq, i, i);
  // A query at 14 sees positions above 8: blocks 0-3 and 4-7 are dead, 8-11 is not.
  EXPECT_EQ(seq.SlidingDeadTokens(14), 8);
  EXPECT_EQ(seq.SlidingDeadTokens(12), 8);  // known dead stays dead: the caller promised
  KvSequence fork = seq.Fork();             // holds its own full references
  seq.ReleaseSliding(8);
  EXPECT_FALSE(seq.spans()[0].sliding);
  EXPECT_TRUE(seq.spans()[2].sliding);
  EXPECT_TRUE(pool.Complete(seq.spans()[0].block));  // the fork still holds it
  EXPECT_EQ(pool.sliding_parts_in_use(), 4);
  KvSequence fork2 = seq.Fork();  // a fork of the trimmed sequence holds what it holds
  EXPECT_FALSE(fork2.spans()[1].sliding);
  fork.ReleaseSliding(fork.SlidingDeadTokens(14));
  EXPECT_FALSE(pool.Complete(seq.spans()[0].block));
  EXPECT_FALSE(pool.Complete(seq.spans()[1].block));
  EXPECT_EQ(pool.sliding_parts_in_use(), 2);
  EXPECT_EQ(ReadK(seq, 5, 1), 1005.0f);  // the global layer of a trimmed block
  EXPECT_EQ(ReadK(seq, 9, 2), 2009.0f);  // a live block
  // The last span is never released (new tokens may go there), even when it is all old.
  EXPECT_EQ(seq.SlidingDeadTokens(100), 12);
  fork.Clear();
  fork2.Clear();
  seq.Clear();
  EXPECT_EQ(pool.blocks_in_use(), 0);
  EXPECT_EQ(pool.sliding_parts_in_use(), 0);
}

TEST(KvSequence, NewTokensNeverGoIntoAReleasedBlock) {
  BlockPool pool(SlidingLayout(), 0, false);
  KvSequence seq(&pool);
  ASSERT_TRUE(seq.Append(Range(0, 10)).ok());
  seq.ReleaseSliding(seq.SlidingDeadTokens(20));  // blocks 0-3 and 4-7
  seq.Truncate(6);  // the last span is now a released one with room left
  EXPECT_EQ(seq.SlidingDeadTokens(20), 6);
  ASSERT_TRUE(seq.Append(Range(6, 8)).ok());
  EXPECT_EQ(seq.spans().size(), 3u);  // a fresh, complete block
  EXPECT_TRUE(pool.Complete(seq.spans()[2].block));
  Fill(seq, 7, 7);
  EXPECT_EQ(ReadK(seq, 7, 2), 2007.0f);
}

#if defined(__SANITIZE_ADDRESS__)
#define PC_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PC_TEST_ASAN 1
#endif
#endif
#ifdef PC_TEST_ASAN
// Under AddressSanitizer a freed sliding part is poisoned: a pointer into it kept past the
// release (which attention must never do) is reported.
TEST(BlockPool, ReadingAFreedSlidingPartIsReported) {
  BlockPool pool(SlidingLayout(), 0, false);
  const BlockId a = *pool.Allocate();
  volatile const uint8_t* k = pool.K(a, 0);
  pool.ReleaseSliding(a);
  EXPECT_DEATH((void)k[0], "use-after-poison");
  pool.Unref(a, false);
}
#endif

}  // namespace
}  // namespace promptcache
