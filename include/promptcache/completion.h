// One completion request and what it gives back (Engine::Submit, SubmitPrompt, SubmitPml): the
// prompt and how to continue it (CompletionRequest), its streamed pieces with log-probabilities
// (TextPiece), the handle to wait for or cancel it (RequestHandle), and its result
// (CompletionResult): each choice's text and tokens, where the prompt's K/V came from
// (SourceRun) and how long each phase took.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "promptcache/sampling.h"
#include "promptcache/status.h"

namespace promptcache {

class Grammar;  // grammar/grammar.h; opaque to library users (CompletionRequest::grammar)

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
  // Control tokens the model writes are part of its text, spelled out (TokenBytes' `special`):
  // harmony's <|channel|>...<|message|> markers (gpt-oss), which say what each part of the
  // output is. End-of-generation tokens still end it unwritten. A grammar then also matches a
  // control token by its spelling.
  bool special_text = false;
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
  // The output the caller expects (OpenAI's Predicted Outputs: the file being edited, say), as
  // tokens: with EngineOptions::draft_max > 0, decoding checks its tokens as guesses, several per
  // forward pass, while the output follows it (and where it picks it up again after an edit).
  // Never changes the output, only how fast it comes where it matches.
  std::vector<int32_t> prediction;
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
  double queue_ms = 0;   // waiting for a free sequence slot (and for remote_ms)
  double prompt_ms = 0;  // lookup + prefill, up to the first token's logits
  // Of prompt_ms, the time spent waiting for prompt blocks or segments that another request was
  // computing (shared in flight, shared_tokens); the phases below exclude it.
  double wait_ms = 0;
  double ttft_ms = 0;  // submission to first token
  double generation_ms = 0;
  // Waiting for its prefix lookup in the remote tier (--cache-redis), read off the engine thread
  // while the request waits in the queue: part of queue_ms.
  double remote_ms = 0;
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
  // Speculative decoding (EngineOptions::draft_max), over all choices: guessed tokens fed to the
  // model, and of them those the sampling confirmed (each saved a forward pass of its own).
  int draft_tokens = 0, accepted_draft_tokens = 0;
  // With prompt_logprobs: entry i is prompt token i + 1's.
  std::vector<TokenLogprob> prompt_logprobs;
  // Tokens generated over all choices.
  int completion_tokens() const {
    if (choices.empty()) return static_cast<int>(tokens.size());
    int n = 0;
    for (const CompletionChoice& c : choices) n += static_cast<int>(c.tokens.size());
    return n;
  }
  // Prompt tokens this request computed into its pinned prefixes: what the pins cover beyond
  // what was read from the cache (Anthropic's cache_creation_input_tokens, OpenAI's
  // cache_write_tokens). The unpinned blocks every request leaves in the prefix cache are not
  // counted: nothing keeps them.
  int cache_write_tokens() const {
    return std::max(0, std::min(pinned_tokens, prompt_tokens) - cached_tokens);
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

}  // namespace promptcache
