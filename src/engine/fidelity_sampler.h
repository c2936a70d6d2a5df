// Fidelity in production (EngineOptions::fidelity_sample): served requests whose prompts reused
// approximate K/V (schema modules, segments) evaluated in the background against the full
// recompute of the same tokens, into EngineStats::fidelity.
//
// The engine thread picks one eligible request in N when its first token's logits come (Pick),
// keeps the logits of its first kFidelitySampleSteps generated tokens, and hands them over with
// the prompt and tokens once the request has finished and answered (Add): nothing of a request's
// response waits for its evaluation. At most kFidelityQueue samples wait; more are dropped and
// counted. One worker thread evaluates them, with a Runner of one compute thread at the lowest
// CPU priority (nice 19 on Linux), and starts an evaluation only while the engine is idle (no
// request running or queued: `idle` says), so that it takes from serving at most the spare
// core time of an evaluation begun just before a request came. Destroying the sampler cancels
// the evaluation under way (between its steps) and drops what waits.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/runner.h"
#include "model/model.h"
#include "promptcache/engine.h"

namespace promptcache {

// A served request's sample: what the comparison needs.
struct FidelitySample {
  bool segment = false;         // reused segments (else schema modules)
  std::vector<int32_t> prompt;  // the prompt's tokens in order (by position for modular ones)
  std::vector<int32_t> tokens;  // the tokens it generated, up to kFidelitySampleSteps
  std::vector<std::vector<float>> logits;  // the logits each was chosen from
};

class FidelitySampler {
 public:
  // `every`: N of EngineOptions::fidelity_sample (> 0). `idle`: whether the engine serves no
  // request now (called from the worker, without the sampler's lock held).
  FidelitySampler(const Model& model, const RunnerOptions& runner, int every,
                  std::function<bool()> idle);
  ~FidelitySampler();
  FidelitySampler(const FidelitySampler&) = delete;
  FidelitySampler& operator=(const FidelitySampler&) = delete;

  // An eligible request (engine thread): true for the first and then every N-th.
  bool Pick();
  // Queues a sample for evaluation, or drops it (counted) when kFidelityQueue wait already.
  void Add(FidelitySample sample);
  // The engine may have become idle: the worker looks again.
  void Wake();
  FidelityStats Stats() const;

 private:
  void Loop();
  void Evaluate(const FidelitySample& sample);

  const Model& model_;
  RunnerOptions runner_;
  const int every_;
  std::function<bool()> idle_;
  uint64_t eligible_ = 0;  // engine thread
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<FidelitySample> queue_;  // guarded by mu_
  bool running_ = false;              // guarded by mu_: an evaluation is under way
  FidelityStats stats_;               // guarded by mu_ (pending computed in Stats)
  std::thread thread_;
};

}  // namespace promptcache
