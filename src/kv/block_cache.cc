#include "kv/block_cache.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>

#include "core/hash.h"
#include "core/log.h"

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
  return entries_.count(key) != 0 || (disk_ && disk_->Contains(key)) ||
         (remote_ && remote_->CountLeading({RemoteKeyOf({}, key)}) == 1);
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

void BlockCache::WriteRemote(const BlockKey& key, Entry& e) {
  if (!remote_ || e.on_remote) return;
  BlockRecord r{key, e.parent, e.tokens, {}};
  r.positions.assign(pool_->Positions(e.block) + e.begin,
                     pool_->Positions(e.block) + e.begin + e.count);
  // Encoded here (a copy of the block): the writer thread never touches the pool.
  e.on_remote =
      remote_->Put(RemoteKeyOf(e.ns, key), EncodeBlock(r, fingerprint_, *pool_, e.block, e.begin),
                   e.pins > 0 ? 0 : options_.remote_ttl_seconds);
}

bool BlockCache::AdoptRemote(const BlockKey& key, std::string_view value, const BlockKey& ns,
                             const BlockKey* parent, std::span<const int32_t> tokens) {
  Result<BlockId> block = pool_->Allocate();
  if (!block.ok()) return false;
  Result<BlockRecord> r = DecodeBlock(value, key, fingerprint_, pool_, *block);
  std::string why = r.ok() ? "" : r.status().message();
  if (r.ok() && parent != nullptr &&
      (!(r->parent == *parent) || r->tokens.size() != tokens.size() ||
       !std::equal(tokens.begin(), tokens.end(), r->tokens.begin()))) {
    why = "its tokens or parent are not the prompt's";
  }
  if (!why.empty()) {
    pool_->Unref(*block);
    remote_->CountInvalid();
    if (remote_->Stats().invalid % 1000 == 1) {
      PC_LOG_WARN("cache: remote value %s skipped: %s", RemoteKeyOf(ns, key).c_str(), why.c_str());
    }
    return false;
  }
  Entry e;
  e.prefix = parent != nullptr;
  e.ns = ns;
  e.on_remote = true;
  AddLoaded(key, *block, std::move(*r), std::move(e));
  stats_.remote_loads++;
  return true;
}

void BlockCache::LoadRemoteChain(std::span<const int32_t> tokens, int limit, const BlockKey& ns,
                                 std::vector<BlockKey>* chain) {
  const int bs = pool_->layout().block_size;
  // Every key the chain could continue with, asked for a window at a time (pipelined) until the
  // first miss. About 1 MiB in flight, at least 2 values: measured on loopback with 360 KiB
  // values (smollm2-135m's f16 blocks), windows of 2 to 4 read 35% faster than 8 or than round
  // trips of 2 (the values are used while still in cache), and 1 waits on every round trip.
  const size_t per_window = (size_t(1) << 20) / pool_->layout().bytes_per_block();
  const int window =
      static_cast<int>(std::clamp<size_t>(per_window, 2, std::max(2, options_.remote_batch)));
  std::vector<BlockKey> keys;
  std::vector<std::string> names;
  BlockKey parent = chain->empty() ? ns : chain->back();
  for (int b = static_cast<int>(chain->size()); (b + 1) * bs <= limit; ++b) {
    parent = ChainKey(parent, tokens.subspan(size_t(b) * bs, bs));
    keys.push_back(parent);
    names.push_back(RemoteKeyOf(ns, parent));
  }
  size_t i = 0;
  const int first = static_cast<int>(chain->size());
  remote_->Stream(names, window, [&](std::optional<RemoteValue> value) {
    const BlockKey expect_parent = chain->empty() ? ns : chain->back();
    const auto block_tokens = tokens.subspan(size_t(first + i) * bs, bs);
    if (!value || !AdoptRemote(keys[i], value->data, ns, &expect_parent, block_tokens)) {
      return false;
    }
    chain->push_back(keys[i++]);
    return true;
  });
}

bool BlockCache::LoadFromRemote(const BlockKey& key) {
  if (!remote_) return false;
  const auto values = remote_->Get({RemoteKeyOf({}, key)});
  return values[0] && AdoptRemote(key, values[0]->data, {}, nullptr, {});
}

void BlockCache::AddEntry(const BlockKey& key, Entry e) {
  if (!e.parent.empty()) {
    if (Entry* p = Find(e.parent)) p->children++;
  }
  e.last_used = Now();
  held_bytes_ += pool_->layout().block_bytes(e.sliding);
  entries_.emplace(key, std::move(e));
}

Status BlockCache::WriteEntry(const BlockKey& key, const Entry& e) {
  BlockRecord r{key, e.parent, e.tokens, {}};
  r.positions.assign(pool_->Positions(e.block) + e.begin,
                     pool_->Positions(e.block) + e.begin + e.count);
  PC_RETURN_IF_ERROR(disk_->Write(r, *pool_, e.block, e.begin));
  stats_.disk_writes++;
  return Status::Ok();
}

bool BlockCache::OnDisk(const BlockKey& key, BlockId block) const {
  // A global-only file is not enough where the block is complete now (a sequence may hold the
  // sliding part the entry gave up).
  return disk_->Contains(key) && !(disk_->Partial(key) && pool_->Complete(block));
}

void BlockCache::Spill(const BlockKey& key, Entry& e) {
  WriteRemote(key, e);
  if (!disk_ || OnDisk(key, e.block)) return;
  Status st = WriteEntry(key, e);
  // A failing disk (read-only, full) fails every write: say so on the first and then on every
  // thousandth, not once per evicted block.
  if (!st.ok() && stats_.disk_errors++ % 1000 == 0) {
    PC_LOG_WARN("cache: %s (%llu disk write errors so far)", st.message().c_str(),
                static_cast<unsigned long long>(stats_.disk_errors));
  }
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

// Loads a block file into a fresh block and indexes it. Its parent must already be cached (the
// lookup walks chains from the root), so `depth` follows from the parent.
bool BlockCache::LoadFromDisk(const BlockKey& key, bool prefix, const BlockKey& ns) {
  if (!disk_ || !disk_->Contains(key)) return false;
  Result<BlockId> block = pool_->Allocate();
  if (!block.ok()) return false;
  Result<BlockRecord> r = disk_->Read(key, pool_, *block);
  if (!r.ok()) {
    stats_.disk_errors++;
    pool_->Unref(*block);
    return false;
  }
  Entry e;
  e.on_disk = true;
  e.prefix = prefix;
  e.ns = ns;
  AddLoaded(key, *block, std::move(*r), std::move(e));
  stats_.disk_loads++;
  return true;
}

void BlockCache::AddLoaded(const BlockKey& key, BlockId block, BlockRecord&& r, Entry e) {
  e.block = block;
  e.begin = 0;
  e.count = static_cast<int>(r.tokens.size());
  e.parent = r.parent;
  e.tokens = std::move(r.tokens);
  const Entry* parent = r.parent.empty() ? nullptr : Find(r.parent);
  e.depth = parent ? parent->depth + parent->count : 0;
  e.sliding = r.complete;
  if (!r.complete) pool_->ReleaseSliding(block);  // written global-only
  AddEntry(key, std::move(e));                    // the allocation's reference becomes the cache's
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
  bool missing = false;  // the walk stopped at a key neither RAM nor disk has
  for (int b = 0; (b + 1) * bs <= limit; ++b) {
    const auto block_tokens = tokens.subspan(size_t(b) * bs, bs);
    const BlockKey key = ChainKey(parent, block_tokens);
    Entry* e = Find(key);
    const bool disk = e == nullptr && LoadFromDisk(key, /*prefix=*/true, ns);
    if (disk) e = Find(key);
    missing = e == nullptr;
    // A hash collision would serve another prompt's K/V: compare the tokens, and the parent
    // key, which was itself verified one step earlier: by induction from the first block, a
    // hit is the very prefix asked for, never a collision of chain keys.
    if (e == nullptr || e->count != bs || !(e->parent == parent) ||
        !std::equal(e->tokens.begin(), e->tokens.end(), block_tokens.begin())) {
      break;
    }
    chain.push_back(key);
    loaded.push_back(disk ? BlockOrigin::kDisk : BlockOrigin::kRam);
    parent = key;
  }
  if (missing && remote_) LoadRemoteChain(tokens, limit, ns, &chain);
  loaded.resize(chain.size(), BlockOrigin::kRemote);
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

void BlockCache::PinnedBytes(const std::string& owner, size_t* total, size_t* owned) const {
  *total = *owned = 0;
  for (const auto& [key, e] : entries_) {
    if (!Pinned(e)) continue;
    *total += PinBytes();
    if (e.owner == owner) *owned += PinBytes();
  }
}

int BlockCache::PinWithin(std::span<const int32_t> tokens, const BlockKey& ns,
                          const std::string& owner, bool* limited,
                          const std::function<void(const BlockKey&, Entry&)>& pin) {
  ClearLapsedPins();
  size_t total = 0, owned = 0;
  PinnedBytes(owner, &total, &owned);
  bool stopped = false;
  int pinned = 0;
  const int bs = pool_->layout().block_size;
  ForEachPrefixEntry(tokens, ns, [&](const BlockKey& key, Entry& e) {
    if (stopped) return;
    if (!Pinned(e)) {
      // The default owner (the server's admin, or every client of a server without tenants)
      // is bounded by the total only.
      const bool over_owner = !owner.empty() && owned + PinBytes() > options_.owner_pin_bytes;
      if (total + PinBytes() > options_.pin_bytes || over_owner) {
        stopped = true;
        return;
      }
      total += PinBytes();
      owned += PinBytes();
      e.owner = owner;
    }
    pin(key, e);
    pinned += bs;
  });
  if (stopped) stats_.pins_limited++;
  if (limited != nullptr) *limited = stopped;
  return pinned;
}

int BlockCache::PinPrefix(std::span<const int32_t> tokens, bool pinned, const BlockKey& ns,
                          const std::string& owner, bool* limited) {
  if (!pinned) {
    if (limited != nullptr) *limited = false;
    ClearLapsedPins();
    return ForEachPrefixEntry(tokens, ns, [&](const BlockKey&, Entry& e) {
      if (e.pins > 0) e.pins--;
    });
  }
  const auto until = Now() + ToDuration(options_.max_pin_seconds);
  return PinWithin(tokens, ns, owner, limited, [&](const BlockKey& key, Entry& e) {
    // Written without expiry from now on (or its expiry removed where it was written).
    if (e.pins++ == 0 && remote_ && e.on_remote) remote_->Persist(RemoteKeyOf(e.ns, key));
    e.pins_until = until;
  });
}

int BlockCache::PinPrefixFor(std::span<const int32_t> tokens, double ttl_seconds,
                             const BlockKey& ns, const std::string& owner, bool* limited) {
  const auto now = Now();
  if (options_.max_pin_seconds > 0) ttl_seconds = std::min(ttl_seconds, options_.max_pin_seconds);
  return PinWithin(tokens, ns, owner, limited, [&](const BlockKey&, Entry& e) {
    // An expired pin's TTL no longer applies; a pin still holding keeps the longer of the two.
    if (e.pinned_until <= now) e.pin_ttl_seconds = 0;
    e.pin_ttl_seconds = std::max(e.pin_ttl_seconds, ttl_seconds);
    e.pinned_until = std::max(e.pinned_until, now + ToDuration(ttl_seconds));
  });
}

void BlockCache::ClearLapsedPins() {
  if (options_.max_pin_seconds <= 0) return;
  const auto now = Now();
  for (auto& [key, e] : entries_) {
    if (e.pins > 0 && e.pins_until <= now) e.pins = 0;
  }
}

std::vector<PinnedPrefixInfo> BlockCache::ListPins() const {
  std::map<BlockKey, bool> has_pinned_child;
  for (const auto& [key, e] : entries_) {
    if (Pinned(e) && !e.parent.empty()) has_pinned_child[e.parent] = true;
  }
  std::vector<PinnedPrefixInfo> out;
  const auto now = Now();
  for (const auto& [key, e] : entries_) {
    if (!Pinned(e) || has_pinned_child.count(key)) continue;
    PinnedPrefixInfo p;
    p.key = key;
    p.ns = e.ns;
    p.owner = e.owner;
    p.tokens = e.depth + e.count;
    p.counted = CountedPinHolds(e) ? e.pins : 0;
    Clock::time_point until = e.pinned_until > now ? e.pinned_until : now;
    if (p.counted > 0) {
      if (options_.max_pin_seconds > 0) {
        until = std::max(until, e.pins_until);
      } else {
        until = Clock::time_point::max();
      }
    }
    if (until != Clock::time_point::max()) {
      p.expires_in_seconds = std::chrono::duration<double>(until - now).count();
    }
    for (const Entry* c = &e; c != nullptr && Pinned(*c);) {
      p.bytes += PinBytes();
      auto it = c->parent.empty() ? entries_.end() : entries_.find(c->parent);
      c = it == entries_.end() ? nullptr : &it->second;
    }
    out.push_back(std::move(p));
  }
  return out;
}

Result<int> BlockCache::Unpin(const std::string& key_hex) {
  auto lift = [](Entry& e) {
    const bool was = e.pins > 0 || e.pinned_until != Clock::time_point{};
    e.pins = 0;
    e.pinned_until = {};
    e.pin_ttl_seconds = 0;
    return was;
  };
  int n = 0;
  if (key_hex.empty()) {
    for (auto& [key, e] : entries_) n += lift(e);
    return n;
  }
  BlockKey key;
  if (!BlockKey::FromHex(key_hex, &key)) return InvalidArgument("bad cache key '" + key_hex + "'");
  if (!entries_.count(key)) return NotFound("no cache entry '" + key_hex + "' in RAM");
  // Its earlier blocks, then everything cached after it.
  for (Entry* e = Find(key); e != nullptr; e = e->parent.empty() ? nullptr : Find(e->parent)) {
    n += lift(*e);
  }
  std::vector<BlockKey> later = {key};
  for (size_t i = 0; i < later.size(); ++i) {
    for (auto& [k, e] : entries_) {
      if (e.parent == later[i]) {
        later.push_back(k);
        n += lift(e);
      }
    }
  }
  return n;
}

bool BlockCache::AppendCached(const BlockKey& key, KvSequence* seq, bool segment) {
  Entry* e = Find(key);
  if (e == nullptr && LoadFromDisk(key, /*prefix=*/false)) e = Find(key);
  if (e == nullptr && LoadFromRemote(key)) e = Find(key);
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

bool BlockCache::CountedPinHolds(const Entry& e) const {
  return e.pins > 0 && (options_.max_pin_seconds <= 0 || e.pins_until > Now());
}

bool BlockCache::Pinned(const Entry& e) const {
  return CountedPinHolds(e) || e.pinned_until > Now();
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

Status BlockCache::SaveAll() {
  if (!disk_) return InvalidArgument("no disk tier configured (--cache-dir)");
  for (auto& [key, e] : entries_) {
    if (!OnDisk(key, e.block)) PC_RETURN_IF_ERROR(WriteEntry(key, e));
  }
  return Status::Ok();
}

Status BlockCache::Drop(const std::string& key_hex, bool force) {
  if (key_hex.empty()) {
    std::vector<BlockKey> keys;
    for (const auto& [key, e] : entries_) {
      // A pinned block's earlier blocks stay for it (a chain is never cut in the middle).
      if (force || !Pinned(e)) keys.push_back(key);
    }
    // Children first, so parents' child counts stay consistent.
    std::sort(keys.begin(), keys.end(), [&](const BlockKey& a, const BlockKey& b) {
      return entries_.at(a).depth > entries_.at(b).depth;
    });
    for (const BlockKey& k : keys) {
      if (Entry* e = Find(k); e != nullptr && e->children == 0) RemoveEntry(k, false);
    }
    if (disk_) {
      for (const BlockKey& k : disk_->Keys()) {
        if (!entries_.count(k)) disk_->Remove(k);
      }
    }
    return Status::Ok();
  }
  BlockKey key;
  if (!BlockKey::FromHex(key_hex, &key)) return InvalidArgument("bad cache key '" + key_hex + "'");
  const bool in_ram = entries_.count(key) != 0, on_disk = disk_ && disk_->Contains(key);
  if (!in_ram && !on_disk) return NotFound("no cache entry '" + key_hex + "'");
  // The entry and everything cached after it in its chain.
  std::vector<BlockKey> doomed = {key};
  for (size_t i = 0; i < doomed.size(); ++i) {
    for (const auto& [k, e] : entries_) {
      if (e.parent == doomed[i]) doomed.push_back(k);
    }
  }
  for (auto it = doomed.rbegin(); it != doomed.rend(); ++it) {
    if (entries_.count(*it)) {
      if (!force && Pinned(entries_.at(*it))) {
        return InvalidArgument("cache entry is pinned (an admin may drop it with ?force=true)");
      }
    }
  }
  for (auto it = doomed.rbegin(); it != doomed.rend(); ++it) {
    if (entries_.count(*it)) RemoveEntry(*it, false);
    if (disk_) disk_->Remove(*it);
  }
  return Status::Ok();
}

std::vector<CachedPrefixInfo> BlockCache::List() const {
  std::vector<CachedPrefixInfo> out;
  const auto now = Now();
  for (const auto& [key, e] : entries_) {
    if (e.children != 0) continue;  // list each chain once, by its last block
    out.push_back({key, e.depth + e.count, true, disk_ && disk_->Contains(key), Pinned(e),
                   std::chrono::duration<double>(now - e.last_used).count()});
  }
  if (disk_) {
    for (const BlockKey& k : disk_->Keys()) {
      if (!entries_.count(k)) out.push_back({k, 0, false, true, false, 0});
    }
  }
  return out;
}

std::vector<CachedBlockInfo> BlockCache::ListBlocks(size_t max_disk_only) const {
  std::vector<CachedBlockInfo> out;
  const auto now = Now();
  for (const auto& [key, e] : entries_) {
    CachedBlockInfo b;
    b.key = key;
    b.parent = e.parent;
    b.depth = e.depth;
    b.tokens = e.tokens;
    b.on_disk = disk_ && disk_->Contains(key);
    b.pinned = Pinned(e);
    b.prefix = e.prefix;
    b.segment = e.segment;
    b.hits = e.hits;
    b.idle_seconds = std::chrono::duration<double>(now - e.last_used).count();
    out.push_back(std::move(b));
  }
  if (!disk_) return out;
  // Disk-only blocks: their depth is their parent's end, found by walking up what is listed.
  std::map<BlockKey, size_t> listed;
  for (size_t i = 0; i < out.size(); ++i) listed[out[i].key] = i;
  const size_t first_disk = out.size();
  for (const BlockKey& key : disk_->Keys()) {
    if (entries_.count(key) || out.size() - first_disk >= max_disk_only) continue;
    Result<BlockRecord> r = disk_->Peek(key);
    if (!r.ok()) continue;  // Read, when asked for it, removes and counts a bad file
    CachedBlockInfo b;
    b.key = key;
    b.parent = r->parent;
    b.tokens = std::move(r->tokens);
    b.in_ram = false;
    b.on_disk = true;
    b.prefix = true;
    b.depth = -1;
    listed[key] = out.size();
    out.push_back(std::move(b));
  }
  for (size_t i = first_disk; i < out.size(); ++i) {
    std::vector<size_t> path;  // from block i up to the first with a known depth
    size_t j = i;
    while (out[j].depth < 0) {
      path.push_back(j);
      auto p = listed.find(out[j].parent);
      if (out[j].parent.empty() || p == listed.end() || path.size() > out.size()) {
        out[j].parent = {};  // its chain's earlier blocks are gone: drawn as a chain of its own
        out[j].depth = 0;
        path.pop_back();
        break;
      }
      j = p->second;
    }
    for (auto it = path.rbegin(); it != path.rend(); ++it) {
      const CachedBlockInfo& parent = out[listed.at(out[*it].parent)];
      out[*it].depth = parent.depth + int(parent.tokens.size());
    }
  }
  return out;
}

BlockCacheStats BlockCache::Stats() const {
  BlockCacheStats s = stats_;
  s.ram_blocks = entries_.size();
  s.ram_bytes = held_bytes_;
  s.pinned_blocks = 0;
  for (const auto& [k, e] : entries_) s.pinned_blocks += Pinned(e);
  s.pinned_bytes = s.pinned_blocks * PinBytes();
  if (disk_) {
    s.disk_bytes = disk_->bytes();
    s.disk_files = disk_->files();
    s.disk_errors += disk_->skipped();
  }
  if (remote_) {
    s.has_remote = true;
    s.remote = remote_->Stats();
  }
  return s;
}

}  // namespace promptcache
