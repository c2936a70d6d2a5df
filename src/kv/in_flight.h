// Blocks being computed now: the keys of BlockCache blocks that a running computation (a
// sequence's prefill, a prefix warm-up) has set out to compute and has not finished, so that
// another request wanting the same blocks waits for them instead of computing them again (as
// SGLang's scheduler shares a prefix in flight).
//
// The protocol, for any kind of keyed block (prefix chains, and anything else the BlockCache
// keys: schema modules, document segments):
//   - A producer claims the keys it is about to compute, in order, before it computes them.
//     Keys another producer holds are not claimed: the producer waits for them (or computes
//     them without claiming, when it will not wait).
//   - After the forward pass that completes a block, the producer inserts the block into the
//     BlockCache and marks its key ready. Only then may anyone else reference it: a block is
//     never shared half computed.
//   - When the producer ends (done, cancelled, failed), it releases all its claims. Keys released
//     without being ready were never published: a waiter finds them claimed by nobody, claims them
//     and computes them itself (it takes over; nobody fails for it).
//   - A waiter waits while the key it needs is claimed by another producer and not ready, then
//     looks the blocks up in the BlockCache as any request does. What it finds there, it reuses;
//     what it does not (evicted, never published), it computes.
// Keys are the cache's own (chained from a namespace's root), so claims never cross namespaces.
//
// Not thread-safe: the engine thread owns it, as it owns the BlockCache.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "kv/disk_tier.h"  // BlockKey

namespace promptcache {

class InFlightBlocks {
 public:
  using Owner = uint64_t;  // a producer's id; 0 is nobody

  struct Holder {
    Owner owner = 0;     // who computes the block (0: nobody)
    bool ready = false;  // computed and in the BlockCache: usable now
  };

  // Claims each of `keys` for `owner` unless another owner holds it (those are skipped);
  // returns how many it claimed (keys it held already count).
  int Claim(Owner owner, std::span<const BlockKey> keys);
  // The block under `key` is complete and published: waiters may reference it.
  void MarkReady(Owner owner, const BlockKey& key);
  // Who holds the key, and whether its block is ready.
  Holder Find(const BlockKey& key) const;
  // Whether another producer than `self` is computing the key's block now (claimed, not ready).
  bool ComputedByOther(const BlockKey& key, Owner self) const {
    const Holder c = Find(key);
    return c.owner != 0 && c.owner != self && !c.ready;
  }
  // Drops every claim of `owner` (it finished, or gave up).
  void ReleaseAll(Owner owner);

  size_t size() const { return claims_.size(); }

 private:
  std::map<BlockKey, Holder> claims_;
  std::map<Owner, std::vector<BlockKey>> by_owner_;
};

}  // namespace promptcache
