// Embedding requests (engine_impl.h, EmbeddingRequest in promptcache/embedding.h): checked and
// queued like completions; on the engine thread one slot feeds the request's inputs to the
// step's batch as prefill-only sequences, asking Forward for the final hidden states of the
// tokens its pooling reads, and turns them into one vector per input (or per token).
#include <algorithm>
#include <cmath>

#include "core/enum_names.h"
#include "engine/engine_slot.h"

namespace promptcache {
namespace {

bool Computed(Pooling p) {
  return p == Pooling::kNone || p == Pooling::kMean || p == Pooling::kCls || p == Pooling::kLast;
}

// What the model file says ({arch}.pooling_type, llama.cpp's numbers), else kMean.
Result<Pooling> ModelPooling(const Model& model) {
  const std::string key = model.config().architecture + ".pooling_type";
  PC_ASSIGN_OR_RETURN(int64_t type, model.file().GetIntOr(key, int64_t(Pooling::kMean)));
  const Pooling p = static_cast<Pooling>(type);
  if (type == 4) {
    return Unimplemented(key +
                         " = 4 (rank: a reranker's classification head) is not a pooling "
                         "promptcache computes; ask for mean, last, cls or none");
  }
  if (type == -1) return Pooling::kMean;  // llama.cpp's "unspecified"
  if (type < -1 || !Computed(p))
    return Unimplemented(key + " = " + std::to_string(type) +
                         " is not a pooling type promptcache knows");
  return p;
}

// Divides v by its Euclidean norm (in double, as llama.cpp does); a zero vector stays zero.
void NormalizeL2(float* v, int n) {
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += double(v[i]) * v[i];
  const double scale = sum > 0 ? 1.0 / std::sqrt(sum) : 0.0;
  for (int i = 0; i < n; ++i) v[i] = static_cast<float>(v[i] * scale);
}

}  // namespace

constexpr EnumName<Pooling> kPoolingNames[] = {{Pooling::kDefault, "default"},
                                               {Pooling::kNone, "none"},
                                               {Pooling::kMean, "mean"},
                                               {Pooling::kCls, "cls"},
                                               {Pooling::kLast, "last"}};
static_assert(NamesEach(kPoolingNames, Pooling::kDefault, Pooling::kLast));

std::string PoolingName(Pooling pooling) { return NameOf(kPoolingNames, pooling, "unknown"); }

Result<Pooling> ParsePooling(std::string_view name) {
  if (std::optional<Pooling> pooling = ValueOf(kPoolingNames, name)) return *pooling;
  return InvalidArgument("unknown pooling '" + std::string(name) +
                         "' (mean, last, cls, none or default)");
}

Result<EmbeddingResult> Engine::Embed(EmbeddingRequest request) {
  PC_ASSIGN_OR_RETURN(std::shared_ptr<EmbeddingHandle> handle, SubmitEmbedding(std::move(request)));
  EmbeddingResult result = handle->Wait();
  if (!result.status.ok()) return result.status;
  if (result.cancelled) return Internal("the embedding request was cancelled (engine stopping)");
  return result;
}

struct EngineImpl::EmbeddingHandleImpl : EmbeddingHandle {
  std::shared_ptr<Request> r;

  EmbeddingResult Wait() override {
    r->Wait();
    return Answer();
  }
  bool WaitFor(double seconds) override { return r->WaitFor(seconds); }
  void Cancel() override { r->Cancel(); }

 private:
  // After the request is done. A request that never ran (cancelled in the queue, failed to
  // start, or still queued at shutdown) has only its CompletionResult's status and reason.
  EmbeddingResult Answer() {
    std::lock_guard<std::mutex> lock(r->mu);
    const EmbeddingJob& job = *r->embedding;
    if (job.answered) return job.result;
    EmbeddingResult res;
    res.status = r->result.status;
    res.cancelled = r->result.finish_reason == "cancelled";
    res.pooling = job.pooling;
    res.normalized = job.req.normalize;
    res.dimensions = job.result.dimensions;
    res.queue_ms = r->result.queue_ms;
    return res;
  }
};

Result<std::shared_ptr<EmbeddingHandle>> EngineImpl::SubmitEmbedding(EmbeddingRequest request) {
  const ModelConfig& c = model_->config();
  const int n = static_cast<int>(request.inputs.size());
  if (n == 0) return InvalidArgument("the request has no inputs");
  if (n > kMaxEmbeddingInputs) {
    return InvalidArgument("the request has " + std::to_string(n) + " inputs; at most " +
                           std::to_string(kMaxEmbeddingInputs) + " are allowed");
  }
  if (request.dimensions != 0 && request.dimensions != c.n_embd) {
    return InvalidArgument("dimensions " + std::to_string(request.dimensions) +
                           " is not supported: this model's embeddings have " +
                           std::to_string(c.n_embd) +
                           " dimensions (n_embd) and promptcache does not shorten them");
  }
  int64_t tokens = 0;
  for (int i = 0; i < n; ++i) {
    const std::vector<int32_t>& input = request.inputs[i];
    const std::string name = n > 1 ? "input " + std::to_string(i) : "the input";
    if (input.empty()) return InvalidArgument(name + " is empty");
    if (static_cast<int64_t>(input.size()) > context_) {
      return InvalidArgument(name + " has " + std::to_string(input.size()) +
                             " tokens; the context size is " + std::to_string(context_));
    }
    PC_RETURN_IF_ERROR(CheckVocabulary(input, name + ": "));
    tokens += static_cast<int64_t>(input.size());
  }
  Pooling pooling = request.pooling;
  if (pooling == Pooling::kDefault) pooling = options_.pooling;
  if (pooling == Pooling::kDefault) {
    PC_ASSIGN_OR_RETURN(pooling, ModelPooling(*model_));
  }
  if (!Computed(pooling)) return InvalidArgument("unknown pooling type");
  // One vector per token: the result is n_embd times the tokens, so it is bounded as one
  // sequence's prompt is.
  if (pooling == Pooling::kNone && tokens > context_) {
    return InvalidArgument("pooling none gives a vector per token: the inputs' " +
                           std::to_string(tokens) + " tokens in all are more than the context (" +
                           std::to_string(context_) + ") allows");
  }
  auto r = std::make_shared<Request>();
  r->embedding = std::make_unique<EmbeddingJob>();
  EmbeddingJob& job = *r->embedding;
  job.pooling = pooling;
  job.result.pooling = pooling;
  job.result.normalized = request.normalize;
  job.result.dimensions = c.n_embd;
  job.result.prompt_tokens = static_cast<int>(tokens);
  job.result.embeddings.resize(n);
  job.req = std::move(request);
  PC_ASSIGN_OR_RETURN(std::shared_ptr<RequestHandle> queued, Enqueue(r));
  (void)queued;  // the same request, seen as a completion
  auto handle = std::make_shared<EmbeddingHandleImpl>();
  handle->r = std::move(r);
  return std::shared_ptr<EmbeddingHandle>(std::move(handle));
}

size_t EngineImpl::EmbeddingReservation(const EmbeddingJob& job) const {
  const KvLayout& l = blocks_.layout();
  const size_t block = size_t(l.block_size);
  auto blocks = [&](size_t tokens) { return (tokens + block - 1) / block; };
  size_t longest = 0, every = 0;
  for (const std::vector<int32_t>& input : job.req.inputs) {
    longest = std::max(longest, input.size());
    every += blocks(input.size());
  }
  // Before a step at most one input is part-way (all of it held at most); the step adds at most
  // a batch of tokens over at most a batch of inputs, each with a partial block at most. Never
  // more than every input held at once.
  const size_t batch = size_t(options_.batch_size);
  const size_t most = blocks(longest) + blocks(batch) + std::min(batch, job.req.inputs.size());
  return std::min(most, every) * l.bytes_per_block();
}

void EngineImpl::AddEmbeddingTokens(Slot& s, int room, std::vector<BatchToken>* batch,
                                    std::vector<HiddenRow>* rows) {
  EmbeddingJob& job = *s.r->embedding;
  const int n_inputs = static_cast<int>(job.req.inputs.size());
  auto feed = [&](EmbeddingJob::Input& in) {
    const std::vector<int32_t>& tokens = job.req.inputs[in.index];
    const int size = static_cast<int>(tokens.size());
    const int n = std::min(room, size - in.filled);
    for (int i = in.filled; i < in.filled + n; ++i) {
      // The tokens the pooling reads; the others only give their K/V to the later ones.
      const bool wanted = job.pooling == Pooling::kMean || job.pooling == Pooling::kNone ||
                          (job.pooling == Pooling::kCls && i == 0) ||
                          (job.pooling == Pooling::kLast && i + 1 == size);
      batch->push_back({tokens[i], i, &in.seq, false, -1, wanted});
      if (wanted) rows->push_back({&job, &in, i});
    }
    in.filled += n;
    room -= n;
  };
  for (EmbeddingJob::Input& in : job.live) {
    if (room > 0) feed(in);
  }
  while (room > 0 && job.next < n_inputs) {
    job.live.push_back({job.next++, 0, KvSequence(&blocks_), {}, {}});
    feed(job.live.back());
  }
}

void EngineImpl::PoolEmbeddings(const std::vector<HiddenRow>& rows, const float* hidden) {
  const int d = model_->config().n_embd;
  for (size_t i = 0; i < rows.size(); ++i) {
    const HiddenRow& row = rows[i];
    const float* h = hidden + i * size_t(d);
    EmbeddingJob::Input& in = *row.input;
    if (row.job->pooling == Pooling::kMean) {
      if (in.sum.empty()) in.sum.assign(d, 0.0);
      for (int j = 0; j < d; ++j) in.sum[j] += h[j];
    } else if (row.job->pooling == Pooling::kNone) {
      in.rows.insert(in.rows.end(), h, h + d);
    } else {
      in.rows.assign(h, h + d);
    }
  }
  // Inputs are fed in order, so they complete in order: the live ones whose every token has
  // been computed are at the front.
  for (auto& sp : active_) {
    Slot& s = *sp;
    if (s.finished || !s.r->embedding) continue;
    EmbeddingJob& job = *s.r->embedding;
    while (!job.live.empty() &&
           job.live.front().filled ==
               static_cast<int>(job.req.inputs[job.live.front().index].size())) {
      EmbeddingJob::Input& in = job.live.front();
      std::vector<float> v = std::move(in.rows);
      if (job.pooling == Pooling::kMean) {
        const double n = static_cast<double>(in.filled);
        v.resize(d);
        for (int j = 0; j < d; ++j) v[j] = static_cast<float>(in.sum[j] / n);
      }
      for (size_t at = 0; job.req.normalize && at < v.size(); at += d) NormalizeL2(&v[at], d);
      job.result.embeddings[in.index] = std::move(v);
      in.seq.Clear();
      job.live.pop_front();
    }
    if (job.live.empty() && job.next == static_cast<int>(job.req.inputs.size())) {
      Finish(s, "stop");
    }
  }
}

void EngineImpl::FinishEmbedding(Slot& s, const std::string& reason, const Status& status) {
  if (s.finished) return;
  s.finished = true;
  Request& r = *s.r;
  EmbeddingJob& job = *r.embedding;
  for (EmbeddingJob::Input& in : job.live) in.seq.Clear();
  job.live.clear();
  EmbeddingResult& res = job.result;
  res.status = status;
  res.cancelled = status.ok() && reason == "cancelled";
  if (!status.ok() || res.cancelled) res.embeddings.clear();
  res.queue_ms = s.result.queue_ms;
  res.compute_ms = MsBetween(s.admitted, Clock::now());
  {
    std::lock_guard<std::mutex> lock(mu_);
    --in_flight_;
    stats_.requests++;
    stats_.embedding_requests++;
    if (!status.ok()) stats_.requests_failed++;
    if (res.cancelled) stats_.requests_cancelled++;
    if (status.ok() && !res.cancelled) stats_.prompt_tokens += res.prompt_tokens;
  }
  std::lock_guard<std::mutex> lock(r.mu);
  job.answered = true;
  r.result.status = status;
  r.result.finish_reason = reason;
  r.done = true;
  r.cv.notify_all();
}

}  // namespace promptcache
