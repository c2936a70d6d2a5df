// Test fixtures of the cache tests (block_cache_test, remote_tier_test): a small KV layout,
// token runs, and sequences whose K/V elements carry their token id, so a test can tell which
// prompt's K/V a hit returned.
#pragma once

#include <numeric>
#include <vector>

#include "core/check.h"
#include "kv/kv_cache.h"

namespace promptcache::testing_blocks {

// Two layers, one KV head of 4, blocks of 4 tokens.
inline KvLayout Layout(KvType type = KvType::kF32) {
  KvLayout l;
  l.n_layers = 2;
  l.n_kv_heads = 1;
  l.head_dim = 4;
  l.type = type;
  l.block_size = 4;
  return l;
}

// n token ids, distinct for each salt.
inline std::vector<int32_t> Tokens(int n, int salt = 0) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = 100 + i + salt * 1000;
  return t;
}

// A sequence holding `tokens` at positions 0..n-1, each K/V element of layer l the token id
// + 0.5 l (an F32 layout).
inline KvSequence Computed(BlockPool* pool, const std::vector<int32_t>& tokens) {
  KvSequence seq(pool);
  std::vector<int32_t> pos(tokens.size());
  std::iota(pos.begin(), pos.end(), 0);
  PC_CHECK(seq.Append(pos).ok());
  for (size_t i = 0; i < tokens.size(); ++i) {
    for (int l = 0; l < 2; ++l) {
      auto* k = reinterpret_cast<float*>(seq.SlotK(i, l));
      auto* v = reinterpret_cast<float*>(seq.SlotV(i, l));
      for (int d = 0; d < 4; ++d) k[d] = v[d] = tokens[i] + 0.5f * l;
    }
  }
  return seq;
}

}  // namespace promptcache::testing_blocks
