// Admitting a request from the queue (engine_impl.h): its slot, and for a plain prompt the
// longest cached prefix (RAM, disk or the remote tier, bounded in time) and what is left to
// prefill. Modular prompts are admitted by modular_admission.cc.
#include <algorithm>

#include "engine/engine_slot.h"
#include "kv/redis_tier.h"

namespace promptcache {

void EngineImpl::Admit(std::shared_ptr<Request> r) {
  // The remote tier's lookups run here, on the engine thread: bounded in all, so that a slow
  // store holds up the other requests' steps no longer than this.
  RemoteBudget remote_budget(options_.cache_redis_deadline_ms);
  auto s = std::make_unique<Slot>(r, &blocks_, model_->tokenizer(), r->req.sampling);
  if (r->req.grammar) s->constraint = std::make_unique<GrammarConstraint>(r->req.grammar, Trie());
  s->admitted = Clock::now();
  s->result.queue_ms = MsBetween(s->r->submitted, s->admitted);
  if (s->r->modular) {
    if (!AdmitModular(*s)) return;
  } else {
    s->tokens = s->r->req.prompt;
    s->n_prompt = static_cast<int>(s->tokens.size());
    s->result.prompt_tokens = s->n_prompt;
    std::vector<BlockOrigin> origins;
    if (options_.prefix_cache) {
      s->result.cached_tokens = cache_->LookupPrefix(
          s->tokens, s->n_prompt - 1, &s->seq, NamespaceKey(s->r->req.cache_namespace), &origins);
    }
    if (s->r->req.prompt_logprobs) ReusePromptLogprobs(*s);
    s->result.computed_tokens = s->n_prompt - s->result.cached_tokens;
    const int bs = options_.block_size;
    for (const BlockOrigin o : origins) {
      AddRun(&s->result.sources,
             o == BlockOrigin::kDisk     ? TokenSource::kDisk
             : o == BlockOrigin::kRemote ? TokenSource::kRemote
                                         : TokenSource::kRam,
             bs);
    }
    s->next_pos = s->n_prompt;
    if (UsesSegments(*r)) {
      if (!AdmitSegments(*s)) return;
    } else {
      AddRun(&s->result.sources, TokenSource::kComputed, s->result.computed_tokens);
      for (int i = s->seq.size(); i < s->n_prompt; ++i) {
        s->fill_tokens.push_back(s->tokens[i]);
        s->fill_pos.push_back(i);
      }
    }
  }
  s->prefill_start = Clock::now();
  if (options_.kv_ram_bytes > 0) s->reserved = Reservation(*s->r);
  active_.push_back(std::move(s));
  if (options_.kv_ram_bytes > 0) {
    reserved_ += active_.back()->reserved;
    UpdateCacheBudget();
    cache_->Maintain();  // room for it: cached blocks beyond what is left are evicted now
  }
}

}  // namespace promptcache
