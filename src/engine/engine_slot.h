// Internal to the engine (the files that implement engine_impl.h): a request as the engine
// thread holds it (its choices and result) and a slot (one sequence being served: a choice of a
// request), with the clock and cache-map helpers they share.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <limits>
#include <mutex>

#include "engine/engine_impl.h"

namespace promptcache {
namespace engine_internal {

using Clock = std::chrono::steady_clock;

inline double MsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// Appends `length` tokens from `source` to a cache map's runs, merging with the last run.
inline void AddRun(std::vector<SourceRun>* runs, TokenSource source, int length) {
  if (length <= 0) return;
  if (!runs->empty() && runs->back().source == source) {
    runs->back().length += length;
  } else {
    runs->push_back({source, length});
  }
}

inline constexpr size_t kTtftWindow = 1024;  // recent TTFT samples kept for the metrics histogram

}  // namespace engine_internal

using engine_internal::AddRun;
using engine_internal::Clock;
using engine_internal::kTtftWindow;
using engine_internal::MsBetween;

struct EngineImpl::Request : RequestHandle {
  CompletionRequest req;
  std::unique_ptr<Planned> modular;  // a PML prompt; null for token prompts
  Clock::time_point submitted = Clock::now();
  std::atomic<bool> cancelled{false};
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  CompletionResult result;
  // Engine thread: the choices, filled as their slots finish; choice 0's result carries the
  // request's timings. `open` counts the slots still running.
  std::vector<CompletionChoice> choices = std::vector<CompletionChoice>(1);
  CompletionResult base;
  Status failure;  // the first error of a forked choice
  int open = 1;
  bool forked = false;
  double grammar_ms = 0;  // every choice's grammar work
  // The leading prompt tokens whose K/V are the full computation's: only those enter the prefix
  // cache (a reused segment, and all after it, are an approximation).
  int exact_prefix = std::numeric_limits<int>::max();

  CompletionResult Wait() override {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
    return result;
  }
  bool WaitFor(double seconds) override {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return done; });
  }
  void Cancel() override { cancelled = true; }
};

struct EngineImpl::Slot {
  // Cached blocks to append to `seq` once `before` prefill tokens are computed.
  struct Gather {
    int before;
    KvSequence held;  // references keep the blocks from being evicted meanwhile
  };

  std::shared_ptr<Request> r;
  int choice = 0;  // index among the request's choices
  KvSequence seq;
  std::vector<int32_t> tokens;  // prompt (every included token, by position), then generated
  int n_prompt = 0;
  // Prefill: tokens computed after what was gathered, at their positions, in order.
  std::vector<int32_t> fill_tokens, fill_pos;
  int filled = 0;
  std::deque<Gather> gathers;
  int next_pos = 0;  // position of the next token fed after the prefill
  int pending = -1;  // sampled token not yet fed to the model
  Sampler sampler;
  TextStream stream;
  CompletionResult result;
  Clock::time_point admitted, prefill_start, first_token;
  bool finished = false;
  size_t reserved = 0;  // K/V bytes held under kv_ram_bytes
  int released = 0;     // leading tokens whose sliding parts seq gave up (TrimSliding)
  std::vector<TokenLogprob> logprobs;             // generated tokens', when requested
  std::vector<TokenLogprob> unsent;               // of them, not yet passed to on_piece
  std::vector<uint64_t> prefix_hashes;            // of the prompt, for its log-probabilities
  std::unique_ptr<GrammarConstraint> constraint;  // the request's grammar, at this choice's text
  // Segments: those missed, stored once the prompt's K/V are complete (StoreSegments), each with
  // whether a partial copy of it must be replaced; and whether the slot reuses or stores
  // segments (its sliding parts are then released only after its prefill, as a modular one's).
  struct SegmentMiss {
    PromptSegment range;
    bool replace = false;
  };
  std::vector<SegmentMiss> segment_misses;
  bool segmented = false;

  Slot(std::shared_ptr<Request> req, BlockPool* blocks, const Tokenizer& tok,
       const SamplingParams& sampling)
      : r(std::move(req)), seq(blocks), sampler(sampling), stream(tok, r->req.stop) {}
};

}  // namespace promptcache
