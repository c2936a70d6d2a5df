// Anthropic's Messages API: POST /v1/messages (a JSON message, or Anthropic's named Server-Sent
// Events with "stream": true) and POST /v1/messages/count_tokens. Parsing is
// server/anthropic_request.h, the bodies server/anthropic_response.h; errors, including those
// the server's hooks send for these paths (a missing key, an unknown URL), are Anthropic's error
// object (the routes' flavour, server/routes.cc).
//
// A request's cache_control breakpoints become timed pins of its prompt's prefixes, applied
// when it ends; its usage reports the prompt tokens read from the cache, those computed into a
// pinned prefix, and the rest (anthropic_response.h).
#include <random>
#include <vector>

#include "model/model.h"
#include "server/anthropic_request.h"
#include "server/anthropic_response.h"
#include "server/routes.h"

namespace promptcache {
namespace {

std::string MessageId() {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  static const char kAlphabet[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  std::string id = "msg_";
  for (int i = 0; i < 24; ++i) id += kAlphabet[rng() % 62];
  return id;
}

// The request's prompt, checked against the server's limits; nullopt after failing the call.
std::optional<AnthropicPrompt> Prompt(Call& call, const AnthropicRequest& r) {
  const ServerContext& server = call.server;
  const int context = server.context();
  const int max_prompt_tokens = server.options().max_prompt_tokens;
  // A prompt that surely exceeds the limits is refused before it is tokenized.
  Result<AnthropicPrompt> p = BuildMessagesPrompt(
      server.encoder(), r, server.options().cache_control_ttl_scale, server.PromptLimit());
  if (!p.ok() && p.status().code() == StatusCode::kOutOfRange) {
    call.Fail(ApiError::BadRequest("prompt is too long: " + p.status().message() +
                                   ", this model's context is " + std::to_string(context) +
                                   " tokens"));
    return std::nullopt;
  }
  if (!p.ok()) {
    call.Fail(p.status());
    return std::nullopt;
  }
  const int n = static_cast<int>(p->tokens.size());
  std::string problem;
  if (max_prompt_tokens > 0 && n > max_prompt_tokens) {
    problem = "the prompt has " + std::to_string(n) + " tokens, more than this server's limit of " +
              std::to_string(max_prompt_tokens) + " (--max-prompt-tokens)";
  } else if (n + r.max_tokens > context) {
    problem = "prompt is too long: " + std::to_string(n) + " tokens + max_tokens " +
              std::to_string(r.max_tokens) + " > this model's context of " +
              std::to_string(context) + " tokens";
  }
  if (!problem.empty()) {
    call.Fail(ApiError::BadRequest(problem));
    return std::nullopt;
  }
  return std::move(p).value();
}

// One streamed message's state, as WriteMessagesStream needs it.
struct MessagesStream {
  ServerContext* server = nullptr;
  std::shared_ptr<TextChannel> channel;
  MessageMeta meta;
  std::string tenant;
  int prompt_tokens = 0;
  std::vector<std::string> stops;
  bool started = false;
};

// Writes whatever is ready; false (a failed write) makes cpp-httplib drop the connection.
bool WriteMessagesStream(MessagesStream& s, httplib::DataSink& sink) {
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
        s.server->Observe(s.tenant, result);
        const std::string generated = s.server->engine().model().tokenizer().Decode(result.tokens);
        out += MessageEndEvents(result, StopOf(result, generated, s.stops));
      }
      if (!sink.write(out.data(), out.size())) return false;
      sink.done();
      return true;
  }
  return sink.write(out.data(), out.size());
}

void StartStream(Call& call, MessageMeta meta, const AnthropicRequest& r, CompletionRequest creq) {
  auto s = std::make_shared<MessagesStream>();
  s->server = &call.server;
  s->channel = std::make_shared<TextChannel>();
  s->meta = std::move(meta);
  s->tenant = creq.tenant;
  s->prompt_tokens = static_cast<int>(creq.prompt.size());
  s->stops = r.stop_sequences;
  creq.on_text = [ch = s->channel](const std::string& piece) { return ch->Push(piece); };
  Result<std::shared_ptr<RequestHandle>> handle = call.engine().Submit(std::move(creq));
  if (!handle.ok()) return call.Fail(handle.status());
  call.StreamEvents(*handle, s->channel,
                    [s](httplib::DataSink& sink) { return WriteMessagesStream(*s, sink); });
}

}  // namespace

void HandleMessages(Call& call) {
  AnthropicRequest r;
  std::optional<ApiError> err = ParseMessagesRequest(call.req.body, call.server.limits(), &r);
  if (!err) err = call.server.CheckModel(r.model);
  if (err) return call.Fail(*err);
  std::optional<AnthropicPrompt> prompt = Prompt(call, r);
  if (!prompt) return;

  CompletionRequest creq;
  creq.prompt = std::move(prompt->tokens);
  creq.timed_pins = std::move(prompt->pins);
  creq.max_tokens = r.max_tokens;
  creq.sampling = r.sampling;
  creq.stop = r.stop_sequences;
  creq.cache_namespace = call.Namespace("");  // no cache_salt in this API
  creq.tenant = call.tenant();
  MessageMeta meta{MessageId(), r.model};
  if (r.stream) return StartStream(call, std::move(meta), r, std::move(creq));

  creq.on_text = call.StopsWithServer();
  Result<std::shared_ptr<RequestHandle>> handle = call.engine().Submit(std::move(creq));
  if (!handle.ok()) return call.Fail(handle.status());
  const CompletionResult result = call.Await(*handle);
  if (!result.status.ok()) return call.Fail(result.status);
  call.server.Observe(call.tenant(), result);
  const std::string generated = call.engine().model().tokenizer().Decode(result.tokens);
  call.Send(MessageBody(meta, result, StopOf(result, generated, r.stop_sequences)));
}

void HandleCountTokens(Call& call) {
  AnthropicRequest r;
  std::optional<ApiError> err = ParseCountTokensRequest(call.req.body, &r);
  if (!err) err = call.server.CheckModel(r.model);
  if (err) return call.Fail(*err);
  Result<AnthropicPrompt> p =
      BuildMessagesPrompt(call.server.encoder(), r, call.server.options().cache_control_ttl_scale);
  if (!p.ok()) return call.Fail(p.status());
  call.Send("{\"input_tokens\":" + std::to_string(p->tokens.size()) + "}");
}

}  // namespace promptcache
