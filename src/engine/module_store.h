// The K/V side of the modular prompt cache: PML text pieces encoded at their reserved positions,
// stored in the engine's BlockCache, and gathered by reference into a request's sequence.
//
// A piece (a run of always-included text or of a module's text, see pml/pml.h) is stored from
// slot 0 of fresh blocks, block i holding its tokens [i*B, (i+1)*B). Block i's key chains from
// block i-1's as prefix keys do (BlockCache::ChainKey, which mixes in the model fingerprint),
// starting from the piece's content key. The content key covers the piece's tokens, positions and
// everything its span holds, so an edited module gets new keys and only what depends on it is
// encoded again; the old blocks age out of the cache like any other. Module blocks share the
// prefix cache's RAM budget, LRU eviction and disk tier: an evicted piece comes back from disk,
// and one lost altogether is simply encoded again (with whatever of its span is lost too).
//
// Encoding a piece: gather its span (always-included text before it, enclosing modules' text
// before it, earlier scaffold peers, its own earlier pieces) into a scratch sequence, run its
// tokens at their positions through the model (each attends to the span and causally to its
// own earlier tokens), and insert the new blocks into the cache.
//
// Serving a prompt: BuildPrefill turns a PmlPlan into stages, in position order, of "gather these
// cached pieces, then compute these tokens", so every computed token (cache="false" module text,
// a parameter argument, the prompt's new text) attends to exactly what the prompt includes at
// earlier positions, as a full forward pass over the same tokens would.
//
// Position modes (PmlPositions). With the schema's positions, pieces are encoded and served at
// their reserved positions and gathered by reference. With contiguous positions the prompt's
// tokens are laid end to end from 0, as the same text sent plainly: pieces are encoded from
// ContiguousLayout (each right after the pieces it attends to, laid end to end, under keys of
// their own) and a piece served elsewhere is copied into fresh blocks with its keys rotated by the
// difference (model/kv_shift.h). A piece whose prompt position equals its encoded one (everything
// before it in the prompt is what it attended to: a single-module prompt, a prefix of the schema)
// is still shared by reference, and equals the plain prompt's computation.
//
// Not thread-safe: the engine thread (or a tool that owns its own cache) drives it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "kv/block_cache.h"
#include "model/model.h"
#include "pml/pml.h"

namespace promptcache {

// A cached piece a prefill stage appends.
struct PrefillGather {
  PmlTextRef ref;
  int at = 0;  // where it starts in the prompt
  // Encoded with exactly what precedes it in the prompt (its Dependencies are every piece
  // gathered before it, nothing computed comes first, and no slot before it lost the scaffold
  // default it held while encoding): its K/V are the full computation's.
  // The others are candidates for recompute (engine/blend.h).
  bool exact = false;
  // Set when its span includes pieces this prompt leaves out (scaffold peers): it is served
  // from the variant that attended only to these (ModuleStore::Variant).
  std::optional<std::vector<PmlTextRef>> deps;
};

// One step of serving a modular prompt: append the cached pieces, then compute the tokens.
struct PrefillStage {
  std::vector<PrefillGather> gather;
  // The prompt ends in cached text: the last gathered token is dropped and recomputed (it is the
  // only token of this, the last stage), so that its logits start generation.
  bool drop_last = false;
  std::vector<int32_t> tokens, positions;
};

struct ModularPrefill {
  std::vector<PrefillStage> stages;
  // Every token the prompt includes, by position: what a full recompute runs.
  std::vector<int32_t> tokens, positions;
  int cached_tokens = 0;    // tokens of the gathered pieces
  int computed_tokens = 0;  // tokens computed at request time (cached ones not counted)
  int end = 0;              // where generation continues (the plan's end)
};

// `schema` is the layout PlanPrompt planned with (reserved positions); kContiguous renumbers
// every token from 0 in position order.
ModularPrefill BuildPrefill(const SchemaLayout& schema, const PmlPlan& plan,
                            PmlPositions positions = PmlPositions::kSchema);

// `schema` as the contiguous mode encodes it: every piece starts where the pieces it attends to
// (Dependencies), laid end to end from 0, end; keys derived from the schema's, so the two modes'
// blocks never mix. Module and parameter positions are left as they are (BuildPrefill places
// those).
SchemaLayout ContiguousLayout(const SchemaLayout& schema);

// Work done by Gather calls.
struct GatherStats {
  int reused_tokens = 0;    // tokens of the requested pieces found in the cache
  int computed_tokens = 0;  // tokens of the requested pieces that had to be encoded
  int encoded_tokens = 0;   // every token encoded, missing span pieces included
  double encode_ms = 0;     // time spent encoding
};

class ModuleStore {
 public:
  // `shared_moves`: EngineOptions::module_shared_moves.
  ModuleStore(const Model& model, BlockCache* cache, ThreadPool* pool, ForwardScratch* scratch,
              int batch_size, bool shared_moves = false);

  // The keys of the piece's blocks, in order.
  std::vector<BlockKey> PieceKeys(const PmlTextPiece& piece) const;
  // True when every block of the piece is cached, in RAM or on disk.
  bool Present(const SchemaLayout& schema, const PmlTextRef& ref) const;
  // What the piece attends to besides itself, by position.
  static std::vector<PmlTextRef> Dependencies(const SchemaLayout& schema, const PmlTextRef& ref);
  // Every piece encoding it may gather: its Dependencies, theirs, and so on, each once (what
  // Ensure may read for a piece it encodes; EngineImpl reads their remote blocks beforehand).
  static std::vector<PmlTextRef> AllDependencies(const SchemaLayout& schema, const PmlTextRef& ref);

  // Appends the piece's K/V to `seq` starting at position `at`: by reference (loading blocks
  // from disk as needed) where `at` is the piece's start, else copied with keys rotated (or, with
  // shared moves, by reference as a shifted span: KvSpan::shift). When it
  // is not cached, encodes it first (and whatever of its span is missing). `deps`, when given,
  // replaces its Dependencies: the variant of the piece that attended to those only (Variant).
  // `own`: copy it into blocks `seq` owns even where it could be shared (to rewrite it later).
  Status Gather(const SchemaLayout& schema, const PmlTextRef& ref, int at, KvSequence* seq,
                GatherStats* stats, const std::vector<PmlTextRef>* deps = nullptr,
                bool own = false);
  // The same for a stage's gathered piece.
  Status Gather(const SchemaLayout& schema, const PrefillGather& g, KvSequence* seq,
                GatherStats* stats, bool own = false) {
    return Gather(schema, g.ref, g.at, seq, stats, g.deps ? &*g.deps : nullptr, own);
  }
  // The piece as encoded attending to `deps` (a subset of its Dependencies) instead: the same
  // tokens under a key of their own; in a contiguous layout, starting where `deps` end.
  static PmlTextPiece Variant(const SchemaLayout& schema, const PmlTextRef& ref,
                              const std::vector<PmlTextRef>& deps);
  // The parameters of the piece's module, before it, whose scaffold default stands in their
  // slot while the piece is encoded (as in the paper: text after a slot saw something there),
  // by position; and how many tokens they hold.
  static std::vector<const PmlParameter*> Fills(const SchemaLayout& schema, const PmlTextRef& ref);
  static int FillTokens(const SchemaLayout& schema, const PmlTextRef& ref);
  // Encodes the piece unless it is cached (in RAM or on disk; nothing is loaded). The remote
  // tier is not read here: the engine reads the piece's blocks there beforehand, off its thread,
  // and takes them into RAM (EngineImpl::EnsurePiece).
  Status Ensure(const SchemaLayout& schema, const PmlTextRef& ref, GatherStats* stats);
  // Removes the piece's blocks from RAM and disk (those not found are skipped).
  void Drop(const SchemaLayout& schema, const PmlTextRef& ref);

  // Runs tokens at the given positions through the model into `seq`, in batches; writes the
  // last token's logits to `logits` when not null.
  Status Compute(std::span<const int32_t> tokens, std::span<const int32_t> positions,
                 KvSequence* seq, float* logits);

  // Every piece the schema caches, in an order where dependencies come first.
  static std::vector<PmlTextRef> CachedPieces(const SchemaLayout& schema);

 private:
  bool AppendCached(const PmlTextPiece& piece, KvSequence* seq);
  Status Encode(const SchemaLayout& schema, const PmlTextRef& ref, const PmlTextPiece& piece,
                const std::vector<PmlTextRef>& deps, KvSequence* seq, GatherStats* stats,
                int depth);
  // Gather without the statistics of the requested piece; `reused` says whether it was cached.
  Status GatherImpl(const SchemaLayout& schema, const PmlTextRef& ref, int at, KvSequence* seq,
                    GatherStats* stats, int depth, bool* reused);
  Status GatherPiece(const SchemaLayout& schema, const PmlTextRef& ref, const PmlTextPiece& piece,
                     const std::vector<PmlTextRef>& deps, int at, bool own, KvSequence* seq,
                     GatherStats* stats, int depth, bool* reused);

  const Model& model_;
  BlockCache* cache_;
  ThreadPool* pool_;
  ForwardScratch* scratch_;
  int batch_size_;
  bool shared_moves_;
};

}  // namespace promptcache
