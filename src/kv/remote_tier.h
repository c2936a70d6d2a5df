// The remote tier of the KV block cache: a key-value store shared by server replicas (Redis, or
// Valkey, through kv/redis_tier.h), below RAM and the disk tier.
//
// A block computed by one replica is written there, so the others find it instead of computing
// it again. Its key names everything that makes its K/V mean something (RemoteKeyPrefix: the
// model fingerprint, KV type and block size; then the tenant namespace and the block's chained
// key), and its value is the disk tier's self-checking record (kv/disk_tier.h EncodeBlock), read
// back with every check again: any replica, or anything with access to the store, may have
// written it. The tier is a cache only: a value missing, expired, evicted, foreign or corrupt is
// a miss, and a store that is down or slow is a miss too, never an error for the request.
//
// Reads are synchronous (a lookup needs the answer) but bounded by a timeout; writes are queued
// and sent by a thread of the implementation's own, never on a request's path.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kv/disk_tier.h"

namespace promptcache {

struct RemoteStats {
  uint64_t hits = 0;     // values read (found)
  uint64_t misses = 0;   // keys asked for and not found (or not asked: the store was down)
  uint64_t errors = 0;   // failed connects and commands (timeouts included)
  uint64_t writes = 0;   // values stored
  uint64_t dropped = 0;  // writes dropped: the queue was full or the store failed them
  uint64_t invalid = 0;  // values found but rejected (foreign, corrupt): counted by the cache
  bool connected = false;
};

// A value read from the store, valid while `owner` lives (it may hold the client's reply: large
// values are not copied, which in glibc's allocator costs more than reading them).
struct RemoteValue {
  std::shared_ptr<const void> owner;
  std::string_view data;
};

class RemoteTier {
 public:
  virtual ~RemoteTier() = default;
  // The values of `keys`, in order (nullopt: a miss). One round trip; when the store cannot be
  // reached, every key is a miss. Thread-safe.
  virtual std::vector<std::optional<RemoteValue>> Get(const std::vector<std::string>& keys) = 0;
  // The values of `keys`, in order, each passed to `use` as it arrives (nullopt: a miss), with up
  // to `window` of them asked for ahead (pipelined): the store sends the next values while `use`
  // checks this one. Once `use` returns false nothing more is passed (what was asked for already
  // is read and dropped). This one: Get in round trips of `window` keys. Thread-safe.
  virtual void Stream(const std::vector<std::string>& keys, int window,
                      const std::function<bool(std::optional<RemoteValue>)>& use);
  // How many of `keys`, from the first, the store holds (without reading them). Thread-safe.
  virtual int CountLeading(const std::vector<std::string>& keys) = 0;
  // Queues a write; ttl_seconds 0: no expiry (pinned prefixes). False when it was dropped.
  virtual bool Put(std::string key, std::string value, int ttl_seconds) = 0;
  // Queues removing the key's expiry (a prefix pinned after it was written).
  virtual void Persist(std::string key) = 0;
  // Counts a value the cache rejected.
  virtual void CountInvalid() = 0;
  virtual RemoteStats Stats() const = 0;
  // Waits until the queued writes are sent (or dropped); for tests and shutdown.
  virtual void Flush() = 0;
};

// "pc:3:<fingerprint>:<kv type>:b<block size>:": what every key of one model and layout starts
// with (the number is the record format), so that replicas of other models or layouts sharing
// the store never even ask for each other's values.
std::string RemoteKeyPrefix(const std::string& fingerprint, KvType type, int block_size);
// prefix + "<namespace hex>:<key hex>"; the namespace is the tenant's root key (empty: shared).
std::string RemoteKey(const std::string& prefix, const BlockKey& ns, const BlockKey& key);

}  // namespace promptcache
