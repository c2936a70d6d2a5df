#include "server/anthropic_routes.h"

#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include "core/log.h"
#include "model/model.h"
#include "server/anthropic_request.h"
#include "server/anthropic_response.h"
#include "server/text_channel.h"

namespace promptcache {
namespace {

// How long a stream waits for text before writing a ping: the write is how a client that went
// away during a long prefill is noticed.
constexpr std::chrono::milliseconds kStreamPoll(250);

std::string MessageId() {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  static const char kAlphabet[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  std::string id = "msg_";
  for (int i = 0; i < 24; ++i) id += kAlphabet[rng() % 62];
  return id;
}

ApiError FromStatus(const Status& st) {
  ApiError e = ApiError::BadRequest(st.message());
  switch (st.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
    case StatusCode::kUnimplemented:
      break;
    case StatusCode::kNotFound:
      e.http_status = 404;
      break;
    case StatusCode::kResourceExhausted:
      e.http_status = 503;
      e.message += " (the server is busy; retry later)";
      break;
    default:
      e.http_status = 500;
  }
  return e;
}

// The request's prompt, checked against the server's limits; nullopt after sending the error.
std::optional<AnthropicPrompt> Prompt(const MessagesContext& ctx, const AnthropicRequest& r,
                                      httplib::Response& res) {
  // A prompt that surely exceeds the limits is refused before it is tokenized.
  size_t limit = size_t(std::max(0, ctx.context - 1));
  if (ctx.max_prompt_tokens > 0) limit = std::min(limit, size_t(ctx.max_prompt_tokens));
  Result<AnthropicPrompt> p = BuildMessagesPrompt(*ctx.encoder, r, ctx.ttl_scale, limit);
  if (!p.ok() && p.status().code() == StatusCode::kOutOfRange) {
    SendMessagesError(res, ApiError::BadRequest("prompt is too long: " + p.status().message() +
                                                ", this model's context is " +
                                                std::to_string(ctx.context) + " tokens"));
    return std::nullopt;
  }
  if (!p.ok()) {
    SendMessagesError(res, FromStatus(p.status()));
    return std::nullopt;
  }
  const int n = static_cast<int>(p->tokens.size());
  std::string problem;
  if (ctx.max_prompt_tokens > 0 && n > ctx.max_prompt_tokens) {
    problem = "the prompt has " + std::to_string(n) + " tokens, more than this server's limit of " +
              std::to_string(ctx.max_prompt_tokens) + " (--max-prompt-tokens)";
  } else if (n + r.max_tokens > ctx.context) {
    problem = "prompt is too long: " + std::to_string(n) + " tokens + max_tokens " +
              std::to_string(r.max_tokens) + " > this model's context of " +
              std::to_string(ctx.context) + " tokens";
  }
  if (!problem.empty()) {
    SendMessagesError(res, ApiError::BadRequest(problem));
    return std::nullopt;
  }
  return std::move(p).value();
}

// One streamed message: its channel, its engine handle, and the thread that waits for its
// result. Destroyed when cpp-httplib releases the response, after the last write.
struct MessagesStream {
  MessageMeta meta;
  std::string tenant;
  int prompt_tokens = 0;
  std::vector<std::string> stops;
  bool started = false;
  std::shared_ptr<TextChannel> channel = std::make_shared<TextChannel>();
  std::shared_ptr<RequestHandle> handle;
  std::thread waiter;
  uint64_t track_id = 0;

  ~MessagesStream() {
    if (waiter.joinable()) waiter.join();
  }
};

// Writes whatever is ready; false (a failed write) makes cpp-httplib drop the connection.
bool WriteMessagesStream(const MessagesContext& ctx, MessagesStream& s, httplib::DataSink& sink) {
  std::string out;
  if (!s.started) {
    s.started = true;
    out = MessageStartEvent(s.meta, s.prompt_tokens) + ContentBlockStartEvent() + PingEvent();
  }
  std::vector<std::string> pieces;
  CompletionResult result;
  switch (s.channel->Next(kStreamPoll, &pieces, &result)) {
    case TextChannel::Event::kText:
      for (const std::string& piece : pieces) {
        if (!piece.empty()) out += TextDeltaEvent(piece);
      }
      break;
    case TextChannel::Event::kTimeout:
      if (out.empty()) out = PingEvent();
      break;
    case TextChannel::Event::kFinished:
      if (!result.status.ok()) {
        out += MessagesErrorEvent(FromStatus(result.status));
      } else {
        ctx.observe(s.tenant, result);
        const std::string generated = ctx.engine->model().tokenizer().Decode(result.tokens);
        out += MessageEndEvents(result, StopOf(result, generated, s.stops));
      }
      if (!sink.write(out.data(), out.size())) return false;
      sink.done();
      return true;
  }
  return sink.write(out.data(), out.size());
}

void StartStream(const MessagesContext& ctx, httplib::Response& res, MessageMeta meta,
                 const AnthropicRequest& r, CompletionRequest creq) {
  auto s = std::make_shared<MessagesStream>();
  s->meta = std::move(meta);
  s->tenant = creq.tenant;
  s->prompt_tokens = static_cast<int>(creq.prompt.size());
  s->stops = r.stop_sequences;
  creq.on_text = [ch = s->channel](const std::string& piece) { return ch->Push(piece); };
  Result<std::shared_ptr<RequestHandle>> handle = ctx.engine->Submit(std::move(creq));
  if (!handle.ok()) return SendMessagesError(res, FromStatus(handle.status()));
  s->handle = *handle;
  s->track_id = ctx.track(s->handle);
  s->waiter = std::thread([h = s->handle, ch = s->channel] { ch->Finish(h->Wait()); });
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  // The context outlives every response: the server owns it and waits for its connections.
  const MessagesContext* c = &ctx;
  res.set_chunked_content_provider(
      "text/event-stream",
      [c, s](size_t, httplib::DataSink& sink) {
        try {
          return WriteMessagesStream(*c, *s, sink);
        } catch (const std::exception& e) {  // nothing may escape into cpp-httplib's writer
          PC_LOG_ERROR("server: stream failed: %s", e.what());
          return false;
        }
      },
      [c, s](bool success) {
        if (!success) {  // the client went away (or the server is stopping)
          s->channel->Cancel();
          s->handle->Cancel();
        }
        c->untrack(s->track_id);
      });
}

}  // namespace

bool IsMessagesPath(const std::string& path) { return path.rfind("/v1/messages", 0) == 0; }

CompletionResult WaitWatching(RequestHandle& handle, const std::function<bool()>& give_up) {
  bool cancelled = false;
  while (!handle.WaitFor(0.1)) {
    if (!cancelled && give_up()) {
      handle.Cancel();
      cancelled = true;
    }
  }
  return handle.Wait();
}

void SendMessagesError(httplib::Response& res, const ApiError& error) {
  res.status = error.http_status;
  if (error.http_status == 503) res.set_header("Retry-After", "1");
  res.set_content(AnthropicErrorBody(error), "application/json");
}

void HandleMessages(const MessagesContext& ctx, const httplib::Request& req,
                    httplib::Response& res) {
  AnthropicRequest r;
  std::optional<ApiError> err = ParseMessagesRequest(req.body, ctx.limits, &r);
  if (!err) err = ctx.check_model(r.model);
  if (err) return SendMessagesError(res, *err);
  std::optional<AnthropicPrompt> prompt = Prompt(ctx, r, res);
  if (!prompt) return;

  CompletionRequest creq;
  creq.prompt = std::move(prompt->tokens);
  creq.timed_pins = std::move(prompt->pins);
  creq.max_tokens = r.max_tokens;
  creq.sampling = r.sampling;
  creq.stop = r.stop_sequences;
  creq.cache_namespace = ctx.cache_namespace(req);
  creq.tenant = ctx.tenant(req);
  MessageMeta meta{MessageId(), r.model};
  if (r.stream) return StartStream(ctx, res, std::move(meta), r, std::move(creq));

  // No text callback is needed; this one only lets the server's Stop() end the request early.
  creq.on_text = [&ctx](const std::string&) { return !ctx.stopping(); };
  const std::string creq_tenant = creq.tenant;
  Result<std::shared_ptr<RequestHandle>> handle = ctx.engine->Submit(std::move(creq));
  if (!handle.ok()) return SendMessagesError(res, FromStatus(handle.status()));
  const uint64_t id = ctx.track(*handle);
  const CompletionResult result =
      WaitWatching(**handle, [&ctx] { return ctx.stopping() || ctx.client_gone(); });
  ctx.untrack(id);
  if (!result.status.ok()) return SendMessagesError(res, FromStatus(result.status));
  ctx.observe(creq_tenant, result);
  const std::string generated = ctx.engine->model().tokenizer().Decode(result.tokens);
  res.status = 200;
  res.set_content(MessageBody(meta, result, StopOf(result, generated, r.stop_sequences)),
                  "application/json");
}

void HandleCountTokens(const MessagesContext& ctx, const httplib::Request& req,
                       httplib::Response& res) {
  AnthropicRequest r;
  std::optional<ApiError> err = ParseCountTokensRequest(req.body, &r);
  if (!err) err = ctx.check_model(r.model);
  if (err) return SendMessagesError(res, *err);
  Result<AnthropicPrompt> p = BuildMessagesPrompt(*ctx.encoder, r, ctx.ttl_scale);
  if (!p.ok()) return SendMessagesError(res, FromStatus(p.status()));
  res.status = 200;
  res.set_content("{\"input_tokens\":" + std::to_string(p->tokens.size()) + "}",
                  "application/json");
}

}  // namespace promptcache
