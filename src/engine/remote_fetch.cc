#include "engine/remote_fetch.h"

#include <utility>

#include "core/check.h"

namespace promptcache {

std::vector<std::vector<RemoteValue>> FetchRemotePlans(RemoteTier& tier,
                                                       std::span<const RemotePrefixFetch> plans,
                                                       int deadline_ms,
                                                       const std::function<bool()>& cancelled) {
  // One deadline for all of the plans' reads (each call's own is never later).
  RemoteBudget budget(deadline_ms);
  std::vector<std::vector<RemoteValue>> values;
  for (const RemotePrefixFetch& plan : plans) {
    values.push_back(plan.names.empty() || (cancelled && cancelled())
                         ? std::vector<RemoteValue>{}
                         : FetchRemotePrefix(tier, plan, deadline_ms, cancelled));
  }
  return values;
}

RemoteFetcher::RemoteFetcher(RemoteTier* tier, int deadline_ms, int threads)
    : tier_(tier), deadline_ms_(deadline_ms) {
  PC_CHECK(threads >= 1);
  try {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Run(); });
  } catch (...) {
    Stop();  // the threads started end before the members they use go
    throw;
  }
}

RemoteFetcher::~RemoteFetcher() { Stop(); }

void RemoteFetcher::Submit(Job job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(std::move(job));
  }
  cv_.notify_one();
}

void RemoteFetcher::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
}

// Each thread takes the oldest job. `done` runs on whichever thread served the job, several at
// once: EngineImpl::FetchDone takes the engine's lock for all it touches (the request's values,
// the queue, the count of fetches).
void RemoteFetcher::Run() {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopped, nothing left
      job = std::move(jobs_.front());
      jobs_.pop_front();
      if (stop_) {  // not sent: handed back empty, so that its request is answered
        lock.unlock();
        job.done({});
        continue;
      }
    }
    job.done(FetchRemotePlans(*tier_, *job.plans, deadline_ms_, job.cancelled));
  }
}

}  // namespace promptcache
