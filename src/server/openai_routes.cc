// POST /v1/completions and /v1/chat/completions: a request checked, planned (plain or modular),
// queued on the engine, and answered as one JSON body or as Server-Sent Events.
#include <algorithm>

#include "model/model.h"
#include "sampling/dry.h"
#include "server/cache_response.h"
#include "server/evaluate_api.h"
#include "server/json_fields.h"
#include "server/openai_response.h"
#include "server/routes.h"
#include "server/schema_api.h"
#include "server/tool_calls.h"
#include "server/tool_request.h"

namespace promptcache {
namespace {

using ojson = nlohmann::ordered_json;

// Queues a prepared request: Engine::Submit for a token prompt, SubmitPrompt for a modular one.
using Submitter = std::function<Result<std::shared_ptr<RequestHandle>>(CompletionRequest request)>;
using Logits = std::vector<std::vector<float>>;
// "evaluate": the fidelity a response reports, from its result and the logits of its tokens.
using Evaluator = std::function<ojson(const CompletionResult&, const Logits&)>;

int64_t UnixSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// `n` prompt tokens, generation continuing at position `end` (== n for a plain prompt; a modular
// prompt's positions have gaps). Sets *max_tokens to what the completion may have.
std::optional<ApiError> CheckLength(const ServerContext& server, const ApiRequest& r, int n,
                                    int end, int* max_tokens) {
  const ServerOptions& options = server.options();
  const int context = server.context();
  const std::string param = r.kind == ApiKind::kChat && !r.modular() ? "messages" : "prompt";
  if (options.max_prompt_tokens > 0 && n > options.max_prompt_tokens) {
    return ApiError::BadRequest(
        "the prompt has " + std::to_string(n) + " tokens, more than this server's limit of " +
            std::to_string(options.max_prompt_tokens) + " (--max-prompt-tokens)",
        param, "prompt_too_long");
  }
  // A modular prompt's length is where its text ends: the schema reserves the positions before.
  const std::string length = end == n ? "the prompt has " + std::to_string(n) + " tokens"
                                      : "the prompt ends at position " + std::to_string(end);
  if (end >= context) {
    return ApiError::BadRequest("this model's maximum context length is " +
                                    std::to_string(context) + " tokens, but " + length,
                                param, "context_length_exceeded");
  }
  if (r.max_tokens && end + *r.max_tokens > context) {
    return ApiError::BadRequest(
        "this model's maximum context length is " + std::to_string(context) + " tokens, but " +
            std::to_string(end + *r.max_tokens) + " were requested (" +
            (end == n ? std::to_string(n) + " in the prompt, "
                      : "the prompt ends at position " + std::to_string(end) + ", ") +
            std::to_string(*r.max_tokens) + " for the completion)",
        "max_tokens", "context_length_exceeded");
  }
  *max_tokens = r.max_tokens ? *r.max_tokens : context - end;
  if (!r.max_tokens && options.max_tokens_limit > 0) {
    *max_tokens = std::min(*max_tokens, options.max_tokens_limit);
  }
  return std::nullopt;
}

// Plans a modular request (schema + modules, or a PML prompt) and checks its length; false after
// failing the call. *planned: the planned prompt.
bool PrepareModular(Call& call, const ApiRequest& r, CompletionRequest* creq, Submitter* submit,
                    PmlPrompt* planned) {
  Engine& engine = call.engine();
  // Errors name the field the client wrote: the PML prompt, or the schema/modules fields.
  const std::string param = r.pml_xml ? "prompt" : "modules";
  if (!r.pml_xml) {
    if (Result<SchemaInfo> s = engine.GetSchema(r.schema); !s.ok()) {
      call.Fail(s.status(), "schema");
      return false;
    }
  }
  Result<PmlPrompt> prompt = ModularPrompt(r);
  if (!prompt.ok()) {
    call.Fail(prompt.status(), param);
    return false;
  }
  // Plans the prompt against its schema (every PML error comes back here, before queueing) and
  // gives its length. SubmitPrompt plans it again; planning is cheap next to serving.
  Result<ExpandedPrompt> expanded = engine.ExpandPrompt(*prompt);
  if (!expanded.ok()) {
    call.Fail(expanded.status(), param);
    return false;
  }
  const int n = static_cast<int>(expanded->tokens.size());
  if (std::optional<ApiError> err =
          CheckLength(call.server, r, n, expanded->end, &creq->max_tokens)) {
    call.Fail(*err);
    return false;
  }
  *planned = *prompt;
  *submit = [&engine, p = std::move(prompt).value()](CompletionRequest c) {
    return engine.SubmitPrompt(p, std::move(c));
  };
  return true;
}

// evaluate: what the response reports as its fidelity ("evaluate": true; null: nothing), given
// the result and the logits each generated token was sampled from.
// map: what the cache map needs ("cache_map": true), or null.
void Respond(Call& call, const ResponseMeta& meta, CompletionRequest creq, const Submitter& submit,
             const Evaluator& evaluate, std::shared_ptr<const CacheMapRequest> map) {
  creq.on_text = call.StopsWithServer();
  const std::string tenant = creq.tenant;
  auto logits = std::make_shared<std::vector<std::vector<float>>>();
  if (evaluate) {
    creq.on_logits = [logits](std::span<const float> l) {
      logits->emplace_back(l.begin(), l.end());
    };
  }
  Result<std::shared_ptr<RequestHandle>> handle = submit(std::move(creq));
  if (!handle.ok()) return call.Fail(handle.status());
  const CompletionResult result = call.Await(*handle);
  if (!result.status.ok()) return call.Fail(result.status);
  call.server.Observe(tenant, result);
  std::string body = CompletionBody(meta, result);
  if (map) {
    body = AddJsonField(body, "cache_map",
                        CacheMapJson(*map, result, call.engine().model().tokenizer()));
  }
  if (evaluate) body = AddJsonField(body, "fidelity", evaluate(result, *logits));
  call.Send(std::move(body));
}

// One streaming request's state, as WriteStream needs it.
struct Stream {
  ServerContext* server = nullptr;
  std::shared_ptr<TextChannel> channel;
  ResponseMeta meta;
  // Echo: each prompt's meta (its text and tokens); choice c is prompt c / n's. One for a single
  // prompt, one per prompt for a batch.
  std::vector<ResponseMeta> prompts;
  int n = 1;
  bool batch = false;  // its parts are counted (Observe) as they end, not here
  bool include_usage = false;
  bool started = false;
  std::shared_ptr<const CacheMapRequest> map;  // "cache_map": true
  std::vector<size_t> offsets;  // each choice's text so far, in bytes (echo included)
  // With tools: each choice's text so far and how much of it went out as content (the rest may
  // be a tool call: held back until the end).
  std::vector<ToolTextStream> tool_texts;
  // A model that thinks: each choice's text split into reasoning and answer as it comes.
  std::vector<ReasoningSplitter> splitters;
  std::string tenant;  // what its result is counted for
};

// Tools: appends a piece to a choice's text and gives what may go out as content now.
std::string ReleaseContent(Stream& s, int choice, const std::string& piece) {
  return s.tool_texts[choice].Release(s.meta.tool_format, piece);
}

// Tools, at the end: each choice's held-back content, or its calls as deltas.
std::string EndToolCalls(Stream& s, const CompletionResult& result) {
  std::string out;
  for (int c = 0; c < static_cast<int>(s.tool_texts.size()); ++c) {
    // The answer: all of the text, or (a model that thinks) what the splitter gave as content.
    const std::string& text = s.meta.reasoning.parsed() ? s.tool_texts[c].text
                              : result.choices.empty()  ? result.text
                                                        : result.choices[c].text;
    const ParsedOutput parsed = ParseToolCalls(s.meta.tool_format, text);
    // Content not sent yet: what precedes the calls, or all the text when there are none.
    const std::string rest =
        s.tool_texts[c].Rest(s.meta.tool_format, text, parsed.content, !parsed.calls.empty());
    if (!rest.empty()) out += StreamTextChunk(s.meta, rest, s.include_usage, c);
    out += StreamToolCallChunks(s.meta, parsed.calls, s.include_usage, c);
  }
  return out;
}

// A model that thinks, at the end: each choice's held-back reasoning and content (a partial tag,
// whitespace), the content through the tool-call hold when tools are offered.
std::string EndReasoning(Stream& s) {
  std::string out;
  for (int c = 0; c < static_cast<int>(s.splitters.size()); ++c) {
    ReasoningSplitter::Delta d = s.splitters[c].Finish();
    if (!d.reasoning.empty()) out += StreamReasoningChunk(s.meta, d.reasoning, s.include_usage, c);
    std::string text = std::move(d.content);
    if (s.meta.tool_format != ToolCallFormat::kNone) text = ReleaseContent(s, c, text);
    if (!text.empty()) out += StreamTextChunk(s.meta, text, s.include_usage, c);
  }
  return out;
}

// One call writes whatever is ready: the role chunk, queued text, a keep-alive comment, or the
// end of the stream. False (a failed write) makes cpp-httplib drop the connection.
bool WriteStream(Stream& s, httplib::DataSink& sink) {
  std::string out;
  // Echo: the prompt leads each choice; with log-probabilities it waits for the engine's piece
  // of choice -1 carrying them.
  ResponseMeta plain = s.meta;
  plain.echo = false;
  if (!s.started) {
    s.started = true;
    for (int i = 0; i < static_cast<int>(s.offsets.size()); ++i) {
      if (s.meta.kind == ApiKind::kChat) out += StreamRoleChunk(s.meta, s.include_usage, i);
      if (s.meta.echo && !s.meta.logprobs) {
        out += StreamTextChunk(plain, s.prompts[i / s.n].prompt_text, s.include_usage, i);
      }
    }
  }
  auto on_text = [&](const std::vector<TextPiece>& pieces) {
    for (const TextPiece& piece : pieces) {
      if (piece.choice < 0) {  // prompt -1 - choice's echo (BatchPiece)
        const int p = -1 - piece.choice;
        if (p >= static_cast<int>(s.prompts.size())) continue;
        const ResponseMeta& pm = s.prompts[p];
        for (int i = p * s.n; i < (p + 1) * s.n; ++i) {
          ojson j = ojson::parse(StreamTextChunk(plain, pm.prompt_text, s.include_usage, i)
                                     .substr(6));  // after "data: "
          j["choices"][0]["logprobs"] = LogprobsJson(pm, {}, 0, &piece.logprobs);
          out += SseEvent(Dump(j));
        }
        continue;
      }
      if (piece.choice < 0 || piece.choice >= static_cast<int>(s.offsets.size())) continue;
      std::string text = piece.text;
      if (s.meta.reasoning.parsed()) {
        ReasoningSplitter::Delta d = s.splitters[piece.choice].Add(piece.text);
        if (!d.reasoning.empty()) {
          out += StreamReasoningChunk(s.meta, d.reasoning, s.include_usage, piece.choice);
        }
        text = std::move(d.content);
        if (text.empty() && !(s.meta.logprobs && !piece.logprobs.empty())) continue;
      }
      if (s.meta.tool_format != ToolCallFormat::kNone) {
        text = ReleaseContent(s, piece.choice, text);
        if (text.empty() && !(s.meta.logprobs && !piece.logprobs.empty())) continue;
      }
      out += StreamTextChunk(s.meta, text, s.include_usage, piece.choice,
                             s.meta.logprobs ? &piece.logprobs : nullptr, s.offsets[piece.choice]);
      for (const TokenLogprob& lp : piece.logprobs) {
        if (s.meta.token_text) s.offsets[piece.choice] += s.meta.token_text(lp.token).size();
      }
    }
  };
  auto on_end = [&](const CompletionResult& result) {
    if (!result.status.ok()) {
      out += StreamErrorEvent(FromStatus(result.status));
    } else {
      if (!s.batch) s.server->Observe(s.tenant, result);
      if (s.meta.reasoning.parsed()) out += EndReasoning(s);
      if (s.meta.tool_format != ToolCallFormat::kNone) out += EndToolCalls(s, result);
      std::string finish = StreamFinishChunk(s.meta, result, s.include_usage);
      if (s.map) {
        finish =
            AddEventField(finish, "cache_map",
                          CacheMapJson(*s.map, result, s.server->engine().model().tokenizer()));
      }
      out += finish;
      if (s.include_usage) out += StreamUsageChunk(s.meta, result);
    }
    out += SseDone();
  };
  return PollAndWrite<TextPiece>(*s.channel, out, ": keep-alive\n\n", sink, on_text, on_end);
}

// A stream of `prompts.size()` prompts with n choices each (choice p * n + i).
std::shared_ptr<Stream> NewStream(Call& call, std::vector<ResponseMeta> prompts, int n,
                                  bool include_usage) {
  auto s = std::make_shared<Stream>();
  s->server = &call.server;
  s->channel = std::make_shared<TextChannel>();
  s->meta = prompts.front();
  s->tenant = call.tenant();
  s->include_usage = include_usage;
  s->n = n;
  s->batch = prompts.size() > 1;
  for (const ResponseMeta& m : prompts) {
    s->offsets.insert(s->offsets.end(), n, m.echo ? m.prompt_text.size() : 0);
  }
  s->tool_texts.assign(s->offsets.size(), ToolTextStream());
  if (s->meta.reasoning.parsed()) {
    s->splitters.assign(s->offsets.size(), ReasoningSplitter(s->meta.reasoning));
  }
  s->prompts = std::move(prompts);
  return s;
}

// Prompt p's pieces onto a stream: choice i is p * n + i, the prompt's echo (choice -1) -1 - p.
std::function<bool(const TextPiece&)> BatchPiece(std::shared_ptr<TextChannel> channel, int p,
                                                 int n) {
  return [ch = std::move(channel), p, n](const TextPiece& piece) {
    TextPiece out = piece;
    out.choice = piece.choice < 0 ? -1 - p : p * n + piece.choice;
    return ch->Push(std::move(out));
  };
}

void StartStream(Call& call, const ResponseMeta& meta, bool include_usage, CompletionRequest creq,
                 const Submitter& submit, std::shared_ptr<const CacheMapRequest> map) {
  std::shared_ptr<Stream> s = NewStream(call, {meta}, creq.n, include_usage);
  s->tenant = creq.tenant;
  s->map = std::move(map);
  creq.on_piece = BatchPiece(s->channel, 0, creq.n);
  Result<std::shared_ptr<RequestHandle>> handle = submit(std::move(creq));
  if (!handle.ok()) return call.Fail(handle.status());
  call.StreamEvents(*handle, s->channel,
                    [s](httplib::DataSink& sink) { return WriteStream(*s, sink); });
}

// What a response says of itself: id, model, log-probabilities' token text, echo.
ResponseMeta CompletionMeta(Call& call, const ApiRequest& r, ApiKind kind, std::string id,
                            const CompletionRequest& creq) {
  ServerContext& server = call.server;
  const Tokenizer& tok = call.engine().model().tokenizer();
  ResponseMeta meta;
  meta.kind = kind;
  meta.id = std::move(id);
  meta.created = UnixSeconds();
  meta.model = r.model.empty() ? server.model_id() : r.model;
  meta.system_fingerprint = server.fingerprint();
  if (r.logprobs >= 0) {
    meta.logprobs = true;
    meta.token_text = [&tok, special = creq.special_text](int32_t t) {
      return tok.TokenBytes(t, special);
    };
  }
  if (r.echo) {
    meta.echo = true;
    meta.prompt_tokens = creq.prompt;
    meta.prompt_text = tok.Decode(creq.prompt);
  }
  return meta;
}

// Completions with a batch of prompts: each prompt is its own request, all queued before the
// first is awaited; the choices of prompt p are indexed p * n + i, as OpenAI indexes them, and
// the usage is summed. Queues every prompt (streamed onto `channel` when not null) and fills
// *handles and each prompt's *metas; false after cancelling those queued and failing the call.
bool SubmitBatch(Call& call, const ApiRequest& r, const std::shared_ptr<TextChannel>& channel,
                 std::vector<std::shared_ptr<RequestHandle>>* handles,
                 std::vector<ResponseMeta>* metas) {
  const std::string id = "cmpl-" + RandomHex(24);
  auto cancel = [handles] {
    for (auto& h : *handles) h->Cancel();
    return false;
  };
  for (size_t p = 0; p < r.batch.size(); ++p) {
    ApiRequest one = r;
    one.batch.clear();
    one.prompt_text = r.batch[p].text;
    one.prompt_tokens = r.batch[p].tokens;
    one.prompt_is_tokens = r.batch[p].is_tokens;
    CompletionRequest creq;
    if (!PrepareChat(call, one, &creq, "prompt[" + std::to_string(p) + "]")) return cancel();
    ResponseMeta meta = CompletionMeta(call, r, ApiKind::kCompletion, id, creq);
    creq.on_text = call.StopsWithServer();
    if (channel) creq.on_piece = BatchPiece(channel, static_cast<int>(p), r.n);
    Result<std::shared_ptr<RequestHandle>> handle = call.engine().Submit(std::move(creq));
    if (!handle.ok()) {
      cancel();
      call.Fail(handle.status());
      return false;
    }
    handles->push_back(*handle);
    metas->push_back(std::move(meta));
  }
  return true;
}

void RespondBatch(Call& call, const ApiRequest& r) {
  ServerContext& server = call.server;
  std::vector<std::shared_ptr<RequestHandle>> handles;
  std::vector<ResponseMeta> metas;
  if (!SubmitBatch(call, r, nullptr, &handles, &metas)) return;
  auto cancel = [&handles] {
    for (auto& h : handles) h->Cancel();
  };
  ojson body;
  for (size_t p = 0; p < handles.size(); ++p) {
    const CompletionResult result = call.Await(handles[p]);
    if (!result.status.ok()) {
      cancel();
      return call.Fail(result.status);
    }
    server.Observe(call.tenant(), result);
    ojson one = ojson::parse(CompletionBody(metas[p], result));
    for (ojson& c : one["choices"]) c["index"] = c["index"].get<int>() + int(p) * r.n;
    if (p == 0) {
      body = std::move(one);
      body.erase("timings");  // per request; a batch is several
      continue;
    }
    for (ojson& c : one["choices"]) body["choices"].push_back(std::move(c));
    ojson& u = body["usage"];
    for (const char* k : {"prompt_tokens", "completion_tokens", "total_tokens"}) {
      u[k] = u[k].get<int64_t>() + one["usage"][k].get<int64_t>();
    }
    u["prompt_tokens_details"]["cached_tokens"] =
        u["prompt_tokens_details"]["cached_tokens"].get<int64_t>() +
        one["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>();
  }
  call.SendJson(body);
}

// A streamed batch's results as one: the choices in order (prompt p's at p * n + i), token
// counts summed, each time the longest; the first failure when one failed. Each part that
// succeeded is counted for the tenant here, as RespondBatch counts them.
CompletionResult MergeBatch(ServerContext* server, const std::string& tenant,
                            std::vector<CompletionResult> parts) {
  CompletionResult all;
  for (CompletionResult& r : parts) {
    if (!r.status.ok()) return std::move(r);
  }
  for (CompletionResult& r : parts) {
    server->Observe(tenant, r);
    if (r.choices.empty()) r.choices.push_back({r.tokens, r.text, r.finish_reason, {}});
    for (CompletionChoice& c : r.choices) all.choices.push_back(std::move(c));
    all.prompt_tokens += r.prompt_tokens;
    all.cached_tokens += r.cached_tokens;
    all.computed_tokens += r.computed_tokens;
    all.shared_tokens += r.shared_tokens;
    all.pinned_tokens += r.pinned_tokens;
    all.pin_limited = all.pin_limited || r.pin_limited;
    all.queue_ms = std::max(all.queue_ms, r.queue_ms);
    all.remote_ms = std::max(all.remote_ms, r.remote_ms);
    all.prompt_ms = std::max(all.prompt_ms, r.prompt_ms);
    all.ttft_ms = std::max(all.ttft_ms, r.ttft_ms);
    all.generation_ms = std::max(all.generation_ms, r.generation_ms);
    all.grammar_ms += r.grammar_ms;
  }
  if (!all.choices.empty()) {
    all.tokens = all.choices[0].tokens;
    all.text = all.choices[0].text;
    all.finish_reason = all.choices[0].finish_reason;
  }
  return all;
}

// A streamed batch: the single-prompt stream (WriteStream) over P * n choices, fed by every
// prompt's request; a client that goes away cancels them all.
void StreamBatch(Call& call, const ApiRequest& r) {
  auto channel = std::make_shared<TextChannel>();
  std::vector<std::shared_ptr<RequestHandle>> handles;
  std::vector<ResponseMeta> metas;
  if (!SubmitBatch(call, r, channel, &handles, &metas)) return;
  std::shared_ptr<Stream> s = NewStream(call, std::move(metas), r.n, r.include_usage);
  s->channel = channel;
  call.StreamEvents(
      std::move(handles), channel, [s](httplib::DataSink& sink) { return WriteStream(*s, sink); },
      [server = &call.server, tenant = call.tenant()](std::vector<CompletionResult> parts) {
        return MergeBatch(server, tenant, std::move(parts));
      });
}

// The request parsed and checked against the server (model name, tool choice, segment fields,
// evaluate on a batch); `segments`: whether its prompt is cut into segments.
std::optional<ApiError> ParseCompletionCall(Call& call, ApiKind kind, ApiRequest* r,
                                            bool* segments) {
  ServerContext& server = call.server;
  std::optional<ApiError> err = kind == ApiKind::kChat
                                    ? ParseChatRequest(call.req.body, server.limits(), r)
                                    : ParseCompletionRequest(call.req.body, server.limits(), r);
  if (!err && !r->model.empty()) err = server.CheckModel(r->model);
  if (!err) err = CheckLogitBias(r->sampling, call.engine().model().tokenizer().vocab_size());
  if (!err && kind == ApiKind::kChat) err = ApplyToolChoice(server.encoder().tool_format(), r);
  if (!err && !r->reasoning_effort.empty() && !server.encoder().reads_reasoning_effort()) {
    err = ApiError::BadRequest(
        "'reasoning_effort' has no meaning for this model: its chat template does not read it",
        "reasoning_effort", "unsupported");
  }
  *segments = !r->modular() && server.Segments(r->cache_segments);
  if (!err) err = CheckSegmentFields(*r, *segments);
  if (!err && r->evaluate && r->batch.size() > 1) {
    err = ApiError::BadRequest("'evaluate' applies to a single prompt, not a batch", "evaluate");
  }
  return err;
}

// The engine request's fields that do not depend on the prompt.
void SetRequestFields(Call& call, const ApiRequest& r, CompletionRequest* creq) {
  creq->sampling = r.sampling;
  creq->stop = r.stop;
  creq->ignore_eos = r.ignore_eos;
  // A harmony model's chat answer is read out of its channel markers (server/harmony.h).
  creq->special_text = r.kind == ApiKind::kChat && call.server.encoder().harmony();
  creq->cache_namespace = call.Namespace(r.cache_salt);
  creq->tenant = call.tenant();
  creq->n = r.n;
  creq->logprobs = r.logprobs;
  creq->prompt_logprobs = r.echo && r.logprobs >= 0;
  creq->grammar = r.grammar;
  if (r.sampling.dry_multiplier > 0) {
    // The breakers' token sequences in this model's vocabulary (a pass over it per breaker).
    creq->sampling.dry_breakers =
        DryBreakerSequences(call.engine().model().tokenizer(), r.dry_breakers);
  }
  if (!r.prediction.empty()) {
    // Tokenized as the answer is: a continuation (no SentencePiece dummy-prefix space).
    creq->prediction = call.engine().model().tokenizer().EncodeContinuation(r.prediction);
    // Guesses only: what the context could never hold is of no use.
    const size_t most = call.server.PromptLimit();
    if (creq->prediction.size() > most) creq->prediction.resize(most);
  }
}

// A plain prompt's tokens: built (cut into segments with `segments`) and checked for length;
// false after failing the call (`param` names the prompt's field).
bool BuildPlainPrompt(Call& call, const ApiRequest& r, bool segments, const std::string& param,
                      CompletionRequest* creq, bool* opens_thinking = nullptr) {
  ServerContext& server = call.server;
  Result<BuiltPrompt> prompt = server.encoder().Build(r, server.PromptLimit(), segments);
  if (!prompt.ok()) {
    call.Fail(server.PromptError(prompt.status(), param));
    return false;
  }
  const int n = static_cast<int>(prompt->tokens.size());
  if (std::optional<ApiError> err = CheckLength(server, r, n, n, &creq->max_tokens)) {
    call.Fail(*err);
    return false;
  }
  if (opens_thinking != nullptr) *opens_thinking = prompt->opens_thinking;
  creq->prompt = std::move(prompt->tokens);
  creq->pin_tokens = prompt->pin_tokens;
  // OpenAI's explicit breakpoints: pins that last prompt_cache_options.ttl.
  for (int tokens : prompt->breakpoint_tokens) {
    creq->timed_pins.push_back(
        {tokens, kPromptCacheTtlSeconds * server.options().cache_control_ttl_scale});
  }
  creq->segments = std::move(prompt->segments);
  if (segments && r.recompute >= 0) creq->segment_recompute = r.recompute;
  return true;
}

// With "evaluate": the fidelity of the served logits against the full recompute (of the modular
// prompt `modular`, which outlives the response, or of the segmented token prompt).
Evaluator CompletionEvaluator(Engine& engine, const ApiRequest& r, const PmlPrompt& modular,
                              const CompletionRequest& creq) {
  if (!r.evaluate) return nullptr;
  if (r.modular()) {
    return [&engine, &modular](const CompletionResult& result, const Logits& logits) {
      return Fidelity(engine, modular, result, logits);
    };
  }
  return [&engine, prompt = creq.prompt](const CompletionResult& result, const Logits& logits) {
    return SegmentFidelity(engine, prompt, result, logits);
  };
}

// A chat response's reasoning split: on when the model thinks (its template) and the request did
// not ask for reasoning_format "none"; `opens_thinking`: its prompt opened the thinking.
void SetReasoning(Call& call, const ApiRequest& r, bool opens_thinking, ResponseMeta* meta) {
  const PromptEncoder& encoder = call.server.encoder();
  meta->reasoning.split = r.reasoning_split && encoder.thinking();
  meta->reasoning.starts_open = opens_thinking;
  meta->reasoning.harmony = encoder.harmony();
  const Tokenizer& tok = call.engine().model().tokenizer();
  // Harmony's markers are control tokens in the text (CompletionRequest::special_text).
  const bool special = encoder.harmony();
  meta->token_bytes = [&tok, special](int32_t t) { return tok.TokenBytes(t, special); };
}

void HandleCompletion(Call& call, ApiKind kind) {
  Engine& engine = call.engine();
  ApiRequest r;
  bool segments = false;
  if (std::optional<ApiError> err = ParseCompletionCall(call, kind, &r, &segments)) {
    return call.Fail(*err);
  }
  if (r.batch.size() > 1) return r.stream ? StreamBatch(call, r) : RespondBatch(call, r);

  CompletionRequest creq;
  SetRequestFields(call, r, &creq);
  std::shared_ptr<CacheMapRequest> map;
  if (r.cache_map) {
    map = std::make_shared<CacheMapRequest>();
    map->block_size = engine.options().block_size;
  }
  Submitter submit;
  PmlPrompt modular;
  bool opens_thinking = false;
  if (r.modular()) {
    if (!PrepareModular(call, r, &creq, &submit, &modular)) return;
    if (map) {
      // Planned once more for its tokens and positions: cheap next to serving.
      Result<ExpandedPrompt> x = engine.ExpandPrompt(modular);
      if (x.ok()) {
        map->prompt = std::move(x->tokens);
        map->positions = std::move(x->positions);
      }
    }
  } else {
    const std::string param = kind == ApiKind::kChat ? "messages" : "prompt";
    if (!BuildPlainPrompt(call, r, segments, param, &creq, &opens_thinking)) return;
    if (map) map->prompt = creq.prompt;
    submit = [&engine](CompletionRequest c) { return engine.Submit(std::move(c)); };
  }
  ResponseMeta meta = CompletionMeta(
      call, r, kind, (kind == ApiKind::kChat ? "chatcmpl-" : "cmpl-") + RandomHex(24), creq);
  if (r.tools_offered()) meta.tool_format = call.server.encoder().tool_format();
  if (kind == ApiKind::kChat) SetReasoning(call, r, opens_thinking, &meta);
  if (r.stream) return StartStream(call, meta, r.include_usage, std::move(creq), submit, map);
  const Evaluator evaluate = CompletionEvaluator(engine, r, modular, creq);
  Respond(call, meta, std::move(creq), submit, evaluate, map);
}

}  // namespace

bool PrepareChat(Call& call, const ApiRequest& r, CompletionRequest* creq, const std::string& param,
                 bool* opens_thinking) {
  SetRequestFields(call, r, creq);
  const bool segments = !r.modular() && call.server.Segments(r.cache_segments);
  if (std::optional<ApiError> err = CheckSegmentFields(r, segments)) {
    call.Fail(*err);
    return false;
  }
  return BuildPlainPrompt(call, r, segments, param, creq, opens_thinking);
}

void HandleCompletions(Call& call) { HandleCompletion(call, ApiKind::kCompletion); }
void HandleChatCompletions(Call& call) { HandleCompletion(call, ApiKind::kChat); }

}  // namespace promptcache
