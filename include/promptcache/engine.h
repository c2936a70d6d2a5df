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
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "promptcache/pml.h"
#include "promptcache/sampling.h"
#include "promptcache/status.h"
#include "promptcache/types.h"

namespace promptcache {

// The engine's own types, opaque to library users: Engine::model() and CompletionRequest::grammar
// pass them along (promptcache/text.h reads the model's tokenizer for you).
class Model;
class Grammar;  // grammar/grammar.h

// How a stored segment's K/V were encoded (EngineOptions::segment_encoding; docs/modules.md
// "Segments" measures both).
enum class SegmentEncoding {
  // As computed in place in the first request that missed it, attending to that request's text
  // before it (nothing more to compute).
  kInContext,
  // Alone after a fixed preamble (the vocabulary's BOS token, else its EOS, else nothing), as
  // CacheBlend precomputes chunks: the same K/V whichever request stores it, at the cost of
  // computing a missed segment twice (in place for its request, and alone).
  kAlone,
};

// How an embedding is made of an input's final hidden states (the model's last layer, after its
// final norm, before the output matrix): llama.cpp's pooling types, with the numbers its GGUF
// key `{arch}.pooling_type` uses. kDefault: EngineOptions::pooling, and there the model file's
// key, else kMean.
enum class Pooling {
  kDefault = -1,
  kNone = 0,  // no pooling: one vector per input token
  kMean = 1,  // the mean over the input's tokens (BOS and EOS included when the input has them)
  kCls = 2,   // the first token's
  kLast = 3,  // the last token's
};
// "mean", "last", "cls", "none" (and "default"); ParsePooling refuses other names, listing these.
std::string PoolingName(Pooling pooling);
Result<Pooling> ParsePooling(std::string_view name);

// How Engine::Create loads the model and sizes the engine, its KV memory and its cache tiers.
struct EngineOptions {
  std::string model_path;
  int threads = 0;     // 0: one per physical core usable (affinity mask, cgroup CPU quota)
  int context = 0;     // per sequence; 0: the model's context length
  int parallel = 4;    // sequences served at once
  int max_queue = 64;  // waiting requests beyond `parallel`; more are refused
  // K/V storage: f16, f32, or q8_0 / q4_0 (ggml blocks; the model's head size must be a multiple
  // of 32, else Create fails).
  KvType kv_type = KvType::kF16;
  int block_size = 16;
  int batch_size = 512;  // prefill tokens per forward pass (0: the model's default, <= 512)
  // Special-token spellings ("<|im_end|>", "</s>") written in user text (chat message contents,
  // completion prompts, PML arguments and new text) stay text unless this is set: only chat
  // templates and PML schemas write special tokens. Set it for trusted callers only.
  bool special_tokens_in_text = false;
  // A Jinja chat template used instead of the model file's tokenizer.chat_template (for chat
  // completions and PML role tags); empty: the file's.
  std::string chat_template;
  // Where modular prompts' tokens sit when the prompt does not say (<prompt positions="...">):
  // kSchema, the schema's reserved positions with gaps where modules are left out (the Prompt
  // Cache paper's layout), or kContiguous, end to end from 0 like the same text sent plainly
  // (cached keys rotated to their new positions; see docs/modules.md).
  PmlPositions module_positions = PmlPositions::kSchema;
  // How a module's cached K/V reach positions other than those it was encoded at (contiguous
  // positions): false, copied into fresh blocks with keys rotated; true, shared with the cache
  // by reference, attention rotating the queries that read them instead (no copy, no extra
  // memory; a rotation per query and layer). docs/modules.md compares them.
  bool module_shared_moves = true;
  // The share (0 to 1) of a modular prompt's cached tokens that were encoded without part of the
  // prompt's context and are recomputed with it, chosen by how far their K/V move (CacheBlend;
  // <prompt recompute="..."> overrides it per prompt). 0: reuse them all, as the paper does.
  double module_recompute = 0;
  // Segment cache (docs/modules.md "Segments"). Off by default: a segment reused elsewhere than it
  // was computed never attended to what now precedes it, an approximation. When on, each of a
  // request's segments (CompletionRequest::segments) of at least segment_min_tokens tokens that
  // its prefix-cache hit does not cover is looked up by its own tokens (whatever its position and
  // whatever precedes it; within the request's namespace, model and KV type). A hit is laid in at
  // its position by key rotation (module_shared_moves: shared by reference or copied), then
  // repaired: its first segment_border_tokens tokens are always recomputed, and segment_recompute
  // of its tokens (CompletionRequest::segment_recompute overrides it), chosen as for modules
  // (CacheBlend). A miss is computed in place and stored for later requests, encoded as
  // segment_encoding says.
  bool segment_cache = false;
  int segment_min_tokens = 64;
  SegmentEncoding segment_encoding = SegmentEncoding::kInContext;
  double segment_recompute = 0.15;
  int segment_border_tokens = 4;
  // Fidelity in production (docs/modules.md): 0 (the default) off; N > 0 evaluates one request
  // in N among those whose prompt reused approximate K/V (cached schema modules, or segments
  // found cached; a plain prefix hit is exact and never counts) against the full recompute of
  // the same tokens, as `promptcache eval-segments` does, into EngineStats::fidelity. Only a
  // sampled request keeps anything: the logits of its first kFidelitySampleSteps generated
  // tokens (choice 0). The evaluation is never on a request's latency path: it is queued when
  // the request has finished (at most kFidelityQueue waiting, more are dropped and counted) and
  // run by one background thread at the lowest CPU priority, one thread of compute, that starts
  // an evaluation only while the engine has no request running or queued.
  int fidelity_sample = 0;
  // Prefix cache.
  bool prefix_cache = true;  // false: plain prompts reuse nothing (schema modules still do)
  size_t cache_ram_bytes = size_t(1) << 30;  // bound on cached (unreferenced) blocks in RAM
  // Bound on all K/V in RAM, running requests and cached blocks together; 0: none (running
  // requests then take what they need). Each request reserves its prompt plus max_tokens
  // (whole blocks; on sliding-window layers, with trim_sliding_kv, a window and a batch of
  // them) when admitted: one that does not fit waits in the queue, one that could never fit is
  // refused, and the cache keeps at most what the reservations leave.
  size_t kv_ram_bytes = 0;
  // Pins (pin_tokens, timed_pins, PinPrefix) are bounded so that they never hold the cache's
  // budget: pinned blocks hold at most pin_ram_bytes in all (default: a quarter of the cache's
  // budget, the smaller of cache_ram_bytes and kv_ram_bytes; at most that budget) and at most
  // tenant_pin_ram_bytes per named tenant (CompletionRequest::tenant; default: a quarter of
  // pin_ram_bytes; the default tenant "" is bounded by the total only). Under kv_ram_bytes the
  // pins count against it too: a request is refused when it could not fit beside a full pin
  // quota. A pin past a quota stops at the last block that fits (CompletionResult::pin_limited);
  // the request is served all the same.
  std::optional<size_t> pin_ram_bytes;
  std::optional<size_t> tenant_pin_ram_bytes;
  // Every pin lapses: a counted pin (pin_tokens, PinPrefix) this long after it was last set or
  // hit, a timed pin after its TTL, cut to this. 0: counted pins hold until unpinned.
  double pin_ttl_seconds = 3600;
  // Fault in cache_ram_bytes of K/V block memory at start (held from then on), so that the first
  // long prefix loaded from the disk or remote tier, or computed, does not wait for the kernel
  // to zero fresh pages: for a replica that takes shared prefixes from Redis. Startup takes the
  // time to touch that memory.
  bool prefault_kv = false;
  // A context beyond what the model was trained for (and its RoPE scaling extends) is refused
  // unless this is set.
  bool allow_long_context = false;
  // Sliding-window models (Gemma, Mistral): a running sequence gives up the K/V of its sliding
  // layers once no later query of it can see them (positions more than a window behind), so a
  // long sequence holds those layers for about a window only (docs/modules.md). Results are the
  // same either way; false keeps every layer of every token (for comparisons).
  bool trim_sliding_kv = true;
  double cache_ttl_seconds = 0;  // 0: no expiry
  int cache_min_tokens = 0;      // prompts shorter than this are not cached
  int cache_granularity = 0;     // cache prefixes in multiples of this (0: block)
  std::string cache_dir;         // disk tier; empty: none
  size_t cache_disk_bytes = size_t(4) << 30;
  // Remote tier shared by replicas (docs/server.md): redis://[:PASSWORD@]HOST[:PORT][/DB];
  // empty: none. A request's lookups wait at most cache_redis_deadline_ms in all (each socket
  // read or write cache_redis_timeout_ms), and not at all while it is down or failing (a circuit
  // breaker); writes are queued (up to cache_redis_queue_bytes, then dropped).
  std::string cache_redis;
  int cache_redis_timeout_ms = 100;
  int cache_redis_deadline_ms = 1000;
  int cache_redis_ttl_seconds = 86400;  // expiry of written blocks; pinned prefixes: none
  size_t cache_redis_queue_bytes = size_t(256) << 20;
  // Embeddings' pooling when a request does not say (EmbeddingRequest::pooling). kDefault: what
  // the model file says ({arch}.pooling_type: embedding models carry it), else kMean. (llama.cpp
  // pools nothing for a file without the key; an OpenAI embeddings client wants one vector.)
  Pooling pooling = Pooling::kDefault;
};

// One token's log-probability under the model: the log-softmax of the raw logits it was
// sampled from (before temperature, penalties and cuts, as OpenAI reports them), with the most
// likely alternatives.
struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;  // (token, logprob), best first
};

// The most alternatives a request may ask for per token (OpenAI's top_logprobs limit).
inline constexpr int kMaxTopLogprobs = 20;
// The most choices (CompletionRequest::n) one request may ask for.
inline constexpr int kMaxChoices = 16;

// A piece of one choice's text with the log-probabilities of the tokens generated since the
// previous piece (their text may be in this piece or, held back for a stop string, later).
struct TextPiece {
  int choice = 0;
  std::string text;
  std::vector<TokenLogprob> logprobs;
};

// A run of prompt tokens [begin, end) reusable on its own (CompletionRequest::segments).
struct PromptSegment {
  int begin = 0, end = 0;
  int size() const { return end - begin; }
};

// One request to Engine::Submit: a prompt of token ids (promptcache/text.h makes them from text)
// and how to continue it.
struct CompletionRequest {
  std::vector<int32_t> prompt;  // token ids, BOS included if wanted
  int max_tokens = 128;
  SamplingParams sampling;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  // The baseline without a KV cache (`promptcache run --no-kv-cache`): each new token is
  // computed by running the whole sequence again from nothing, alone (not batched with other
  // requests), so that N tokens cost about N*N/2 tokens of work instead of N. The prefix cache
  // is neither read nor written. Plain prompts only, without prompt_logprobs. For measurements.
  bool recompute_each_step = false;
  // Pin the first `pin_tokens` prompt tokens in the cache (rounded down to blocks) until
  // unpinned through the cache API; -1 pins the whole prompt.
  int pin_tokens = 0;
  // Pins that expire (Anthropic's cache_control TTLs): each pins the first `tokens` prompt
  // tokens (rounded down to blocks) for `ttl_seconds`, renewed by every later prefix hit on
  // them; until then DELETE /v1/cache and eviction leave them.
  struct TimedPin {
    int tokens = 0;
    double ttl_seconds = 0;
  };
  std::vector<TimedPin> timed_pins;
  // Called on the engine thread with each new piece of text (never broken UTF-8). Return false
  // to cancel the request (e.g. the client disconnected); its computed blocks stay cached.
  std::function<bool(const std::string&)> on_text;
  // Called on the engine thread with the raw logits (n_vocab) each new token is sampled from,
  // before sampling: for evaluations (eval-modules) and log-probabilities.
  std::function<void(std::span<const float>)> on_logits;
  // The cache namespace of the request's prefix (an opaque string the server derives from its
  // tenant and cache_salt; empty: the default namespace). Prefixes of one namespace are never
  // reused by another, in RAM, on disk or in the remote tier. Modular prompts' modules are the
  // schema's, shared by every namespace.
  std::string cache_namespace;
  // Who the request's pins are charged to (EngineOptions::tenant_pin_ram_bytes): the server's
  // tenant name; empty: the default tenant, bounded by the total pin quota only.
  std::string tenant;
  // Choices: n > 1 prefills the prompt once, then forks n sequences sharing its blocks, each
  // sampling with its own stream (seed + choice), decoded in the same batches.
  int n = 1;
  // >= 0: record each generated token's log-probability with this many alternatives (at most
  // kMaxTopLogprobs). -1: none.
  int logprobs = -1;
  // Also the prompt's tokens' log-probabilities, from the second token on (echo in completions;
  // plain token prompts only), with max(logprobs, 0) alternatives. Cached prefixes reuse the
  // values computed when they were first prefilled.
  bool prompt_logprobs = false;
  // When set, called instead of on_text with each piece of every choice, and with the
  // log-probabilities when `logprobs` >= 0; with prompt_logprobs, a first piece of choice -1
  // carries the prompt's. Return false to cancel the whole request.
  std::function<bool(const TextPiece&)> on_piece;
  // Constrained decoding: every choice's text is a sentence of this grammar (grammar/grammar.h;
  // JSON schemas are converted to one). A token the grammar refuses is never generated; the
  // request stops ("stop") once the grammar admits nothing more. Null: free text.
  std::shared_ptr<const Grammar> grammar;
  // Segments: ranges of `prompt` reusable on their own, wherever they appear (a chat message, a
  // content part, a document between separators; EngineOptions::segment_cache). Ascending and
  // not overlapping, within the prompt (else Submit refuses the request). Ignored while the
  // engine's segment cache is off, and with prompt_logprobs (a reused segment has no logits).
  std::vector<PromptSegment> segments;
  // The share of reused segments' tokens recomputed; unset: EngineOptions::segment_recompute.
  std::optional<double> segment_recompute;
};

// Where the K/V of a run of prompt tokens came from: a prefix hit in RAM, a prefix block read
// back from the disk tier, the remote tier, a schema module's cached blocks, computed for this
// request, or a cached segment (CompletionRequest::segments) from any tier. The cache map of a
// response (docs/server.md) is these runs.
enum class TokenSource { kRam, kDisk, kRemote, kModule, kComputed, kSegment };
struct SourceRun {
  TokenSource source = TokenSource::kComputed;
  int length = 0;
};

// One choice of a completion.
struct CompletionChoice {
  std::vector<int32_t> tokens;
  std::string text;
  std::string finish_reason;
  std::vector<TokenLogprob> logprobs;  // one per generated token, when requested
};

// What RequestHandle::Wait returns: the generated text and tokens, and where the prompt's K/V
// came from and how long each phase took.
struct CompletionResult {
  Status status;                // not OK: the request failed (e.g. prompt over the context)
  std::vector<int32_t> tokens;  // generated ids
  std::string text;
  std::string finish_reason;  // "stop", "length", "cancelled"
  int prompt_tokens = 0;
  int cached_tokens = 0;    // prompt tokens whose K/V came from the cache
  int computed_tokens = 0;  // prompt tokens computed for this request
  // Of cached_tokens, those another request still computing its prompt computed (shared in
  // flight: this request waited for them, or found them cached while that prefill ran).
  int shared_tokens = 0;
  // Prompt tokens the request's pins (pin_tokens, timed_pins) cover once it ends, in whole
  // blocks: the longest pinned prefix.
  int pinned_tokens = 0;
  // A pin stopped short at a pin quota (EngineOptions::pin_ram_bytes): pinned_tokens is less
  // than the pins asked for.
  bool pin_limited = false;
  double queue_ms = 0;   // waiting for a free sequence slot
  double prompt_ms = 0;  // lookup + prefill, up to the first token's logits
  double ttft_ms = 0;    // submission to first token
  double generation_ms = 0;
  // Modular (PML) prompts. cached_tokens counts the prompt tokens reused from cached modules,
  // computed_tokens the rest: parameter arguments, cache="false" modules, the new text, and
  // modules missing from the cache (encoded first). prompt_ms = gather_ms + encode_ms +
  // prefill_ms.
  bool modular = false;
  std::string schema;
  int encoded_tokens = 0;  // tokens encoded for missing modules (their spans included)
  double gather_ms = 0;    // finding the modules' blocks and sharing them (disk loads too)
  double encode_ms = 0;    // encoding missing modules
  double prefill_ms = 0;   // computing the new tokens, up to the first token's logits
  // Selective recompute (EngineOptions::module_recompute, segment_recompute): cached tokens
  // recomputed with the prompt's context (counted in computed_tokens, not cached_tokens), out of
  // the candidates (tokens encoded without part of it: for segments, every reused one), and the
  // time the selection and recompute took (part of gather_ms).
  int recompute_candidates = 0;
  int recomputed_tokens = 0;
  double recompute_ms = 0;
  // Segments (CompletionRequest::segments). Looked up (beyond the prefix hit and long enough),
  // found cached, and missed and stored for later requests; reused segment tokens count in
  // cached_tokens, less those recomputed, of which border_recomputed are the first tokens of a
  // reused segment (EngineOptions::segment_border_tokens). With segments reused, gather_ms is
  // the lookups, laying them in, computing the text between them and the recompute;
  // encode_ms encoding missed segments alone (SegmentEncoding::kAlone); prefill_ms the rest.
  int segment_lookups = 0, segment_hits = 0, segment_stores = 0;
  int border_recomputed = 0;
  // The prompt's tokens in order (by position for modular prompts), run-length encoded by where
  // their K/V came from; the lengths sum to prompt_tokens. Tokens recomputed by selective
  // recompute still show as their module's or segment's.
  std::vector<SourceRun> sources;
  // Constrained decoding (a grammar): time spent checking tokens against it and masking the
  // logits, over all choices (part of generation_ms and prompt_ms).
  double grammar_ms = 0;
  // Every choice, in order (choices[0] repeats tokens, text and finish_reason above).
  std::vector<CompletionChoice> choices;
  // With prompt_logprobs: entry i is prompt token i + 1's.
  std::vector<TokenLogprob> prompt_logprobs;
  // Tokens generated over all choices.
  int completion_tokens() const {
    if (choices.empty()) return static_cast<int>(tokens.size());
    int n = 0;
    for (const CompletionChoice& c : choices) n += static_cast<int>(c.tokens.size());
    return n;
  }
};

// A submitted request: wait for it, or cancel it.
class RequestHandle {
 public:
  virtual ~RequestHandle() = default;
  virtual CompletionResult Wait() = 0;
  // Waits at most `seconds` for the request to finish: true when it has (Wait then returns at
  // once). For callers that watch something else meanwhile (a client's connection).
  virtual bool WaitFor(double seconds) = 0;
  virtual void Cancel() = 0;
};

// One cached prefix chain, named by its last block (Engine::ListCache).
struct CacheEntryInfo {
  std::string key;  // hex key of the prefix's last block
  int tokens = 0;   // prefix length
  bool in_ram = false;
  bool on_disk = false;
  bool pinned = false;
  double idle_seconds = 0;
};

// One pinned prefix chain, named by its last pinned block (Engine::ListPins).
struct PinInfo {
  std::string key;                 // hex key of the chain's last pinned block
  std::string namespace_key;       // hex root key of its cache namespace; "" the default namespace
  std::string tenant;              // who pinned its last block ("" the default tenant)
  int tokens = 0;                  // prefix length up to that block
  size_t bytes = 0;                // its pinned blocks, as the pin quotas count them
  int counted_pins = 0;            // counted pins on its last block
  double expires_in_seconds = -1;  // until its last block's pin lapses; < 0: never
};

// What Engine::PinPrefix pinned.
struct PinOutcome {
  int tokens = 0;        // the pinned prefix, in whole blocks
  bool limited = false;  // stopped short at a pin quota
};

// One cached block, for drawing the prefix tree: chains share their first blocks.
struct CacheBlockInfo {
  std::string key, parent;  // hex; parent empty: a chain's first block
  int depth = 0;            // tokens before the block in its chain
  std::vector<int32_t> tokens;
  bool on_disk = false, pinned = false;
  bool prefix = true;  // false: a schema module's block, or a segment's
  uint64_t hits = 0;   // prefix lookups that reused it
  double idle_seconds = 0;
  bool in_ram = true;  // false: on the disk tier only (`prefix` is then not known: true)
  bool segment = false;  // a segment's block (CompletionRequest::segments); `prefix` is false
};

// How many leading tokens of a prompt each cache tier holds (Engine::LookupCache). For a modular
// prompt (Engine::LookupPrompt): how many of its tokens come from cached pieces held in RAM, on
// disk but not in RAM, and in the remote tier only.
struct CacheTierCounts {
  int ram = 0, disk = 0, remote = 0;
  int prompt_tokens = 0;  // LookupPrompt: every token the prompt includes
  int reusable = 0;  // what a request would reuse now: the prefix found in RAM, then disk, then
                     // remote, in whole blocks, at most the prompt minus its last token; and
                     // the tokens of `segments`
  // LookupCache with segments (and the engine's segment cache on): the tokens of the segments
  // beyond `reusable`'s prefix found cached whole in some tier, as a request would look them
  // up (those shorter than segment_min_tokens are not).
  int segments = 0;
};

// Generating `tokens` tokens with and without the KV cache (Engine::MeasureGeneration).
struct GenerationTiming {
  int tokens = 0;
  double with_cache_ms = 0, no_cache_ms = 0;
};

// The remote (Redis) tier's counters, part of EngineStats.
struct RemoteTierStats {
  bool enabled = false, connected = false;
  uint64_t hits = 0, misses = 0, errors = 0, writes = 0, dropped = 0, invalid = 0;
  uint64_t loads = 0;            // blocks loaded into RAM from it
  uint64_t deadline_misses = 0;  // calls cut short by their deadline
  uint64_t breaker_opens = 0;    // times its circuit breaker opened
  uint64_t skipped = 0;          // lookups not sent while the breaker was open
  bool breaker_open = false;     // not being asked now
};

// Sampled fidelity evaluations (EngineOptions::fidelity_sample) of one kind of reuse: each
// teacher-forces the full recompute of the request's prompt on the tokens it generated and
// compares, step by step, the full recompute's top-1 with the top-1 of the logits the served
// request had (FidelityReport, engine/fidelity.h). Steps and agreements are summed over samples.
struct FidelityTally {
  uint64_t samples = 0;  // requests evaluated
  uint64_t steps = 0, agreements = 0;
  // Over the steps whose full-recompute top-2 margin is at least 0.1 logit (kNearTieMargin): a
  // flip there is an error, not a near tie.
  uint64_t margin_steps = 0, margin_agreements = 0;
  double first_token_kl_sum = 0;  // KL(full || served) of the first token's distributions
  double first_token_kl_max = 0;  // the worst sample's
  double mean_kl_sum = 0;         // each sample's KL averaged over its steps, summed
  void Add(const FidelityTally& o) {
    samples += o.samples;
    steps += o.steps;
    agreements += o.agreements;
    margin_steps += o.margin_steps;
    margin_agreements += o.margin_agreements;
    first_token_kl_sum += o.first_token_kl_sum;
    first_token_kl_max =
        first_token_kl_max > o.first_token_kl_max ? first_token_kl_max : o.first_token_kl_max;
    mean_kl_sum += o.mean_kl_sum;
  }
};
inline constexpr int kFidelitySampleSteps = 16;  // generated steps a sampled request keeps
inline constexpr int kFidelityQueue = 4;         // sampled requests waiting at most

struct FidelityStats {
  FidelityTally modules;   // modular (PML) prompts that reused cached modules
  FidelityTally segments;  // prompts that reused cached segments
  uint64_t dropped = 0;    // sampled, not evaluated: kFidelityQueue were waiting already
  uint64_t failed = 0;     // evaluations that failed (the recompute could not run)
  int pending = 0;         // waiting or being evaluated
  FidelityTally Total() const {
    FidelityTally t = modules;
    t.Add(segments);
    return t;
  }
};

// Counters since the engine started, and its current load (Engine::Stats).
struct EngineStats {
  uint64_t requests = 0, requests_failed = 0, requests_rejected = 0;
  uint64_t requests_cancelled = 0;  // finished "cancelled": the caller went away or stopped it
  // Of `requests`: embedding requests (their inputs' tokens count in prompt_tokens).
  uint64_t embedding_requests = 0;
  uint64_t prompt_tokens = 0, cached_tokens = 0, generated_tokens = 0;
  // Of cached_tokens, those computed by another request's prefill in flight at the time
  // (CompletionResult::shared_tokens): a prefix concurrent requests computed once.
  uint64_t shared_in_flight_tokens = 0;
  uint64_t cache_hits = 0, cache_lookups = 0;  // lookups that reused >= 1 block
  // Segments (CompletionRequest::segments): looked up, found cached, their tokens reused (not
  // recomputed), and stored after a miss.
  uint64_t segment_lookups = 0, segment_hits = 0, segment_tokens_reused = 0, segment_stores = 0;
  // Times a request waited, at admission, for a segment another running request was computing
  // and about to store (docs/modules.md "Segments", in flight): it then reused it as a hit.
  uint64_t in_flight_segment_waits = 0;
  uint64_t evictions = 0, disk_writes = 0, disk_loads = 0, disk_errors = 0;
  size_t cache_ram_bytes = 0;  // distinct cached blocks in RAM (shared blocks counted once)
  size_t cache_disk_bytes = 0;
  // K/V of every block in use, cached or held by running sequences (global layers, and the
  // sliding layers still held: see trim_sliding_kv).
  size_t kv_bytes_in_use = 0;
  size_t kv_bytes_peak = 0;  // the most kv_bytes_in_use has been
  size_t cache_pinned_bytes = 0;  // pinned cached blocks, as the pin quotas count them
  size_t pin_ram_bytes = 0;       // the pin quota in force (EngineOptions::pin_ram_bytes)
  uint64_t pins_limited = 0;      // pins cut short by a pin quota
  // The engine thread's heartbeat: how long its current piece of work (a step of the running
  // requests with their admissions, or a task between steps) has taken so far (0 while it
  // waits for work), and the longest piece of the last minute or so.
  double step_seconds = 0;
  double step_max_seconds = 0;
  RemoteTierStats remote;
  FidelityStats fidelity;
  int active = 0, queued = 0;
  std::vector<double> ttft_ms;  // recent times to first token, for histograms
};

// How Engine::LoadSchemaFile / LoadSchemaText load a PML schema.
struct SchemaLoadOptions {
  // Called on the loading thread after each encoded piece: tokens done and to do.
  std::function<void(int done, int total)> on_progress;
  // With a cache_dir: keep the schema (and its src files) under cache_dir/schemas/NAME/, so an
  // engine created on that folder later loads it again.
  bool persist = true;
  // false: refuse src="..." attributes (schema text from a remote client must not read files).
  bool allow_src = true;
  // false: register without encoding; prompts encode the modules they miss (and count them as
  // computed). What `promptcache prompt --schema` does, to show the cost of a cold cache.
  bool encode = true;
};

// A loaded schema's summary (Engine::LoadSchemaFile, ListSchemas, GetSchema).
struct SchemaInfo {
  std::string name;
  std::string file;      // the path it was read from, or the name given with its text
  int total_length = 0;  // positions the schema reserves; a prompt's new text starts here
  int modules = 0;
  int cached_modules = 0;  // modules precomputed (not cache="false")
  int cached_tokens = 0;   // tokens of the always-included text and the cached modules
  int encoded_tokens = 0;  // encoded by this load
  int reused_tokens = 0;   // found in the cache (RAM or disk) by this load
  double encode_ms = 0;
  bool persisted = false;  // kept under cache_dir/schemas/
  std::string layout;      // FormatLayout: each module's range, tokens and span
};

// A modular prompt's tokens as the schema lays them out.
struct ExpandedPrompt {
  std::vector<int32_t> tokens;     // every token the prompt includes, by position
  std::vector<int32_t> positions;  // their positions (gaps where modules are left out)
  int cached_tokens = 0;           // of them, tokens of cached modules and always-included text
  int end = 0;                     // where generation continues
};

// Builds a PmlPrompt in C++ instead of XML:
//   PromptBuilder("support").Module("doc-fr").Argument("greeting", "name", "Ana")
//       .Turn("user", "Comment ...?").prompt()
class PromptBuilder {
 public:
  explicit PromptBuilder(std::string schema);
  // Includes a module; "parent/child" names a nested module (its parents are included too).
  PromptBuilder& Module(std::string_view path);
  // Fills a parameter of a module, including the module.
  PromptBuilder& Argument(std::string_view path, std::string parameter, std::string value);
  // New text after the modules: plain, or one chat turn ("system", "user" or "assistant").
  PromptBuilder& Text(std::string text);
  PromptBuilder& Turn(std::string role, std::string text);
  const PmlPrompt& prompt() const { return prompt_; }

 private:
  PmlModuleRef* Find(std::string_view path);
  PmlPrompt prompt_;
};

// The most inputs one embedding request may carry (OpenAI's limit).
inline constexpr int kMaxEmbeddingInputs = 2048;

// One request to Engine::SubmitEmbedding (or Embed): inputs of token ids, each embedded on its
// own (its tokens attend only to each other), all computed in the same forward passes.
//
// Inputs are token ids as the caller made them: TokenizeForEmbedding (promptcache/text.h) adds
// BOS and EOS as the model file says, as llama.cpp does. Each input must be non-empty and at
// most the context size; with kNone, all inputs together at most the context size (one vector
// per token is what comes back).
//
// Embeddings never use the prefix cache, nor add to it: a cached prefix holds each layer's K/V,
// not the last layer's hidden states (nor are they kept anywhere), so every token of an input
// is computed, and what an embedding computes is dropped once it is pooled.
struct EmbeddingRequest {
  std::vector<std::vector<int32_t>> inputs;
  Pooling pooling = Pooling::kDefault;  // kDefault: EngineOptions::pooling
  // Divide each vector by its Euclidean (L2) norm, as llama.cpp's llama-embedding and
  // llama-server do by default; false: the pooled hidden state as it is.
  bool normalize = true;
  // The length of the vectors asked for: 0 or the model's n_embd. Any other value (OpenAI's
  // `dimensions`, a truncation only models trained for it support) is refused with
  // InvalidArgument naming it: promptcache does not shorten embeddings.
  int dimensions = 0;
};

// What an embedding request gives back.
struct EmbeddingResult {
  // Not OK: the request failed or was refused, with the reason. A request cancelled (its
  // handle's Cancel) has an OK status, `cancelled` set and no embeddings.
  Status status;
  bool cancelled = false;
  Pooling pooling = Pooling::kMean;  // the pooling used (never kDefault)
  bool normalized = true;
  int dimensions = 0;  // floats per vector: the model's n_embd
  // One entry per input, in order: pooled, one vector of `dimensions` floats; with kNone, the
  // input's tokens' vectors one after another (tokens × dimensions floats).
  std::vector<std::vector<float>> embeddings;
  int prompt_tokens = 0;  // every input's tokens, all computed (usage: prompt and total tokens)
  double queue_ms = 0;    // waiting for the engine to take it
  double compute_ms = 0;  // from then until the last vector was made
};

// A submitted embedding request: wait for it, or cancel it (as RequestHandle).
class EmbeddingHandle {
 public:
  virtual ~EmbeddingHandle() = default;
  virtual EmbeddingResult Wait() = 0;
  virtual bool WaitFor(double seconds) = 0;
  virtual void Cancel() = 0;
};

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
  virtual Status SaveCache() = 0;                        // write RAM entries to the disk tier
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
