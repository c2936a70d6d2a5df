// The block cache's index (kv/block_cache.h): chain keys, prefix lookup and insertion, module and
// segment entries, sliding parts, and least-recently-used eviction within the RAM budget. The
// tiers below RAM live in block_cache_tiers.cc, pins in block_cache_pins.cc, and what the cache
// reports (listings, statistics, drops) in block_cache_listing.cc.

#include "kv/block_cache.h"

#include <algorithm>
#include <functional>

#include "core/hash.h"

namespace promptcache {

BlockCache::BlockCache(BlockPool* pool, std::string fingerprint, const BlockCacheOptions& options,
                       std::unique_ptr<DiskTier> disk, std::unique_ptr<RemoteTier> remote)
    : pool_(pool),
      fingerprint_(std::move(fingerprint)),
      options_(options),
      disk_(std::move(disk)),
      remote_(std::move(remote)),
      remote_prefix_(
          RemoteKeyPrefix(fingerprint_, pool->layout().type, pool->layout().block_size)) {}

BlockCache::~BlockCache() {
  for (auto& [key, e] : entries_) pool_->Unref(e.block, e.sliding);
}

BlockKey BlockCache::ChainKey(const BlockKey& parent, std::span<const int32_t> tokens) const {
  Hasher128 h;
  h.Update(std::string_view(fingerprint_));
  h.UpdatePod(parent.hi);
  h.UpdatePod(parent.lo);
  h.Update(tokens.data(), tokens.size_bytes());
  uint64_t d[2];
  h.Digest(d);
  return {d[0], d[1]};
}

BlockCache::Entry* BlockCache::Find(const BlockKey& key) {
  auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : &it->second;
}

bool BlockCache::Contains(const BlockKey& key) const {
  return entries_.count(key) != 0 || (disk_ && disk_->Contains(key));
}

std::vector<BlockKey> BlockCache::ChainKeys(std::span<const int32_t> tokens,
                                            const BlockKey& ns) const {
  const int bs = pool_->layout().block_size;
  std::vector<BlockKey> keys;
  BlockKey parent = ns;
  for (size_t b = 0; (b + 1) * bs <= tokens.size(); ++b) {
    parent = ChainKey(parent, tokens.subspan(b * bs, bs));
    keys.push_back(parent);
  }
  return keys;
}

TierCounts BlockCache::Probe(const std::vector<BlockKey>& keys) const {
  const int bs = pool_->layout().block_size;
  TierCounts c;
  size_t i = 0;
  while (i < keys.size() && entries_.count(keys[i])) ++i;
  c.ram = static_cast<int>(i) * bs;
  for (i = 0; disk_ && i < keys.size() && disk_->Contains(keys[i]);) ++i;
  c.disk = static_cast<int>(i) * bs;
  for (i = 0; i < keys.size() && (entries_.count(keys[i]) || (disk_ && disk_->Contains(keys[i])));)
    ++i;
  c.local = static_cast<int>(i) * bs;
  return c;
}

int BlockCache::RemoteLeading(const BlockKey& ns, std::span<const BlockKey> keys) const {
  if (!remote_) return 0;
  std::vector<std::string> names;
  names.reserve(keys.size());
  for (const BlockKey& k : keys) names.push_back(RemoteKeyOf(ns, k));
  return remote_->CountLeading(names);
}

void BlockCache::AddEntry(const BlockKey& key, Entry e) {
  if (!e.parent.empty()) {
    if (Entry* p = Find(e.parent)) p->children++;
  }
  e.last_used = Now();
  held_bytes_ += pool_->layout().block_bytes(e.sliding);
  entries_.emplace(key, std::move(e));
}

void BlockCache::RemoveEntry(const BlockKey& key, bool spill_to_disk) {
  auto it = entries_.find(key);
  PC_CHECK(it != entries_.end());
  Entry& e = it->second;
  if (spill_to_disk) Spill(key, e);
  if (!e.parent.empty()) {
    if (Entry* p = Find(e.parent)) p->children--;
  }
  held_bytes_ -= pool_->layout().block_bytes(e.sliding);
  pool_->Unref(e.block, e.sliding);
  entries_.erase(it);
}

void BlockCache::StripSliding(const BlockKey& key, Entry& e) {
  PC_CHECK(e.sliding && pool_->layout().has_sliding());
  Spill(key, e);  // whole, while it still is
  pool_->ReleaseSliding(e.block);
  e.sliding = false;
  held_bytes_ -= pool_->layout().sliding_bytes_per_block();
  stats_.sliding_evictions++;
}

bool BlockCache::MakeComplete(const BlockKey& key, Entry& e) {
  if (e.sliding) return true;
  if (pool_->Complete(e.block)) {  // another holder kept the part
    pool_->AcquireSliding(e.block);
  } else {
    if (!disk_ || !disk_->Contains(key) || disk_->Partial(key)) return false;
    if (!pool_->RestoreSliding(e.block).ok()) return false;
    Result<BlockRecord> r = disk_->Read(key, pool_, e.block, /*sliding_only=*/true);
    if (!r.ok()) {
      pool_->ReleaseSliding(e.block);
      return false;
    }
    stats_.disk_loads++;
  }
  e.sliding = true;
  held_bytes_ += pool_->layout().sliding_bytes_per_block();
  return true;
}

int BlockCache::LookupPrefix(std::span<const int32_t> tokens, int max_tokens, KvSequence* seq,
                             const BlockKey& ns, std::vector<BlockOrigin>* origins) {
  PC_CHECK(seq->size() == 0);
  ExpireIdle();  // the engine may have slept past the TTL since its last Maintain
  stats_.lookups++;
  const int bs = pool_->layout().block_size;
  const int limit = std::min<int>(max_tokens, static_cast<int>(tokens.size()));
  std::vector<BlockKey> chain;
  std::vector<BlockOrigin> loaded;  // per block of chain: where it was
  BlockKey parent = ns;
  for (int b = 0; (b + 1) * bs <= limit; ++b) {
    const auto block_tokens = tokens.subspan(size_t(b) * bs, bs);
    const BlockKey key = ChainKey(parent, block_tokens);
    Entry* e = Find(key);
    const bool disk = e == nullptr && LoadFromDisk(key, /*prefix=*/true, ns);
    if (disk) e = Find(key);
    // A hash collision would serve another prompt's K/V: compare the tokens, and the parent
    // key, which was itself verified one step earlier: by induction from the first block, a
    // hit is the very prefix asked for, never a collision of chain keys.
    if (e == nullptr || !IsBlockOf(*e, parent, block_tokens)) break;
    chain.push_back(key);
    loaded.push_back(disk ? BlockOrigin::kDisk : BlockOrigin::kRam);
    parent = key;
  }
  size_t n = chain.size();
  const size_t g = options_.granularity > bs ? options_.granularity / bs : 1;
  n = UsableBlocks(chain, n / g * g, g);
  const auto now = Now();
  for (size_t i = 0; i < n; ++i) {
    Entry& e = entries_.at(chain[i]);
    seq->AppendBlock(e.block, e.begin, e.count, InWindow(i, n));
    e.last_used = now;
    e.hits++;
    // A hit renews a timed pin that still holds, as Anthropic refreshes a cache entry's TTL
    // each time it is read.
    if (e.pinned_until > now) {
      e.pinned_until = std::max(e.pinned_until, now + ToDuration(e.pin_ttl_seconds));
    }
    if (CountedPinHolds(e)) e.pins_until = now + ToDuration(options_.max_pin_seconds);
  }
  if (origins != nullptr) origins->assign(loaded.begin(), loaded.begin() + n);
  if (n > 0) {
    stats_.hits++;
    stats_.hit_tokens += n * bs;
  }
  return static_cast<int>(n) * bs;
}

bool BlockCache::IsBlockOf(const Entry& e, const BlockKey& parent,
                           std::span<const int32_t> tokens) const {
  return e.count == pool_->layout().block_size && e.parent == parent &&
         std::equal(e.tokens.begin(), e.tokens.end(), tokens.begin());
}

bool BlockCache::InWindow(size_t b, size_t n) const {
  const KvLayout& l = pool_->layout();
  if (!l.has_sliding()) return true;
  // Block b's last position against what a query at n * bs still sees: positions above
  // n * bs - W.
  return int64_t(b + 1) * l.block_size - 1 > int64_t(n) * l.block_size - l.sliding_window;
}

size_t BlockCache::UsableBlocks(const std::vector<BlockKey>& chain, size_t n, size_t step) {
  if (!pool_->layout().has_sliding()) return n;
  bool missed = false;
  while (n > 0) {
    size_t gap = n;  // a window block that is missing, if any
    for (size_t b = n; b-- > 0 && InWindow(b, n);) {
      if (!MakeComplete(chain[b], entries_.at(chain[b]))) {
        gap = b;
        break;
      }
    }
    if (gap == n) break;
    // Every hit longer than the gap has it in its window too (windows only move right).
    missed = true;
    n = gap / step * step;
  }
  if (missed) stats_.window_misses++;
  return n;
}

int BlockCache::InsertPrefix(std::span<const int32_t> tokens, const KvSequence& seq,
                             const BlockKey& ns) {
  if (static_cast<int>(tokens.size()) < options_.min_tokens) return 0;
  const int bs = pool_->layout().block_size;
  const int n_full = std::min<int>(seq.size(), static_cast<int>(tokens.size())) / bs;
  const auto& spans = seq.spans();
  BlockKey parent = ns;
  const auto now = Now();
  int b = 0;
  for (; b < n_full; ++b) {
    // Only block-aligned sequences map block b to tokens [b*bs, (b+1)*bs).
    // A moved span's keys are not those of its positions (KvSpan::shift).
    if (b >= static_cast<int>(spans.size()) || spans[b].begin != 0 || spans[b].count != bs ||
        spans[b].shift != 0) {
      break;
    }
    const auto block_tokens = tokens.subspan(size_t(b) * bs, bs);
    const BlockKey key = ChainKey(parent, block_tokens);
    if (Entry* e = Find(key)) {
      e->last_used = now;
      if (!e->sliding && spans[b].sliding) Complete(e, spans[b].block, 0);
    } else {
      Entry ne;
      ne.block = spans[b].block;
      ne.begin = 0;
      ne.count = bs;
      ne.parent = parent;
      ne.tokens.assign(block_tokens.begin(), block_tokens.end());
      ne.depth = b * bs;
      ne.prefix = true;
      ne.ns = ns;
      ne.sliding = spans[b].sliding;  // what a trimmed sequence still holds
      pool_->Ref(ne.block, ne.sliding);
      AddEntry(key, std::move(ne));
      WriteRemote(key, entries_.at(key));
    }
    parent = key;
  }
  return b;
}

int BlockCache::ForEachPrefixEntry(std::span<const int32_t> tokens, const BlockKey& ns,
                                   const std::function<void(const BlockKey&, Entry&)>& visit) {
  const int bs = pool_->layout().block_size;
  BlockKey parent = ns;
  int n = 0;
  for (int b = 0; (b + 1) * bs <= static_cast<int>(tokens.size()); ++b) {
    const BlockKey key = ChainKey(parent, tokens.subspan(size_t(b) * bs, bs));
    Entry* e = Find(key);
    if (e == nullptr && LoadFromDisk(key, /*prefix=*/true, ns)) e = Find(key);
    if (e == nullptr) break;
    visit(key, *e);
    n += bs;
    parent = key;
  }
  return n;
}

bool BlockCache::AppendCached(const BlockKey& key, KvSequence* seq, bool segment) {
  Entry* e = Find(key);
  if (e == nullptr && LoadFromDisk(key, /*prefix=*/false)) e = Find(key);
  if (e != nullptr && segment) e->segment = true;
  // A module is read at any position: without its sliding part it is a miss (re-encoded).
  if (e == nullptr || !MakeComplete(key, *e)) return false;
  seq->AppendBlock(e->block, e->begin, e->count);
  e->last_used = Now();
  return true;
}

void BlockCache::Insert(const BlockKey& key, const BlockKey& parent, const KvSequence& seq,
                        int slot_begin, std::span<const int32_t> tokens, bool segment) {
  const KvSpan first = seq.Locate(slot_begin);
  PC_CHECK(first.begin + static_cast<int>(tokens.size()) <= pool_->layout().block_size);
  if (Entry* e = Find(key)) {
    if (!e->sliding && first.sliding) Complete(e, first.block, first.begin);
    return;
  }
  Entry e;
  e.block = first.block;
  e.begin = first.begin;
  e.count = static_cast<int>(tokens.size());
  e.parent = parent;
  e.tokens.assign(tokens.begin(), tokens.end());
  const Entry* p = parent.empty() ? nullptr : Find(parent);
  e.depth = p ? p->depth + p->count : 0;
  e.sliding = first.sliding;
  e.segment = segment;
  pool_->Ref(e.block, e.sliding);
  AddEntry(key, std::move(e));
  WriteRemote(key, entries_.at(key));
}

void BlockCache::Complete(Entry* e, BlockId block, int begin) {
  PC_CHECK(!e->sliding && pool_->Complete(block));
  if (block != e->block) {  // the same tokens computed again: hold the complete copy instead
    pool_->Ref(block, /*sliding=*/false);
    pool_->Unref(e->block, /*sliding=*/false);
    e->block = block;
    e->begin = begin;
  }
  pool_->AcquireSliding(block);
  e->sliding = true;
  held_bytes_ += pool_->layout().sliding_bytes_per_block();
}

bool BlockCache::Evictable(const Entry& e) const {
  return !Pinned(e) && e.children == 0 && pool_->RefCount(e.block) == 1;
}

bool BlockCache::Strippable(const Entry& e) const {
  return e.prefix && e.sliding && !Pinned(e) && pool_->layout().has_sliding() &&
         pool_->SlidingRefCount(e.block) == 1;
}

void BlockCache::ExpireIdle() {
  const auto now = Now();
  if (options_.ttl_seconds > 0) {
    // Removing a leaf can make its parent a leaf: repeat until nothing more expires.
    for (bool changed = true; changed;) {
      changed = false;
      std::vector<BlockKey> idle;
      for (const auto& [key, e] : entries_) {
        const double secs = std::chrono::duration<double>(now - e.last_used).count();
        if (secs > options_.ttl_seconds && Evictable(e)) idle.push_back(key);
      }
      for (const BlockKey& k : idle) {
        RemoveEntry(k, /*spill_to_disk=*/true);
        stats_.expirations++;
        changed = true;
      }
    }
  }
}

void BlockCache::Maintain() {
  ExpireIdle();
  while (RamBytes() > options_.ram_bytes) {
    // The least recently used of the whole blocks and sliding parts that may go (earlier blocks
    // of a chain first among equals: a hit at the chain's end needs the later ones' windows).
    const BlockKey* victim = nullptr;
    const Entry* oldest = nullptr;
    for (const auto& [key, e] : entries_) {
      if (!Evictable(e) && !Strippable(e)) continue;
      if (oldest == nullptr || e.last_used < oldest->last_used ||
          (e.last_used == oldest->last_used && e.depth < oldest->depth)) {
        oldest = &e;
        victim = &key;
      }
    }
    if (victim == nullptr) break;  // everything left is in use or pinned
    const BlockKey key = *victim;
    if (Evictable(*oldest)) {
      RemoveEntry(key, /*spill_to_disk=*/true);
      stats_.evictions++;
    } else {
      StripSliding(key, entries_.at(key));  // a sequence still uses its global part
    }
  }
}

}  // namespace promptcache
