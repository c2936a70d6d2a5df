// The remote tier on Redis (or Valkey: the same protocol), through Debian's hiredis.
//
// Two connections: one for reads (a lookup's pipelined GETs of a batch of chained keys, or EXISTS
// for a router's probe), shared by the engine thread and the server's threads under a lock, and
// one for a writer thread that sends queued SETs (pipelined, with EX unless the prefix is
// pinned). Each call has a total deadline, however slowly the store answers: a lookup's
// `deadline_ms` (or its request's RemoteBudget, if sooner; waiting for the lock counts), a write
// batch's max(1 s, 10 x timeout_ms, deadline_ms); `timeout_ms` bounds connecting and each socket
// read or write. A call that fails or misses its deadline closes its connection, which is tried
// again only after a backoff (100 ms, doubling up to 2 s); and after `breaker.failures_to_open` of
// them in a row the store is not asked at all for a cool-down (CircuitBreaker): every lookup
// meanwhile is an instant miss. The write queue is bounded in bytes: beyond it writes are dropped
// and counted, as they are while the store is down. Expiry and eviction are the store's (EX, and
// its maxmemory-policy: allkeys-lru is what a cache wants); a full store that refuses writes only
// counts errors.
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
};

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
