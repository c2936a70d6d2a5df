#include "engine/session.h"

#include <algorithm>
#include <chrono>

#include "core/progress.h"

namespace promptcache {
namespace {

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

int ResolveContext(const Model& m, int requested) {
  return requested > 0 ? requested : m.config().context_length;
}

int64_t PoolBlocks(const SessionOptions& o, int context) {
  return o.static_cache ? (context + o.block_size - 1) / o.block_size : 0;
}

}  // namespace

Session::Session(const Model& model, const SessionOptions& options)
    : model_(model),
      options_(options),
      context_(ResolveContext(model, options.context)),
      pool_(options.threads),
      blocks_(model.MakeKvLayout(options.kv_type, options.block_size),
              PoolBlocks(options, ResolveContext(model, options.context)), options.static_cache),
      seq_(&blocks_),
      logits_(model.config().n_vocab) {}

Status Session::CheckFits(size_t n_tokens) const {
  if (n_tokens > static_cast<size_t>(context_)) {
    return OutOfRange("the prompt has " + std::to_string(n_tokens) +
                      " tokens, more than the context size " + std::to_string(context_));
  }
  return Status::Ok();
}

Status Session::Eval(std::span<const int32_t> tokens, std::span<const int32_t> positions,
                     KvSequence* seq, float* logits, bool show_progress, bool forward_only) {
  PC_CHECK(tokens.size() == positions.size());
  const size_t n = tokens.size();
  std::vector<BatchToken> batch(n);
  for (size_t i = 0; i < n; ++i) {
    batch[i] = {tokens[i], positions[i], seq, i + 1 == n && logits != nullptr};
  }
  const bool trim = forward_only && options_.trim_sliding_kv;
  return EvalChunks(batch, logits, show_progress, trim ? seq : nullptr);
}

Status Session::EvalBatch(std::span<const BatchToken> batch, float* logits, bool show_progress) {
  return EvalChunks(batch, logits, show_progress, nullptr);
}

Status Session::EvalChunks(std::span<const BatchToken> batch, float* logits, bool show_progress,
                           KvSequence* trim) {
  const size_t n = batch.size();
  const size_t chunk = options_.batch_size > 0 ? options_.batch_size : model_.DefaultBatchSize();
  const size_t n_vocab = model_.config().n_vocab;
  std::unique_ptr<ProgressBar> bar;
  if (show_progress && n > chunk) bar = std::make_unique<ProgressBar>("prefill", n);
  for (size_t b = 0; b < n; b += chunk) {
    const std::span<const BatchToken> part = batch.subspan(b, std::min(n, b + chunk) - b);
    PC_RETURN_IF_ERROR(model_.Forward(part, logits, &pool_, &scratch_));
    if (trim != nullptr) {
      const int32_t next = b + part.size() < n ? batch[b + part.size()].pos : part.back().pos + 1;
      trim->ReleaseSliding(trim->SlidingDeadTokens(next));
    }
    const auto outs =
        std::count_if(part.begin(), part.end(), [](const BatchToken& t) { return t.want_logits; });
    if (logits != nullptr) logits += size_t(outs) * n_vocab;
    if (bar) bar->Update(b + part.size());
  }
  return Status::Ok();
}

Result<GenerateResult> Session::Generate(std::span<const int32_t> prompt,
                                         const GenerateOptions& o) {
  if (prompt.empty()) return InvalidArgument("the prompt is empty");
  PC_RETURN_IF_ERROR(CheckFits(prompt.size()));
  PC_RETURN_IF_ERROR(o.sampling.Validate());
  if (o.max_tokens < 0) return InvalidArgument("max_tokens must be >= 0");

  GenerateResult r;
  r.prompt_tokens = static_cast<int>(prompt.size());
  std::vector<int32_t> all(prompt.begin(), prompt.end());
  std::vector<int32_t> positions(all.size());
  for (size_t i = 0; i < positions.size(); ++i) positions[i] = static_cast<int32_t>(i);

  seq_.Clear();
  const auto t0 = std::chrono::steady_clock::now();
  PC_RETURN_IF_ERROR(Eval(all, positions, &seq_, logits_.data(), o.show_progress,
                          /*forward_only=*/true));
  r.prompt_ms = MsSince(t0);

  Sampler sampler(o.sampling);
  TextStream stream(model_.tokenizer(), o.stop);
  const auto t1 = std::chrono::steady_clock::now();
  r.finish_reason = "length";
  for (int step = 0; step < o.max_tokens; ++step) {
    if (all.size() >= static_cast<size_t>(context_)) break;  // context full
    const int32_t next = sampler.Sample(logits_.data(), model_.config().n_vocab, all);
    if (!o.ignore_eos && model_.tokenizer().IsEndOfGeneration(next)) {
      r.finish_reason = "stop";
      break;
    }
    all.push_back(next);
    r.tokens.push_back(next);
    bool stopped = false;
    const std::string piece = stream.Push(next, &stopped);
    if (!piece.empty() && o.on_text && !o.on_text(piece)) {
      r.finish_reason = "cancelled";
      break;
    }
    if (stopped) {
      r.finish_reason = "stop";
      break;
    }
    if (step + 1 == o.max_tokens || all.size() >= static_cast<size_t>(context_)) break;
    const int32_t pos = static_cast<int32_t>(all.size() - 1);
    if (o.use_kv_cache) {
      PC_RETURN_IF_ERROR(Eval({&next, 1}, {&pos, 1}, &seq_, logits_.data(), false, true));
    } else {
      // The baseline: forget everything and recompute the whole sequence.
      seq_.Clear();
      positions.push_back(pos);
      PC_RETURN_IF_ERROR(Eval(all, positions, &seq_, logits_.data(), false, true));
    }
  }
  if (r.finish_reason != "stop" && r.finish_reason != "cancelled") {
    const std::string rest = stream.Finish();
    if (!rest.empty() && o.on_text) o.on_text(rest);
  }
  r.text = stream.text();
  r.generation_ms = MsSince(t1);
  return r;
}

std::string TextStream::Push(int32_t id, bool* stopped) {
  held_ += dec_.Push(id);
  return Release(stopped);
}

std::string TextStream::Finish() {
  held_ += dec_.Flush();
  bool stopped = false;
  std::string out = Release(&stopped);
  if (!stopped) {
    out += held_;
    emitted_ += held_;
    held_.clear();
  }
  return out;
}

// Emits all held text except a tail that could still grow into a stop string; on a match,
// emits the text before it and drops the rest.
std::string TextStream::Release(bool* stopped) {
  // Emitted text never ends with a proper prefix of a stop string, so a match lies in held_.
  size_t cut = std::string::npos;
  for (const std::string& s : stop_) {
    if (s.empty()) continue;
    const size_t at = held_.find(s);
    if (at != std::string::npos && at < cut) cut = at;
  }
  if (cut != std::string::npos) {
    *stopped = true;
    std::string out = held_.substr(0, cut);
    emitted_ += out;
    held_.clear();
    return out;
  }
  size_t keep = 0;  // longest suffix of held_ that is a proper prefix of a stop string
  for (const std::string& s : stop_) {
    if (s.empty()) continue;
    for (size_t n = std::min(s.size() - 1, held_.size()); n > keep; --n) {
      if (held_.compare(held_.size() - n, n, s, 0, n) == 0) {
        keep = n;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  emitted_ += out;
  return out;
}

}  // namespace promptcache
