// Admitting a token prompt with segments (engine_impl.h; docs/modules.md "Segments"): after its
// prefix hit, each segment beyond it is looked up in the segment cache (engine/segment_store.h).
// Hits are laid in at their positions with their keys rotated: by reference with a shift
// (module_shared_moves) or copied. With nothing to recompute they join the prefill as a modular
// prompt's cached pieces do, between its computed tokens; else everything up to the last hit is
// gathered and computed now and Blend repairs the hits: the first segment_border_tokens tokens
// of each, and the share segment_recompute of their tokens. Misses are computed in place and
// stored once the prompt's K/V are complete, at its first token (StoreSegments).
//
// In flight: a miss the slot will store is claimed (segment_claims_, by the segment's first
// block key, which hashes its tokens, encoding, KV type and namespace) from its admission until
// it is stored or the slot ends. A prompt admitted while a segment it would look up is claimed
// by another sequence waits (AwaitSegments) instead of computing it again: it plans nothing and
// claims nothing meanwhile, and once every segment it waits for is stored, or its producer went
// away (cancelled, failed: the claim goes unstored), it is admitted again (ReadmitSegments) and
// finds a hit, or computes and claims the segment itself. The bound is prefix sharing's
// (prefix_sharing.cc): its producer's prefill goes first while it is awaited, and after
// 2 + 2 * ceil(tokens the producer has left to prefill / batch_size) steps the waiter stops
// waiting and computes what it misses itself.
#include <algorithm>

#include "core/log.h"
#include "engine/engine_slot.h"
#include "model/kv_shift.h"

namespace promptcache {

// A segment found cached: its range in the prompt, its blocks (by reference) and where they were
// encoded.
struct EngineImpl::SegmentHit {
  PromptSegment range;
  KvSequence held;
  int32_t start;
  bool exact;  // encoded with exactly the prompt's text before it, at its position
};

// The plan of a segmented prompt's tokens as AdmitSegments lays them out, front to back.
struct EngineImpl::SegmentPlan {
  int next;        // the first prompt token not yet placed
  bool now;        // computing before the recompute (with repair): at once, else in the prefill
  BlendInput in;   // with repair: the tokens computed now and the hits' candidates
  int reused = 0;  // hit tokens laid in (the last prompt token excepted)
};

bool EngineImpl::UsesSegments(const Request& r) const {
  // The recompute_each_step baseline computes everything, and an embedding request has no prompt.
  return options_.segment_cache && !r.modular && !r.embedding && !r.req.segments.empty() &&
         !r.req.prompt_logprobs && !r.req.recompute_each_step;
}

std::vector<PromptSegment> EngineImpl::LookedUp(const std::vector<PromptSegment>& segments,
                                                int from) const {
  std::vector<PromptSegment> out;
  for (const PromptSegment& g : segments) {
    if (g.begin >= from && g.size() >= std::max(1, options_.segment_min_tokens)) out.push_back(g);
  }
  return out;
}

bool EngineImpl::AwaitSegments(Slot& s, const std::vector<PromptSegment>& looked) {
  const BlockKey ns = NamespaceKey(s.r->req.cache_namespace);
  const std::span<const int32_t> prompt(s.tokens);
  s.awaited_segments.clear();
  int left = 0;  // the most prefill tokens a producer it waits for has left
  for (const PromptSegment& g : looked) {
    const BlockKey key = segments_->Keys(prompt.subspan(g.begin, g.size()), ns).front();
    const InFlightBlocks::Holder h = segment_claims_.Find(key);
    if (!segment_claims_.ComputedByOther(key, s.segment_owner)) continue;
    s.awaited_segments.push_back({key, g.size()});
    for (const auto& p : active_) {
      if (p->segment_owner == h.owner && !p->finished) {
        left = std::max(left, static_cast<int>(p->fill_tokens.size()) - p->filled);
      }
    }
  }
  if (s.awaited_segments.empty()) return false;
  s.waited = 0;
  s.wait_limit = 2 + 2 * ((left + options_.batch_size - 1) / options_.batch_size);
  ++segment_counters_.in_flight_waits;
  return true;
}

void EngineImpl::ReadmitSegments(Slot& s, bool may_wait) {
  s.awaited_segments.clear();
  // The prefix cache may hold more of the prompt now; a failure finishes the request.
  AttachPrefix(s, /*may_wait=*/false);
  AdmitSegments(s, may_wait);
}

bool EngineImpl::AdmitSegments(Slot& s, bool may_wait) {
  const CompletionRequest& req = s.r->req;
  const int prefix = s.seq.size();
  const std::vector<PromptSegment> looked = LookedUp(req.segments, prefix);
  // A segment another sequence is computing now: wait for it (nothing planned, nothing counted).
  if (may_wait && AwaitSegments(s, looked)) return true;
  std::vector<SegmentHit> hits = FindSegments(s, looked);
  const double ratio = req.segment_recompute.value_or(options_.segment_recompute);
  const int border = std::max(0, options_.segment_border_tokens);
  const bool repair =
      std::any_of(hits.begin(), hits.end(), [](const SegmentHit& h) { return !h.exact; }) &&
      (ratio > 0 || border > 0);
  if (!hits.empty()) s.r->exact_prefix = hits.front().range.begin;
  SegmentPlan plan{prefix, /*now=*/repair, {}};
  Status st = LayInSegments(s, hits, repair, border, &plan);
  BlendStats bs;
  if (st.ok() && repair) {
    st = Blend(*model_, &s.seq, plan.in, ratio, options_.batch_size, &pool_, &scratch_, &bs);
  }
  plan.now = false;  // the rest is the prefill's, after the repaired segments
  if (st.ok()) st = PlaceComputed(s, s.n_prompt, &plan);
  if (!st.ok()) {
    Finish(s, "error", st);
    return false;
  }
  RecordSegmentReuse(s, hits, plan.reused, bs, prefix);
  // Its exact prefix (up to the first hit) is shared in flight as a plain prompt's: claimed,
  // and what is computed of it already (with repair: all of it) published now.
  ClaimPrefix(s, prefix, std::min(s.n_prompt, s.r->exact_prefix));
  PublishPrefill(s);
  return true;
}

std::vector<EngineImpl::SegmentHit> EngineImpl::FindSegments(
    Slot& s, const std::vector<PromptSegment>& looked) {
  const BlockKey ns = NamespaceKey(s.r->req.cache_namespace);
  const std::span<const int32_t> prompt(s.tokens);
  CompletionResult& res = s.result;
  std::vector<SegmentHit> hits;
  // With a remote tier, its reads were made at intake, off this thread (admission.cc): a block
  // that RAM and disk do not hold now is a miss.
  for (const PromptSegment& g : looked) {
    ++res.segment_lookups;
    SegmentHit h{g, KvSequence(&blocks_), 0, false};
    const auto tokens = prompt.subspan(g.begin, g.size());
    const SegmentStore::Lookup l = segments_->Find(tokens, ns, &h.held);
    if (!l.found) {
      s.segment_misses.push_back({g, l.partial});
      // Stored by this slot once its K/V are complete: others wait for it meanwhile (a key
      // another sequence holds stays its: this slot then stores it too, as before).
      if (s.segment_owner == 0) s.segment_owner = next_owner_++;
      const BlockKey key = segments_->Keys(tokens, ns).front();
      segment_claims_.Claim(s.segment_owner, std::span<const BlockKey>(&key, 1));
      continue;
    }
    h.start = l.start;
    // kAlone: exact where the prompt before it is the preamble it was encoded after.
    const std::vector<int32_t>& pre = segments_->preamble();
    h.exact = segments_->encoding() == SegmentEncoding::kAlone && h.start == g.begin &&
              g.begin == static_cast<int>(pre.size()) &&
              std::equal(pre.begin(), pre.end(), prompt.begin());
    hits.push_back(std::move(h));
  }
  segment_counters_.lookups += res.segment_lookups;
  segment_counters_.hits += hits.size();
  res.segment_hits = static_cast<int>(hits.size());
  s.segmented = !hits.empty() || !s.segment_misses.empty();
  return hits;
}

Status EngineImpl::PlaceComputed(Slot& s, int end, SegmentPlan* plan) {
  const int next = plan->next;
  if (end <= next) return Status::Ok();
  const std::span<const int32_t> prompt(s.tokens);
  std::vector<int32_t> positions(end - next);
  for (int i = next; i < end; ++i) positions[i - next] = i;
  if (plan->now) {
    for (int i = next; i < end; ++i) {
      plan->in.computed_slots.push_back(i);
      plan->in.computed_tokens.push_back(prompt[i]);
    }
    PC_RETURN_IF_ERROR(
        store_->Compute(prompt.subspan(next, end - next), positions, &s.seq, nullptr));
  } else {
    s.fill_tokens.insert(s.fill_tokens.end(), prompt.begin() + next, prompt.begin() + end);
    s.fill_pos.insert(s.fill_pos.end(), positions.begin(), positions.end());
  }
  plan->next = end;
  return Status::Ok();
}

Status EngineImpl::LayInSegments(Slot& s, std::vector<SegmentHit>& hits, bool repair, int border,
                                 SegmentPlan* plan) {
  const std::span<const int32_t> prompt(s.tokens);
  for (SegmentHit& h : hits) {
    PC_RETURN_IF_ERROR(PlaceComputed(s, h.range.begin, plan));
    const int shift = h.range.begin - h.start;
    // The prompt's last token is computed again: its logits start generation.
    const int size = std::min(h.range.end, s.n_prompt - 1) - h.range.begin;
    KvSequence moved(&blocks_);
    KvSequence* target = repair ? &s.seq : &moved;
    const int base = target->size();
    if (h.exact || (options_.module_shared_moves && !repair)) {
      target->AppendSegment(h.held, 0, size, shift);
    } else {
      PC_RETURN_IF_ERROR(AppendShifted(model_->config(), h.held, 0, size, shift, target, &pool_));
    }
    if (!repair) {
      s.gathers.push_back({static_cast<int>(s.fill_tokens.size()), std::move(moved)});
    } else if (!h.exact) {  // a candidate, in blocks the sequence owns
      for (int i = 0; i < size; ++i) {
        plan->in.slots.push_back(base + i);
        plan->in.tokens.push_back(prompt[h.range.begin + i]);
        if (i < border) plan->in.forced.push_back(base + i);
      }
    }
    plan->reused += size;
    plan->next = h.range.begin + size;
  }
  return Status::Ok();
}

void EngineImpl::RecordSegmentReuse(Slot& s, const std::vector<SegmentHit>& hits, int reused,
                                    const BlendStats& bs, int prefix) {
  CompletionResult& res = s.result;
  const int n = s.n_prompt;
  res.cached_tokens += reused - bs.recomputed;
  res.computed_tokens = n - res.cached_tokens;
  res.recompute_candidates = bs.candidates;
  res.recomputed_tokens = bs.recomputed;
  res.border_recomputed = bs.forced;
  res.recompute_ms = bs.ms;
  segment_counters_.tokens_reused += reused - bs.recomputed;
  int at = prefix;  // the sources: computed, then each hit's tokens, in order
  for (const SegmentHit& h : hits) {
    AddRun(&res.sources, TokenSource::kComputed, h.range.begin - at);
    at = std::min(h.range.end, n - 1);
    AddRun(&res.sources, TokenSource::kSegment, at - h.range.begin);
  }
  AddRun(&res.sources, TokenSource::kComputed, n - at);
  // Its admission passes: the first, and after each wait the one that woke it.
  if (!hits.empty()) res.gather_ms = MsBetween(s.admitted, Clock::now()) - res.wait_ms;
}

void EngineImpl::StoreSegments(Slot& s) {
  const BlockKey ns = NamespaceKey(s.r->req.cache_namespace);
  const std::span<const int32_t> prompt(s.tokens.data(), s.n_prompt);
  const std::vector<int32_t>& pre = segments_->preamble();
  const Clock::time_point t0 = Clock::now();
  for (const Slot::SegmentMiss& m : s.segment_misses) {
    const auto tokens = prompt.subspan(m.range.begin, m.range.size());
    Status st;
    if (segments_->encoding() == SegmentEncoding::kInContext) {
      st = segments_->Store(tokens, ns, s.seq, m.range.begin, m.replace);
    } else {
      // Alone after the preamble: its own sequence, from position 0.
      KvSequence alone(&blocks_);
      std::vector<int32_t> ids = pre, positions;
      ids.insert(ids.end(), tokens.begin(), tokens.end());
      for (size_t i = 0; i < ids.size(); ++i) positions.push_back(static_cast<int32_t>(i));
      st = store_->Compute(ids, positions, &alone, nullptr);
      if (st.ok())
        st = segments_->Store(tokens, ns, alone, static_cast<int>(pre.size()), m.replace);
    }
    if (!st.ok()) {
      PC_LOG_WARN("segment cache: a segment of %d tokens was not stored: %s", m.range.size(),
                  st.message().c_str());
      continue;
    }
    ++s.result.segment_stores;
    ++segment_counters_.stores;
  }
  if (segments_->encoding() == SegmentEncoding::kAlone) {
    s.result.encode_ms += MsBetween(t0, Clock::now());
  }
  s.segment_misses.clear();
  // Stored (or not, after a warning): those waiting for them look them up again.
  segment_claims_.ReleaseAll(s.segment_owner);
}

}  // namespace promptcache
