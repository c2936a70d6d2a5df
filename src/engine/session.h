// A Session runs generation for one conversation at a time on a loaded Model: it owns the
// sequence's KV cache, the thread pool and the forward pass's scratch, and turns a prompt into
// streamed text with sampling, stop strings and end-of-generation tokens.
//
// With the KV cache (the default) the prompt is prefilled once, in chunks, and each new token
// costs one token of work. Without it (`use_kv_cache = false`, the CLI's --no-kv-cache) every
// step recomputes the whole sequence from scratch: the baseline that shows what the cache saves.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "sampling/sampler.h"
#include "kv/kv_cache.h"
#include "model/model.h"

namespace promptcache {

struct SessionOptions {
  int threads = 0;  // 0: one per physical core usable (ThreadPool::DefaultThreads)
  int context = 0;  // 0: the model's trained context length
  KvType kv_type = KvType::kF16;
  bool static_cache = false;  // preallocate the KV cache for the whole context
  int block_size = 16;
  int batch_size = 512;  // prefill chunk: bounds the scratch memory of one forward pass
  // Sliding-window models: Generate releases the sliding layers' K/V that no later token sees
  // (kv/kv_cache.h), so a long sequence holds them for about a window. Same results either way.
  bool trim_sliding_kv = true;
};

struct GenerateOptions {
  int max_tokens = 128;
  SamplingParams sampling;
  std::vector<std::string> stop;  // stop strings; the text stops before the first match
  bool ignore_eos = false;
  bool use_kv_cache = true;
  bool show_progress = false;  // a progress bar for long prefills (when stderr is a terminal)
  // Called with each piece of new text as soon as it is final (never broken UTF-8, never a
  // possible start of a stop string). Return false to stop generating.
  std::function<bool(const std::string&)> on_text;
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated ids (not the prompt)
  std::string text;             // the generated text, stop string excluded
  std::string finish_reason;    // "stop" (EOS or stop string), "length", or "cancelled"
  int prompt_tokens = 0;
  double prompt_ms = 0;      // prefill, up to the first token's logits
  double generation_ms = 0;  // all decode steps
};

class Session {
 public:
  Session(const Model& model, const SessionOptions& options);

  const Model& model() const { return model_; }
  int context() const { return context_; }
  ThreadPool* pool() { return &pool_; }
  BlockPool* block_pool() { return &blocks_; }
  KvSequence* sequence() { return &seq_; }

  // Generates a continuation of `prompt` (token ids, BOS included as the caller wants), starting
  // from an empty cache.
  Result<GenerateResult> Generate(std::span<const int32_t> prompt, const GenerateOptions& options);

  // Lower level: runs tokens at the given positions through the model into `seq`, in chunks of
  // batch_size, and writes the last token's logits to `logits` (n_vocab floats) if not null.
  // `forward_only`: the caller promises that no query at a position below the next chunk's
  // first (below positions.back() + 1 after the last chunk) will ever read `seq` again, so
  // after each chunk the sliding parts no later query sees are released (with
  // SessionOptions::trim_sliding_kv). Positions must increase.
  Status Eval(std::span<const int32_t> tokens, std::span<const int32_t> positions, KvSequence* seq,
              float* logits, bool show_progress = false, bool forward_only = false);
  // The same for a batch over any sequences (Model::Forward's contract): run in chunks of
  // batch_size tokens, the logits of every token with want_logits written in batch order.
  Status EvalBatch(std::span<const BatchToken> batch, float* logits, bool show_progress = false);

 private:
  Status CheckFits(size_t n_tokens) const;
  // EvalBatch, releasing after each chunk what `trim` (the batch's one sequence, or null) no
  // longer needs.
  Status EvalChunks(std::span<const BatchToken> batch, float* logits, bool show_progress,
                    KvSequence* trim);

  const Model& model_;
  SessionOptions options_;
  int context_;
  ThreadPool pool_;
  BlockPool blocks_;
  KvSequence seq_;
  ForwardScratch scratch_;
  std::vector<float> logits_;
};

// Incremental detokenizer with stop strings: feed tokens, get text that is safe to show.
class TextStream {
 public:
  TextStream(const Tokenizer& tok, std::vector<std::string> stop)
      : dec_(tok), stop_(std::move(stop)) {}
  // Adds a token; returns text now final. Sets *stopped when a stop string appeared.
  std::string Push(int32_t id, bool* stopped);
  // Whatever is held back at the end of generation (not called after a stop).
  std::string Finish();
  const std::string& text() const { return emitted_; }

 private:
  std::string Release(bool* stopped);

  StreamDecoder dec_;
  std::vector<std::string> stop_;
  std::string held_;  // decoded but not yet emitted: might begin a stop string
  std::string emitted_;
};

}  // namespace promptcache
