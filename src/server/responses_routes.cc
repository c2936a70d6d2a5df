// POST /v1/responses, GET and DELETE /v1/responses/{id}, GET /v1/responses/{id}/input_items:
// OpenAI's Responses API over the chat route's machinery. The request is read as a chat request
// (server/responses_request.h), the stored conversation of previous_response_id spliced in, and the
// result answered as a response object or as its typed event stream (server/responses_response.h).

#include <deque>

#include "model/model.h"
#include "server/json_fields.h"
#include "server/responses_response.h"
#include "server/routes.h"
#include "server/tool_calls.h"
#include "server/tool_request.h"

namespace promptcache {
namespace {

using ojson = nlohmann::ordered_json;

bool Blank(const std::string& s) { return s.find_first_not_of(" \t\r\n") == std::string::npos; }

// What a finished response leaves in the store: its conversation and its object.
void Remember(ServerContext& server, const std::string& tenant, const ResponsesMeta& meta,
              const ojson& chat, const CompletionResult& result, const ojson& response) {
  if (!meta.request->store) return;
  ojson messages = ojson::array();
  const ojson& sent = chat["messages"];
  // The instructions are not carried over: a continuation gives its own.
  for (size_t i = meta.request->instructions.is_string() ? 1 : 0; i < sent.size(); ++i) {
    messages.push_back(sent[i]);
  }
  messages.push_back(AssistantMessage(meta, result));
  ojson items = meta.request->input_items;
  for (ojson& item : items) {
    if (item.contains("id")) continue;
    // Keys in OpenAI's order: the id first.
    ojson with_id = {{"id", (item["type"] == "message" ? "msg_" : "item_") + RandomHex(32)}};
    for (const auto& [key, value] : item.items()) with_id[key] = value;
    item = std::move(with_id);
  }
  server.responses().Put(meta.id, {std::move(messages), response, tenant, std::move(items)});
}

ApiError ResponseNotFound(const std::string& id) {
  return MakeError(404, "Response with id '" + id + "' not found.", "invalid_request_error",
                   "not_found");
}

// One streamed response: its events as the text arrives.
struct ResponsesStream {
  ServerContext* server = nullptr;
  std::shared_ptr<TextChannel> channel;
  ResponsesMeta meta;
  std::shared_ptr<ResponsesRequest> request;
  ojson chat;
  std::string tenant;
  int sequence = 0;
  bool started = false;
  bool message_open = false;
  std::string text;      // all the text so far (of the answer, for a model that thinks)
  std::string streamed;  // what went out as output_text deltas
  // A model that thinks: the text split as it comes; the reasoning item (output 0) so far.
  ReasoningSplitter splitter{ReasoningMode{}};
  bool reasoning_open = false;
  bool reasoning_closed = false;
  std::string reasoning;
  // Log-probabilities asked for: the generated text so far, where the message starts in it (set
  // as the message opens), and the tokens no delta has carried yet, each with the offset in
  // that text where its bytes start.
  std::string generated;
  size_t message_begin = 0;
  size_t token_end = 0;  // where the next token starts
  std::deque<std::pair<size_t, TokenLogprob>> pending;
  int message_index() const { return reasoning_open || reasoning_closed ? 1 : 0; }
};

std::string OpenMessage(ResponsesStream& s) {
  s.message_open = true;
  if (s.request->logprobs) s.message_begin = SplitOutput(s.meta, s.generated).text_begin;
  const int index = s.message_index();
  std::string out = ResponsesEvent(
      "response.output_item.added",
      {{"output_index", index}, {"item", MessageItem(s.meta, "", "in_progress")}}, &s.sequence);
  out += ResponsesEvent("response.content_part.added",
                        {{"item_id", MessageItemId(s.meta)},
                         {"output_index", index},
                         {"content_index", 0},
                         {"part",
                          {{"type", "output_text"},
                           {"text", ""},
                           {"annotations", ojson::array()},
                           {"logprobs", ojson::array()}}}},
                        &s.sequence);
  return out;
}

// The pending tokens that start before the message's first `streamed` bytes end, those of the
// message as output_text lists them (a token before it, the thinking's, is dropped).
ojson TakeLogprobs(ResponsesStream& s) {
  ojson out = ojson::array();
  const size_t until = s.message_begin + s.streamed.size();
  while (!s.pending.empty() && s.pending.front().first < until) {
    if (s.pending.front().first >= s.message_begin) {
      out.push_back(OutputTextLogprob(s.meta, s.pending.front().second));
    }
    s.pending.pop_front();
  }
  return out;
}

// The thinking as reasoning_text deltas of the reasoning item, opening it first.
std::string ReasoningDelta(ResponsesStream& s, const std::string& delta) {
  if (delta.empty()) return "";
  std::string out;
  const ojson where = {{"item_id", ReasoningItemId(s.meta)}, {"output_index", 0}};
  if (!s.reasoning_open) {
    s.reasoning_open = true;
    out += ResponsesEvent("response.output_item.added",
                          {{"output_index", 0}, {"item", ReasoningItem(s.meta, "", "in_progress")}},
                          &s.sequence);
    ojson added = where;
    added["content_index"] = 0;
    added["part"] = {{"type", "reasoning_text"}, {"text", ""}};
    out += ResponsesEvent("response.content_part.added", added, &s.sequence);
  }
  s.reasoning += delta;
  ojson d = where;
  d["content_index"] = 0;
  d["delta"] = delta;
  return out + ResponsesEvent("response.reasoning_text.delta", d, &s.sequence);
}

// Closes an open reasoning item (`status`: completed, or incomplete when cut inside it).
std::string CloseReasoning(ResponsesStream& s, const char* status = "completed") {
  if (!s.reasoning_open) return "";
  s.reasoning_open = false;
  s.reasoning_closed = true;
  ojson where = {{"item_id", ReasoningItemId(s.meta)}, {"output_index", 0}, {"content_index", 0}};
  ojson text_done = where;
  text_done["text"] = s.reasoning;
  std::string out = ResponsesEvent("response.reasoning_text.done", text_done, &s.sequence);
  ojson part_done = where;
  part_done["part"] = {{"type", "reasoning_text"}, {"text", s.reasoning}};
  out += ResponsesEvent("response.content_part.done", part_done, &s.sequence);
  return out +
         ResponsesEvent("response.output_item.done",
                        {{"output_index", 0}, {"item", ReasoningItem(s.meta, s.reasoning, status)}},
                        &s.sequence);
}

std::string Delta(ResponsesStream& s, const std::string& delta) {
  if (delta.empty()) return "";
  std::string out = CloseReasoning(s);
  if (!s.message_open) out += OpenMessage(s);
  s.streamed += delta;
  return out + ResponsesEvent("response.output_text.delta",
                              {{"item_id", MessageItemId(s.meta)},
                               {"output_index", s.message_index()},
                               {"content_index", 0},
                               {"delta", delta},
                               {"logprobs", TakeLogprobs(s)}},
                              &s.sequence);
}

// Text that may go out now: with tools, what precedes a call that may be starting, and only
// once it is more than whitespace (whitespace before calls is no message).
std::string Release(ResponsesStream& s) {
  if (s.meta.tool_format == ToolCallFormat::kNone)
    return Delta(s, s.text.substr(s.streamed.size()));
  const size_t begin = ToolContentBegin(s.meta.tool_format, s.text);
  const size_t start = ToolCallStart(s.meta.tool_format, s.text);
  if (start <= begin) return "";
  const std::string content = s.text.substr(begin, start - begin);
  if (!s.message_open && Blank(content)) return "";
  if (content.size() <= s.streamed.size()) return "";
  return Delta(s, content.substr(s.streamed.size()));
}

std::string Finish(ResponsesStream& s, const CompletionResult& result) {
  const ResponsesOutput out = SplitOutput(s.meta, result.text);
  const bool length = result.finish_reason == "length";
  std::string events;
  if (s.reasoning.size() < out.reasoning.size() && out.reasoning.rfind(s.reasoning, 0) == 0) {
    events += ReasoningDelta(s, out.reasoning.substr(s.reasoning.size()));
  }
  events += CloseReasoning(
      s, length && out.text.empty() && out.calls.empty() ? "incomplete" : "completed");
  if (out.has_message) {
    if (out.text.rfind(s.streamed, 0) == 0) events += Delta(s, out.text.substr(s.streamed.size()));
    if (!s.message_open) events += OpenMessage(s);
    const ojson logprobs =
        s.request->logprobs ? MessageLogprobs(s.meta, result, out) : ojson::array();
    const ojson done_part = {{"type", "output_text"},
                             {"text", out.text},
                             {"annotations", ojson::array()},
                             {"logprobs", logprobs}};
    const ojson where = {{"item_id", MessageItemId(s.meta)},
                         {"output_index", out.message_index()},
                         {"content_index", 0}};
    ojson text_done = where;
    text_done["text"] = out.text;
    text_done["logprobs"] = logprobs;
    events += ResponsesEvent("response.output_text.done", text_done, &s.sequence);
    ojson part_done = where;
    part_done["part"] = done_part;
    events += ResponsesEvent("response.content_part.done", part_done, &s.sequence);
    events += ResponsesEvent(
        "response.output_item.done",
        {{"output_index", out.message_index()},
         {"item", MessageItem(s.meta, out.text, length ? "incomplete" : "completed", &logprobs)}},
        &s.sequence);
  }
  for (size_t i = 0; i < out.calls.size(); ++i) {
    const int index = static_cast<int>(i) + out.message_index() + (out.has_message ? 1 : 0);
    const ojson item = FunctionCallItem(s.meta, static_cast<int>(i), out.calls[i], "completed");
    events += ResponsesEvent(
        "response.output_item.added",
        {{"output_index", index},
         {"item", FunctionCallItem(s.meta, static_cast<int>(i), out.calls[i], "in_progress")}},
        &s.sequence);
    const ojson where = {{"item_id", item["id"]}, {"output_index", index}};
    ojson delta = where;
    delta["delta"] = out.calls[i].arguments;
    events += ResponsesEvent("response.function_call_arguments.delta", delta, &s.sequence);
    ojson done = where;
    done["arguments"] = out.calls[i].arguments;
    events += ResponsesEvent("response.function_call_arguments.done", done, &s.sequence);
    events += ResponsesEvent("response.output_item.done", {{"output_index", index}, {"item", item}},
                             &s.sequence);
  }
  const ojson response = ResponseObject(s.meta, &result);
  const bool incomplete = response["status"] == "incomplete";
  events += ResponsesEvent(incomplete ? "response.incomplete" : "response.completed",
                           {{"response", response}}, &s.sequence);
  Remember(*s.server, s.tenant, s.meta, s.chat, result, response);
  return events;
}

bool WriteResponses(ResponsesStream& s, httplib::DataSink& sink) {
  std::string out;
  if (!s.started) {
    s.started = true;
    const ojson response = ResponseObject(s.meta, nullptr);
    out += ResponsesEvent("response.created", {{"response", response}}, &s.sequence);
    out += ResponsesEvent("response.in_progress", {{"response", response}}, &s.sequence);
  }
  auto on_text = [&](const std::vector<TextPiece>& pieces) {
    for (const TextPiece& piece : pieces) {
      if (s.request->logprobs) {
        s.generated += piece.text;
        for (const TokenLogprob& lp : piece.logprobs) {
          s.pending.emplace_back(s.token_end, lp);
          s.token_end += s.meta.token_bytes(lp.token).size();
        }
      }
      if (!s.meta.reasoning.parsed()) {
        s.text += piece.text;
        continue;
      }
      ReasoningSplitter::Delta d = s.splitter.Add(piece.text);
      out += ReasoningDelta(s, d.reasoning);
      s.text += d.content;
    }
    out += Release(s);
  };
  auto on_end = [&](const CompletionResult& result) {
    if (!result.status.ok()) {
      const ApiError e = FromStatus(result.status);
      out += ResponsesEvent("error",
                            {{"code", e.code.empty() ? ojson(nullptr) : ojson(e.code)},
                             {"message", e.message},
                             {"param", e.param.empty() ? ojson(nullptr) : ojson(e.param)}},
                            &s.sequence);
    } else {
      s.server->Observe(s.tenant, result);
      out += Finish(s, result);
    }
  };
  return PollAndWrite<TextPiece>(*s.channel, out, ": keep-alive\n\n", sink, on_text, on_end);
}

// An error of the chat parser, its param spelled as the Responses request spells the field.
ApiError AsResponsesError(ApiError e) {
  static const std::pair<std::string_view, std::string_view> kNames[] = {
      {"max_completion_tokens", "max_output_tokens"},
      {"response_format.json_schema.", "text.format."},
      {"response_format", "text.format"},
      {"reasoning_effort", "reasoning.effort"},
      {"messages", "input"}};
  for (const auto& [chat, responses] : kNames) {
    if (e.param.rfind(chat, 0) == 0) {
      // A message's index counts the instructions and stored turns: only the field is named.
      e.param = chat == "messages" ? std::string(responses)
                                   : std::string(responses) + e.param.substr(chat.size());
      break;
    }
  }
  return e;
}

}  // namespace

void HandleResponses(Call& call) {
  ServerContext& server = call.server;
  auto rr = std::make_shared<ResponsesRequest>();
  if (std::optional<ApiError> err = ParseResponsesRequest(call.req.body, rr.get())) {
    return call.Fail(*err);
  }
  ojson history = ojson::array();
  if (!rr->previous_response_id.empty()) {
    std::optional<ResponseStore::Entry> prev =
        server.responses().Get(rr->previous_response_id, call.tenant());
    if (!prev) {
      return call.Fail(MakeError(
          404, "Previous response with id '" + rr->previous_response_id + "' not found.",
          "invalid_request_error", "previous_response_not_found", "previous_response_id"));
    }
    history = std::move(prev->messages);
  }
  const ojson chat = SpliceHistory(*rr, history);
  ApiRequest r;
  std::optional<ApiError> err = ParseChatRequest(Dump(chat), server.limits(), &r);
  if (err) return call.Fail(AsResponsesError(*err));
  if (!r.model.empty()) err = server.CheckModel(r.model);
  if (!err) err = CheckLogitBias(r.sampling, call.engine().model().tokenizer().vocab_size());
  if (!err) err = ApplyToolChoice(server.encoder().tool_format(), &r);
  if (!err && !r.reasoning_effort.empty() && !server.encoder().reads_reasoning_effort()) {
    err = ApiError::BadRequest(
        "'reasoning.effort' has no meaning for this model: its chat template does not read "
        "reasoning_effort",
        "reasoning.effort", "unsupported");
  }
  if (!err && r.evaluate) {
    err = ApiError::BadRequest("'evaluate' applies to /v1/chat/completions and /v1/completions",
                               "evaluate");
  }
  if (err) return call.Fail(*err);

  CompletionRequest creq;
  bool opens_thinking = false;
  if (!PrepareChat(call, r, &creq, "input", &opens_thinking)) return;
  ResponsesMeta meta;
  meta.id = "resp_" + RandomHex(32);
  meta.created = std::chrono::duration_cast<std::chrono::seconds>(
                     std::chrono::system_clock::now().time_since_epoch())
                     .count();
  meta.model = r.model.empty() ? server.model_id() : r.model;
  meta.request = rr.get();
  if (r.tools_offered()) meta.tool_format = server.encoder().tool_format();
  const bool harmony = server.encoder().harmony();
  meta.reasoning = {server.encoder().thinking(), opens_thinking, harmony};
  const Tokenizer& tok = call.engine().model().tokenizer();
  meta.token_bytes = [&tok, harmony](int32_t t) { return tok.TokenBytes(t, harmony); };
  Engine& engine = call.engine();
  if (rr->stream) {
    auto s = std::make_shared<ResponsesStream>();
    s->server = &server;
    s->channel = std::make_shared<TextChannel>();
    s->request = rr;
    s->meta = meta;
    s->chat = chat;
    s->tenant = creq.tenant;
    s->splitter = ReasoningSplitter(meta.reasoning);
    creq.on_piece = [ch = s->channel](const TextPiece& piece) { return ch->Push(piece); };
    Result<std::shared_ptr<RequestHandle>> handle = engine.Submit(std::move(creq));
    if (!handle.ok()) return call.Fail(handle.status());
    call.StreamEvents(*handle, s->channel,
                      [s](httplib::DataSink& sink) { return WriteResponses(*s, sink); });
    return;
  }
  creq.on_text = call.StopsWithServer();
  const std::string tenant = creq.tenant;
  Result<std::shared_ptr<RequestHandle>> handle = engine.Submit(std::move(creq));
  if (!handle.ok()) return call.Fail(handle.status());
  const CompletionResult result = call.Await(*handle);
  if (!result.status.ok()) return call.Fail(result.status);
  server.Observe(tenant, result);
  const ojson response = ResponseObject(meta, &result);
  Remember(server, tenant, meta, chat, result, response);
  call.SendJson(response);
}

void HandleResponseGet(Call& call) {
  std::optional<ResponseStore::Entry> e =
      call.server.responses().Get(call.PathParam(), call.tenant());
  if (!e) return call.Fail(ResponseNotFound(call.PathParam()));
  call.SendJson(e->response);
}

void HandleResponseDelete(Call& call) {
  const std::string id = call.PathParam();
  if (!call.server.responses().Erase(id, call.tenant())) return call.Fail(ResponseNotFound(id));
  call.SendJson({{"id", id}, {"object", "response"}, {"deleted", true}});
}

void HandleResponseInputItems(Call& call) {
  std::optional<ResponseStore::Entry> e =
      call.server.responses().Get(call.PathParam(), call.tenant());
  if (!e) return call.Fail(ResponseNotFound(call.PathParam()));
  ojson page;
  if (std::optional<ApiError> err = InputItemsPage(e->input_items, call.req.params, &page)) {
    return call.Fail(*err);
  }
  call.SendJson(page);
}

}  // namespace promptcache
