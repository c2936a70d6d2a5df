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
// Reads are synchronous for their caller but bounded: each by a total deadline, and one
// request's together by a RemoteBudget. The block cache's lookups never read it: its part of a
// lookup is planned on the cache's thread, read on another and taken in on the cache's thread
// again (kv/block_cache.h: PlanRemotePrefix or PlanRemoteBlocks, FetchRemotePrefix,
// AdoptRemotePrefix or AdoptRemoteBlocks). The engine makes a prompt's reads (prefix, segments,
// modules) on a thread of its own (engine/remote_fetch.h), and a schema's registration reads each
// of its pieces on its caller's thread (EngineImpl::EnsurePiece), never on the engine thread,
// whose steps other requests wait on. Writes are queued and sent by a thread of the
// implementation's own, never on a request's path. A store that keeps failing or missing its
// deadlines is not asked at all for a while (CircuitBreaker): lookups miss at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
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
  uint64_t deadline_misses = 0;  // calls cut short by their deadline (their keys: misses)
  uint64_t breaker_opens = 0;    // times the breaker opened (the store stopped being asked)
  uint64_t skipped = 0;          // lookups not sent while the breaker was open (misses too)
  bool connected = false;
  bool breaker_open = false;  // the store is not being asked (open, or a probe under way)
};

// Stops asking a store that fails: after `failures_to_open` consecutive failures (errors, or
// deadlines missed) of reads or of writes, the breaker opens and no call is made for
// `cooldown_s`; then one read is let through as a probe (half-open): its success closes the
// breaker, its failure opens it again for twice as long (up to `max_cooldown_s`). Writes go only
// while it is closed: a write that gets through a slow store proves little (its reply is a few
// bytes), so only a read closes it. Thread-safe; the time is passed in (tests).
class CircuitBreaker {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  struct Options {
    int failures_to_open = 3;
    double cooldown_s = 5;
    double max_cooldown_s = 60;
  };
  enum class State { kClosed, kOpen, kHalfOpen };
  enum class Path { kRead, kWrite };
  enum class Change { kNone, kOpened, kClosed };  // what a report did (for the log)

  explicit CircuitBreaker(Options options) : options_(options), cooldown_s_(options.cooldown_s) {}

  // What AllowRead answered: whether the read may go, and whether it is the half-open probe.
  struct Pass {
    bool allowed = false, probe = false;
    explicit operator bool() const { return allowed; }
  };
  // May a read go to the store now? Closed: yes. Open: no (counted as skipped) until the
  // cool-down has passed; then this read is the probe, and others are refused until it reports.
  // Every read allowed reports exactly one of Succeeded, Failed or Abandoned, with its pass's
  // `probe`.
  Pass AllowRead(TimePoint now);
  // May a write go: only while closed (no report needed for a write refused).
  bool AllowWrite() const;
  // A read's success closes the breaker, the probe's or one from before it opened (the store
  // did answer in time).
  Change Succeeded(Path path);
  // While half-open only the probe's failure opens it again: a read let through before it
  // opened, failing late, says nothing of the store since.
  Change Failed(Path path, TimePoint now, bool probe = false);
  // A read allowed but not sent after all (the connection was backing off): the probe is given
  // back, to the next read.
  void Abandoned(bool probe);

  State state() const;
  uint64_t opens() const;
  uint64_t skipped() const;
  double cooldown_s() const;  // of the current (or next) opening

 private:
  Change Open(TimePoint now);

  const Options options_;
  mutable std::mutex mu_;
  State state_ = State::kClosed;
  int read_failures_ = 0, write_failures_ = 0;  // consecutive, while closed
  TimePoint reopen_at_{};
  double cooldown_s_;
  bool probing_ = false;  // half-open: the probe is under way
  uint64_t opens_ = 0, skipped_ = 0;
};

// While one lives, every remote-tier call its thread makes ends by one deadline, `ms` from its
// creation (or an enclosing budget's, if sooner): a request's lookups, however many calls they
// take, wait that long at most in all. Calls outside any budget have a deadline of their own.
class RemoteBudget {
 public:
  explicit RemoteBudget(int ms);
  ~RemoteBudget();
  RemoteBudget(const RemoteBudget&) = delete;
  RemoteBudget& operator=(const RemoteBudget&) = delete;
  // The innermost budget's deadline on this thread, if any.
  static std::optional<std::chrono::steady_clock::time_point> Deadline();

 private:
  std::optional<std::chrono::steady_clock::time_point> saved_;
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
