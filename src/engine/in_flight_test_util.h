// Helpers of the in-flight sharing tests (engine_in_flight_test.cc, segment_in_flight_test.cc),
// on engine_test_util.h's (the model, Make, Reference): seeded token runs, an engine with room
// for a burst on stories260K (or synth's tiny gemma3), and a Gate that holds the engine thread
// inside a step while a burst is submitted, so that the burst is admitted together, in order, at
// the next step (as clients arriving at once); its own request then decodes one token per step,
// which numbers the steps. Nothing here is timed: bounds are in steps, waits are liveness bounds.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <future>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine_impl.h"
#include "engine/engine_test_util.h"
#include "engine/test_models.h"

namespace promptcache {
namespace in_flight_test {

inline constexpr int kBlock = 16;
inline constexpr double kLiveness = 120;  // seconds: a request that takes longer is stuck

// n token ids of a seeded run (salts give runs that share no block).
inline std::vector<int32_t> Ids(int n, int salt) {
  std::vector<int32_t> t;
  uint32_t x = 2654435761u * uint32_t(salt + 1);
  for (int i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    t.push_back(int32_t(3 + (x >> 8) % 480));
  }
  return t;
}

inline std::vector<int32_t> Cat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Synth's tiny gemma3 (test_models.h): sliding windows of 24 tokens on 7 of its 8 layers.
inline std::string SlidingModel() { return ModelPath("gemma3"); }

// Make's engine (over `model`) with room for a whole burst: 12 sequences, and 32-token batches,
// so that a 160-token prefix takes several steps.
inline std::unique_ptr<Engine> MakeBurstEngine(EngineOptions o = {},
                                               const std::string& model = kStories) {
  o.model_path = model;
  o.parallel = 12;
  o.batch_size = 32;
  return Make(std::move(o));
}

class Gate {
 public:
  // `at_step(k)` runs on the engine thread in step k after the burst's admission (1: its first).
  explicit Gate(Engine& e, std::function<void(int)> at_step = nullptr)
      : at_step_(std::move(at_step)), opened_(open_.get_future().share()) {
    CompletionRequest r;
    r.prompt = Ids(8, 999);
    r.max_tokens = 400;
    r.ignore_eos = true;
    r.sampling.temperature = 0;
    r.on_logits = [this](std::span<const float>) {
      const int k = steps_++;
      if (k == 0) {
        held_.set_value();
        opened_.wait();
      } else if (at_step_) {
        at_step_(k);
      }
    };
    auto h = e.Submit(std::move(r));
    PC_CHECK(h.ok());
    handle_ = *h;
    held_.get_future().wait();  // the engine thread is inside a step now
  }
  ~Gate() {
    if (!opened_called_) Open();
    handle_->Cancel();
    handle_->Wait();
  }
  void Open() {
    opened_called_ = true;
    open_.set_value();
  }
  // The step running now (engine thread) or last run.
  int Step() const { return steps_ - 1; }

 private:
  std::function<void(int)> at_step_;
  std::promise<void> open_, held_;
  std::shared_future<void> opened_;
  std::atomic<int> steps_{0};
  bool opened_called_ = false;
  std::shared_ptr<RequestHandle> handle_;
};

struct Probe {
  std::vector<int32_t> prompt;
  std::string ns;
  int n = 1;
  std::vector<PromptSegment> segments;
  std::shared_ptr<RequestHandle> h;
  std::atomic<int> first_step{-1};  // the step that gave its first token
  CompletionResult result;
};

inline void Submit(Engine& e, Gate& g, Probe& p, int max_tokens = 12) {
  CompletionRequest r;
  r.prompt = p.prompt;
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  r.sampling.temperature = 0;
  r.cache_namespace = p.ns;
  r.n = p.n;
  r.segments = p.segments;
  r.on_logits = [&g, &p](std::span<const float>) {
    if (p.first_step < 0) p.first_step = g.Step();
  };
  auto h = e.Submit(std::move(r));
  PC_CHECK(h.ok());
  p.h = *h;
}

inline void Finish(Probe& p) {
  ASSERT_TRUE(p.h->WaitFor(kLiveness)) << "a request of the burst never finished";
  p.result = p.h->Wait();
  ASSERT_TRUE(p.result.status.ok()) << p.result.status.message();
}

// Submits `burst` to the engine `g` holds, in that order, opens the gate and waits for each
// request to finish (call it in ASSERT_NO_FATAL_FAILURE).
inline void RunBurst(Engine& e, Gate& g, const std::vector<Probe*>& burst) {
  for (Probe* p : burst) Submit(e, g, *p);
  g.Open();
  for (Probe* p : burst) ASSERT_NO_FATAL_FAILURE(Finish(*p));
}

// A finished request's segment hits and stores, as one pair to compare.
inline std::pair<int, int> HitsAndStores(const Probe& p) {
  return {p.result.segment_hits, p.result.segment_stores};
}

inline size_t CommonPrefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

// What request i of a burst reuses when every shared block is computed once: the most whole
// blocks it shares with an earlier request of its namespace (which computes them, or took them
// in turn), never its last token.
inline int ExpectedCached(const std::vector<std::unique_ptr<Probe>>& burst, size_t i) {
  size_t best = 0;
  for (size_t j = 0; j < i; ++j) {
    if (burst[j]->ns == burst[i]->ns) {
      best = std::max(best, CommonPrefix(burst[i]->prompt, burst[j]->prompt) / kBlock);
    }
  }
  const size_t limit = (burst[i]->prompt.size() - 1) / kBlock;
  return static_cast<int>(std::min(best, limit)) * kBlock;
}

}  // namespace in_flight_test
}  // namespace promptcache
