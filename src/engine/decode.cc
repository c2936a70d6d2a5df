// The engine's per-token work (engine_impl.h): each new token's logits handled (sampled, with a
// grammar when the request has one, then the end checks), forking n choices from one prefill,
// prompt and generated tokens' log-probabilities, handing pieces of text to the request, a
// speculative step's rows handed out in order (DeliverDrafted: the guesses its sampling
// confirms kept), and finishing a choice and completing its request once the last choice
// finished.
#include <algorithm>
#include <limits>

#include "engine/engine_slot.h"
#include "sampling/logprobs.h"

namespace promptcache {
namespace {

// Choice i > 0 of a seeded request samples from its own reproducible stream.
SamplingParams ChoiceSampling(SamplingParams p, int choice) {
  if (choice > 0 && p.seed != 0) {
    uint64_t z = p.seed + 0x9e3779b97f4a7c15ull * uint64_t(choice);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    p.seed = (z ^ (z >> 31)) | 1;  // never 0, which would mean "random"
  }
  return p;
}

}  // namespace

int EngineImpl::PromptTop(const Slot& s) const {
  return std::min(std::max(0, s.r->req.logprobs), model_->config().n_vocab);
}

void EngineImpl::ReusePromptLogprobs(Slot& s) {
  s.prefix_hashes = PrefixHashes(s.tokens);
  s.result.prompt_logprobs.assign(s.n_prompt - 1, TokenLogprob());
  // Token j's value comes from the logits of position j - 1: cached positions need the memo,
  // and the first miss is computed again from there.
  int keep = s.seq.size();
  for (int j = 1; j <= keep && j < s.n_prompt; ++j) {
    if (!memo_->Find(s.prefix_hashes[j], s.tokens[j], PromptTop(s),
                     &s.result.prompt_logprobs[j - 1])) {
      keep = j - 1;
    }
  }
  if (keep < s.seq.size()) s.seq.Truncate(keep);
  s.result.cached_tokens = keep;
}

void EngineImpl::HandlePromptRow(Slot& s, int pos, const float* logits) {
  const int j = pos + 1;  // the prompt token these logits predict
  if (j <= 0 || j >= s.n_prompt) return;
  TokenLogprob lp = ComputeLogprob(logits, model_->config().n_vocab, s.tokens[j], PromptTop(s));
  if (options_.prefix_cache) memo_->Insert(s.prefix_hashes[j], lp);
  s.result.prompt_logprobs[j - 1] = std::move(lp);
}

void EngineImpl::ForkChoices(Slot& s) {
  Request& r = *s.r;
  r.forked = true;
  const int n = r.req.n;
  r.choices.resize(n);
  r.open += n - 1;
  for (int c = 1; c < n; ++c) {
    auto f = std::make_unique<Slot>(s.r, &blocks_, model_->tokenizer(),
                                    ChoiceSampling(r.req.sampling, c));
    f->choice = c;
    if (r.req.grammar)
      f->constraint = std::make_unique<GrammarConstraint>(r.req.grammar, Trie(r.req.special_text));
    f->drafter = MakeDrafter(r);
    f->seq = s.seq.Fork();  // the prompt's blocks, shared: a choice's tokens go to new blocks
    f->tokens = s.tokens;
    f->n_prompt = s.n_prompt;
    f->next_pos = s.next_pos;
    f->released = s.released;
    f->admitted = s.admitted;
    f->prefill_start = s.prefill_start;
    f->result.prompt_tokens = s.result.prompt_tokens;
    active_.push_back(std::move(f));
  }
}

const std::shared_ptr<const VocabTrie>& EngineImpl::Trie(bool special) {
  std::shared_ptr<const VocabTrie>& trie = trie_[special ? 1 : 0];
  if (!trie) {
    const Tokenizer& tok = model_->tokenizer();
    std::vector<std::string> bytes(model_->config().n_vocab);
    std::vector<int32_t> ends;
    for (int32_t id = 0; id < static_cast<int32_t>(bytes.size()); ++id) {
      const bool end = tok.IsEndOfGeneration(id);
      // An end-of-generation token ends the text; it never spells a grammar's literal.
      if (id < tok.vocab_size()) bytes[id] = tok.TokenBytes(id, special && !end);
      if (end) ends.push_back(id);
    }
    trie = std::make_shared<VocabTrie>(std::move(bytes), std::move(ends));
  }
  return trie;
}

int32_t EngineImpl::SampleConstrained(Slot& s, const float* logits) {
  const int n_vocab = model_->config().n_vocab;
  const float mu = s.decode.sampler().mirostat_mu();
  const int32_t first = s.decode.Sample(logits, n_vocab, s.tokens);
  // What free generation does not do, from here on, counts as the grammar's cost.
  const Clock::time_point start = Clock::now();
  struct Timer {
    Request* r;
    Clock::time_point start;
    ~Timer() { r->grammar_ms += MsBetween(start, Clock::now()); }
  } timer{s.r.get(), start};
  if (s.constraint->Allows(first)) return first;
  const std::vector<uint8_t>& mask = s.constraint->Mask();
  masked_.assign(logits, logits + n_vocab);
  bool any = false;
  for (int i = 0; i < n_vocab; ++i) {
    if (mask[i]) {
      any = true;
      // A finite floor: the sampler's cuts then never leave it with nothing.
      if (!(masked_[i] > -1e30f)) masked_[i] = -1e30f;
    } else {
      masked_[i] = -std::numeric_limits<float>::infinity();
    }
  }
  if (!any) return -1;
  s.decode.sampler().set_mirostat_mu(mu);  // the first draw is not the step's token
  const int32_t next = s.decode.Sample(masked_.data(), n_vocab, s.tokens);
  return mask[next] ? next : -1;
}

bool EngineImpl::Emit(Slot& s, const std::string& text) {
  const CompletionRequest& req = s.r->req;
  if (req.on_piece) {
    TextPiece piece;
    piece.choice = s.choice;
    piece.text = text;
    piece.logprobs = std::move(s.unsent);
    s.unsent.clear();
    return req.on_piece(piece);
  }
  return !req.on_text || req.on_text(text);
}

bool EngineImpl::SampleFidelity(const Slot& s) {
  if (!fidelity_) return false;
  // Approximate K/V only: modules encoded apart from the prompt, or segments computed after other
  // text. A prefix hit is the full computation's own K/V.
  const bool approximate =
      (s.r->modular && s.result.cached_tokens > 0) || s.result.segment_hits > 0;
  return approximate && fidelity_->Pick();
}

void EngineImpl::HandOverFidelity(Slot& s) {
  const CompletionResult& res = s.result;
  s.fidelity = false;
  if (!res.status.ok() || res.finish_reason == "cancelled" || res.tokens.empty()) return;
  FidelitySample sample;
  sample.segment = !s.r->modular;
  sample.prompt.assign(s.tokens.begin(), s.tokens.begin() + s.n_prompt);
  const size_t n = std::min(res.tokens.size(), s.fidelity_logits.size());
  sample.tokens.assign(res.tokens.begin(), res.tokens.begin() + n);
  s.fidelity_logits.resize(n);
  sample.logits = std::move(s.fidelity_logits);
  fidelity_->Add(std::move(sample));
}

void EngineImpl::CompleteRequest(Request& r) {
  CompletionResult res = std::move(r.base);
  if (res.status.ok() && !r.failure.ok()) res.status = r.failure;
  res.choices = std::move(r.choices);
  res.grammar_ms = r.grammar_ms;
  res.draft_tokens = r.draft_tokens;
  res.accepted_draft_tokens = r.accepted_draft_tokens;
  {
    std::lock_guard<std::mutex> lock(mu_);
    --in_flight_;
    if (in_flight_ == 0 && fidelity_) fidelity_->Wake();
    stats_.requests++;
    if (!res.status.ok()) stats_.requests_failed++;
    if (res.finish_reason == "cancelled") stats_.requests_cancelled++;
    stats_.prompt_tokens += res.prompt_tokens;
    stats_.cached_tokens += res.cached_tokens;
    stats_.shared_in_flight_tokens += res.shared_tokens;
    stats_.generated_tokens += res.completion_tokens();
    stats_.draft_tokens += res.draft_tokens;
    stats_.accepted_draft_tokens += res.accepted_draft_tokens;
    if (!res.tokens.empty() || res.finish_reason == "length") {
      stats_.ttft_ms.push_back(res.ttft_ms);
      if (stats_.ttft_ms.size() > kTtftWindow) stats_.ttft_ms.erase(stats_.ttft_ms.begin());
    }
  }
  std::lock_guard<std::mutex> lock(r.mu);
  r.result = std::move(res);
  r.done = true;
  r.cv.notify_all();
}

void EngineImpl::HandleLogits(Slot& s, const float* logits) {
  const CompletionRequest& req = s.r->req;
  const bool first = s.result.tokens.empty();
  if (first) {
    s.first_token = Clock::now();
    s.result.prompt_ms = MsBetween(s.admitted, s.first_token);
    s.result.prefill_ms = MsBetween(s.prefill_start, s.first_token);
    s.result.ttft_ms = MsBetween(s.r->submitted, s.first_token);
    if (!s.segment_misses.empty()) StoreSegments(s);  // the prompt's K/V are complete
  }
  const int n_vocab = model_->config().n_vocab;
  if (req.on_logits) req.on_logits(std::span<const float>(logits, n_vocab));
  if (first && s.choice == 0 && !s.fidelity_decided) {
    s.fidelity_decided = true;
    s.fidelity = SampleFidelity(s);
  }
  if (s.fidelity && s.fidelity_logits.size() < size_t(kFidelitySampleSteps)) {
    s.fidelity_logits.emplace_back(logits, logits + n_vocab);
  }
  if (first && s.choice == 0 && req.prompt_logprobs && req.on_piece) {
    // A stream gets the prompt's log-probabilities first, as a piece of choice -1.
    if (!req.on_piece(TextPiece{-1, "", s.result.prompt_logprobs})) {
      s.r->cancelled = true;
      return Finish(s, "cancelled");
    }
  }
  if (first && s.choice == 0 && req.n > 1 && !s.r->forked) {
    ForkChoices(s);
    // The new choices sample their first token from these logits too.
    for (size_t i = active_.size() - (req.n - 1); i < active_.size(); ++i) {
      HandleLogits(*active_[i], logits);
    }
  }
  if (s.decode.Exhausted()) return Finish(s, "length");  // max_tokens 0
  const int32_t next =
      s.constraint ? SampleConstrained(s, logits) : s.decode.Sample(logits, n_vocab, s.tokens);
  if (next < 0) {
    // The grammar's own reason when its recognizer outgrew its bounds (grammar/token_mask.h).
    if (!s.constraint->error().ok()) return Finish(s, "error", s.constraint->error());
    return Finish(s, "error",
                  InvalidArgument("the grammar allows no token of the model's vocabulary here"));
  }
  bool grammar_done = false;
  if (s.constraint) {
    if (Trie(s.r->req.special_text)->IsEnd(next)) return Finish(s, "stop");
    const Clock::time_point t = Clock::now();
    s.constraint->Accept(next);
    s.r->grammar_ms += MsBetween(t, Clock::now());
    grammar_done = s.constraint->Finished();
  }
  const auto keep = [&](int32_t id) {
    s.tokens.push_back(id);
    s.result.tokens.push_back(id);
    if (req.logprobs >= 0) {
      s.logprobs.push_back(ComputeLogprob(logits, n_vocab, id, std::min(req.logprobs, n_vocab)));
      if (req.on_piece) s.unsent.push_back(s.logprobs.back());
    }
  };
  const DecodeEnd end = s.decode.Take(
      {next, s.next_pos + 1 < context_, false, grammar_done},
      [&](const std::string& piece) { return Emit(s, piece); }, keep);
  if (end == DecodeEnd::kNone) {
    s.pending = next;
    return;
  }
  if (end == DecodeEnd::kCancelled) s.r->cancelled = true;
  Finish(s, FinishReason(end));
}

Drafter EngineImpl::MakeDrafter(const Request& r) const {
  if (r.req.recompute_each_step || r.embedding) return Drafter();
  return Drafter(
      {options_.draft_max, options_.draft_ngram_min, std::max(4, options_.draft_ngram_min)},
      r.req.prediction);
}

void EngineImpl::DeliverDrafted(Slot& s, const float* rows) {
  // The pass fed the pending token at P and guess i at P + i: the sequence holds all their K/V.
  // Row i is what a step feeding guess i alone would have produced, so long as guesses 1..i
  // are the tokens sampled before it; the first row whose sampled token is not the next guess
  // (or the last row) ends the turn, and the K/V after its input go.
  const int k = static_cast<int>(s.draft.size());
  const int base = s.seq.size() - k;  // the K/V up to and including the pending token's
  const int32_t pending_pos = s.next_pos - k - 1;
  const size_t n_vocab = model_->config().n_vocab;
  // Counted first: the request's result is handed over as soon as a row finishes it.
  s.r->draft_tokens += k;
  int accepted = 0;
  for (int i = 0; i <= k; ++i) {
    s.next_pos = pending_pos + i + 1;
    s.keep_kv = base + i;
    s.pending = -1;
    Deliver(s, rows + size_t(i) * n_vocab);
    if (s.finished || i == k || s.pending != s.draft[i]) break;
    ++accepted;  // its K/V are in: nothing left to feed
    ++s.r->accepted_draft_tokens;
  }
  if (!s.finished) s.seq.Truncate(base + accepted);
  s.keep_kv = -1;
  s.drafter.Observe(k, accepted);
  s.draft.clear();
}

void EngineImpl::Finish(Slot& s, const std::string& reason, Status status) {
  if (s.finished) return;
  if (s.r->embedding) return FinishEmbedding(s, reason, status);
  s.finished = true;
  // Ending while its guesses' rows are handed out: the K/V past the last confirmed one go.
  if (s.keep_kv >= 0) s.seq.Truncate(s.keep_kv);
  CompletionResult& res = s.result;
  res.status = status;
  res.finish_reason = reason;
  const std::string rest = reason == "length" ? s.decode.Flush() : std::string();
  if (!rest.empty() || !s.unsent.empty()) {
    try {
      Emit(s, rest);
    } catch (...) {
      res.status = Internal("the request's callback threw");
      res.finish_reason = "error";
    }
  }
  res.text = s.decode.text();
  if (s.fidelity) HandOverFidelity(s);
  if (!res.tokens.empty()) res.generation_ms = MsBetween(s.first_token, Clock::now());
  // Whatever this sequence computed stays reusable, also when the client went away.
  if (UsesPrefixCache(*s.r) && status.ok()) {
    const BlockKey ns = NamespaceKey(s.r->req.cache_namespace);
    const int exact = std::min(s.seq.size(), s.r->exact_prefix);
    cache_->InsertPrefix(std::span<const int32_t>(s.tokens).first(exact), s.seq, ns);
    const int pin =
        s.r->req.pin_tokens < 0 ? s.n_prompt : std::min(s.r->req.pin_tokens, s.n_prompt);
    const std::string& tenant = s.r->req.tenant;
    bool limited = false;
    if (pin > 0 && s.choice == 0) {
      res.pinned_tokens = cache_->PinPrefix(std::span<const int32_t>(s.tokens).first(pin), true, ns,
                                            tenant, &limited);
      res.pin_limited |= limited;
    }
    for (const CompletionRequest::TimedPin& p : s.r->req.timed_pins) {
      if (s.choice != 0 || p.tokens <= 0) continue;
      const auto pinned = std::span<const int32_t>(s.tokens).first(std::min(p.tokens, s.n_prompt));
      res.pinned_tokens = std::max(
          res.pinned_tokens, cache_->PinPrefixFor(pinned, p.ttl_seconds, ns, tenant, &limited));
      res.pin_limited |= limited;
    }
  }
  s.seq.Clear();
  s.gathers.clear();
  claims_.ReleaseAll(s.owner);  // what it did not complete, a sequence waiting for it computes
  segment_claims_.ReleaseAll(s.segment_owner);  // segments it did not store, likewise
  s.awaits = -1;
  s.awaited_segments.clear();
  Request& r = *s.r;
  r.choices[s.choice] = {res.tokens, res.text, res.finish_reason, std::move(s.logprobs)};
  if (s.choice == 0) {
    r.base = std::move(res);
  } else if (!res.status.ok() && r.failure.ok()) {
    r.failure = res.status;
  }
  if (--r.open > 0) return;
  CompleteRequest(r);
}

}  // namespace promptcache
