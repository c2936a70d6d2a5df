// Remote prefix lookups off the engine thread: one thread of the engine's own that reads the
// values a request's prefix lookup asks the remote tier for (kv/block_cache.h
// FetchRemotePrefix), so that a slow or distant store holds up that request alone and never the
// other requests' steps.
//
// The engine thread plans each lookup (BlockCache::PlanRemotePrefix: RAM and disk first), hands
// it here, and goes on stepping; the fetcher reads the values up to the first miss under the
// request's deadline (--cache-redis-deadline) and hands them back through `done`, which puts the
// request back in the engine's queue; the engine thread then checks them into the cache
// (BlockCache::AdoptRemotePrefix) and admits the request. Lookups run one at a time, in the order
// they were handed in: each is bounded by its deadline, and the store's circuit breaker makes
// them miss at once while it is open.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "kv/block_cache.h"

namespace promptcache {

class RemoteFetcher {
 public:
  struct Job {
    const RemotePrefixFetch* plan = nullptr;  // outlives the job (held by the request)
    std::function<bool()> cancelled;          // asked after each value: the request went away
    // On the fetcher's thread: the values read, from the first key up to the first miss (none
    // for a job the fetcher stopped before sending).
    std::function<void(std::vector<RemoteValue>)> done;
  };

  // `tier` outlives the fetcher; `deadline_ms` bounds each job's reads in all.
  RemoteFetcher(RemoteTier* tier, int deadline_ms);
  ~RemoteFetcher();
  RemoteFetcher(const RemoteFetcher&) = delete;
  RemoteFetcher& operator=(const RemoteFetcher&) = delete;

  void Submit(Job job);
  // Ends the thread: the job under way finishes (within its deadline), those not started are
  // done with no values. Later calls do nothing.
  void Stop();

 private:
  void Run();

  RemoteTier* tier_;
  const int deadline_ms_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;  // guarded by mu_
  bool stop_ = false;     // guarded by mu_
  std::thread thread_;
};

}  // namespace promptcache
