// How attention's work is cut into items (see attention.cc): the sizes that the planner
// (Model::PlanAttention, attention_plan.cc) and the item runner (attention.cc) both rely on, and
// two small helpers on items and sequences that both use. Internal to the model module.
#pragma once

#include <algorithm>
#include <vector>

#include "kv/kv_cache.h"
#include "model/model.h"

namespace promptcache::attention_items {

// Keys per chunk and tokens per item: fixed, so that a query's arithmetic never depends on the
// batch (attention.cc says how the work is cut).
inline constexpr int kChunkRows = 512;
inline constexpr int kItemTokens = 64;

using Item = AttentionScratch::Item;

inline bool SameFirstBlock(const KvSequence& a, const KvSequence& b) {
  if (a.spans().empty() || b.spans().empty()) return false;
  const KvSpan& x = a.spans()[0];
  const KvSpan& y = b.spans()[0];
  return x.block == y.block && x.begin == y.begin;
}

// Keys read by the item's furthest-reaching token.
inline int ItemKeys(const Item& it, const std::vector<int>& order, const std::vector<int>& slot) {
  int keys = 0;
  for (int i = 0; i < it.count; ++i) keys = std::max(keys, slot[order[it.first + i]] + 1);
  return keys;
}

}  // namespace promptcache::attention_items
