#include "engine/fidelity_sampler.h"

#include <algorithm>
#include <chrono>

#include "core/log.h"
#include "core/stop_thread.h"
#include "engine/fidelity.h"

#ifdef __linux__
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace promptcache {
namespace {

// How often a worker with samples waiting looks whether the engine has become idle, when no
// Wake comes first.
constexpr auto kIdlePoll = std::chrono::milliseconds(20);

}  // namespace

FidelitySampler::FidelitySampler(const Model& model, const RunnerOptions& runner, int every,
                                 std::function<bool()> idle)
    : model_(model), runner_(runner), every_(std::max(1, every)), idle_(std::move(idle)) {
  runner_.threads = 1;  // one core at most, whatever the engine uses
  thread_ = std::thread([this] { Loop(); });
}

FidelitySampler::~FidelitySampler() { StopAndJoin(mu_, stop_, cv_, thread_); }

bool FidelitySampler::Pick() { return eligible_++ % uint64_t(every_) == 0; }

void FidelitySampler::Add(FidelitySample sample) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ || queue_.size() + (running_ ? 1 : 0) >= size_t(kFidelityQueue)) {
      ++stats_.dropped;
      return;
    }
    queue_.push_back(std::move(sample));
  }
  cv_.notify_all();
}

void FidelitySampler::Wake() { cv_.notify_all(); }

FidelityStats FidelitySampler::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  FidelityStats s = stats_;
  s.pending = static_cast<int>(queue_.size()) + (running_ ? 1 : 0);
  return s;
}

void FidelitySampler::Loop() {
#ifdef __linux__
  // The lowest priority for this thread alone (Linux's nice is per thread): serving comes first.
  setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 19);
#endif
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
    }
    // Idle is the engine's to say, under its own lock: asked without ours.
    if (!idle_()) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, kIdlePoll, [&] { return stop_.load(); });
      continue;
    }
    FidelitySample sample;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_ || queue_.empty()) continue;
      sample = std::move(queue_.front());
      queue_.pop_front();
      running_ = true;
    }
    Evaluate(sample);
  }
}

void FidelitySampler::Evaluate(const FidelitySample& sample) {
  // The contiguous baseline: the same tokens sent plainly.
  const ExpandedPrompt x = Contiguous(sample.prompt);
  CompareOptions co;
  co.against_logits_top1 = true;  // the request may have sampled, or followed a grammar
  co.greedy = false;
  co.cancelled = [this] { return stop_.load(); };
  const Result<FidelityReport> rep =
      CompareWithFullRecompute(model_, x, sample.tokens, sample.logits, runner_, co);
  // The sample leaves `pending` as it is counted, under one lock: pending + samples + dropped +
  // failed never moves but by a new sample.
  std::lock_guard<std::mutex> lock(mu_);
  running_ = false;
  if (stop_) return;  // cancelled (or finished as the engine stopped): not counted
  if (!rep.ok()) {
    ++stats_.failed;
    PC_LOG_WARN("fidelity sample: %s", rep.status().message().c_str());
    return;
  }
  FidelityTally& t = sample.segment ? stats_.segments : stats_.modules;
  ++t.samples;
  t.steps += uint64_t(rep->steps);
  t.agreements += uint64_t(rep->agreements);
  t.margin_steps += uint64_t(rep->margin_steps);
  t.margin_agreements += uint64_t(rep->margin_agreements);
  t.first_token_kl_sum += rep->first_token_kl;
  t.first_token_kl_max = std::max(t.first_token_kl_max, rep->first_token_kl);
  t.mean_kl_sum += rep->mean_kl;
}

}  // namespace promptcache
