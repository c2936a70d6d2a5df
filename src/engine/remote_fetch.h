// Remote lookups off the engine thread: a few threads of the engine's own that read the values a
// request's prefix, segment and module lookups ask the remote tier for (kv/block_cache.h
// FetchRemotePrefix), so that a slow or distant store holds up that request alone and never the
// other requests' steps.
//
// The engine thread plans each request's lookups (BlockCache::PlanRemotePrefix, and for each
// segment or module piece PlanRemoteBlocks: RAM and disk first), hands them here, and goes on
// stepping; the fetcher reads each plan's values up to its first miss, all under the request's
// deadline (--cache-redis-deadline), and hands them back through `done`, which puts the request
// back in the engine's queue; the engine thread then checks them into the cache
// (AdoptRemotePrefix, AdoptRemoteBlocks) and admits the request. Up to `threads` requests are
// served at once (--cache-redis-readers: as many as the Redis client has read connections), taken
// in the order they were handed in, so that one request's long or slow fetch does not hold up the
// fetches queued behind it; each is bounded by its own deadline, and the store's circuit breaker
// makes them miss at once while it is open. A schema's registration reads its
// modules the same way, on its caller's thread instead of this one (FetchRemotePlans,
// EngineImpl::EnsurePiece).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "kv/block_cache.h"

namespace promptcache {

// The values of each of `plans` (as FetchRemotePrefix reads them; none for a plan without names,
// nor for those left once `cancelled`, which may be null, says so), all read under one
// RemoteBudget of `deadline_ms`. Touches no cache: the fetcher's thread and a schema's
// registration (EngineImpl::EnsurePiece, on its caller's thread) read through it.
std::vector<std::vector<RemoteValue>> FetchRemotePlans(
    RemoteTier& tier, std::span<const RemotePrefixFetch> plans, int deadline_ms,
    const std::function<bool()>& cancelled = nullptr);

class RemoteFetcher {
 public:
  struct Job {
    // A request's lookups: its prefix's, then its segments' (a plan without names is not sent).
    // Outlives the job (held by the request).
    const std::vector<RemotePrefixFetch>* plans = nullptr;
    std::function<bool()> cancelled;  // asked after each value: the request went away
    // On one of the fetcher's threads (several jobs' at once): for each plan, the values read,
    // from its first key up to the first miss (none for a job the fetcher stopped before
    // sending).
    std::function<void(std::vector<std::vector<RemoteValue>>)> done;
  };

  // `tier` outlives the fetcher; `deadline_ms` bounds each job's reads in all; `threads` (>= 1)
  // jobs are served at once.
  RemoteFetcher(RemoteTier* tier, int deadline_ms, int threads);
  ~RemoteFetcher();
  RemoteFetcher(const RemoteFetcher&) = delete;
  RemoteFetcher& operator=(const RemoteFetcher&) = delete;

  void Submit(Job job);
  // Ends the threads: the jobs under way finish (each within its deadline), those not started
  // are done with no values. Later calls do nothing.
  void Stop();

 private:
  void Run();

  RemoteTier* tier_;
  const int deadline_ms_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;  // guarded by mu_
  bool stop_ = false;     // guarded by mu_
  std::vector<std::thread> threads_;
};

}  // namespace promptcache
