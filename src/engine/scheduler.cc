// The engine thread (engine_impl.h): its loop (tasks, the queue in order of arrival under the
// K/V budget, admissions), one step (a forward pass over every active sequence: decode tokens
// first, then prefill chunks up to batch_size, those others wait for first: prefix_sharing.cc),
// with speculative decoding's guesses after a sequence's decode token (AddDraft), the K/V
// reservations that bound admission, and the requests that end without running (cancelled in
// the queue, or failed at admission).
#include <algorithm>
#include <string>

#include "core/log.h"
#include "engine/engine_slot.h"
#include "engine/runner.h"

namespace promptcache {

bool EngineImpl::Trims(const Request& r) const {
  // A modular prompt's prefill recomputes slots in place and gathers pieces between its stages,
  // and one with segments may do the same, or store segments from its K/V once it is complete;
  // they trim only once that is done, so their reservation covers the whole prefill.
  return options_.trim_sliding_kv && blocks_.layout().has_sliding() && !r.modular &&
         !UsesSegments(r);
}

size_t EngineImpl::Reservation(const Request& r) const {
  if (r.embedding) return EmbeddingReservation(*r.embedding);
  const size_t prompt = r.modular ? r.modular->prefill.tokens.size() : r.req.prompt.size();
  // Choices share the prompt's blocks and each holds its own generated tokens.
  const size_t tokens = std::min<size_t>(
      size_t(context_) * size_t(std::max(1, r.req.n)),
      prompt + size_t(std::max(0, r.req.max_tokens)) * size_t(std::max(1, r.req.n)));
  const KvLayout& l = blocks_.layout();
  const size_t block = size_t(l.block_size);
  const size_t blocks = (tokens + block - 1) / block;
  if (!Trims(r)) return blocks * l.bytes_per_block();
  // Before each forward pass a trimming sequence holds sliding parts for the W - 1 positions
  // its next query still sees, then adds at most a batch of tokens: over at most two blocks
  // more than those tokens fill (a partial block at each end).
  const size_t live = (size_t(l.sliding_window) - 1 + options_.batch_size + block - 1) / block + 2;
  return blocks * l.global_bytes_per_block() + std::min(blocks, live) * l.sliding_bytes_per_block();
}

// The cache may keep what the running requests' reservations leave of kv_ram_bytes.
// New pins fit in what is left too (pins already held stay until they lapse).
void EngineImpl::UpdateCacheBudget() {
  if (options_.kv_ram_bytes == 0) return;
  const size_t left = options_.kv_ram_bytes > reserved_ ? options_.kv_ram_bytes - reserved_ : 0;
  const size_t budget = std::min(options_.cache_ram_bytes, left);
  cache_->SetRamBudget(budget);
  cache_->SetPinBudget(std::min(pin_quota_, budget), tenant_pin_quota_);
}

void EngineImpl::Loop() {
  for (;;) {
    std::deque<std::function<void()>> tasks;
    std::vector<std::shared_ptr<Request>> admitted, cancelled;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock,
               [&] { return stop_ || !tasks_.empty() || !active_.empty() || !queue_.empty(); });
      if (stop_ && active_.empty()) break;
      BeginWork();
      tasks.swap(tasks_);
      TakeCancelled(&cancelled);
      TakeAdmitted(&admitted);
      stats_.queued = static_cast<int>(queue_.size());
    }
    for (auto& r : cancelled) CancelQueued(*r);
    RunTasks(tasks);
    AdmitAll(admitted);
    if (stop_) {
      for (auto& s : active_) Finish(*s, "cancelled");
    }
    StepOrFail();
    RemoveFinished();
    UpdateCacheBudget();
    cache_->Maintain();
    UpdateStatsSnapshot();
    EndWork();
  }
  ShutDown();
}

void EngineImpl::TakeCancelled(std::vector<std::shared_ptr<Request>>* cancelled) {
  for (auto it = queue_.begin(); it != queue_.end();) {
    if ((*it)->cancelled) {
      cancelled->push_back(*it);
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
}

void EngineImpl::TakeAdmitted(std::vector<std::shared_ptr<Request>>* admitted) {
  size_t reserving = reserved_ + pinned_bytes_;
  while (!queue_.empty() &&
         static_cast<int>(active_.size() + admitted->size()) + fetching_ < options_.parallel) {
    if (options_.kv_ram_bytes > 0) {
      const size_t need = Reservation(*queue_.front());
      if (!active_.empty() || !admitted->empty()) {
        if (reserving + need > options_.kv_ram_bytes) break;
      }
      reserving += need;
    }
    admitted->push_back(queue_.front());
    queue_.pop_front();
  }
}

void EngineImpl::RunTasks(std::deque<std::function<void()>>& tasks) {
  // Tasks are pieces of work of their own (a schema's module, a savings measurement): each
  // shows in the heartbeat apart from the step.
  for (auto& t : tasks) {
    t();
    EndWork();
    BeginWork();
  }
}

void EngineImpl::AdmitAll(const std::vector<std::shared_ptr<Request>>& admitted) {
  // An exception here (an allocation that fails, above all) fails the requests it concerns;
  // escaping the engine thread, it would end the process.
  for (const auto& r : admitted) {
    try {
      if (StartFetch(r)) continue;
      if (r->fetch && !AdoptSome(*r)) {  // more next turn, first in line
        std::lock_guard<std::mutex> lock(mu_);
        queue_.push_front(r);
        stats_.queued = static_cast<int>(queue_.size());
        continue;
      }
      Admit(r);
    } catch (const std::exception& e) {
      const std::string why = std::string("the engine could not start the request: ") + e.what();
      auto it =
          std::find_if(active_.begin(), active_.end(), [&](const auto& s) { return s->r == r; });
      if (it != active_.end()) {
        Finish(**it, "error", Internal(why));
      } else {
        Abandon(*r, why);
      }
    }
  }
  if (!admitted.empty()) {  // /health and /metrics see them while their first step runs
    std::lock_guard<std::mutex> lock(mu_);
    stats_.active = static_cast<int>(
        std::count_if(active_.begin(), active_.end(), [](const auto& s) { return !s->finished; }));
  }
}

void EngineImpl::StepOrFail() {
  try {
    Step();
  } catch (const std::exception& e) {
    for (auto& s : active_) {
      Finish(*s, "error", Internal(std::string("the engine failed computing: ") + e.what()));
    }
  }
}

void EngineImpl::RemoveFinished() {
  for (const auto& s : active_) {
    if (s->finished) reserved_ -= s->reserved;
  }
  active_.erase(std::remove_if(active_.begin(), active_.end(),
                               [](const std::unique_ptr<Slot>& s) { return s->finished; }),
                active_.end());
}

void EngineImpl::ShutDown() {
  // The fetch under way ends within its deadline; its request and those not sent come back to
  // the queue, answered below.
  if (fetcher_) fetcher_->Stop();
  // A restarted engine finds what this one cached.
  if (cache_->disk() != nullptr) {
    if (Status st = cache_->SaveAll(); !st.ok())
      PC_LOG_WARN("saving the cache: %s", st.message().c_str());
  }
  // Blocks still queued for the remote tier go out before the process ends (the writer is
  // bounded by its timeout per batch, and drops everything while the store is down).
  if (cache_->remote() != nullptr) cache_->remote()->Flush();
  // Requests still queued at shutdown are answered, not left waiting.
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& r : queue_) {
    r->fetch.reset();
    std::lock_guard<std::mutex> rl(r->mu);
    r->result.status = Internal("the engine is shutting down");
    r->done = true;
    r->cv.notify_all();
  }
  queue_.clear();
}

// One forward pass's inputs: its tokens, and which rows of its output are read.
struct EngineImpl::StepBatch {
  std::vector<BatchToken> tokens;
  // The rows of logits, in batch order: a slot's next token (pos -1), or a prompt position
  // whose logits give the next prompt token's log-probability.
  struct Row {
    Slot* slot;
    int pos;
  };
  std::vector<Row> wants_logits;
  std::vector<HiddenRow> wants_hidden;  // embedding requests' tokens whose hidden states pool
};

bool EngineImpl::Step() {
  StepBatch batch;
  std::vector<Slot*> recompute;  // requests without a KV cache: their whole sequence again
  AddDecodeTokens(&batch, &recompute);
  const std::vector<Slot*> prefilled = AddPrefillChunks(&batch);
  // The baseline recomputes alone: its passes are what it measures.
  for (Slot* s : recompute) RecomputeStep(*s);
  if (batch.tokens.empty()) return !recompute.empty();
  std::vector<float> logits(batch.wants_logits.size() * size_t(model_->config().n_vocab));
  std::vector<float> hidden(batch.wants_hidden.size() * size_t(model_->config().n_embd));
  Status st = model_->Forward(batch.tokens, logits.data(), &pool_, &scratch_, 0, hidden.data());
  if (!st.ok()) {
    PC_LOG_ERROR("forward pass failed: %s", st.message().c_str());
    for (auto& sp : active_) {
      if (!sp->finished) Finish(*sp, "error", st);
    }
    return true;
  }
  DeliverRows(batch, logits.data());
  PoolEmbeddings(batch.wants_hidden, hidden.data());
  // Blocks this pass completed are usable by others from now on (those waiting for them too).
  for (Slot* s : prefilled) PublishPrefill(*s);
  for (auto& sp : active_) TrimSliding(*sp);
  return true;
}

void EngineImpl::AddDecodeTokens(StepBatch* batch, std::vector<Slot*>* recompute) {
  for (auto& sp : active_) {
    Slot& s = *sp;
    if (s.finished) continue;
    if (s.r->cancelled) {
      Finish(s, "cancelled");
      continue;
    }
    if (s.pending >= 0 && s.r->req.recompute_each_step) {
      recompute->push_back(&s);
    } else if (s.pending >= 0) {
      batch->tokens.push_back({s.pending, s.next_pos++, &s.seq, true});
      batch->wants_logits.push_back({&s, -1});
      AddDraft(s, batch);
    }
  }
}

void EngineImpl::AddDraft(Slot& s, StepBatch* batch) {
  s.draft.clear();
  if (!s.drafter.enabled()) return;
  // Row i samples the token after guess i, which decoding one token at a time would feed only
  // while max_tokens leaves room for it and the context has a position for it (DecodeStep's
  // `room` for the row before: its input's position + 2 < context).
  const int pending_pos = s.next_pos - 1;
  const int kept = static_cast<int>(s.decode.tokens().size());
  const int limit = std::min(s.r->req.max_tokens - kept - 1, context_ - 2 - pending_pos);
  if (limit <= 0) return;
  s.draft = s.drafter.Propose(s.tokens, static_cast<int>(s.tokens.size()) - s.n_prompt, limit);
  for (int32_t guess : s.draft) {
    batch->tokens.push_back({guess, s.next_pos++, &s.seq, true});
    batch->wants_logits.push_back({&s, -1});
  }
}

std::vector<EngineImpl::Slot*> EngineImpl::AddPrefillChunks(StepBatch* batch) {
  // Sequences others wait for first (most awaited tokens first), then the oldest request
  // first. Waiting sequences whose blocks are done join.
  WakeWaiters();
  std::vector<Slot*> prefilled;
  for (Slot* sp : PrefillOrder()) {
    Slot& s = *sp;
    if (s.finished || s.pending >= 0 || s.r->cancelled || s.Waiting()) continue;
    const int room = options_.batch_size - static_cast<int>(batch->tokens.size());
    if (room <= 0) break;
    if (s.r->embedding) {
      AddEmbeddingTokens(s, room, &batch->tokens, &batch->wants_hidden);
      continue;
    }
    if (AddPrefillChunk(s, room, batch) > 0) prefilled.push_back(&s);
  }
  return prefilled;
}

int EngineImpl::AddPrefillChunk(Slot& s, int room, StepBatch* batch) {
  // Cached blocks that come before the next tokens join the sequence first; a token attends
  // to what its sequence held before the batch, so a stage's tokens wait for the next step.
  while (!s.gathers.empty() && s.gathers.front().before == s.filled) {
    Slot::Gather& g = s.gathers.front();
    s.seq.AppendSegment(g.held, 0, g.held.size());
    s.gathers.pop_front();
  }
  const int total = static_cast<int>(s.fill_tokens.size());
  const int stop = s.gathers.empty() ? total : s.gathers.front().before;
  const int n = std::min(room, stop - s.filled);
  const bool scored = s.r->req.prompt_logprobs;
  for (int i = s.filled; i < s.filled + n; ++i) {
    const bool last = i + 1 == total;
    batch->tokens.push_back({s.fill_tokens[i], s.fill_pos[i], &s.seq, last || scored});
    if (last || scored) batch->wants_logits.push_back({&s, last ? -1 : s.fill_pos[i]});
  }
  s.filled += n;
  return n;
}

void EngineImpl::DeliverRows(const StepBatch& batch, const float* logits) {
  const size_t n_vocab = model_->config().n_vocab;
  for (size_t i = 0; i < batch.wants_logits.size(); ++i) {
    Slot& s = *batch.wants_logits[i].slot;
    const float* row = logits + i * n_vocab;
    if (batch.wants_logits[i].pos >= 0) {
      if (!s.finished) HandlePromptRow(s, batch.wants_logits[i].pos, row);
      continue;
    }
    if (!s.draft.empty()) {
      const size_t guesses = s.draft.size();
      DeliverDrafted(s, row);
      i += guesses;  // its rows follow
      continue;
    }
    s.pending = -1;
    Deliver(s, row);
  }
}

void EngineImpl::Deliver(Slot& s, const float* logits) {
  // The request's callbacks are the caller's code: one that throws fails its request, not the
  // engine thread (and with it the process).
  try {
    HandleLogits(s, logits);
  } catch (const std::exception& e) {
    Finish(s, "error", Internal(std::string("the request's callback threw: ") + e.what()));
  } catch (...) {
    Finish(s, "error", Internal("the request's callback threw"));
  }
}

void EngineImpl::RecomputeStep(Slot& s) {
  // s.tokens ends with the pending token (HandleLogits kept it), at position next_pos.
  std::vector<float> logits(model_->config().n_vocab);
  const Status st = RecomputeSequence(*model_, s.tokens, &s.seq, logits.data(), options_.batch_size,
                                      &pool_, &scratch_, options_.trim_sliding_kv);
  if (!st.ok()) return Finish(s, "error", st);
  ++s.next_pos;
  s.pending = -1;
  Deliver(s, logits.data());
}

void EngineImpl::TrimSliding(Slot& s) {
  if (s.finished || s.Waiting() || !options_.trim_sliding_kv || !blocks_.layout().has_sliding())
    return;
  if (s.r->embedding) return;  // its inputs' sequences live for a step or two
  const int total = static_cast<int>(s.fill_tokens.size());
  if ((s.r->modular || s.segmented) && (s.filled < total || !s.gathers.empty())) return;
  // The sequence only moves forward: its next query is the next prefill token's, or the token
  // to decode next.
  const int32_t next = s.filled < total ? s.fill_pos[s.filled] : s.next_pos;
  const int dead = s.seq.SlidingDeadTokens(next);
  if (dead <= s.released) return;
  // While the sequence still holds those blocks whole, the cache takes them (and a full
  // reference): a later prompt sharing this prefix finds its last window complete, however far
  // this request runs past it.
  if (UsesPrefixCache(*s.r)) {
    cache_->InsertPrefix(
        std::span<const int32_t>(s.tokens).first(std::min(dead, s.r->exact_prefix)), s.seq,
        NamespaceKey(s.r->req.cache_namespace));
  }
  s.seq.ReleaseSliding(dead);
  s.released = dead;
}

namespace {

// Ends a request that did not run to its end: its result as `set_result` writes it, under its
// lock, and its waiters woken. False, doing nothing, where it had ended already.
template <typename R, typename F>
bool EndUnfinished(R& r, const F& set_result) {
  {
    std::lock_guard<std::mutex> lock(r.mu);
    if (r.done) return false;
    set_result(r.result);
    r.done = true;
  }
  r.cv.notify_all();
  return true;
}

}  // namespace

void EngineImpl::Abandon(Request& r, const std::string& why) {
  r.fetch.reset();
  const bool ended = EndUnfinished(r, [&](CompletionResult& result) {
    result.status = Internal(why);
    result.finish_reason = "error";
  });
  if (!ended) return;  // Admit finished it before it threw
  std::lock_guard<std::mutex> lock(mu_);
  --in_flight_;
  stats_.requests++;
  stats_.requests_failed++;
  if (r.embedding) stats_.embedding_requests++;
}

void EngineImpl::CancelQueued(Request& r) {
  r.fetch.reset();  // values read for it (cancelled while they were fetched) go unused
  const bool ended = EndUnfinished(r, [&](CompletionResult& result) {
    result.finish_reason = "cancelled";
    result.prompt_tokens = static_cast<int>(r.req.prompt.size());
    result.queue_ms = MsBetween(r.submitted, Clock::now());
  });
  if (!ended) return;
  std::lock_guard<std::mutex> lock(mu_);
  --in_flight_;
  stats_.requests++;
  stats_.requests_cancelled++;
  if (r.embedding) stats_.embedding_requests++;
}

}  // namespace promptcache
