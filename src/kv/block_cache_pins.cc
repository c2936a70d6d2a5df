// The block cache's pins (kv/block_cache.h): counted and timed pins on prefix chains, bounded
// by the byte quotas (in all and per owner) and the longest a pin may hold, and the operator's
// view of them (ListPins) and way to lift them (Unpin).

#include <algorithm>
#include <chrono>
#include <map>

#include "kv/block_cache.h"

namespace promptcache {

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

bool BlockCache::CountedPinHolds(const Entry& e) const {
  return e.pins > 0 && (options_.max_pin_seconds <= 0 || e.pins_until > Now());
}

bool BlockCache::Pinned(const Entry& e) const {
  return CountedPinHolds(e) || e.pinned_until > Now();
}

}  // namespace promptcache
