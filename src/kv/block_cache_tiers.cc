// The block cache's tiers below RAM (kv/block_cache.h): what is written to the disk and remote
// tiers (spilled on eviction, written through once to the remote tier, saved on demand), and how
// a block file or a remote value comes back into RAM, checked against the chain that asks for it.

#include <algorithm>
#include <optional>
#include <string>

#include "core/check.h"
#include "core/log.h"
#include "kv/block_cache.h"

namespace promptcache {

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

RemotePrefixFetch BlockCache::RemoteChain(std::span<const int32_t> tokens, int limit,
                                          const BlockKey& ns, const BlockKey& parent,
                                          int first) const {
  const int bs = pool_->layout().block_size;
  RemotePrefixFetch f;
  f.ns = ns;
  f.parent = parent;
  f.first = first;
  // Every key the chain could continue with, asked for a window at a time until the first miss.
  f.window = RemoteWindow();
  BlockKey key = parent;
  for (int b = first; (b + 1) * bs <= limit; ++b) {
    key = ChainKey(key, tokens.subspan(size_t(b) * bs, bs));
    f.keys.push_back(key);
    f.names.push_back(RemoteKeyOf(ns, key));
  }
  return f;
}

RemotePrefixFetch BlockCache::PlanRemotePrefix(std::span<const int32_t> tokens, int max_tokens,
                                               const BlockKey& ns) const {
  if (!remote_) return {};
  const int bs = pool_->layout().block_size;
  const int limit = std::min<int>(max_tokens, static_cast<int>(tokens.size()));
  // LookupPrefix's walk, without loading: a block file is taken to hold what its key names (a
  // file that fails its checks then ends the lookup early; the remote tier is not asked).
  BlockKey parent = ns;
  int b = 0;
  for (; (b + 1) * bs <= limit; ++b) {
    const auto block_tokens = tokens.subspan(size_t(b) * bs, bs);
    const BlockKey key = ChainKey(parent, block_tokens);
    auto it = entries_.find(key);
    if (it == entries_.end() && !(disk_ && disk_->Contains(key))) break;
    if (it != entries_.end() && !IsBlockOf(it->second, parent, block_tokens)) {
      return {};  // another prompt's block under this key: LookupPrefix stops here too
    }
    parent = key;
  }
  return RemoteChain(tokens, limit, ns, parent, b);
}

RemotePrefixFetch SlicePlan(const RemotePrefixFetch& fetch, size_t from, size_t n) {
  PC_CHECK(from + n <= fetch.keys.size());
  RemotePrefixFetch s;
  s.ns = fetch.ns;
  s.parent = from == 0 ? fetch.parent : fetch.keys[from - 1];
  s.first = fetch.first + static_cast<int>(from);
  s.keys.assign(fetch.keys.begin() + from, fetch.keys.begin() + from + n);
  s.names.assign(fetch.names.begin() + from, fetch.names.begin() + from + n);
  s.window = fetch.window;
  return s;
}

std::vector<RemoteValue> FetchRemotePrefix(RemoteTier& tier, const RemotePrefixFetch& fetch,
                                           int deadline_ms, const std::function<bool()>& stop) {
  RemoteBudget budget(deadline_ms);
  std::vector<RemoteValue> values;
  tier.Stream(fetch.names, fetch.window, [&](std::optional<RemoteValue> value) {
    if (!value) return false;
    values.push_back(std::move(*value));
    return !(stop && stop());
  });
  return values;
}

std::vector<BlockKey> BlockCache::AdoptRemotePrefix(std::span<const int32_t> tokens,
                                                    const RemotePrefixFetch& fetch,
                                                    std::span<const RemoteValue> values,
                                                    size_t* walked) {
  const int bs = pool_->layout().block_size;
  std::vector<BlockKey> adopted;
  BlockKey parent = fetch.parent;
  size_t i = 0;
  for (; i < values.size() && i < fetch.keys.size(); ++i) {
    const BlockKey& key = fetch.keys[i];
    const auto block_tokens = tokens.subspan(size_t(fetch.first + i) * bs, bs);
    if (const Entry* e = Find(key)) {
      // Cached while the values travelled: kept, if it is this prompt's block.
      if (!IsBlockOf(*e, parent, block_tokens)) break;
    } else if (AdoptRemote(key, values[i].data, fetch.ns, &parent, block_tokens)) {
      adopted.push_back(key);
    } else {
      break;
    }
    parent = key;
  }
  if (walked != nullptr) *walked = i;
  return adopted;
}

RemotePrefixFetch BlockCache::PlanRemoteBlocks(std::span<const BlockKey> keys) const {
  if (!remote_) return {};
  size_t b = 0;
  while (b < keys.size() && (entries_.count(keys[b]) != 0 || (disk_ && disk_->Contains(keys[b])))) {
    ++b;
  }
  RemotePrefixFetch f;
  f.first = static_cast<int>(b);
  f.keys.assign(keys.begin() + b, keys.end());
  for (const BlockKey& k : f.keys) f.names.push_back(RemoteKeyOf({}, k));
  f.window = RemoteWindow();
  return f;
}

int BlockCache::RemoteWindow() const {
  // Pipelined, about 1 MiB in flight, at least 2 values: measured on loopback with 360 KiB
  // values (smollm2-135m's f16 blocks), windows of 2 to 4 read 35% faster than 8 or than round
  // trips of 2 (the values are used while still in cache), and 1 waits on every round trip.
  const size_t per_window = (size_t(1) << 20) / pool_->layout().bytes_per_block();
  return static_cast<int>(std::clamp<size_t>(per_window, 2, std::max(2, options_.remote_batch)));
}

int BlockCache::AdoptRemoteBlocks(const RemotePrefixFetch& fetch,
                                  std::span<const RemoteValue> values) {
  int n = 0;
  for (size_t i = 0; i < values.size() && i < fetch.keys.size(); ++i) {
    if (Find(fetch.keys[i]) == nullptr &&
        !AdoptRemote(fetch.keys[i], values[i].data, {}, nullptr, {})) {
      break;
    }
    ++n;
  }
  return n;
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

Status BlockCache::SaveAll() {
  if (!disk_) return InvalidArgument("no disk tier configured (--cache-dir)");
  for (auto& [key, e] : entries_) {
    if (!OnDisk(key, e.block)) PC_RETURN_IF_ERROR(WriteEntry(key, e));
  }
  return Status::Ok();
}

}  // namespace promptcache
