// The engine's counters and load (Engine::Stats): requests and tokens, cache hits, evictions and
// tiers, K/V memory, the remote tier's health, sampled fidelity of approximate reuse, and the
// engine thread's heartbeat; and the with/without-KV-cache timing curve (MeasureGeneration).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace promptcache {

// Generating `tokens` tokens with and without the KV cache (Engine::MeasureGeneration).
struct GenerationTiming {
  int tokens = 0;
  double with_cache_ms = 0, no_cache_ms = 0;
};

// The remote (Redis) tier's counters, part of EngineStats.
struct RemoteTierStats {
  bool enabled = false, connected = false;
  uint64_t hits = 0, misses = 0, errors = 0, writes = 0, dropped = 0, invalid = 0;
  uint64_t loads = 0;            // blocks loaded into RAM from it
  uint64_t deadline_misses = 0;  // calls cut short by their deadline
  uint64_t breaker_opens = 0;    // times its circuit breaker opened
  uint64_t skipped = 0;          // lookups not sent while the breaker was open
  bool breaker_open = false;     // not being asked now
};

// Sampled fidelity evaluations (EngineOptions::fidelity_sample) of one kind of reuse: each
// teacher-forces the full recompute of the request's prompt on the tokens it generated and
// compares, step by step, the full recompute's top-1 with the top-1 of the logits the served
// request had (FidelityReport, engine/fidelity.h). Steps and agreements are summed over samples.
struct FidelityTally {
  uint64_t samples = 0;  // requests evaluated
  uint64_t steps = 0, agreements = 0;
  // Over the steps whose full-recompute top-2 margin is at least 0.1 logit (kNearTieMargin): a
  // flip there is an error, not a near tie.
  uint64_t margin_steps = 0, margin_agreements = 0;
  double first_token_kl_sum = 0;  // KL(full || served) of the first token's distributions
  double first_token_kl_max = 0;  // the worst sample's
  double mean_kl_sum = 0;         // each sample's KL averaged over its steps, summed
  void Add(const FidelityTally& o) {
    samples += o.samples;
    steps += o.steps;
    agreements += o.agreements;
    margin_steps += o.margin_steps;
    margin_agreements += o.margin_agreements;
    first_token_kl_sum += o.first_token_kl_sum;
    first_token_kl_max =
        first_token_kl_max > o.first_token_kl_max ? first_token_kl_max : o.first_token_kl_max;
    mean_kl_sum += o.mean_kl_sum;
  }
};
inline constexpr int kFidelitySampleSteps = 16;  // generated steps a sampled request keeps
inline constexpr int kFidelityQueue = 4;         // sampled requests waiting at most

struct FidelityStats {
  FidelityTally modules;   // modular (PML) prompts that reused cached modules
  FidelityTally segments;  // prompts that reused cached segments
  uint64_t dropped = 0;    // sampled, not evaluated: kFidelityQueue were waiting already
  uint64_t failed = 0;     // evaluations that failed (the recompute could not run)
  int pending = 0;         // waiting or being evaluated
  FidelityTally Total() const {
    FidelityTally t = modules;
    t.Add(segments);
    return t;
  }
};

// Counters since the engine started, and its current load (Engine::Stats).
struct EngineStats {
  uint64_t requests = 0, requests_failed = 0, requests_rejected = 0;
  uint64_t requests_cancelled = 0;  // finished "cancelled": the caller went away or stopped it
  // Of `requests`: embedding requests (their inputs' tokens count in prompt_tokens).
  uint64_t embedding_requests = 0;
  uint64_t prompt_tokens = 0, cached_tokens = 0, generated_tokens = 0;
  // Of cached_tokens, those computed by another request's prefill in flight at the time
  // (CompletionResult::shared_tokens): a prefix concurrent requests computed once.
  uint64_t shared_in_flight_tokens = 0;
  // Speculative decoding: guessed tokens fed to the model, and those confirmed
  // (CompletionResult::draft_tokens, accepted_draft_tokens).
  uint64_t draft_tokens = 0, accepted_draft_tokens = 0;
  uint64_t cache_hits = 0, cache_lookups = 0;  // lookups that reused >= 1 block
  // Segments (CompletionRequest::segments): looked up, found cached, their tokens reused (not
  // recomputed), and stored after a miss.
  uint64_t segment_lookups = 0, segment_hits = 0, segment_tokens_reused = 0, segment_stores = 0;
  // Times a request waited, at admission, for a segment another running request was computing
  // and about to store (docs/modules.md "Segments", in flight): it then reused it as a hit.
  uint64_t in_flight_segment_waits = 0;
  uint64_t evictions = 0, disk_writes = 0, disk_loads = 0, disk_errors = 0;
  size_t cache_ram_bytes = 0;  // distinct cached blocks in RAM (shared blocks counted once)
  size_t cache_disk_bytes = 0;
  // K/V of every block in use, cached or held by running sequences (global layers, and the
  // sliding layers still held: see trim_sliding_kv).
  size_t kv_bytes_in_use = 0;
  size_t kv_bytes_peak = 0;       // the most kv_bytes_in_use has been
  size_t cache_pinned_bytes = 0;  // pinned cached blocks, as the pin quotas count them
  size_t pin_ram_bytes = 0;       // the pin quota in force (EngineOptions::pin_ram_bytes)
  uint64_t pins_limited = 0;      // pins cut short by a pin quota
  // The engine thread's heartbeat: how long its current piece of work (a step of the running
  // requests with their admissions, or a task between steps) has taken so far (0 while it
  // waits for work), and the longest piece of the last minute or so.
  double step_seconds = 0;
  double step_max_seconds = 0;
  RemoteTierStats remote;
  FidelityStats fidelity;
  int active = 0, queued = 0;
  // Requests whose prefix lookup is reading the remote tier (not yet active, no longer queued).
  int fetching = 0;
  std::vector<double> ttft_ms;  // recent times to first token, for histograms
};

}  // namespace promptcache
