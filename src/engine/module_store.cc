#include "engine/module_store.h"

#include <algorithm>
#include <chrono>

#include "core/hash.h"
#include "model/kv_shift.h"

namespace promptcache {
namespace {

using Clock = std::chrono::steady_clock;

// Pieces depend only on pieces with smaller indices (always text first, then modules in index
// order), so recursion depth is bounded by the schema; this guards against a broken layout.
constexpr int kMaxDepth = 1 << 16;

struct Item {
  int start;
  bool cached;
  PmlTextRef ref;                      // cached pieces
  const std::vector<int32_t>* tokens;  // computed runs
  // Nothing to compute, but the context differs from what the pieces after it were encoded
  // with: an empty argument in a slot whose scaffold default stood there while encoding.
  bool changes_context = false;
};

}  // namespace

ModularPrefill BuildPrefill(const SchemaLayout& schema, const PmlPlan& plan,
                            PmlPositions positions) {
  std::vector<Item> items;
  for (const PmlTextRef& r : plan.cached)
    items.push_back({schema.Piece(r).start, true, r, nullptr});
  for (const PmlTextRef& r : plan.computed) {
    const PmlTextPiece& p = schema.Piece(r);
    items.push_back({p.start, false, r, &p.tokens});
  }
  for (const PmlArgument& a : plan.arguments) {
    if (!a.tokens.tokens.empty()) {
      items.push_back({a.tokens.start, false, {}, &a.tokens.tokens});
    } else if (!schema.modules[a.module].parameters[a.parameter].scaffold_tokens.empty()) {
      items.push_back({a.tokens.start, false, {}, &a.tokens.tokens, /*changes_context=*/true});
    }
  }
  if (!plan.new_text.tokens.empty()) {
    items.push_back({plan.new_text.start, false, {}, &plan.new_text.tokens});
  }
  std::stable_sort(items.begin(), items.end(),
                   [](const Item& a, const Item& b) { return a.start < b.start; });
  const bool contiguous = positions == PmlPositions::kContiguous;
  std::vector<PmlTextRef> gathered;  // so far, in order
  bool computed_before = false;
  ModularPrefill out;
  out.end = plan.end;
  for (const Item& it : items) {
    if (it.changes_context) {  // the pieces after it are candidates for recompute
      computed_before = true;
      continue;
    }
    const std::vector<int32_t>& toks = it.cached ? schema.Piece(it.ref).tokens : *it.tokens;
    const int start = contiguous ? static_cast<int>(out.tokens.size()) : it.start;
    for (size_t i = 0; i < toks.size(); ++i) {
      out.tokens.push_back(toks[i]);
      out.positions.push_back(start + static_cast<int>(i));
    }
    if (it.cached) {
      if (out.stages.empty() || !out.stages.back().tokens.empty()) out.stages.emplace_back();
      // A span may hold pieces the prompt leaves out (earlier scaffold peers): what a full
      // pass over the prompt's tokens sees is the span without them.
      const std::vector<PmlTextRef> all = ModuleStore::Dependencies(schema, it.ref);
      std::vector<PmlTextRef> deps;
      for (const PmlTextRef& d : all) {
        if (std::find(plan.cached.begin(), plan.cached.end(), d) != plan.cached.end()) {
          deps.push_back(d);
        }
      }
      PrefillGather g{it.ref, start, !computed_before && deps == gathered, std::nullopt};
      if (deps != all) g.deps = std::move(deps);
      out.stages.back().gather.push_back(std::move(g));
      gathered.push_back(it.ref);
      out.cached_tokens += static_cast<int>(toks.size());
    } else {
      if (out.stages.empty()) out.stages.emplace_back();
      PrefillStage& st = out.stages.back();
      for (size_t i = 0; i < toks.size(); ++i) {
        st.tokens.push_back(toks[i]);
        st.positions.push_back(start + static_cast<int>(i));
      }
      computed_before = computed_before || !toks.empty();
      out.computed_tokens += static_cast<int>(toks.size());
    }
  }
  if (contiguous) out.end = static_cast<int>(out.tokens.size());
  if (!out.stages.empty() && out.stages.back().tokens.empty()) {
    // The prompt ends in cached text (nothing computed at all, or the last computed item, an
    // argument or a cache="false" module, has cached text after it): the logits that start
    // generation must be the last token's, so it is dropped from the gather and recomputed.
    PrefillStage& st = out.stages.back();
    st.drop_last = true;
    st.tokens.push_back(out.tokens.back());
    st.positions.push_back(out.positions.back());
    out.cached_tokens -= 1;
    out.computed_tokens += 1;
  }
  return out;
}

SchemaLayout ContiguousLayout(const SchemaLayout& schema) {
  SchemaLayout out = schema;
  out.contiguous = true;
  auto relocate = [&](const PmlTextRef& ref, PmlTextPiece* piece) {
    int start = ModuleStore::FillTokens(schema, ref);
    for (const PmlTextRef& dep : ModuleStore::Dependencies(schema, ref)) {
      start += static_cast<int>(schema.Piece(dep).tokens.size());
    }
    piece->reserved_start = piece->start;
    piece->start = start;
    // The schema's key covers the tokens, their attention span and its lengths, which fix the
    // new positions: a derived key is as good a content key, and never equals the original.
    Hasher128 h;
    h.Update(std::string_view("pml-contiguous-v1"));
    h.Update(piece->key);
    piece->key = h.HexDigest();
  };
  for (size_t j = 0; j < out.always.size(); ++j) {
    relocate({kPmlAlways, static_cast<int>(j)}, &out.always[j]);
  }
  for (size_t i = 0; i < out.modules.size(); ++i) {
    for (size_t j = 0; j < out.modules[i].texts.size(); ++j) {
      relocate({static_cast<int>(i), static_cast<int>(j)}, &out.modules[i].texts[j]);
    }
  }
  return out;
}

std::vector<const PmlParameter*> ModuleStore::Fills(const SchemaLayout& schema,
                                                    const PmlTextRef& ref) {
  std::vector<const PmlParameter*> out;
  if (ref.module == kPmlAlways) return out;
  const int before = schema.Piece(ref).ReservedStart();
  for (const PmlParameter& p : schema.modules[ref.module].parameters) {
    if (p.scaffold && p.start < before) out.push_back(&p);
  }
  std::sort(out.begin(), out.end(),
            [](const PmlParameter* a, const PmlParameter* b) { return a->start < b->start; });
  return out;
}

int ModuleStore::FillTokens(const SchemaLayout& schema, const PmlTextRef& ref) {
  int n = 0;
  for (const PmlParameter* p : Fills(schema, ref)) n += static_cast<int>(p->scaffold_tokens.size());
  return n;
}

PmlTextPiece ModuleStore::Variant(const SchemaLayout& schema, const PmlTextRef& ref,
                                  const std::vector<PmlTextRef>& deps) {
  PmlTextPiece out = schema.Piece(ref);
  Hasher128 h;
  h.Update(std::string_view("pml-variant-v1"));
  h.Update(out.key);
  h.UpdatePod(static_cast<uint64_t>(deps.size()));
  int start = 0;
  for (const PmlTextRef& d : deps) {
    h.Update(schema.Piece(d).key);
    start += static_cast<int>(schema.Piece(d).tokens.size());
  }
  out.key = h.HexDigest();
  if (schema.contiguous) out.start = start + FillTokens(schema, ref);
  return out;
}

ModuleStore::ModuleStore(const Model& model, BlockCache* cache, ThreadPool* pool,
                         ForwardScratch* scratch, int batch_size, bool shared_moves)
    : model_(model),
      cache_(cache),
      pool_(pool),
      scratch_(scratch),
      batch_size_(batch_size),
      shared_moves_(shared_moves) {}

std::vector<BlockKey> ModuleStore::PieceKeys(const PmlTextPiece& piece) const {
  BlockKey key;
  PC_CHECK(BlockKey::FromHex(piece.key, &key));
  const int bs = cache_->pool()->layout().block_size;
  std::vector<BlockKey> keys;
  const std::span<const int32_t> tokens(piece.tokens);
  for (size_t b = 0; b < tokens.size(); b += bs) {
    key = cache_->ChainKey(key, tokens.subspan(b, std::min<size_t>(bs, tokens.size() - b)));
    keys.push_back(key);
  }
  return keys;
}

bool ModuleStore::Present(const SchemaLayout& schema, const PmlTextRef& ref) const {
  for (const BlockKey& k : PieceKeys(schema.Piece(ref))) {
    if (!cache_->Contains(k)) return false;
  }
  return true;
}

std::vector<PmlTextRef> ModuleStore::Dependencies(const SchemaLayout& schema,
                                                  const PmlTextRef& ref) {
  std::vector<PmlTextRef> deps;
  if (ref.module != kPmlAlways) deps = schema.modules[ref.module].span;
  for (int j = 0; j < ref.piece; ++j) deps.push_back({ref.module, j});
  return deps;
}

std::vector<PmlTextRef> ModuleStore::AllDependencies(const SchemaLayout& schema,
                                                     const PmlTextRef& ref) {
  std::vector<PmlTextRef> out;
  std::vector<PmlTextRef> todo = Dependencies(schema, ref);
  while (!todo.empty()) {
    const PmlTextRef d = todo.back();
    todo.pop_back();
    if (std::find(out.begin(), out.end(), d) != out.end()) continue;
    out.push_back(d);
    for (const PmlTextRef& e : Dependencies(schema, d)) todo.push_back(e);
  }
  return out;
}

std::vector<PmlTextRef> ModuleStore::CachedPieces(const SchemaLayout& schema) {
  std::vector<PmlTextRef> out;
  for (size_t j = 0; j < schema.always.size(); ++j) {
    out.push_back({kPmlAlways, static_cast<int>(j)});
  }
  for (size_t i = 0; i < schema.modules.size(); ++i) {
    if (!schema.modules[i].cached) continue;
    for (size_t j = 0; j < schema.modules[i].texts.size(); ++j) {
      out.push_back({static_cast<int>(i), static_cast<int>(j)});
    }
  }
  return out;
}

bool ModuleStore::AppendCached(const PmlTextPiece& piece, KvSequence* seq) {
  const int before = seq->size();
  for (const BlockKey& k : PieceKeys(piece)) {
    if (!cache_->AppendCached(k, seq)) {
      seq->Truncate(before);
      return false;
    }
  }
  if (seq->size() - before != static_cast<int>(piece.tokens.size())) {
    seq->Truncate(before);  // an entry of another length under this key: not ours
    return false;
  }
  return true;
}

Status ModuleStore::Compute(std::span<const int32_t> tokens, std::span<const int32_t> positions,
                            KvSequence* seq, float* logits) {
  PC_CHECK(tokens.size() == positions.size());
  std::vector<BatchToken> batch;
  for (size_t b = 0; b < tokens.size(); b += batch_size_) {
    const size_t e = std::min(tokens.size(), b + batch_size_);
    batch.clear();
    for (size_t i = b; i < e; ++i) {
      const bool last = i + 1 == tokens.size() && logits != nullptr;
      batch.push_back({tokens[i], positions[i], seq, last});
    }
    PC_RETURN_IF_ERROR(model_.Forward(batch, logits, pool_, scratch_));
  }
  return Status::Ok();
}

Status ModuleStore::Encode(const SchemaLayout& schema, const PmlTextRef& ref,
                           const PmlTextPiece& piece, const std::vector<PmlTextRef>& deps,
                           KvSequence* seq, GatherStats* stats, int depth) {
  KvSequence ctx(cache_->pool());
  const std::vector<const PmlParameter*> fills = Fills(schema, ref);
  size_t next_fill = 0;
  // The scaffold defaults standing in the slots before `reserved` (the module's own text comes
  // in position order, its slots between its pieces).
  auto fill_before = [&](int reserved) -> Status {
    for (; next_fill < fills.size() && fills[next_fill]->start < reserved; ++next_fill) {
      const PmlParameter& p = *fills[next_fill];
      std::vector<int32_t> positions(p.scaffold_tokens.size());
      for (size_t i = 0; i < positions.size(); ++i) {
        positions[i] = (schema.contiguous ? ctx.size() : p.start) + static_cast<int>(i);
      }
      PC_RETURN_IF_ERROR(Compute(p.scaffold_tokens, positions, &ctx, nullptr));
    }
    return Status::Ok();
  };
  for (const PmlTextRef& dep : deps) {
    if (dep.module == ref.module)
      PC_RETURN_IF_ERROR(fill_before(schema.Piece(dep).ReservedStart()));
    // Contiguous: the span end to end from 0, whatever its pieces' own starts.
    const int at = schema.contiguous ? ctx.size() : schema.Piece(dep).start;
    bool reused = false;
    PC_RETURN_IF_ERROR(GatherImpl(schema, dep, at, &ctx, stats, depth + 1, &reused));
  }
  PC_RETURN_IF_ERROR(fill_before(piece.ReservedStart()));
  PC_CHECK(!schema.contiguous || ctx.size() == piece.start);
  const auto t0 = Clock::now();
  // Blocks are keyed as if the piece started at slot 0 of a block: a fork shares every block of
  // the span, so the sequence cannot write into one and allocates a fresh block.
  KvSequence work = ctx.Fork();
  const int base = work.size();
  std::vector<int32_t> positions(piece.tokens.size());
  for (size_t i = 0; i < positions.size(); ++i) positions[i] = piece.start + static_cast<int>(i);
  PC_RETURN_IF_ERROR(Compute(piece.tokens, positions, &work, nullptr));
  const int bs = cache_->pool()->layout().block_size;
  const std::vector<BlockKey> keys = PieceKeys(piece);
  const std::span<const int32_t> tokens(piece.tokens);
  for (size_t b = 0; b < keys.size(); ++b) {
    const size_t first = b * bs;
    const auto chunk = tokens.subspan(first, std::min<size_t>(bs, tokens.size() - first));
    cache_->Insert(keys[b], b == 0 ? BlockKey{} : keys[b - 1], work, base + static_cast<int>(first),
                   chunk);
  }
  seq->AppendSegment(work, base, work.size());
  stats->encoded_tokens += static_cast<int>(piece.tokens.size());
  stats->encode_ms += std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  return Status::Ok();
}

Status ModuleStore::GatherImpl(const SchemaLayout& schema, const PmlTextRef& ref, int at,
                               KvSequence* seq, GatherStats* stats, int depth, bool* reused) {
  return GatherPiece(schema, ref, schema.Piece(ref), Dependencies(schema, ref), at,
                     /*own=*/false, seq, stats, depth, reused);
}

Status ModuleStore::GatherPiece(const SchemaLayout& schema, const PmlTextRef& ref,
                                const PmlTextPiece& piece, const std::vector<PmlTextRef>& deps,
                                int at, bool own, KvSequence* seq, GatherStats* stats, int depth,
                                bool* reused) {
  if (depth > kMaxDepth) return Internal("PML span dependencies nest too deeply");
  // Elsewhere than encoded, or to be owned: through a scratch sequence, then copied (keys
  // rotated by the difference), or shared as a shifted span.
  KvSequence moved(cache_->pool());
  KvSequence* target = at == piece.start && !own ? seq : &moved;
  *reused = AppendCached(piece, target);
  if (!*reused) PC_RETURN_IF_ERROR(Encode(schema, ref, piece, deps, target, stats, depth));
  if (target == seq) return Status::Ok();
  if (shared_moves_ && !own) {
    seq->AppendSegment(moved, 0, moved.size(), at - piece.start);
    return Status::Ok();
  }
  return AppendShifted(model_.config(), moved, 0, moved.size(), at - piece.start, seq, pool_);
}

Status ModuleStore::Gather(const SchemaLayout& schema, const PmlTextRef& ref, int at,
                           KvSequence* seq, GatherStats* stats, const std::vector<PmlTextRef>* deps,
                           bool own) {
  const int n = static_cast<int>(schema.Piece(ref).tokens.size());
  bool reused = false;
  if (deps != nullptr) {
    const PmlTextPiece variant = Variant(schema, ref, *deps);
    PC_RETURN_IF_ERROR(GatherPiece(schema, ref, variant, *deps, at, own, seq, stats, 0, &reused));
  } else {
    PC_RETURN_IF_ERROR(GatherPiece(schema, ref, schema.Piece(ref), Dependencies(schema, ref), at,
                                   own, seq, stats, 0, &reused));
  }
  (reused ? stats->reused_tokens : stats->computed_tokens) += n;
  return Status::Ok();
}

Status ModuleStore::Ensure(const SchemaLayout& schema, const PmlTextRef& ref, GatherStats* stats) {
  if (Present(schema, ref)) {
    stats->reused_tokens += static_cast<int>(schema.Piece(ref).tokens.size());
    return Status::Ok();
  }
  KvSequence scratch(cache_->pool());
  return Gather(schema, ref, schema.Piece(ref).start, &scratch, stats);
}

void ModuleStore::Drop(const SchemaLayout& schema, const PmlTextRef& ref) {
  const std::vector<BlockKey> keys = PieceKeys(schema.Piece(ref));
  for (auto it = keys.rbegin(); it != keys.rend(); ++it) {
    (void)cache_->Drop(it->Hex());  // NotFound: already gone
  }
}

}  // namespace promptcache
