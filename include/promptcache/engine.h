// promptcache's public C++ API: an Engine serves completion requests for one model, reusing
// attention state across requests.
//
// Requests are submitted from any thread into a queue; one engine thread runs them with
// continuous batching (the decode steps of all active sequences form one forward pass, and a new
// request's prefill joins between steps). Each prompt first looks up the longest cached prefix
// (by token ids, at block granularity) and computes only the rest; finished sequences leave
// their blocks in the cache, which is bounded in RAM, expires idle entries, and can spill to a
// disk tier that survives restarts.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/sampler.h"
#include "kv/kv_cache.h"

namespace promptcache {

class Model;

struct EngineOptions {
  std::string model_path;
  int threads = 0;             // 0: all cores
  int context = 0;             // per sequence; 0: the model's context length
  int parallel = 4;            // sequences served at once
  int max_queue = 64;          // waiting requests beyond `parallel`; more are refused
  KvType kv_type = KvType::kF16;
  int block_size = 16;
  int batch_size = 512;        // prefill tokens per forward pass
  // Prefix cache.
  bool prefix_cache = true;
  size_t cache_ram_bytes = size_t(1) << 30;  // bound on cached (unreferenced) blocks in RAM
  double cache_ttl_seconds = 0;              // 0: no expiry
  int cache_min_tokens = 0;                  // prompts shorter than this are not cached
  int cache_granularity = 0;                 // cache prefixes in multiples of this (0: block)
  std::string cache_dir;                     // disk tier; empty: none
  size_t cache_disk_bytes = size_t(4) << 30;
};

struct CompletionRequest {
  std::vector<int32_t> prompt;  // token ids, BOS included if wanted
  int max_tokens = 128;
  SamplingParams sampling;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  // Pin the first `pin_tokens` prompt tokens in the cache (rounded down to blocks) until
  // unpinned through the cache API; -1 pins the whole prompt.
  int pin_tokens = 0;
  // Called on the engine thread with each new piece of text (never broken UTF-8). Return false
  // to cancel the request (e.g. the client disconnected); its computed blocks stay cached.
  std::function<bool(const std::string&)> on_text;
};

struct CompletionResult {
  Status status;                 // not OK: the request failed (e.g. prompt over the context)
  std::vector<int32_t> tokens;   // generated ids
  std::string text;
  std::string finish_reason;     // "stop", "length", "cancelled"
  int prompt_tokens = 0;
  int cached_tokens = 0;         // prompt tokens whose K/V came from the cache
  int computed_tokens = 0;       // prompt tokens computed for this request
  double queue_ms = 0;           // waiting for a free sequence slot
  double prompt_ms = 0;         // lookup + prefill, up to the first token's logits
  double ttft_ms = 0;           // submission to first token
  double generation_ms = 0;
};

// A submitted request: wait for it, or cancel it.
class RequestHandle {
 public:
  virtual ~RequestHandle() = default;
  virtual CompletionResult Wait() = 0;
  virtual void Cancel() = 0;
};

struct CacheEntryInfo {
  std::string key;      // hex key of the prefix's last block
  int tokens = 0;       // prefix length
  bool in_ram = false;
  bool on_disk = false;
  bool pinned = false;
  double idle_seconds = 0;
};

struct EngineStats {
  uint64_t requests = 0, requests_failed = 0, requests_rejected = 0;
  uint64_t prompt_tokens = 0, cached_tokens = 0, generated_tokens = 0;
  uint64_t cache_hits = 0, cache_lookups = 0;  // lookups that reused >= 1 block
  uint64_t evictions = 0, disk_writes = 0, disk_loads = 0, disk_errors = 0;
  size_t cache_ram_bytes = 0;    // distinct cached blocks in RAM (shared blocks counted once)
  size_t cache_disk_bytes = 0;
  size_t kv_bytes_in_use = 0;    // every block in use, cached or held by running sequences
  int active = 0, queued = 0;
  std::vector<double> ttft_ms;   // recent times to first token, for histograms
};

class Engine {
 public:
  static Result<std::unique_ptr<Engine>> Create(const EngineOptions& options);
  virtual ~Engine() = default;

  virtual const Model& model() const = 0;
  virtual const EngineOptions& options() const = 0;

  // Queues a request. ResourceExhausted when the queue is full, InvalidArgument for a bad
  // request (empty prompt, prompt over the context, invalid sampling values).
  virtual Result<std::shared_ptr<RequestHandle>> Submit(CompletionRequest request) = 0;

  virtual EngineStats Stats() const = 0;

  // Explicit cache control.
  virtual std::vector<CacheEntryInfo> ListCache() const = 0;
  virtual Status PinPrefix(const std::vector<int32_t>& tokens, bool pinned) = 0;
  virtual Status DropCache(const std::string& key) = 0;  // "" drops everything unpinned
  virtual Status SaveCache() = 0;                        // write RAM entries to the disk tier
  // Computes (or loads) a prefix into the cache without generating.
  virtual Result<int> WarmPrefix(const std::vector<int32_t>& tokens) = 0;
};

}  // namespace promptcache
