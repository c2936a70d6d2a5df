#include "engine/runner.h"

#include <algorithm>

namespace promptcache {
namespace {

int ResolveContext(const Model& m, int requested) {
  return requested > 0 ? requested : m.config().context_length;
}

int64_t PoolBlocks(const RunnerOptions& o, int context) {
  return o.static_cache ? (context + o.block_size - 1) / o.block_size : 0;
}

}  // namespace

Status ForwardInChunks(const Model& model, std::span<const BatchToken> batch, float* logits,
                       size_t chunk, ThreadPool* pool, ForwardScratch* scratch, KvSequence* trim,
                       ProgressBar* bar) {
  const size_t n = batch.size();
  const size_t n_vocab = model.config().n_vocab;
  for (size_t b = 0; b < n; b += chunk) {
    const std::span<const BatchToken> part = batch.subspan(b, std::min(n, b + chunk) - b);
    PC_RETURN_IF_ERROR(model.Forward(part, logits, pool, scratch));
    if (trim != nullptr) {
      const int32_t next = b + part.size() < n ? batch[b + part.size()].pos : part.back().pos + 1;
      trim->ReleaseSliding(trim->SlidingDeadTokens(next));
    }
    const auto outs =
        std::count_if(part.begin(), part.end(), [](const BatchToken& t) { return t.want_logits; });
    if (logits != nullptr) logits += size_t(outs) * n_vocab;
    if (bar != nullptr) bar->Update(b + part.size());
  }
  return Status::Ok();
}

Status RecomputeSequence(const Model& model, std::span<const int32_t> tokens, KvSequence* seq,
                         float* logits, size_t chunk, ThreadPool* pool, ForwardScratch* scratch,
                         bool trim) {
  seq->Clear();
  std::vector<BatchToken> batch(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    batch[i] = {tokens[i], static_cast<int32_t>(i), seq, i + 1 == tokens.size()};
  }
  return ForwardInChunks(model, batch, logits, chunk, pool, scratch, trim ? seq : nullptr);
}

Runner::Runner(const Model& model, const RunnerOptions& options)
    : model_(model),
      options_(options),
      context_(ResolveContext(model, options.context)),
      pool_(options.threads),
      blocks_(model.MakeKvLayout(options.kv_type, options.block_size),
              PoolBlocks(options, ResolveContext(model, options.context)), options.static_cache),
      seq_(&blocks_) {}

size_t Runner::Chunk() const {
  return options_.batch_size > 0 ? options_.batch_size : model_.DefaultBatchSize();
}

Status Runner::Eval(std::span<const int32_t> tokens, std::span<const int32_t> positions,
                    KvSequence* seq, float* logits, bool show_progress, bool forward_only) {
  PC_CHECK(tokens.size() == positions.size());
  const size_t n = tokens.size();
  std::vector<BatchToken> batch(n);
  for (size_t i = 0; i < n; ++i) {
    batch[i] = {tokens[i], positions[i], seq, i + 1 == n && logits != nullptr};
  }
  std::unique_ptr<ProgressBar> bar;
  if (show_progress && n > Chunk()) bar = std::make_unique<ProgressBar>("prefill", n);
  const bool trim = forward_only && options_.trim_sliding_kv;
  return ForwardInChunks(model_, batch, logits, Chunk(), &pool_, &scratch_, trim ? seq : nullptr,
                         bar.get());
}

Status Runner::EvalBatch(std::span<const BatchToken> batch, float* logits, bool show_progress) {
  std::unique_ptr<ProgressBar> bar;
  if (show_progress && batch.size() > Chunk()) {
    bar = std::make_unique<ProgressBar>("prefill", batch.size());
  }
  return ForwardInChunks(model_, batch, logits, Chunk(), &pool_, &scratch_, nullptr, bar.get());
}

Status Runner::Recompute(std::span<const int32_t> tokens, KvSequence* seq, float* logits) {
  return RecomputeSequence(model_, tokens, seq, logits, Chunk(), &pool_, &scratch_,
                           options_.trim_sliding_kv);
}

}  // namespace promptcache
