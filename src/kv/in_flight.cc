// InFlightBlocks (kv/in_flight.h): claims by key, and each owner's keys for releasing them.
#include "kv/in_flight.h"

#include "core/check.h"

namespace promptcache {

int InFlightBlocks::Claim(Owner owner, std::span<const BlockKey> keys) {
  PC_CHECK(owner != 0);
  int claimed = 0;
  for (const BlockKey& key : keys) {
    auto [it, fresh] = claims_.try_emplace(key, Holder{owner, false});
    if (!fresh && it->second.owner != owner) continue;
    if (fresh) by_owner_[owner].push_back(key);
    ++claimed;
  }
  return claimed;
}

void InFlightBlocks::MarkReady(Owner owner, const BlockKey& key) {
  auto it = claims_.find(key);
  if (it != claims_.end() && it->second.owner == owner) it->second.ready = true;
}

InFlightBlocks::Holder InFlightBlocks::Find(const BlockKey& key) const {
  auto it = claims_.find(key);
  return it == claims_.end() ? Holder{} : it->second;
}

void InFlightBlocks::ReleaseAll(Owner owner) {
  auto it = by_owner_.find(owner);
  if (it == by_owner_.end()) return;
  for (const BlockKey& key : it->second) claims_.erase(key);
  by_owner_.erase(it);
}

}  // namespace promptcache
