// Admitting a modular (PML) prompt (engine_impl.h): its modules' cached blocks gathered in
// stages (encoding those missing), or with selective recompute (CacheBlend: every stage but the
// last gathered and computed now, then a share of the inexact pieces' tokens recomputed), and
// where each of its tokens' K/V came from.
#include <algorithm>

#include "engine/engine_slot.h"

namespace promptcache {
namespace {

// A modular prompt's sources by position: the gathered pieces found cached (`reused`, one flag
// per gather in stage order) are module tokens, everything else is computed. A stage's tokens
// are marked after its gathers, so the token drop_last recomputes counts as computed.
std::vector<SourceRun> ModularSources(const ModularPrefill& pf, const SchemaLayout& layout,
                                      const std::vector<bool>& reused) {
  std::vector<TokenSource> src(pf.positions.size(), TokenSource::kComputed);
  auto mark = [&](int pos, TokenSource source) {
    auto it = std::lower_bound(pf.positions.begin(), pf.positions.end(), pos);
    if (it != pf.positions.end() && *it == pos) src[it - pf.positions.begin()] = source;
  };
  size_t k = 0;
  for (const PrefillStage& stage : pf.stages) {
    for (const PrefillGather& g : stage.gather) {
      const bool hit = k < reused.size() && reused[k++];
      const int n = static_cast<int>(layout.Piece(g.ref).tokens.size());
      for (int i = 0; i < n && hit; ++i) mark(g.at + i, TokenSource::kModule);
    }
    for (const int pos : stage.positions) mark(pos, TokenSource::kComputed);
  }
  std::vector<SourceRun> runs;
  for (const TokenSource t : src) AddRun(&runs, t, 1);
  return runs;
}

}  // namespace

bool EngineImpl::AdmitModular(Slot& s) {
  const SchemaLayout& layout = s.r->modular->schema->For(s.r->modular->positions);
  const ModularPrefill& pf = s.r->modular->prefill;
  s.tokens = pf.tokens;
  s.n_prompt = static_cast<int>(s.tokens.size());
  s.next_pos = pf.end;
  CompletionResult& res = s.result;
  res.modular = true;
  res.schema = layout.name;
  res.prompt_tokens = s.n_prompt;
  GatherStats gs;
  bool last_reused = false, dropped = false;
  BlendStats bs;
  std::vector<bool> reused;  // per gathered piece, in stage order: found cached
  if (s.r->modular->recompute > 0) {
    if (Status st = GatherBlended(s, layout, &gs, &bs, &last_reused, &dropped, &reused); !st.ok()) {
      Finish(s, "error", st);
      return false;
    }
  }
  for (size_t k = 0; k < pf.stages.size() && s.r->modular->recompute <= 0; ++k) {
    const PrefillStage& stage = pf.stages[k];
    KvSequence held(&blocks_);
    KvSequence* target = k == 0 ? &s.seq : &held;
    for (const PrefillGather& g : stage.gather) {
      const int before = gs.reused_tokens;
      if (Status st = store_->Gather(layout, g, target, &gs); !st.ok()) {
        Finish(s, "error", st);
        return false;
      }
      last_reused = gs.reused_tokens > before;
      reused.push_back(last_reused);
    }
    if (stage.drop_last) {
      target->Truncate(target->size() - 1);
      dropped = true;
    }
    if (k > 0) s.gathers.push_back({static_cast<int>(s.fill_tokens.size()), std::move(held)});
    s.fill_tokens.insert(s.fill_tokens.end(), stage.tokens.begin(), stage.tokens.end());
    s.fill_pos.insert(s.fill_pos.end(), stage.positions.begin(), stage.positions.end());
  }
  res.cached_tokens =
      std::max(0, gs.reused_tokens - (dropped && last_reused ? 1 : 0) - bs.recomputed);
  res.computed_tokens = s.n_prompt - res.cached_tokens;
  res.sources = ModularSources(pf, layout, reused);
  res.recompute_candidates = bs.candidates;
  res.recomputed_tokens = bs.recomputed;
  res.recompute_ms = bs.ms;
  res.encoded_tokens = gs.encoded_tokens;
  res.encode_ms = gs.encode_ms;
  res.gather_ms = std::max(0.0, MsBetween(s.admitted, Clock::now()) - gs.encode_ms);
  return true;
}

Status EngineImpl::GatherBlended(Slot& s, const SchemaLayout& layout, GatherStats* gs,
                                 BlendStats* bs, bool* last_reused, bool* dropped,
                                 std::vector<bool>* reused) {
  const ModularPrefill& pf = s.r->modular->prefill;
  BlendInput in;
  std::vector<int>& slots = in.slots;  // the candidates, in blocks s.seq owns
  std::vector<int32_t>& tokens = in.tokens;
  std::vector<int>& computed_slots = in.computed_slots;  // computed here, before the last stage
  std::vector<int32_t>& computed_tokens = in.computed_tokens;
  for (size_t k = 0; k < pf.stages.size(); ++k) {
    const PrefillStage& stage = pf.stages[k];
    for (const PrefillGather& g : stage.gather) {
      const int before = gs->reused_tokens, base = s.seq.size();
      // Candidates go into blocks of this sequence's own: Blend rewrites them in place.
      PC_RETURN_IF_ERROR(store_->Gather(layout, g, &s.seq, gs, /*own=*/!g.exact));
      if (!g.exact) {
        const std::vector<int32_t>& piece = layout.Piece(g.ref).tokens;
        for (size_t i = 0; i < piece.size(); ++i) {
          slots.push_back(base + static_cast<int>(i));
          tokens.push_back(piece[i]);
        }
      }
      *last_reused = gs->reused_tokens > before;
      reused->push_back(*last_reused);
    }
    if (stage.drop_last) {
      s.seq.Truncate(s.seq.size() - 1);
      *dropped = true;
      if (!slots.empty() && slots.back() == s.seq.size()) {
        slots.pop_back();
        tokens.pop_back();
      }
    }
    if (k + 1 < pf.stages.size()) {
      for (size_t i = 0; i < stage.tokens.size(); ++i) {
        computed_slots.push_back(s.seq.size() + static_cast<int>(i));
        computed_tokens.push_back(stage.tokens[i]);
      }
      PC_RETURN_IF_ERROR(store_->Compute(stage.tokens, stage.positions, &s.seq, nullptr));
    } else {
      s.fill_tokens = stage.tokens;
      s.fill_pos = stage.positions;
    }
  }
  return Blend(*model_, &s.seq, in, s.r->modular->recompute, options_.batch_size, &pool_, &scratch_,
               bs);
}

}  // namespace promptcache
