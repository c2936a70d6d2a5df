// What the block cache reports and an operator removes (kv/block_cache.h): one row per cached
// chain (List), every block with its parent and depth for the tree view (ListBlocks, disk-only
// blocks included), the statistics, and Drop of one chain or of everything.

#include <algorithm>
#include <chrono>
#include <map>

#include "kv/block_cache.h"

namespace promptcache {

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
