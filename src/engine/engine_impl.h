// The Engine behind include/promptcache/engine.h: a request queue in front of one engine thread
// that owns the model's compute (thread pool, KV blocks, block cache) and serves up to
// `parallel` sequences with continuous batching.
//
// Each step builds one batch: the next token of every decoding sequence, then prefill chunks of
// newly admitted prompts up to batch_size tokens. A sequence's prefill is a list of (token,
// position) pairs computed after what it gathered from the cache: for a plain prompt the longest
// cached prefix, then positions n_cached..n-1; for a modular (PML) prompt the cached blocks of the
// modules it picks, in stages (see engine/module_store.h), with gaps in positions where the
// schema reserves room for modules it leaves out. Decoding continues at the next position.
// Finished or cancelled plain sequences leave their full blocks in the prefix cache; modular ones
// insert nothing (their module blocks are cached already, and their positions are not a prefix).
// A plain prompt's full blocks also go to the cache after each forward pass of its prefill, and
// the blocks a prefill is about to compute are claimed (kv/in_flight.h): a prompt admitted while
// another computes blocks it matches waits for them and reuses them instead of computing them
// again (prefix_sharing.cc). Likewise the segments a prompt misses are claimed until it stores
// them, and a prompt missing a segment another sequence is computing waits for that store
// (segment_admission.cc).
//
// Schemas (engine_schemas.cc) are parsed and planned on the calling thread with the model's
// tokenizer; their modules are encoded on the engine thread, one text piece per task, between
// the steps of running requests.
//
// The implementation by responsibility: engine.cc (Create, Submit and the queue, stats),
// scheduler.cc (the engine thread's loop, each batched step, K/V reservations), admission.cc
// (a plain prompt's admission and prefix lookup, whose remote part remote_fetch.h reads off the
// engine thread), modular_admission.cc (modular prompts'
// gathering and selective recompute), segment_admission.cc (a plain prompt's segments: looked
// up, laid in, repaired, stored, shared in flight), decode.cc (per-token handling, choices,
// log-probabilities, a speculative step's rows), cache_admin.cc (list, pin, drop, save, lookup,
// warm), engine_schemas.cc (schema loading), savings.cc (MeasureGeneration), embedding.cc
// (embedding requests: prefill-only sequences whose final hidden states are pooled) and
// prefix_sharing.cc (a prompt's prefix shared in flight, and the order of prefill chunks that puts
// awaited ones first).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <thread>

#include "engine/blend.h"
#include "engine/fidelity_sampler.h"
#include "engine/modular.h"
#include "engine/module_store.h"
#include "engine/pml_encoder.h"
#include "engine/remote_fetch.h"
#include "engine/segment_store.h"
#include "grammar/token_mask.h"
#include "kv/block_cache.h"
#include "kv/in_flight.h"
#include "model/model.h"
#include "promptcache/engine.h"
#include "sampling/draft.h"
#include "sampling/logprobs.h"

namespace promptcache {

class EngineImpl : public Engine {
 public:
  // `options` resolved (batch_size set); `static_kv`: see CreateEngine.
  EngineImpl(const EngineOptions& options, std::unique_ptr<Model> model,
             std::unique_ptr<DiskTier> disk, std::unique_ptr<RemoteTier> remote, bool static_kv);
  ~EngineImpl() override;

  const Model& model() const override { return *model_; }
  const EngineOptions& options() const override { return options_; }
  Result<std::shared_ptr<RequestHandle>> Submit(CompletionRequest request) override;
  EngineStats Stats() const override;
  Result<std::shared_ptr<EmbeddingHandle>> SubmitEmbedding(EmbeddingRequest request) override;
  std::vector<CacheEntryInfo> ListCache() const override;
  std::vector<CacheBlockInfo> ListCacheBlocks() const override;
  Status PinPrefix(const std::vector<int32_t>& tokens, bool pinned,
                   const std::string& cache_namespace, const std::string& tenant,
                   PinOutcome* out) override;
  Status DropCache(const std::string& key, bool force) override;
  std::vector<PinInfo> ListPins() const override;
  Result<int> Unpin(const std::string& key) override;
  Status SaveCache() override;
  Result<int> WarmPrefix(const std::vector<int32_t>& tokens,
                         const std::string& cache_namespace) override;
  CacheTierCounts LookupCache(const std::vector<int32_t>& tokens,
                              const std::string& cache_namespace,
                              const std::vector<PromptSegment>& segments) const override;
  Result<CacheTierCounts> LookupPrompt(const PmlPrompt& prompt) const override;
  Result<std::vector<GenerationTiming>> MeasureGeneration(int max_tokens) override;

  Result<SchemaInfo> LoadSchemaFile(const std::string& path,
                                    const SchemaLoadOptions& options) override;
  Result<SchemaInfo> LoadSchemaText(std::string_view xml, const std::string& path,
                                    const SchemaLoadOptions& options) override;
  std::vector<SchemaInfo> ListSchemas() const override;
  Result<SchemaInfo> GetSchema(const std::string& name) const override;
  Result<std::shared_ptr<const SchemaLayout>> GetSchemaLayout(
      const std::string& name) const override;
  Status DropSchema(const std::string& name) override;
  Result<std::shared_ptr<RequestHandle>> SubmitPrompt(const PmlPrompt& prompt,
                                                      CompletionRequest request) override;
  Result<std::shared_ptr<RequestHandle>> SubmitPml(std::string_view xml, CompletionRequest request,
                                                   const std::string& file) override;
  Result<ExpandedPrompt> ExpandPrompt(const PmlPrompt& prompt) const override;

  // Loads the schemas persisted under cache_dir/schemas/ (Create calls it).
  void ReloadPersistedSchemas();
  const ModelPmlEncoder& encoder() const { return encoder_; }

  // Runs `fn` on the engine thread and waits for it: how other threads touch engine state.
  void RunOnEngineThread(const std::function<void()>& fn) const;
  BlockCache* cache() { return cache_.get(); }
  BlockPool* blocks() { return &blocks_; }
  ThreadPool* pool() { return &pool_; }
  ForwardScratch* scratch() { return &scratch_; }
  ModuleStore* modules() { return store_.get(); }
  SegmentStore* segments() { return segments_.get(); }

 private:
  struct Request;
  struct Slot;
  struct EmbeddingJob;  // an embedding request's inputs and progress (engine_slot.h)
  struct EmbeddingHandleImpl;
  // A row of Forward's hidden states: which embedding input and token it is.
  struct HiddenRow;
  // A modular prompt checked against its schema, ready to serve.
  struct Planned {
    std::shared_ptr<const SchemaEntry> schema;
    PmlPositions positions = PmlPositions::kSchema;  // resolved: never kDefault
    double recompute = 0;                            // resolved share
    ModularPrefill prefill;
  };

  Status ValidateRequest(const CompletionRequest& request) const;
  // InvalidArgument "<what>token id T is outside the vocabulary" for the first id outside it.
  Status CheckVocabulary(std::span<const int32_t> ids, const std::string& what) const;
  // The root key of a cache namespace's prefix chains (empty for the default namespace).
  BlockKey NamespaceKey(const std::string& cache_namespace) const;
  // The K/V bytes a request reserves under kv_ram_bytes: its prompt and max_tokens (at most
  // the context), in whole blocks; on sliding layers only what a trimming sequence holds at
  // once.
  size_t Reservation(const Request& r) const;
  // Whether the request's sequence gives up the sliding parts no later query of it sees.
  bool Trims(const Request& r) const;
  void UpdateCacheBudget();
  // Fails a request that never became active (its admission threw).
  void Abandon(Request& r, const std::string& why);
  // Answers a request cancelled while it waited in the queue, without starting it.
  void CancelQueued(Request& r);
  // The engine thread's heartbeat (EngineStats::step_seconds): a piece of work starts, ends.
  void BeginWork();
  void EndWork();
  Result<std::shared_ptr<RequestHandle>> Enqueue(std::shared_ptr<Request> r);
  Result<std::shared_ptr<RequestHandle>> EnqueueModular(CompletionRequest request, Planned planned);
  Result<Planned> Plan(const PmlPrompt& prompt) const;
  Result<SchemaInfo> Register(std::string xml, const std::string& path,
                              const SchemaLoadOptions& options, bool persisted);
  Status EncodeSchema(SchemaEntry* entry, const SchemaLoadOptions& options);
  // One piece of a schema being registered, on the caller's thread (engine_schemas.cc): its
  // remote reads made here, then encoded on the engine thread unless some tier held it.
  Status EnsurePiece(const SchemaLayout& layout, const PmlTextRef& ref, GatherStats* stats);
  // On the engine thread: the piece's remote blocks, then those of each piece an encoding of it
  // may gather (ModuleStore::AllDependencies), past what RAM and disk hold (PlanRemoteBlocks).
  std::vector<RemotePrefixFetch> PlanPieceReads(const SchemaLayout& layout,
                                                const PmlTextRef& ref) const;

  // The engine thread (scheduler.cc): each turn takes its work under mu_, runs the tasks, admits,
  // steps, and drops what finished; at the end ShutDown.
  void Loop();
  // With mu_ held: the queued requests cancelled while they waited, and then those admitted, in
  // order of arrival; under kv_ram_bytes the first that does not fit waits for running requests
  // to finish (it always fits when none runs).
  void TakeCancelled(std::vector<std::shared_ptr<Request>>* cancelled);
  void TakeAdmitted(std::vector<std::shared_ptr<Request>>* admitted);
  void RunTasks(std::deque<std::function<void()>>& tasks);
  // Admits each (one that throws fails, not the engine thread), then updates stats_.active.
  void AdmitAll(const std::vector<std::shared_ptr<Request>>& admitted);
  void StepOrFail();  // Step; an exception fails every active request
  // Finished slots give back their reservation and leave active_.
  void RemoveFinished();
  // After the loop: the cache saved to disk and flushed to the remote tier, and the requests
  // still queued answered.
  void ShutDown();
  void Admit(std::shared_ptr<Request> r);
  // A prompt's remote prefix and segment lookups, off the engine thread (admission.cc): when RAM
  // and disk end before the blocks a lookup would ask the remote tier for, the request is handed
  // to the fetcher (true) instead of being admitted; FetchDone (on the fetcher's thread) puts it
  // back in the queue, in its order of arrival, with the values read, and Admit takes them in.
  bool StartFetch(const std::shared_ptr<Request>& r);
  void FetchDone(const std::shared_ptr<Request>& r, std::vector<std::vector<RemoteValue>> values);
  // A request's remote reads: its prefix's (first; none for a modular prompt), then each
  // segment's it may look up, or each module piece it gathers.
  std::vector<RemotePrefixFetch> PlanRemoteReads(const Request& r) const;
  // Back from the fetcher: takes in up to adopt_bytes_per_turn_ of its values (copying them into
  // K/V blocks is the engine thread's; the other requests step between the parts), or all of
  // them when no other request is running. True once all are in.
  bool AdoptSome(Request& r);
  void AdoptFetched(Slot& s);
  // A plain prompt's prefix (prefix_sharing.cc): the longest cached prefix, then either the
  // prefill of the rest (claiming its blocks: returns true) or, when blocks right after the hit
  // are being computed by another sequence and `may_wait`, a wait for them (false).
  bool AttachPrefix(Slot& s, bool may_wait);
  // A waiting slot woken: the time since its last admission pass counted as waiting.
  void EndWait(Slot& s);
  // Claims the full blocks of s's prompt within [from, end) that it is about to compute (from:
  // its prefix hit, whole blocks), unless another sequence holds them.
  void ClaimPrefix(Slot& s, int from, int end);
  // Slots whose awaited blocks or segments are done (or whose producer went away, or that
  // waited their bound) attach again.
  void WakeWaiters();
  // The order of prefill chunks in a step: sequences others wait for first, most awaited tokens
  // first, then the rest as admitted.
  std::vector<Slot*> PrefillOrder() const;
  // After a forward pass: the full blocks s has computed go to the cache and are marked ready;
  // at the end of its prefill its claims are released.
  void PublishPrefill(Slot& s);
  bool AdmitModular(Slot& s);  // false: the request failed (and is finished)
  // AdmitModular with selective recompute: every stage but the last is gathered and computed
  // now, then Blend recomputes a share of the inexact pieces' tokens.
  Status GatherBlended(Slot& s, const SchemaLayout& layout, GatherStats* gs, BlendStats* bs,
                       bool* last_reused, bool* dropped, std::vector<bool>* reused);
  // Segments (segment_admission.cc). Whether the request's segments are served: the segment
  // cache is on, and the request is a token prompt with segments, no prompt log-probabilities and
  // not the recompute_each_step baseline.
  bool UsesSegments(const Request& r) const;
  // The segments of s's prompt that a lookup would consider: beyond the first `from` tokens and
  // at least segment_min_tokens long.
  std::vector<PromptSegment> LookedUp(const std::vector<PromptSegment>& segments, int from) const;
  // After s's prefix hit: looks its segments up and plans the rest of its prefill (hits laid in,
  // repaired at once when anything is to be recomputed), claiming the misses it will store;
  // false: the request failed (finished). With `may_wait`, when a segment it misses is one
  // another sequence is computing and will store, s plans nothing yet and waits for it
  // (Slot::awaited_segments; WakeWaiters admits it again).
  bool AdmitSegments(Slot& s, bool may_wait);
  // AdmitSegments' steps (SegmentHit, SegmentPlan: segment_admission.cc). The cached segments
  // of `looked`, counted; each miss is recorded and claimed for s to store.
  struct SegmentHit;
  struct SegmentPlan;
  std::vector<SegmentHit> FindSegments(Slot& s, const std::vector<PromptSegment>& looked);
  // The hits laid into s in prompt order, the tokens before each placed by PlaceComputed; with
  // `repair` into s's own blocks as Blend's candidates (the first `border` of each forced), else
  // as gathers between the prefill's tokens.
  Status LayInSegments(Slot& s, std::vector<SegmentHit>& hits, bool repair, int border,
                       SegmentPlan* plan);
  // The prompt's tokens [plan->next, end): computed now (plan->now) or added to the prefill.
  Status PlaceComputed(Slot& s, int end, SegmentPlan* plan);
  // The reuse in s's result (cached and computed tokens, recompute figures, token sources) and
  // the engine's segment counters.
  void RecordSegmentReuse(Slot& s, const std::vector<SegmentHit>& hits, int reused,
                          const BlendStats& bs, int prefix);
  // Whether s waits for segments of `looked` (its lookup-eligible ones) that other sequences
  // are computing now; if so it is set waiting, with its bound.
  bool AwaitSegments(Slot& s, const std::vector<PromptSegment>& looked);
  // A slot that waited for segments: its prefix and segments looked up again, and planned (or
  // waiting again, with `may_wait`).
  void ReadmitSegments(Slot& s, bool may_wait);
  // Stores the segments s missed, now that its prompt's K/V are complete, and drops its claims.
  void StoreSegments(Slot& s);
  bool Step();  // one forward pass over all active slots; false if there was nothing to do
  // Step's batch (scheduler.cc) and its parts: decode first, one token for every sequence that
  // is generating (recompute_each_step ones listed apart); then prefill chunks while the batch
  // has room (AddPrefillChunk: s's next tokens, at most `room`, its gathers joined first; the
  // number added), returning the slots that prefilled; the logits rows handed out after the pass.
  struct StepBatch;
  void AddDecodeTokens(StepBatch* batch, std::vector<Slot*>* recompute);
  std::vector<Slot*> AddPrefillChunks(StepBatch* batch);
  int AddPrefillChunk(Slot& s, int room, StepBatch* batch);
  void DeliverRows(const StepBatch& batch, const float* logits);
  // Speculative decoding (sampling/draft.h): a slot's drafter (off for the no-cache baseline);
  // its guesses fed after its pending token, as far as decoding one token at a time would
  // feed them (max_tokens, the context); and its rows handed out in order, each as the only
  // row of a step would be, keeping the guesses its sampling confirms and the K/V up to them.
  Drafter MakeDrafter(const Request& r) const;
  void AddDraft(Slot& s, StepBatch* batch);
  void DeliverDrafted(Slot& s, const float* rows);
  // A recompute_each_step request's decode step: its whole sequence computed again, alone.
  void RecomputeStep(Slot& s);
  // Whether a request reads and writes the prefix cache: plain prompts, with the cache on, that
  // are not the no-cache baseline.
  bool UsesPrefixCache(const Request& r) const;
  // HandleLogits, failing the request (not the engine thread) when its callbacks throw.
  void Deliver(Slot& s, const float* logits);
  void HandleLogits(Slot& s, const float* logits);
  // Prompt log-probabilities (CompletionRequest::prompt_logprobs): the alternatives asked for,
  // those of the cached prefix from memo_ (computing again from the first one missing), and
  // one prompt position's logits.
  int PromptTop(const Slot& s) const;
  void ReusePromptLogprobs(Slot& s);
  void HandlePromptRow(Slot& s, int pos, const float* logits);
  // n > 1: the other choices start from s's prefilled prompt, sharing its blocks.
  void ForkChoices(Slot& s);
  // Passes a piece of text (and the log-probabilities not sent yet) to the request's callback;
  // false: the caller cancelled.
  bool Emit(Slot& s, const std::string& text);
  // The last choice finished: hands the result over.
  void CompleteRequest(Request& r);
  // Releases the sliding parts of s's blocks that its next queries no longer see, registering
  // a plain prompt's prefix up to them in the cache first (where they stay reusable).
  void TrimSliding(Slot& s);
  void Finish(Slot& s, const std::string& reason, Status status = Status::Ok());
  // Embeddings (embedding.cc). The K/V an embedding request holds at most at once; its next
  // tokens for the step's batch (continuing its input in progress, then starting new ones
  // while there is room); pooling the rows Forward wrote (finishing the inputs, and the
  // request, that are complete); finishing it (Finish calls it for embedding slots).
  size_t EmbeddingReservation(const EmbeddingJob& job) const;
  void AddEmbeddingTokens(Slot& s, int room, std::vector<BatchToken>* batch,
                          std::vector<HiddenRow>* rows);
  void PoolEmbeddings(const std::vector<HiddenRow>& rows, const float* hidden);
  void FinishEmbedding(Slot& s, const std::string& reason, const Status& status);
  void UpdateStatsSnapshot();

  EngineOptions options_;
  std::unique_ptr<Model> model_;
  int context_;
  ThreadPool pool_;
  BlockPool blocks_;
  std::unique_ptr<BlockCache> cache_;
  InFlightBlocks claims_;  // engine thread: blocks running sequences compute now
  // Engine thread: segments running sequences compute now and will store, each by its first
  // block's key (SegmentStore::Keys: its tokens, encoding, KV type and namespace).
  InFlightBlocks segment_claims_;
  uint64_t next_owner_ = 1;  // engine thread: the next producer id for claims_
  ForwardScratch scratch_;
  std::unique_ptr<ModuleStore> store_;
  std::unique_ptr<SegmentStore> segments_;
  // With a remote tier: reads prefix lookups' values off the engine thread; stopped by ShutDown
  // (its requests go back to the queue and are answered there).
  std::unique_ptr<RemoteFetcher> fetcher_;
  // Requests at the fetcher (guarded by mu_): each holds a slot until its values are back, so
  // that a burst cannot send more lookups at once, nor hold more fetched values, than --parallel.
  int fetching_ = 0;
  // Fetched values taken in per turn of the loop while others run (a copy of a few ms).
  size_t adopt_bytes_per_turn_ = size_t(16) << 20;
  bool adopt_whole_when_alone_ = true;

 public:
  // Tests: parts of `bytes`, also when no other request runs.
  void set_adopt_parts(size_t bytes) {
    adopt_bytes_per_turn_ = bytes;
    adopt_whole_when_alone_ = false;
  }

 private:
  // Fidelity in production (EngineOptions::fidelity_sample > 0; null when off): reset first in
  // the destructor, after the engine thread ends (its worker reads model_ and asks mu_).
  std::unique_ptr<FidelitySampler> fidelity_;
  // Whether the engine serves nothing now (no request running or queued, no task): when the
  // fidelity sampler may evaluate.
  bool Idle() const;
  // Engine thread, at a request's first logits: whether its choice 0 is sampled for fidelity.
  bool SampleFidelity(const Slot& s);
  // At the end of a sampled slot: its sample goes to the sampler.
  void HandOverFidelity(Slot& s);
  // Engine thread: EngineStats' segment counters, copied by UpdateStatsSnapshot.
  struct SegmentCounters {
    uint64_t lookups = 0, hits = 0, tokens_reused = 0, stores = 0, in_flight_waits = 0;
  } segment_counters_;
  ModelPmlEncoder encoder_;
  std::unique_ptr<LogprobMemo> memo_;  // engine thread
  // The vocabulary's token bytes as a trie, for grammars; built at the first constrained
  // request (engine thread).
  // The vocabulary's bytes for grammars; [1]: with control tokens spelled out (special_text).
  std::shared_ptr<const VocabTrie> trie_[2];
  const std::shared_ptr<const VocabTrie>& Trie(bool special);
  // Samples the next token of a constrained slot: the sampler's draw if the grammar allows it,
  // else a draw from the logits masked to the tokens it allows. -1: the grammar allows none.
  int32_t SampleConstrained(Slot& s, const float* logits);
  std::vector<float> masked_;  // engine thread: masked logits
  std::vector<std::unique_ptr<Slot>> active_;

  mutable std::mutex schema_mu_;
  std::map<std::string, std::shared_ptr<const SchemaEntry>> schemas_;  // guarded by schema_mu_
  std::mutex load_mu_;                                                 // one schema load at a time

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::deque<std::shared_ptr<Request>> queue_;
  mutable std::deque<std::function<void()>> tasks_;
  bool stop_ = false;
  int in_flight_ = 0;            // submitted and not yet finished; guarded by mu_
  size_t reserved_ = 0;          // K/V bytes reserved by the active requests (engine thread)
  size_t pin_quota_ = 0;         // EngineOptions::pin_ram_bytes, resolved
  size_t tenant_pin_quota_ = 0;  // EngineOptions::tenant_pin_ram_bytes, resolved
  size_t pinned_bytes_ = 0;      // pinned cached blocks after the last step (engine thread)
  // Heartbeat: when the current piece of work began (steady clock, ns; 0: waiting for work),
  // and the longest piece in the current and the previous minute (ms).
  std::atomic<int64_t> busy_since_ns_{0};
  std::atomic<double> step_max_ms_{0}, step_max_prev_ms_{0};
  std::chrono::steady_clock::time_point step_window_{};  // engine thread: the current minute
  EngineStats stats_;                                    // guarded by mu_
  std::thread thread_;
};

}  // namespace promptcache
