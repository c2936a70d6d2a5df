// The remote tier on Redis (or Valkey: the same protocol), through Debian's hiredis.
//
// Two connections, each with a timeout on connecting and on every command (the writer's is ten
// times the lookups', at least 1 s: it holds up no request, and a batch of large values takes
// longer than a lookup may wait): one for reads (a lookup's pipelined GETs of a batch of chained
// keys, or EXISTS for a router's probe), shared by the engine thread and the server's threads under
// a lock, and one for a writer thread that sends queued SETs (pipelined, with EX unless the prefix
// is pinned). A connection that fails or times out is closed and tried again only after a backoff
// (100 ms, doubling up to 2 s), so a store that is down or slow costs a request at most one
// timeout, and every lookup meanwhile is an instant miss. The write queue is bounded in bytes:
// beyond it writes are dropped and counted, as they are while the store is down. Expiry and
// eviction are the store's (EX, and its maxmemory-policy: allkeys-lru is what a cache wants); a
// full store that refuses writes only counts errors.
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
