// POST /v1/completions and /v1/chat/completions: a request checked, planned (plain or modular),
// queued on the engine, and answered as one JSON body or as Server-Sent Events.
#include "server/http_server_impl.h"

namespace promptcache {

using server_internal::Dump;
using server_internal::FromStatus;
using server_internal::kStreamPoll;
using server_internal::ojson;
using server_internal::RandomHex;
using server_internal::UnixSeconds;

std::optional<ApiError> HttpServer::Impl::CheckLength(const ApiRequest& r, int n, int end,
                                                      int* max_tokens) const {
  const std::string param = r.kind == ApiKind::kChat && !r.modular() ? "messages" : "prompt";
  if (options_.max_prompt_tokens > 0 && n > options_.max_prompt_tokens) {
    return ApiError::BadRequest(
        "the prompt has " + std::to_string(n) + " tokens, more than this server's limit of " +
            std::to_string(options_.max_prompt_tokens) + " (--max-prompt-tokens)",
        param, "prompt_too_long");
  }
  // A modular prompt's length is where its text ends: the schema reserves the positions before.
  const std::string length = end == n ? "the prompt has " + std::to_string(n) + " tokens"
                                      : "the prompt ends at position " + std::to_string(end);
  if (end >= context_) {
    return ApiError::BadRequest("this model's maximum context length is " +
                                    std::to_string(context_) + " tokens, but " + length,
                                param, "context_length_exceeded");
  }
  if (r.max_tokens && end + *r.max_tokens > context_) {
    return ApiError::BadRequest(
        "this model's maximum context length is " + std::to_string(context_) + " tokens, but " +
            std::to_string(end + *r.max_tokens) + " were requested (" +
            (end == n ? std::to_string(n) + " in the prompt, "
                      : "the prompt ends at position " + std::to_string(end) + ", ") +
            std::to_string(*r.max_tokens) + " for the completion)",
        "max_tokens", "context_length_exceeded");
  }
  *max_tokens = r.max_tokens ? *r.max_tokens : context_ - end;
  if (!r.max_tokens && options_.max_tokens_limit > 0) {
    *max_tokens = std::min(*max_tokens, options_.max_tokens_limit);
  }
  return std::nullopt;
}

size_t HttpServer::Impl::PromptLimit() const {
  size_t limit = size_t(std::max(0, context_ - 1));
  if (options_.max_prompt_tokens > 0) limit = std::min(limit, size_t(options_.max_prompt_tokens));
  return limit;
}

ApiError HttpServer::Impl::PromptTooLong(const Status& st, const std::string& param) const {
  if (options_.max_prompt_tokens > 0 && options_.max_prompt_tokens < context_) {
    return ApiError::BadRequest(st.message() + ", more than this server's limit of " +
                                    std::to_string(options_.max_prompt_tokens) +
                                    " (--max-prompt-tokens)",
                                param, "prompt_too_long");
  }
  return ApiError::BadRequest("this model's maximum context length is " + std::to_string(context_) +
                                  " tokens, but " + st.message(),
                              param, "context_length_exceeded");
}

void HttpServer::Impl::HandleCompletion(const httplib::Request& req, httplib::Response& res,
                                        ApiKind kind) {
  ApiRequest r;
  std::optional<ApiError> err = kind == ApiKind::kChat
                                    ? ParseChatRequest(req.body, limits_, &r)
                                    : ParseCompletionRequest(req.body, limits_, &r);
  if (!err) err = CheckModel(r.model);
  if (!err && kind == ApiKind::kChat) err = ApplyToolChoice(encoder_.tool_format(), &r);
  if (err) return SendError(res, *err);

  CompletionRequest creq;
  std::shared_ptr<CacheMapRequest> map;
  if (r.cache_map) {
    map = std::make_shared<CacheMapRequest>();
    map->block_size = engine_->options().block_size;
  }
  creq.sampling = r.sampling;
  creq.stop = r.stop;
  creq.ignore_eos = r.ignore_eos;
  creq.cache_namespace = Namespace(req, r.cache_salt);
  creq.tenant = Tenant(req).value_or("");
  creq.n = r.n;
  creq.logprobs = r.logprobs;
  creq.prompt_logprobs = r.echo && r.logprobs >= 0;
  creq.grammar = r.grammar;
  Submitter submit;
  PmlPrompt modular;
  if (r.modular()) {
    if (!PrepareModular(r, res, &creq, &submit, &modular)) return;
    if (map) {
      // Planned once more for its tokens and positions: cheap next to serving.
      Result<ExpandedPrompt> x = engine_->ExpandPrompt(modular);
      if (x.ok()) {
        map->prompt = std::move(x->tokens);
        map->positions = std::move(x->positions);
      }
    }
  } else {
    Result<BuiltPrompt> prompt = encoder_.Build(r, PromptLimit());
    if (!prompt.ok()) {
      const std::string param = kind == ApiKind::kChat ? "messages" : "prompt";
      if (prompt.status().code() == StatusCode::kOutOfRange) {
        return SendError(res, PromptTooLong(prompt.status(), param));
      }
      return SendError(res, FromStatus(prompt.status(), param));
    }
    const int n = static_cast<int>(prompt->tokens.size());
    if ((err = CheckLength(r, n, n, &creq.max_tokens))) return SendError(res, *err);
    creq.prompt = std::move(prompt->tokens);
    creq.pin_tokens = prompt->pin_tokens;
    if (map) map->prompt = creq.prompt;
    submit = [this](CompletionRequest c) { return engine_->Submit(std::move(c)); };
  }

  ResponseMeta meta;
  meta.kind = kind;
  meta.id = (kind == ApiKind::kChat ? "chatcmpl-" : "cmpl-") + RandomHex(24);
  meta.created = UnixSeconds();
  meta.model = r.model;
  meta.system_fingerprint = fingerprint_;
  if (r.tools_offered()) meta.tool_format = encoder_.tool_format();
  if (r.logprobs >= 0) {
    meta.logprobs = true;
    const Tokenizer& tok = engine_->model().tokenizer();
    meta.token_text = [&tok](int32_t id) { return tok.TokenBytes(id); };
  }
  if (r.echo) {
    meta.echo = true;
    meta.prompt_tokens = creq.prompt;
    meta.prompt_text = engine_->model().tokenizer().Decode(creq.prompt);
  }
  if (r.stream) return StartStream(res, meta, r.include_usage, std::move(creq), submit, map);
  Respond(res, meta, std::move(creq), submit, r.evaluate ? &modular : nullptr, map);
}

bool HttpServer::Impl::PrepareModular(const ApiRequest& r, httplib::Response& res,
                                      CompletionRequest* creq, Submitter* submit,
                                      PmlPrompt* planned) {
  // Errors name the field the client wrote: the PML prompt, or the schema/modules fields.
  const std::string param = r.pml_xml ? "prompt" : "modules";
  if (!r.pml_xml) {
    if (Result<SchemaInfo> s = engine_->GetSchema(r.schema); !s.ok()) {
      SendError(res, FromStatus(s.status(), "schema"));
      return false;
    }
  }
  Result<PmlPrompt> prompt = ModularPrompt(r);
  if (!prompt.ok()) {
    SendError(res, FromStatus(prompt.status(), param));
    return false;
  }
  // Plans the prompt against its schema (every PML error comes back here, before queueing) and
  // gives its length. SubmitPrompt plans it again; planning is cheap next to serving.
  Result<ExpandedPrompt> expanded = engine_->ExpandPrompt(*prompt);
  if (!expanded.ok()) {
    SendError(res, FromStatus(expanded.status(), param));
    return false;
  }
  const int n = static_cast<int>(expanded->tokens.size());
  if (std::optional<ApiError> err = CheckLength(r, n, expanded->end, &creq->max_tokens)) {
    SendError(res, *err);
    return false;
  }
  *planned = *prompt;
  *submit = [this, p = std::move(prompt).value()](CompletionRequest c) {
    return engine_->SubmitPrompt(p, std::move(c));
  };
  return true;
}

void HttpServer::Impl::Respond(httplib::Response& res, const ResponseMeta& meta,
                               CompletionRequest creq, const Submitter& submit,
                               const PmlPrompt* evaluate,
                               std::shared_ptr<const CacheMapRequest> map) {
  // No text callback is needed; this one only lets Stop() end the request early.
  creq.on_text = [this](const std::string&) { return !stopping_.load(); };
  const std::string tenant = creq.tenant;
  auto logits = std::make_shared<std::vector<std::vector<float>>>();
  if (evaluate != nullptr) {
    creq.on_logits = [logits](std::span<const float> l) {
      logits->emplace_back(l.begin(), l.end());
    };
  }
  Result<std::shared_ptr<RequestHandle>> handle = submit(std::move(creq));
  if (!handle.ok()) return SendError(res, FromStatus(handle.status()));
  const uint64_t id = Track(*handle);
  // A client that closes its connection is not waiting for the answer: its request stops.
  const CompletionResult result =
      WaitWatching(**handle, [this] { return stopping_.load() || RequestClientGone(); });
  Untrack(id);
  if (!result.status.ok()) return SendError(res, FromStatus(result.status));
  Observe(tenant, result);
  res.status = 200;
  std::string body = CompletionBody(meta, result);
  if (map) {
    body =
        AddJsonField(body, "cache_map", CacheMapJson(*map, result, engine_->model().tokenizer()));
  }
  if (evaluate != nullptr) {
    body = AddJsonField(body, "fidelity", Fidelity(*evaluate, result, *logits));
  }
  res.set_content(body, "application/json");
}

ojson HttpServer::Impl::Fidelity(const PmlPrompt& prompt, const CompletionResult& result,
                                 const std::vector<std::vector<float>>& logits) const {
  PmlPrompt at_schema = prompt;  // the baselines' tokens, at the schema's positions
  at_schema.positions = PmlPositions::kSchema;
  Result<ExpandedPrompt> x = engine_->ExpandPrompt(at_schema);
  if (!x.ok()) return ojson{{"error", x.status().message()}};
  RunnerOptions so;
  so.threads = engine_->options().threads;
  so.kv_type = engine_->options().kv_type;
  ojson out;
  for (const bool contiguous : {true, false}) {
    Result<FidelityReport> rep = CompareWithFullRecompute(
        engine_->model(), contiguous ? Contiguous(*x) : *x, result.tokens, logits, so);
    if (!rep.ok()) return ojson{{"error", rep.status().message()}};
    out[contiguous ? "contiguous" : "gapped"] = {{"steps", rep->steps},
                                                 {"top1_agreement", rep->top1_agreement},
                                                 {"first_token_kl", rep->first_token_kl},
                                                 {"greedy_equal", rep->greedy_equal}};
  }
  return out;
}

void HttpServer::Impl::StartStream(httplib::Response& res, const ResponseMeta& meta,
                                   bool include_usage, CompletionRequest creq,
                                   const Submitter& submit,
                                   std::shared_ptr<const CacheMapRequest> map) {
  auto s = std::make_shared<Stream>();
  s->meta = meta;
  s->tenant = creq.tenant;
  s->map = std::move(map);
  s->include_usage = include_usage;
  creq.on_piece = [ch = s->channel](const TextPiece& piece) { return ch->Push(piece); };
  s->offsets.assign(creq.n, meta.echo ? meta.prompt_text.size() : 0);
  s->texts.assign(creq.n, "");
  s->sent.assign(creq.n, 0);
  Result<std::shared_ptr<RequestHandle>> handle = submit(std::move(creq));
  if (!handle.ok()) return SendError(res, FromStatus(handle.status()));
  s->handle = *handle;
  s->track_id = Track(s->handle);
  s->waiter = std::thread([h = s->handle, ch = s->channel] { ch->Finish(h->Wait()); });

  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, s](size_t, httplib::DataSink& sink) {
        try {
          return WriteStream(*s, sink);
        } catch (const std::exception& e) {  // nothing may escape into cpp-httplib's writer
          PC_LOG_ERROR("server: stream failed: %s", e.what());
          return false;
        }
      },
      [this, s](bool success) {
        // The client went away (or the server is stopping): free the sequence at once.
        if (!success) {
          s->channel->Cancel();
          s->handle->Cancel();
        }
        Untrack(s->track_id);
      });
}

// One call writes whatever is ready: the role chunk, queued text, a keep-alive comment, or the
// end of the stream. False (a failed write) makes cpp-httplib drop the connection.
bool HttpServer::Impl::WriteStream(Stream& s, httplib::DataSink& sink) {
  std::string out;
  std::vector<TextPiece> pieces;
  CompletionResult result;
  const TextChannel::Event event = s.channel->Next(kStreamPoll, &pieces, &result);
  // Echo: the prompt leads each choice; with log-probabilities it waits for the engine's piece
  // of choice -1 carrying them.
  ResponseMeta plain = s.meta;
  plain.echo = false;
  if (!s.started) {
    s.started = true;
    for (int i = 0; i < static_cast<int>(s.offsets.size()); ++i) {
      if (s.meta.kind == ApiKind::kChat) out += StreamRoleChunk(s.meta, s.include_usage, i);
      if (s.meta.echo && !s.meta.logprobs) {
        out += StreamTextChunk(plain, s.meta.prompt_text, s.include_usage, i);
      }
    }
  }
  switch (event) {
    case TextChannel::Event::kText:
      for (const TextPiece& piece : pieces) {
        if (piece.choice == -1) {
          for (int i = 0; i < static_cast<int>(s.offsets.size()); ++i) {
            ojson j = ojson::parse(StreamTextChunk(plain, s.meta.prompt_text, s.include_usage, i)
                                       .substr(6));  // after "data: "
            j["choices"][0]["logprobs"] = LogprobsJson(s.meta, {}, 0, &piece.logprobs);
            out += SseEvent(Dump(j));
          }
          continue;
        }
        if (piece.choice < 0 || piece.choice >= static_cast<int>(s.offsets.size())) continue;
        std::string text = piece.text;
        if (s.meta.tool_format != ToolCallFormat::kNone) {
          text = ReleaseContent(s, piece.choice, piece.text);
          if (text.empty() && !(s.meta.logprobs && !piece.logprobs.empty())) continue;
        }
        out +=
            StreamTextChunk(s.meta, text, s.include_usage, piece.choice,
                            s.meta.logprobs ? &piece.logprobs : nullptr, s.offsets[piece.choice]);
        for (const TokenLogprob& lp : piece.logprobs) {
          if (s.meta.token_text) s.offsets[piece.choice] += s.meta.token_text(lp.token).size();
        }
      }
      break;
    case TextChannel::Event::kTimeout:
      if (out.empty()) out = ": keep-alive\n\n";
      break;
    case TextChannel::Event::kFinished:
      if (!result.status.ok()) {
        out += StreamErrorEvent(FromStatus(result.status));
      } else {
        Observe(s.tenant, result);
        if (s.meta.tool_format != ToolCallFormat::kNone) out += EndToolCalls(s, result);
        std::string finish = StreamFinishChunk(s.meta, result, s.include_usage);
        if (s.map) {
          finish = AddEventField(finish, "cache_map",
                                 CacheMapJson(*s.map, result, engine_->model().tokenizer()));
        }
        out += finish;
        if (s.include_usage) out += StreamUsageChunk(s.meta, result);
      }
      out += SseDone();
      if (!sink.write(out.data(), out.size())) return false;
      sink.done();
      return true;
  }
  // Text held back (a tool call may be starting) leaves nothing to write: an empty write would
  // end the chunked body.
  if (out.empty()) return true;
  return sink.write(out.data(), out.size());
}

std::string HttpServer::Impl::ReleaseContent(Stream& s, int choice, const std::string& piece) {
  std::string& text = s.texts[choice];
  size_t& sent = s.sent[choice];
  text += piece;
  const size_t start = ToolCallStart(s.meta.tool_format, text);
  sent = std::max(sent, ToolContentBegin(s.meta.tool_format, text));  // a marker, not content
  if (start <= sent) return "";
  std::string out = text.substr(sent, start - sent);
  sent = start;
  return out;
}

std::string HttpServer::Impl::EndToolCalls(Stream& s, const CompletionResult& result) {
  std::string out;
  for (int c = 0; c < static_cast<int>(s.texts.size()); ++c) {
    const std::string& text = result.choices.empty() ? result.text : result.choices[c].text;
    const ParsedOutput parsed = ParseToolCalls(s.meta.tool_format, text);
    // Content not sent yet: what precedes the calls, or all the text when there are none.
    const size_t begin = ToolContentBegin(s.meta.tool_format, text);
    s.sent[c] = std::max(s.sent[c], begin);
    const size_t end = parsed.calls.empty() ? text.size() : begin + parsed.content.size();
    if (end > s.sent[c]) {
      out += StreamTextChunk(s.meta, text.substr(s.sent[c], end - s.sent[c]), s.include_usage, c);
    }
    out += StreamToolCallChunks(s.meta, parsed.calls, s.include_usage, c);
  }
  return out;
}

void HttpServer::Impl::Observe(const std::string& tenant, const CompletionResult& r) {
  if (!r.tokens.empty()) metrics_.ObserveTtft(r.ttft_ms / 1000.0);
  metrics_.ObserveTenant(tenant, r);
}

}  // namespace promptcache
