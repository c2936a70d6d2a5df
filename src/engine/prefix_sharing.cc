// A plain prompt's prefix (engine_impl.h): the longest cached prefix, and blocks shared in flight
// (kv/in_flight.h), so that concurrent requests sharing a prefix compute it once.
//
// A prompt's prefill claims the full blocks it is about to compute (their chain keys, which
// start from its namespace's root: claims never cross namespaces). After each forward pass its
// completed full blocks go to the prefix cache and their claims are marked ready; the claims go
// at the end of its prefill, or when it finishes (cancelled, failed) before that.
//
// A prompt admitted while blocks right after its cached prefix are claimed and not ready (a
// "follower") computes nothing yet: it waits for the last of the claimed blocks it matches,
// holding its first hit's blocks meanwhile, then looks the prefix up again, which now finds them
// in the cache, and continues from there. Meanwhile it claims the blocks after its match, so a
// third prompt sharing more of it follows it in turn. If the producer goes away before the
// blocks are ready (cancelled), its claims are released: the follower finds them claimed by
// nobody, claims and computes them itself (the first follower to wake takes over, the others
// follow it). A follower only ever references blocks from the cache, and a block reaches the
// cache only after the forward pass that filled it.
//
// Bounds (docs/server.md, "Reading cached_tokens"): admission is unchanged, first come first
// served, so a request that shares nothing is admitted as soon as a slot is free. In each step
// the sequences others wait for get their prefill chunks first, the one with the most awaited
// tokens first; once nobody waits for them they go back to their place, so others' prefill is
// delayed at most by the steps the awaited blocks take. A follower waits at most until the chunk
// that completes its match is done; as a guard against a producer that makes no progress, after
// 2 + 2 * ceil(awaited tokens / batch_size) steps it stops waiting and computes what is missing
// itself.
//
// Prompts with segments (segment_admission.cc) share only their exact prefix, up to their first
// reused segment (past it their K/V are an approximation): they wait for prefix blocks as plain
// prompts do (claiming nothing while they wait), and once their segments are planned they claim
// and publish the blocks of their exact prefix alone (with selective recompute it is computed at
// admission, so published at once). They also share the segments they miss: one waits for a
// segment another sequence is computing and will store (Slot::awaited_segments), under the same
// priority and bound; WakeWaiters admits it again.
//
// Prompts with prompt_logprobs do not wait (the values of a prefix they did not compute come from
// the log-probability memo, which a producer without them does not fill); they still claim
// what they compute when their hit is whole blocks.
#include <algorithm>
#include <map>

#include "engine/engine_slot.h"

namespace promptcache {

bool EngineImpl::AttachPrefix(Slot& s, bool may_wait) {
  const int bs = options_.block_size;
  CompletionResult& res = s.result;
  // The new hit is taken before the previous one (a waiting slot's) is let go: its blocks stay.
  KvSequence seq(&blocks_);
  std::vector<BlockOrigin> origins;
  if (UsesPrefixCache(*s.r)) {
    // RAM and disk: what the remote tier held was read off the engine thread and taken into RAM
    // at admission (admission.cc).
    cache_->LookupPrefix(s.tokens, s.n_prompt - 1, &seq, NamespaceKey(s.r->req.cache_namespace),
                         &origins);
  }
  s.seq = std::move(seq);
  const int hit = s.seq.size() / bs;
  if (s.base_hit < 0) {
    // Blocks of the first hit that a running producer computed were shared in flight too.
    int own = 0;
    while (own < hit && own < static_cast<int>(s.keys.size())) {
      const InFlightBlocks::Holder h = claims_.Find(s.keys[own]);
      if (h.owner != 0 && h.owner != s.owner) break;
      ++own;
    }
    s.base_hit = own * bs;
  }
  if (may_wait) {
    // The blocks after the hit that another sequence is computing now, as far as they go: the
    // lookup would have matched them (at most the prompt minus its last token).
    const int matchable = std::min<int>((s.n_prompt - 1) / bs, s.keys.size());
    int m = hit;
    while (m < matchable && claims_.ComputedByOther(s.keys[m], s.owner)) ++m;
    if (m > hit) {
      if (s.awaits < 0) s.waited = 0;
      s.awaits = m - 1;
      const int awaited = m * bs - s.seq.size();
      s.wait_limit = 2 + 2 * ((awaited + options_.batch_size - 1) / options_.batch_size);
      // A prompt with segments does not know yet how much of it will be exact: it claims none.
      if (!UsesSegments(*s.r)) claims_.Claim(s.owner, std::span<const BlockKey>(s.keys).subspan(m));
      return false;
    }
  }
  s.awaits = -1;
  if (s.r->req.prompt_logprobs) ReusePromptLogprobs(s);
  const int cached = s.seq.size();
  res.cached_tokens = cached;
  res.shared_tokens = std::max(0, cached - std::max(0, s.base_hit));
  res.computed_tokens = s.n_prompt - cached;
  res.sources.clear();
  for (size_t i = 0; i < origins.size() && static_cast<int>(i) * bs < cached; ++i) {
    const bool fetched = i < s.keys.size() && std::find(s.fetched.begin(), s.fetched.end(),
                                                        s.keys[i]) != s.fetched.end();
    const BlockOrigin o = fetched ? BlockOrigin::kRemote : origins[i];
    AddRun(&res.sources,
           o == BlockOrigin::kDisk     ? TokenSource::kDisk
           : o == BlockOrigin::kRemote ? TokenSource::kRemote
                                       : TokenSource::kRam,
           std::min(bs, cached - static_cast<int>(i) * bs));
  }
  // A prompt with segments: AdmitSegments plans the rest (or has it wait for segments).
  if (UsesSegments(*s.r)) return true;
  AddRun(&res.sources, TokenSource::kComputed, res.computed_tokens);
  s.fill_tokens.clear();
  s.fill_pos.clear();
  for (int i = cached; i < s.n_prompt; ++i) {
    s.fill_tokens.push_back(s.tokens[i]);
    s.fill_pos.push_back(i);
  }
  ClaimPrefix(s, cached, s.n_prompt);
  return true;
}

void EngineImpl::ClaimPrefix(Slot& s, int from, int end) {
  // What it computes from here, in whole blocks (a prefix under cache_min_tokens is never
  // published: nobody should wait for it).
  const int bs = options_.block_size;
  const int last = std::min<int>(end / bs, s.keys.size());
  if (s.owner != 0 && from % bs == 0 && s.n_prompt >= cache_->options().min_tokens &&
      from / bs < last) {
    claims_.Claim(s.owner, std::span<const BlockKey>(s.keys).subspan(from / bs, last - from / bs));
  }
}

void EngineImpl::WakeWaiters() {
  for (auto& sp : active_) {
    Slot& s = *sp;
    if (s.finished || s.r->cancelled) continue;
    if (!s.awaited_segments.empty()) {
      const bool done = std::none_of(
          s.awaited_segments.begin(), s.awaited_segments.end(),
          [&](const auto& a) { return segment_claims_.ComputedByOther(a.key, s.segment_owner); });
      const bool give_up = !done && ++s.waited > s.wait_limit;
      // In admission order: the first waiter of a segment whose producer went away claims it,
      // and those after it wait for it in turn.
      if (done || give_up) {
        EndWait(s);
        ReadmitSegments(s, /*may_wait=*/!give_up);
        s.prefill_start = Clock::now();
      }
      continue;
    }
    if (s.awaits < 0) continue;
    const bool done = !claims_.ComputedByOther(s.keys[s.awaits], s.owner);
    const bool give_up = !done && ++s.waited > s.wait_limit;
    if (!done && !give_up) continue;
    EndWait(s);
    // A prompt with segments then plans its segments (and may wait for some: a failure
    // finishes it).
    if (AttachPrefix(s, /*may_wait=*/!give_up) && UsesSegments(*s.r)) AdmitSegments(s, true);
    s.prefill_start = Clock::now();
  }
}

void EngineImpl::EndWait(Slot& s) {
  // A waiting slot's admission pass ended at prefill_start; what it does next is timed from
  // here (prefill_ms then counts computing only, and gather_ms the passes, not the wait).
  s.result.wait_ms += MsBetween(s.prefill_start, Clock::now());
}

std::vector<EngineImpl::Slot*> EngineImpl::PrefillOrder() const {
  std::map<uint64_t, Slot*> producers, segment_producers;
  for (const auto& sp : active_) {
    if (sp->owner != 0 && !sp->finished) producers[sp->owner] = sp.get();
    if (sp->segment_owner != 0 && !sp->finished) segment_producers[sp->segment_owner] = sp.get();
  }
  // Each waiter's awaited tokens count for the sequence that will compute them: its producer,
  // or the producer that one waits for in turn (chains go to lower blocks: no cycles).
  std::map<const Slot*, int64_t> weight;
  const int bs = options_.block_size;
  for (const auto& sp : active_) {
    const Slot& w = *sp;
    if (w.finished || w.awaits < 0) continue;
    const int64_t awaited = int64_t(w.awaits + 1) * bs - w.seq.size();
    const Slot* p = &w;
    for (size_t hop = 0; hop <= active_.size() && p != nullptr && p->awaits >= 0; ++hop) {
      auto it = producers.find(claims_.Find(p->keys[p->awaits]).owner);
      p = it == producers.end() ? nullptr : it->second;
    }
    if (p != nullptr && p->awaits < 0) weight[p] += awaited;
  }
  // A segment's waiters count its tokens for the sequence that will store it (which never waits
  // itself: a waiting slot claims nothing).
  for (const auto& sp : active_) {
    if (sp->finished) continue;
    for (const Slot::AwaitedSegment& a : sp->awaited_segments) {
      auto it = segment_producers.find(segment_claims_.Find(a.key).owner);
      if (it != segment_producers.end()) weight[it->second] += a.tokens;
    }
  }
  std::vector<Slot*> order;
  for (const auto& sp : active_) order.push_back(sp.get());
  std::stable_sort(order.begin(), order.end(), [&](const Slot* a, const Slot* b) {
    auto wa = weight.find(a), wb = weight.find(b);
    return (wa == weight.end() ? 0 : wa->second) > (wb == weight.end() ? 0 : wb->second);
  });
  return order;
}

void EngineImpl::PublishPrefill(Slot& s) {
  if (s.finished || s.owner == 0 || s.Waiting()) return;
  // Only the exact prefix: a prompt with segments holds reused (approximate) K/V past it.
  const int exact = std::min(s.seq.size(), s.r->exact_prefix);
  const int ready = cache_->InsertPrefix(std::span<const int32_t>(s.tokens).first(exact), s.seq,
                                         NamespaceKey(s.r->req.cache_namespace));
  for (int b = s.published; b < ready && b < static_cast<int>(s.keys.size()); ++b) {
    claims_.MarkReady(s.owner, s.keys[b]);
  }
  s.published = std::max(s.published, ready);
  if (s.filled == static_cast<int>(s.fill_tokens.size())) claims_.ReleaseAll(s.owner);
}

}  // namespace promptcache
