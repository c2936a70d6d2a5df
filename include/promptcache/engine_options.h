// How an Engine is made (Engine::Create): which model, how many threads and sequences, the KV
// element type and memory bounds, and the cache tiers (RAM, disk, remote), pins, modular prompts'
// and segments' reuse, fidelity sampling and the embeddings' default pooling. Every field has a
// default; a library user sets model_path and what differs.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "promptcache/embedding.h"
#include "promptcache/pml.h"
#include "promptcache/types.h"

namespace promptcache {

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
  // Lookups read at once: the Redis client's read connections, and the engine's fetcher threads
  // (engine/remote_fetch.h); 1 reads one request's after another's. 1..32.
  int cache_redis_readers = 4;
  int cache_redis_ttl_seconds = 86400;  // expiry of written blocks; pinned prefixes: none
  size_t cache_redis_queue_bytes = size_t(256) << 20;
  // Embeddings' pooling when a request does not say (EmbeddingRequest::pooling). kDefault: what
  // the model file says ({arch}.pooling_type: embedding models carry it), else kMean. (llama.cpp
  // pools nothing for a file without the key; an OpenAI embeddings client wants one vector.)
  Pooling pooling = Pooling::kDefault;
  // Speculative decoding (docs/server.md "Speculative decoding"): each decode step also feeds up
  // to draft_max guessed tokens after the one just sampled, read off the request's prediction
  // (CompletionRequest::prediction) or off an earlier occurrence, in the prompt or the output, of
  // the sequence's last draft_ngram_min..4 tokens (prompt lookup). A guess is kept only where the
  // request's own sampling picks that very token from those logits, which batch-invariant logits
  // make the ones decoding one token at a time computes: the output is the same with or without,
  // only faster where the text repeats (a quote, an edit, code). 0: off.
  int draft_max = 8;
  int draft_ngram_min = 2;
};

}  // namespace promptcache
