// promptcache's public C++ API: an Engine serves completion requests for one model, reusing
// attention state across requests.
//
// Requests are submitted from any thread into a queue; one engine thread runs them with
// continuous batching (the decode steps of all active sequences form one forward pass, and a new
// request's prefill joins between steps). Each prompt first looks up the longest cached prefix
// (by token ids, at block granularity) and computes only the rest; finished sequences leave
// their blocks in the cache, which is bounded in RAM, expires idle entries, and can spill to a
// disk tier that survives restarts. Concurrent prompts sharing a prefix compute it once: one
// that matches blocks another is computing waits for them instead of computing them again.
//
// Modular prompts (docs/modules.md): a PML schema (promptcache/pml.h) declares prompt modules;
// loading it encodes each module once at the positions the schema reserves and keeps its K/V in
// the same block cache. A PML prompt names a schema, picks modules and adds new
// text; serving it gathers the picked modules' cached blocks by reference and computes only what
// is new. Schemas registered with an engine that has a cache_dir persist there and come back
// (with their modules, from the disk tier) when an engine is created on that folder again.
//
// Segments (docs/modules.md "Segments"; EngineOptions::segment_cache, off by default): reuse
// beyond the prefix without a schema. A request marks token ranges of its prompt that are
// reusable on their own (a chat message, a retrieved document); each is cached by the hash of its
// own tokens and, found again anywhere in a later prompt of the same namespace, laid in at its
// position (keys rotated) and repaired by recomputing a share of its tokens.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "promptcache/cache_info.h"
#include "promptcache/completion.h"
#include "promptcache/embedding.h"
#include "promptcache/engine_options.h"
#include "promptcache/engine_stats.h"
#include "promptcache/pml.h"
#include "promptcache/schema.h"
#include "promptcache/status.h"

namespace promptcache {

// The engine's model, opaque to library users: Engine::model() passes it along
// (promptcache/text.h reads its tokenizer for you).
class Model;

// Serves completion requests for one model (see the top of this file); requests may be submitted
// from any thread.
class Engine {
 public:
  static Result<std::unique_ptr<Engine>> Create(const EngineOptions& options);
  virtual ~Engine() = default;

  virtual const Model& model() const = 0;
  virtual const EngineOptions& options() const = 0;

  // Queues a request. ResourceExhausted when the queue is full, InvalidArgument for a bad
  // request (empty prompt, prompt over the context, invalid sampling values).
  virtual Result<std::shared_ptr<RequestHandle>> Submit(CompletionRequest request) = 0;

  virtual EngineStats Stats() const = 0;

  // Embeddings (see EmbeddingRequest): queued with completion requests and run by the engine
  // thread between and beside their steps, one of the `parallel` slots per request, under the
  // same queue limit and kv_ram_bytes budget. InvalidArgument for a bad request (no inputs, an
  // empty input, one over the context, a token id outside the vocabulary, dimensions other than
  // n_embd), Unimplemented when the model's own pooling (a reranker's "rank") is not one
  // promptcache computes, ResourceExhausted when the queue is full.
  virtual Result<std::shared_ptr<EmbeddingHandle>> SubmitEmbedding(EmbeddingRequest request) = 0;
  // SubmitEmbedding and Wait, for a caller that does not cancel: a refusal, or a failure while
  // computing, is the Result's error.
  Result<EmbeddingResult> Embed(EmbeddingRequest request);

  // Explicit cache control.
  virtual std::vector<CacheEntryInfo> ListCache() const = 0;
  // Every block in RAM with its parent and tokens (ListCache lists chains by their last block).
  virtual std::vector<CacheBlockInfo> ListCacheBlocks() const { return {}; }
  // `cache_namespace`: as in CompletionRequest.
  // `tenant`: who the pin is charged to (CompletionRequest::tenant); `out`: what was pinned
  // (a pin past a quota stops short, as requests' pins do). NotFound when nothing is cached.
  virtual Status PinPrefix(const std::vector<int32_t>& tokens, bool pinned,
                           const std::string& cache_namespace = "", const std::string& tenant = "",
                           PinOutcome* out = nullptr) = 0;
  // "" drops everything unpinned; `force` drops pinned entries too (an operator's way to
  // reclaim what pins hold).
  virtual Status DropCache(const std::string& key, bool force = false) = 0;
  // The pinned chains, and lifting pins (key "" : every pin) without dropping the blocks:
  // returns the blocks unpinned, NotFound for a key not in RAM.
  virtual std::vector<PinInfo> ListPins() const { return {}; }
  virtual Result<int> Unpin(const std::string& key) { return NotFound("no pins: " + key); }
  virtual Status SaveCache() = 0;  // write RAM entries to the disk tier
  // Computes (or loads) a prefix into the cache without generating.
  virtual Result<int> WarmPrefix(const std::vector<int32_t>& tokens,
                                 const std::string& cache_namespace = "") = 0;
  // How many leading tokens of `tokens` (in `cache_namespace`, see CompletionRequest) each tier
  // holds, without loading or computing anything: for a cache-aware router. With `segments`
  // (as in CompletionRequest), also how many tokens of them are cached as segments.
  virtual CacheTierCounts LookupCache(const std::vector<int32_t>& tokens,
                                      const std::string& cache_namespace,
                                      const std::vector<PromptSegment>& segments = {}) const = 0;
  // The same for a modular prompt, planned against its schema as SubmitPrompt would (its errors
  // come back here) but neither loaded nor computed: `reusable` is the tokens of its cached
  // pieces found in some tier; the rest (parameters, cache="false" modules, new text, pieces
  // held nowhere) would be computed.
  virtual Result<CacheTierCounts> LookupPrompt(const PmlPrompt& prompt) const = 0;

  // Times generation with and without the KV cache at about eight lengths up to `max_tokens`,
  // on the engine's thread between steps (requests wait meanwhile, so that the timing is not
  // shared with them): the curve that shows what the KV cache saves.
  virtual Result<std::vector<GenerationTiming>> MeasureGeneration(int max_tokens) = 0;

  // Modular prompt cache. Loading a schema parses and lays it out with the model's tokenizer
  // and chat template, encodes every cached module that is not cached yet (interleaved with
  // running requests), and registers it under its name, replacing a schema of that name. Errors
  // are the PML parser's one-line messages ("FILE:LINE:COL: schema 'NAME': ...").
  virtual Result<SchemaInfo> LoadSchemaFile(const std::string& path,
                                            const SchemaLoadOptions& options = {}) = 0;
  // The same for schema text; `path` names it in messages, and its folder is the base of src
  // attributes (a bare name: the current directory).
  virtual Result<SchemaInfo> LoadSchemaText(std::string_view xml, const std::string& path,
                                            const SchemaLoadOptions& options = {}) = 0;
  virtual std::vector<SchemaInfo> ListSchemas() const = 0;
  virtual Result<SchemaInfo> GetSchema(const std::string& name) const = 0;
  // The layout of a loaded schema (module names, parameters, positions), shared read-only.
  virtual Result<std::shared_ptr<const SchemaLayout>> GetSchemaLayout(
      const std::string& name) const = 0;
  // Unregisters the schema, deletes its persisted files and drops its modules' blocks from the
  // cache (those another loaded schema shares stay). NotFound if no such schema.
  virtual Status DropSchema(const std::string& name) = 0;

  // Queues a modular prompt: `request` gives everything but the prompt (request.prompt must be
  // empty). The prompt is checked against its schema here: unknown schema or module, union,
  // required/requires/excludes and parameter errors come back at once, as one line.
  virtual Result<std::shared_ptr<RequestHandle>> SubmitPrompt(const PmlPrompt& prompt,
                                                              CompletionRequest request) = 0;
  // The same for `<prompt schema="...">` XML; `file` names it in messages.
  virtual Result<std::shared_ptr<RequestHandle>> SubmitPml(std::string_view xml,
                                                           CompletionRequest request,
                                                           const std::string& file = "prompt") = 0;
  // The tokens and positions a modular prompt includes (what a full recompute would run).
  virtual Result<ExpandedPrompt> ExpandPrompt(const PmlPrompt& prompt) const = 0;
};

}  // namespace promptcache
