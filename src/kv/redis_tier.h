// The remote tier on Redis (or Valkey: the same protocol), through Debian's hiredis.
//
// Reads (a lookup's pipelined GETs of a batch of chained keys, or EXISTS for a router's probe)
// go over a small pool of connections, `read_connections` at most, shared by the engine's
// fetcher threads and the server's: each read takes a free one (a connected one first) for the
// whole call, so that reads from different threads travel at once instead of one behind another.
// They are opened lazily, one more only when every one so far is in use: a replica whose reads
// never overlap holds one. A writer thread sends queued SETs over a connection of its own
// (pipelined, with EX unless the prefix is pinned). Each call has a total deadline, however
// slowly the store answers: a lookup's `deadline_ms` (or its request's RemoteBudget, if sooner;
// waiting for a free read connection counts, and a read that gets none by then is a deadline
// miss), a write batch's max(1 s, 10 x timeout_ms, deadline_ms); `timeout_ms` bounds connecting
// and each socket read or write. A call that fails or misses its deadline closes its connection,
// and the reads' (or the writer's) connections are opened again only after a backoff (100 ms,
// doubling up to 2 s); and after `breaker.failures_to_open` failed calls in a row the store is
// not asked at all for a cool-down (CircuitBreaker): every lookup meanwhile is an instant miss.
// The write queue is bounded in bytes: beyond it writes are dropped and counted, as they are
// while the store is down. Expiry and eviction are the store's (EX, and its maxmemory-policy:
// allkeys-lru is what a cache wants); a full store that refuses writes only counts errors.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "kv/remote_tier.h"

namespace promptcache {

struct RedisOptions {
  std::string url;  // redis://[:PASSWORD@]HOST[:PORT][/DB]
  int timeout_ms = 100;
  size_t queue_bytes = size_t(256) << 20;
  int deadline_ms = 1000;  // a lookup call in all (see above)
  CircuitBreaker::Options breaker;
  // Reads at once (1: each waits for the one before it); 1..kMaxReadConnections.
  int read_connections = 4;
};
inline constexpr int kMaxReadConnections = 32;

struct RedisAddress {
  std::string host, password;
  int port = 6379;
  int db = 0;
};
// InvalidArgument with a one-line reason for anything but the form above.
Result<RedisAddress> ParseRedisUrl(const std::string& url);

// Does not need the store to be up: it is connected on first use, and again after failures.
Result<std::unique_ptr<RemoteTier>> OpenRedisTier(const RedisOptions& options);

}  // namespace promptcache
