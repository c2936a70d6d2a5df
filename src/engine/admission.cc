// Admitting a request from the queue (engine_impl.h): its slot, and for a plain prompt the
// longest cached prefix (RAM, disk or the remote tier, bounded in time) and what is left to
// prefill, or a wait for the blocks of it another sequence is computing (prefix_sharing.cc);
// a prompt with segments plans the rest in segment_admission.cc. Modular prompts are admitted by
// modular_admission.cc.
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
  } else if (!s->r->embedding) {  // an embedding's inputs are all computed (embedding.cc)
    s->tokens = s->r->req.prompt;
    s->n_prompt = static_cast<int>(s->tokens.size());
    s->result.prompt_tokens = s->n_prompt;
    // A prompt with segments shares in flight only its exact prefix, up to its first reused
    // segment (prefix_sharing.cc), and the segments it misses (segment_admission.cc).
    const bool segments = UsesSegments(*s->r);
    const bool shares = UsesPrefixCache(*s->r);
    if (shares) {
      s->owner = next_owner_++;
      s->keys = cache_->ChainKeys(s->tokens, NamespaceKey(s->r->req.cache_namespace));
    }
    // Its prefill, or a wait for blocks another sequence is computing (prefix_sharing.cc).
    const bool attached = AttachPrefix(*s, /*may_wait=*/shares && !s->r->req.prompt_logprobs);
    s->next_pos = s->n_prompt;
    // After its prefix hit, its segments are looked up and the rest planned, or it waits for
    // segments another sequence is computing (segment_admission.cc); after a wait for its
    // prefix, WakeWaiters does this.
    if (segments && attached && !AdmitSegments(*s, /*may_wait=*/true)) return;
  }
  s->prefill_start = Clock::now();
  if (options_.kv_ram_bytes > 0) s->reserved = Reservation(*s->r);
  try {
    active_.push_back(std::move(s));
  } catch (...) {
    claims_.ReleaseAll(s->owner);  // a slot that never ran computes nothing for anyone
    segment_claims_.ReleaseAll(s->segment_owner);
    throw;
  }
  if (options_.kv_ram_bytes > 0) {
    reserved_ += active_.back()->reserved;
    UpdateCacheBudget();
    cache_->Maintain();  // room for it: cached blocks beyond what is left are evicted now
  }
}

}  // namespace promptcache
