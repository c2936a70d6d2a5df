// A Runner evaluates token sequences on a loaded Model: it owns a thread pool, a K/V block pool
// (with one sequence, sequence()) and the forward pass's scratch, and runs tokens through the
// model into a sequence in chunks of batch_size. It does not generate: generation goes through
// the Engine (include/promptcache/engine.h), whose requests use the same decode step
// (sampling/decode_step.h). What uses a Runner: fidelity's full recomputes (engine/fidelity.h),
// the savings measurements (engine/savings.h), and the CLI's logits and bench.
//
// RecomputeSequence is the baseline without a KV cache, one implementation for every caller:
// forget the sequence and compute all of its tokens again (the Engine's recompute_each_step
// requests, and GenerationTimer's no-cache series).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/progress.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "kv/kv_cache.h"
#include "model/model.h"

namespace promptcache {

struct RunnerOptions {
  int threads = 0;  // 0: one per physical core usable (ThreadPool::DefaultThreads)
  int context = 0;  // 0: the model's trained context length
  KvType kv_type = KvType::kF16;
  bool static_cache = false;  // preallocate the KV cache for the whole context
  int block_size = 16;
  int batch_size = 512;  // chunk: bounds the scratch memory of one forward pass (0: the model's)
  // Sliding-window models: Eval with forward_only releases the sliding layers' K/V that no
  // later token sees (kv/kv_cache.h), so a long sequence holds them for about a window.
  bool trim_sliding_kv = true;
};

// Runs `batch` (Model::Forward's contract) in chunks of `chunk` tokens, writing the logits of
// every token with want_logits in batch order. `trim`: the batch's one sequence, whose sliding
// parts no later chunk (or query past the batch) sees are released after each chunk; or null.
// `bar`: advanced per chunk, or null.
Status ForwardInChunks(const Model& model, std::span<const BatchToken> batch, float* logits,
                       size_t chunk, ThreadPool* pool, ForwardScratch* scratch, KvSequence* trim,
                       ProgressBar* bar = nullptr);

// The baseline without a KV cache: clears `seq` and computes every token of `tokens` again at
// positions 0..n-1 (in chunks, releasing sliding parts when `trim`), the last token's logits
// into `logits`.
Status RecomputeSequence(const Model& model, std::span<const int32_t> tokens, KvSequence* seq,
                         float* logits, size_t chunk, ThreadPool* pool, ForwardScratch* scratch,
                         bool trim);

class Runner {
 public:
  Runner(const Model& model, const RunnerOptions& options);

  const Model& model() const { return model_; }
  int context() const { return context_; }
  ThreadPool* pool() { return &pool_; }
  BlockPool* block_pool() { return &blocks_; }
  KvSequence* sequence() { return &seq_; }

  // Runs tokens at the given positions through the model into `seq`, in chunks of batch_size,
  // and writes the last token's logits to `logits` (n_vocab floats) if not null.
  // `forward_only`: the caller promises that no query at a position below the next chunk's
  // first (below positions.back() + 1 after the last chunk) will ever read `seq` again, so
  // after each chunk the sliding parts no later query sees are released (with
  // RunnerOptions::trim_sliding_kv). Positions must increase.
  Status Eval(std::span<const int32_t> tokens, std::span<const int32_t> positions, KvSequence* seq,
              float* logits, bool show_progress = false, bool forward_only = false);
  // The same for a batch over any sequences (Model::Forward's contract): run in chunks of
  // batch_size tokens, the logits of every token with want_logits written in batch order.
  Status EvalBatch(std::span<const BatchToken> batch, float* logits, bool show_progress = false);
  // RecomputeSequence with this runner's pool, chunk and trimming.
  Status Recompute(std::span<const int32_t> tokens, KvSequence* seq, float* logits);

 private:
  size_t Chunk() const;

  const Model& model_;
  RunnerOptions options_;
  int context_;
  ThreadPool pool_;
  BlockPool blocks_;
  KvSequence seq_;
  ForwardScratch scratch_;
};

// The names tools/cmd_bench.cc still uses (another branch edits that file): remove once it
// has merged and says Runner.
using Session = Runner;
using SessionOptions = RunnerOptions;

}  // namespace promptcache
