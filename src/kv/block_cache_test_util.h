// Helpers of the block cache's tests (block_cache_test.cc, block_cache_pin_test.cc,
// block_cache_disk_test.cc): a RAM budget in blocks, a sequence's K/V read back, a sliding
// layout, a prompt cached as a finished request leaves it, and a pool with a RAM-only cache; the
// tests live in namespace block_cache_test to use them by their short names.
#pragma once

#include <vector>

#include "kv/block_cache.h"
#include "kv/testing_blocks.h"

namespace promptcache::block_cache_test {

// The cache tests' common fixtures (kv/testing_blocks.h), by their short names.
using testing_blocks::Computed;
using testing_blocks::Layout;
using testing_blocks::Tokens;

// Layer 1's K element 3 of slot i: Computed() wrote the token id + 0.5 there.
inline float KAt(KvSequence& seq, int i) { return reinterpret_cast<float*>(seq.SlotK(i, 1))[3]; }

inline BlockCacheOptions Options(size_t ram_blocks) {
  BlockCacheOptions o;
  o.ram_bytes = ram_blocks * Layout().bytes_per_block();
  return o;
}

// Caches the prefix `tokens` as a finished request leaves it: its sequence gone, the cache holds
// the only reference to each block (so nothing but pins keeps them from eviction).
inline void CacheFinished(BlockCache* cache, BlockPool* pool, const std::vector<int32_t>& tokens,
                          const BlockKey& ns = {}) {
  KvSequence seq = Computed(pool, tokens);
  cache->InsertPrefix(tokens, seq, ns);
}

// The start of most cache tests: a pool of `layout`'s blocks and a cache on it with options `o`
// and no tier below, holding each prompt of `finished` as a finished request leaves it.
struct RamCache {
  explicit RamCache(const BlockCacheOptions& o,
                    const std::vector<std::vector<int32_t>>& finished = {},
                    const KvLayout& layout = Layout())
      : pool(layout, 0, false), cache(&pool, "fp", o, nullptr) {
    for (const auto& tokens : finished) CacheFinished(&cache, &pool, tokens);
  }
  BlockPool pool;
  BlockCache cache;
};

// Layout() with layer 0 sliding, a window of 6 positions: a query at L sees positions above
// L - 6, so a hit of L tokens needs the sliding parts of its last two blocks (of 4).
inline KvLayout SlidingLayout() {
  KvLayout l = Layout();
  l.layer_sliding = {1, 0};
  l.sliding_window = 6;
  return l;
}

// The sequence as a trimming request leaves it: sliding parts given up where a query at `next`
// no longer sees them.
inline void Trim(KvSequence* seq, int next) { seq->ReleaseSliding(seq->SlidingDeadTokens(next)); }

}  // namespace promptcache::block_cache_test
