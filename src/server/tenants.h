// Tenant isolation for the prefix cache: which tenant an API key belongs to, and the cache
// namespace a request's prefixes live in.
//
// A namespace is derived on the server, never taken from the client as is: HMAC-SHA256 keyed
// with a server secret over the tenant (from --api-keys) and the request's cache_salt (vLLM's
// field). Prefixes of one namespace are never reused by another (kv/block_cache.h chains them
// from the namespace), so one tenant can neither hit nor time another's prompts; within one
// namespace the timing side channel remains (docs/server.md). Replicas that share a remote tier
// must share the secret for a tenant's prefixes to be found across them.
#pragma once

#include <map>
#include <string>

#include "core/status.h"

namespace promptcache {

// "KEY [TENANT]" per line ('#' comments and blank lines skipped). A key without a tenant is a
// tenant of its own (named after a hash of the key). InvalidArgument names the line at fault.
Result<std::map<std::string, std::string>> ParseApiKeys(const std::string& text,
                                                        const std::string& file);
Result<std::map<std::string, std::string>> ReadApiKeysFile(const std::string& path);

// "" for the default namespace (no tenant, no salt: the cache every unsalted request of a server
// without tenants shares); else the hex HMAC-SHA256 of tenant and salt under `secret`.
std::string CacheNamespace(const std::string& secret, const std::string& tenant,
                           const std::string& salt);

// The server secret: the first line of `file` when given; else DIR/cache-secret under the cache
// folder, created (32 random bytes, hex, mode 0600) when missing; else a random one for this
// process only. `where` says which, for the log.
Result<std::string> LoadCacheSecret(const std::string& file, const std::string& cache_dir,
                                    std::string* where);

}  // namespace promptcache
