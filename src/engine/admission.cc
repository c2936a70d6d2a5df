// Admitting a request from the queue (engine_impl.h): its slot, and for a plain prompt the
// longest cached prefix (RAM, disk, or the remote tier: read off the engine thread, below) and
// what is left to prefill, or a wait for the blocks of it another sequence is computing
// (prefix_sharing.cc); a prompt with segments plans the rest in segment_admission.cc. Modular
// prompts are admitted by modular_admission.cc.
//
// A prompt's remote lookups never wait for the network on the engine thread: at intake the
// engine thread walks RAM and disk (BlockCache::PlanRemotePrefix for a plain prompt's prefix,
// PlanRemoteBlocks for each of its segments, or each piece a modular prompt gathers); if a chain
// ends at a block neither holds, within the part a lookup matches, the request goes to the
// fetcher (engine/remote_fetch.h) instead of being admitted, and the others keep stepping,
// requests queued after it being admitted meanwhile. The fetcher reads the values under
// --cache-redis-deadline and puts the request back in the queue in its order of arrival;
// admitted again, it takes them into the cache, 16 MiB per turn of the loop while others run so
// that they step between the parts (AdoptSome), with every check (AdoptRemotePrefix: each a record
// of its key, holding the prompt's tokens after the block before it; the first that fails ends
// the chain; a segment's or module's blocks as AdoptRemoteBlocks checks them), and its lookups
// find them in RAM (the cache's lookups read RAM and disk only: LookupPrefix, AppendCached).
// A request cancelled meanwhile is answered (and its values dropped) when it is back in the
// queue; at shutdown the fetch under way ends within its deadline and the rest are not sent.
#include <algorithm>

#include "engine/engine_slot.h"

namespace promptcache {

bool EngineImpl::StartFetch(const std::shared_ptr<Request>& r) {
  // Once per request: back from its fetch, it is admitted with what the fetch read.
  if (!fetcher_ || r->fetch || r->embedding) return false;
  std::vector<RemotePrefixFetch> plans = PlanRemoteReads(*r);
  if (std::all_of(plans.begin(), plans.end(), [](const auto& p) { return p.names.empty(); })) {
    return false;
  }
  r->fetch = std::make_unique<Request::Fetch>();
  r->fetch->plans = std::move(plans);
  r->fetch->started = Clock::now();
  RemoteFetcher::Job job;
  job.plans = &r->fetch->plans;
  job.cancelled = [r] { return r->cancelled.load(); };
  job.done = [this, r](std::vector<std::vector<RemoteValue>> values) {
    FetchDone(r, std::move(values));
  };
  std::lock_guard<std::mutex> lock(mu_);  // FetchDone waits for it: the count never dips
  stats_.fetching = ++fetching_;
  try {
    fetcher_->Submit(std::move(job));
  } catch (...) {
    stats_.fetching = --fetching_;  // not sent; AdmitAll fails the request
    throw;
  }
  return true;
}

std::vector<RemotePrefixFetch> EngineImpl::PlanRemoteReads(const Request& r) const {
  const auto& prompt = r.req.prompt;
  const BlockKey ns = NamespaceKey(r.req.cache_namespace);
  std::vector<RemotePrefixFetch> plans(1);
  if (r.modular) {  // no prefix lookup: each piece it gathers
    const SchemaLayout& layout = r.modular->schema->For(r.modular->positions);
    for (const PrefillStage& stage : r.modular->prefill.stages) {
      for (const PrefillGather& g : stage.gather) {
        plans.push_back(cache_->PlanRemoteBlocks(store_->PieceKeys(layout.Piece(g.ref))));
      }
    }
    return plans;
  }
  if (!UsesPrefixCache(r)) return plans;
  plans[0] = cache_->PlanRemotePrefix(prompt, static_cast<int>(prompt.size()) - 1, ns);
  if (!UsesSegments(r)) return plans;
  // The segments past what RAM and disk hold of the prefix (a remote prefix hit may cover more
  // of them: those are read for nothing, and their blocks kept).
  const int local = plans[0].names.empty() ? 0 : plans[0].first * options_.block_size;
  for (const PromptSegment& g : LookedUp(r.req.segments, local)) {
    const std::span<const int32_t> tokens(prompt.data() + g.begin, g.size());
    plans.push_back(cache_->PlanRemoteBlocks(segments_->Keys(tokens, ns)));
  }
  return plans;
}

void EngineImpl::FetchDone(const std::shared_ptr<Request>& r,
                           std::vector<std::vector<RemoteValue>> values) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    r->fetch->values = std::move(values);
    r->fetch->ms = MsBetween(r->fetch->started, Clock::now());
    stats_.fetching = --fetching_;
    // Ahead of the requests that came after it (they may have been admitted meanwhile).
    auto it = std::find_if(queue_.begin(), queue_.end(),
                           [&](const auto& q) { return q->submitted > r->submitted; });
    queue_.insert(it, r);
    stats_.queued = static_cast<int>(queue_.size());
  }
  cv_.notify_all();
}

bool EngineImpl::AdoptSome(Request& r) {
  Request::Fetch& f = *r.fetch;
  f.values.resize(f.plans.size());
  const size_t per_block = std::max<size_t>(1, blocks_.layout().bytes_per_block());
  // With nobody else running there is no step to hold up: all at once, no turn lost.
  const bool alone =
      adopt_whole_when_alone_ &&
      std::all_of(active_.begin(), active_.end(), [](const auto& s) { return s->finished; });
  size_t budget = alone ? SIZE_MAX : std::max<size_t>(1, adopt_bytes_per_turn_ / per_block);
  while (f.plan < f.plans.size() && budget > 0) {
    std::vector<RemoteValue>& v = f.values[f.plan];
    const size_t n = std::min(budget, v.size() - f.next);
    bool stopped = n == 0;
    if (n > 0) {
      const RemotePrefixFetch part = SlicePlan(f.plans[f.plan], f.next, n);
      const std::span<const RemoteValue> values(v.data() + f.next, n);
      size_t walked = 0;
      if (f.plan == 0) {  // the prefix's chain; then each segment's or module piece's blocks
        const auto keys = cache_->AdoptRemotePrefix(r.req.prompt, part, values, &walked);
        f.adopted.insert(f.adopted.end(), keys.begin(), keys.end());
      } else {
        walked = static_cast<size_t>(cache_->AdoptRemoteBlocks(part, values));
      }
      stopped = walked < n;  // a value failed its checks: the rest of this chain is unused
      budget -= n;
      f.next += n;
    }
    if (stopped || f.next >= v.size()) {
      v = {};  // its memory goes back now
      ++f.plan;
      f.next = 0;
    }
  }
  return f.plan >= f.plans.size();
}

void EngineImpl::AdoptFetched(Slot& s) {
  // Its values all taken in (AdoptSome): what it reports.
  s.fetched = std::move(s.r->fetch->adopted);
  s.result.remote_ms = s.r->fetch->ms;
  s.r->fetch.reset();
}

void EngineImpl::Admit(std::shared_ptr<Request> r) {
  auto s = std::make_unique<Slot>(r, &blocks_, model_->tokenizer(), r->req.sampling);
  if (r->req.grammar)
    s->constraint = std::make_unique<GrammarConstraint>(r->req.grammar, Trie(r->req.special_text));
  s->drafter = MakeDrafter(*r);
  s->admitted = Clock::now();
  s->result.queue_ms = MsBetween(s->r->submitted, s->admitted);
  if (s->r->modular) {
    if (r->fetch) AdoptFetched(*s);  // its remote reads, made at intake off this thread
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
    if (r->fetch) AdoptFetched(*s);
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
