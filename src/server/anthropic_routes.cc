// Anthropic's Messages API: POST /v1/messages (a JSON message, or Anthropic's named Server-Sent
// Events with "stream": true) and POST /v1/messages/count_tokens. Parsing is
// server/anthropic_request.h, the bodies server/anthropic_response.h; errors, including those
// the server's hooks send for these paths (a missing key, an unknown URL), are Anthropic's error
// object (the routes' flavour, server/routes.cc).
//
// A request's cache_control breakpoints become timed pins of its prompt's prefixes, applied
// when it ends; its usage reports the prompt tokens read from the cache, those computed into a
// pinned prefix, and the rest (anthropic_response.h).
#include <algorithm>
#include <random>
#include <vector>

#include "model/model.h"
#include "server/anthropic_request.h"
#include "server/anthropic_response.h"
#include "server/reasoning.h"
#include "server/routes.h"
#include "server/tool_calls.h"

namespace promptcache {
namespace {

// "msg_..." for a message, "toolu_..." for a tool_use block.
std::string MessageId(const char* prefix = "msg_") {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  static const char kAlphabet[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  std::string id = prefix;
  for (int i = 0; i < 24; ++i) id += kAlphabet[rng() % 62];
  return id;
}

// The request's prompt, checked against the server's limits; nullopt after failing the call.
std::optional<AnthropicPrompt> Prompt(Call& call, const AnthropicRequest& r) {
  const ServerContext& server = call.server;
  const int context = server.context();
  const int max_prompt_tokens = server.options().max_prompt_tokens;
  // A prompt that surely exceeds the limits is refused before it is tokenized.
  Result<AnthropicPrompt> p =
      BuildMessagesPrompt(server.encoder(), r, server.options().cache_control_ttl_scale,
                          server.PromptLimit(), server.Segments(r.cache_segments));
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

// The calls in the generated text (the chat route's parser), as tool_use blocks; *content: the
// text before them (all of it when there are none).
std::vector<ToolUseBlock> ToolUses(ToolCallFormat format, const std::string& text,
                                   std::string* content) {
  const ParsedOutput parsed = ParseToolCalls(format, text);
  *content = parsed.content;
  std::vector<ToolUseBlock> out;
  for (const ToolCall& c : parsed.calls) {
    nlohmann::ordered_json input = nlohmann::ordered_json::parse(c.arguments, nullptr, false);
    if (!input.is_object()) input = nlohmann::ordered_json::object();
    out.push_back({MessageId("toolu_"), c.name, std::move(input)});
  }
  return out;
}

// A message that ends in calls stops for them ("tool_use"), not at its end of turn.
void StopForTools(const std::vector<ToolUseBlock>& calls, StopInfo* stop) {
  if (!calls.empty() && stop->reason == "end_turn") {
    stop->reason = "tool_use";
    stop->sequence.reset();
  }
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
  // With tools or thinking, blocks open as text comes (the text block only once there is
  // text), and text that may be a call is held back until the end, as the chat route's stream
  // does. Without either, the text block opens at once.
  ToolCallFormat tool_format = ToolCallFormat::kNone;
  ToolTextStream tool_text;
  int blocks = 0;  // content blocks started
  bool text_open = false;
  // A model that thinks (or writes harmony: ReasoningMode::parsed): the text split as it comes; the
  // thinking block's text so far.
  bool split = false;
  ReasoningSplitter splitter{ReasoningMode{}};
  bool thinking_open = false;
  std::string thinking;
  std::string answer;  // the answer so far (without tools: for the end)
  bool lazy() const { return tool_format != ToolCallFormat::kNone || split; }
};

// Text as a text block's delta, opening the block first.
std::string ToolText(MessagesStream& s, const std::string& text) {
  if (text.empty()) return "";
  std::string out;
  if (!s.text_open) {
    s.text_open = true;
    out = ContentBlockStartEvent(s.blocks++);
  }
  return out + TextDeltaEvent(text, s.blocks - 1);
}

// Thinking as a thinking block's delta, opening the block first.
std::string ThinkingText(MessagesStream& s, const std::string& text) {
  if (text.empty()) return "";
  std::string out;
  if (!s.thinking_open) {
    s.thinking_open = true;
    out = ThinkingBlockStartEvent(s.blocks++);
  }
  s.thinking += text;
  return out + ThinkingDeltaEvent(text, s.blocks - 1);
}

// Closes an open thinking block: its signature, then its stop.
std::string CloseThinking(MessagesStream& s) {
  if (!s.thinking_open) return "";
  s.thinking_open = false;
  return SignatureDeltaEvent(ThinkingSignature(s.thinking), s.blocks - 1) +
         ContentBlockStopEvent(s.blocks - 1);
}

// A piece of the answer (the thinking closes before it); with tools, what may go out as text
// now (the rest may be a call).
std::string AnswerText(MessagesStream& s, const std::string& piece) {
  if (piece.empty()) return "";
  std::string out = CloseThinking(s);
  s.answer += piece;
  if (s.tool_format == ToolCallFormat::kNone) return out + ToolText(s, piece);
  return out + ToolText(s, s.tool_text.Release(s.tool_format, piece));
}

// Tools or thinking, at the end (`answer`: the text without the thinking): the held-back text,
// or the calls as tool_use blocks; then the message's end.
std::string EndBlocks(MessagesStream& s, const CompletionResult& result, const std::string& answer,
                      StopInfo stop) {
  std::string out = CloseThinking(s);
  std::vector<ToolUseBlock> calls;
  if (s.tool_format != ToolCallFormat::kNone) {
    std::string content;
    calls = ToolUses(s.tool_format, answer, &content);
    out += ToolText(s, s.tool_text.Rest(s.tool_format, answer, content, !calls.empty()));
  }
  if (s.blocks == 0 && calls.empty()) {  // an empty message still has its text block
    out += ContentBlockStartEvent(s.blocks++);
    s.text_open = true;
  }
  if (s.text_open) out += ContentBlockStopEvent(s.blocks - 1);
  for (const ToolUseBlock& c : calls) out += ToolUseEvents(s.blocks++, c);
  StopForTools(calls, &stop);
  return out + MessageDeltaEvents(result, stop);
}

// Writes whatever is ready; false (a failed write) makes cpp-httplib drop the connection.
bool WriteMessagesStream(MessagesStream& s, httplib::DataSink& sink) {
  std::string out;
  if (!s.started) {
    s.started = true;
    out = MessageStartEvent(s.meta, s.prompt_tokens) + (s.lazy() ? "" : ContentBlockStartEvent()) +
          PingEvent();
  }
  auto on_text = [&](const std::vector<std::string>& pieces) {
    for (const std::string& piece : pieces) {
      if (s.split) {
        ReasoningSplitter::Delta d = s.splitter.Add(piece);
        out += ThinkingText(s, d.reasoning) + AnswerText(s, d.content);
      } else if (s.lazy()) {
        out += AnswerText(s, piece);
      } else if (!piece.empty()) {
        out += TextDeltaEvent(piece);
      }
    }
  };
  auto on_end = [&](const CompletionResult& result) {
    if (!result.status.ok()) {
      out += MessagesErrorEvent(FromStatus(result.status));
      return;
    }
    s.server->Observe(s.tenant, result);
    const std::string generated = s.server->engine().model().tokenizer().Decode(result.tokens);
    const StopInfo stop = StopOf(result, generated, s.stops);
    if (s.split) {
      ReasoningSplitter::Delta d = s.splitter.Finish();
      out += ThinkingText(s, d.reasoning) + AnswerText(s, d.content);
    }
    out += s.lazy() ? EndBlocks(s, result, s.split ? s.answer : result.text, stop)
                    : MessageEndEvents(result, stop);
  };
  return PollAndWrite<std::string>(*s.channel, out, PingEvent(), sink, on_text, on_end);
}

// Anthropic's thinking budget (docs/server.md, "Thinking"): the first request generates at most
// budget_tokens; when it stops there inside the thinking, the thinking is closed
// ("\n</think>\n\n", as Qwen3 and the R1 distills write it) and a second request goes on from the
// first's prompt, output and that text with what max_tokens leaves (the same sequence's prefix:
// the cache serves it). Off with a grammar (a second request would start it over) and for a model
// that does not think.
struct ThinkingBudget {
  int budget = 0;  // 0: not enforced
  int max_tokens = 0;
  ReasoningMode reasoning;
  std::vector<int32_t> close_tokens;
  static constexpr const char* kClose = "\n</think>\n\n";

  // The continuation of `first` (whose request was `base`), or nullopt; *inserted: the text put
  // between the two (the closing tag, or "").
  std::optional<CompletionRequest> Next(const CompletionRequest& base,
                                        const CompletionResult& first,
                                        std::string* inserted) const {
    inserted->clear();
    if (budget <= 0 || first.finish_reason != "length") return std::nullopt;
    const ReasoningSplit split = SplitReasoning(reasoning, first.text);
    const bool open = split.has_reasoning && split.reasoning_end == first.text.size();
    int left = max_tokens - static_cast<int>(first.tokens.size());
    CompletionRequest c;
    c.prompt = base.prompt;
    c.prompt.insert(c.prompt.end(), first.tokens.begin(), first.tokens.end());
    if (open) {
      *inserted = kClose;
      c.prompt.insert(c.prompt.end(), close_tokens.begin(), close_tokens.end());
      left -= static_cast<int>(close_tokens.size());
    }
    if (left <= 0) return std::nullopt;
    c.max_tokens = left;
    c.sampling = base.sampling;
    c.stop = base.stop;
    c.cache_namespace = base.cache_namespace;
    c.tenant = base.tenant;
    return c;
  }

  // The two results as one message: the tokens and text of both with the inserted text between.
  CompletionResult Join(CompletionResult first, CompletionResult second,
                        const std::string& inserted) const {
    if (!second.status.ok()) return second;
    if (!inserted.empty()) {
      first.tokens.insert(first.tokens.end(), close_tokens.begin(), close_tokens.end());
    }
    first.tokens.insert(first.tokens.end(), second.tokens.begin(), second.tokens.end());
    first.text += inserted + second.text;
    first.finish_reason = second.finish_reason;
    if (!first.choices.empty()) {  // choices[0] repeats the fields above (one choice here)
      first.choices.resize(1);
      first.choices[0].tokens = first.tokens;
      first.choices[0].text = first.text;
      first.choices[0].finish_reason = first.finish_reason;
    }
    first.generation_ms += second.prompt_ms + second.generation_ms;
    first.grammar_ms += second.grammar_ms;
    return first;
  }
};

void StartStream(Call& call, MessageMeta meta, const AnthropicRequest& r, CompletionRequest creq,
                 ToolCallFormat tool_format, ReasoningMode reasoning,
                 const ThinkingBudget& budget) {
  auto s = std::make_shared<MessagesStream>();
  s->server = &call.server;
  s->channel = std::make_shared<TextChannel>();
  s->meta = std::move(meta);
  s->tenant = creq.tenant;
  s->prompt_tokens = static_cast<int>(creq.prompt.size());
  s->stops = r.stop_sequences;
  s->tool_format = tool_format;
  s->split = reasoning.parsed();
  s->splitter = ReasoningSplitter(reasoning);
  creq.on_text = [ch = s->channel](const std::string& piece) { return ch->Push(piece); };
  auto write = [s](httplib::DataSink& sink) { return WriteMessagesStream(*s, sink); };
  if (budget.budget <= 0) {
    Result<std::shared_ptr<RequestHandle>> handle = call.engine().Submit(std::move(creq));
    if (!handle.ok()) return call.Fail(handle.status());
    return call.StreamEvents(*handle, s->channel, write);
  }
  // The continuation's text follows the first's on the same channel, the closing tag first.
  auto base = std::make_shared<CompletionRequest>(creq);
  base->on_text = nullptr;
  Result<std::shared_ptr<RequestHandle>> handle = call.engine().Submit(std::move(creq));
  if (!handle.ok()) return call.Fail(handle.status());
  auto inserted = std::make_shared<std::string>();
  Engine* engine = &call.engine();
  ServerContext* server = &call.server;
  auto next = [budget, base, inserted, engine, server,
               ch = s->channel](const CompletionResult& first) -> std::shared_ptr<RequestHandle> {
    std::optional<CompletionRequest> c = budget.Next(*base, first, inserted.get());
    if (!c) return nullptr;
    if (!inserted->empty() && !ch->Push(*inserted)) return nullptr;
    c->on_text = [ch, server](const std::string& piece) {
      return ch->Push(piece) && !server->stopping();
    };
    Result<std::shared_ptr<RequestHandle>> h = engine->Submit(std::move(*c));
    return h.ok() ? *h : nullptr;
  };
  auto join = [budget, inserted](CompletionResult a, CompletionResult b) {
    return budget.Join(std::move(a), std::move(b), *inserted);
  };
  call.StreamEvents(*handle, s->channel, write, next, join);
}

}  // namespace

void HandleMessages(Call& call) {
  AnthropicRequest r;
  std::optional<ApiError> err = ParseMessagesRequest(call.req.body, call.server.limits(), &r);
  if (!err) err = call.server.CheckModel(r.model);
  const ToolCallFormat tool_format =
      r.tools_offered() ? call.server.encoder().tool_format() : ToolCallFormat::kNone;
  std::shared_ptr<const Grammar> grammar;
  if (!err) err = ApplyMessagesToolChoice(tool_format, r, &grammar);
  if (!err && grammar && r.grammar) {
    err = ApiError::BadRequest("'grammar' and 'tool_choice' both constrain the output: give one",
                               "grammar");
  }
  if (!err && r.output_format && (grammar || r.grammar)) {
    err = ApiError::BadRequest("'output_config.format' and '" +
                                   std::string(grammar ? "tool_choice" : "grammar") +
                                   "' both constrain the output: give one",
                               "output_config.format");
  }
  if (!grammar) grammar = r.grammar ? r.grammar : r.output_format;
  if (!err && !r.effort.empty() && !call.server.encoder().reads_reasoning_effort()) {
    err = ApiError::BadRequest(
        "'output_config.effort' has no meaning for this model: its chat template does not read "
        "reasoning_effort",
        "output_config.effort");
  }
  const bool segments = call.server.Segments(r.cache_segments);
  if (!err && r.recompute >= 0 && !segments) {
    err = ApiError::BadRequest(
        "'recompute' applies to prompts with segments (\"cache_segments\": true)", "recompute");
  }
  if (err) return call.Fail(*err);
  std::optional<AnthropicPrompt> prompt = Prompt(call, r);
  if (!prompt) return;

  CompletionRequest creq;
  creq.prompt = std::move(prompt->tokens);
  creq.timed_pins = std::move(prompt->pins);
  creq.segments = std::move(prompt->segments);
  if (segments && r.recompute >= 0) creq.segment_recompute = r.recompute;
  creq.max_tokens = r.max_tokens;
  creq.sampling = r.sampling;
  creq.stop = r.stop_sequences;
  creq.grammar = grammar;
  creq.special_text = call.server.encoder().harmony();  // its channels (server/harmony.h)
  creq.cache_namespace = call.Namespace("");            // no cache_salt in this API
  creq.tenant = call.tenant();
  MessageMeta meta{MessageId(), r.model};
  // A model that thinks: its thinking is a thinking block (always split: this API has no
  // reasoning_format).
  const ReasoningMode reasoning{call.server.encoder().thinking(), prompt->opens_thinking,
                                call.server.encoder().harmony()};
  ThinkingBudget budget;
  // The budget closes the thinking with "</think>", which harmony's has no use for.
  if (r.thinking_budget > 0 && reasoning.split && !reasoning.harmony && !grammar) {
    budget = {r.thinking_budget, r.max_tokens, reasoning,
              call.engine().model().tokenizer().Encode(ThinkingBudget::kClose, false)};
    creq.max_tokens = std::min(r.max_tokens, r.thinking_budget);
  }
  if (r.stream) {
    return StartStream(call, std::move(meta), r, std::move(creq), tool_format, reasoning, budget);
  }

  creq.on_text = call.StopsWithServer();
  CompletionRequest base;  // with a budget: what a continuation copies (the prompt)
  if (budget.budget > 0) base = creq;
  Result<std::shared_ptr<RequestHandle>> handle = call.engine().Submit(std::move(creq));
  if (!handle.ok()) return call.Fail(handle.status());
  CompletionResult result = call.Await(*handle);
  if (!result.status.ok()) return call.Fail(result.status);
  std::string inserted;
  if (std::optional<CompletionRequest> c = budget.Next(base, result, &inserted)) {
    c->on_text = call.StopsWithServer();
    Result<std::shared_ptr<RequestHandle>> second = call.engine().Submit(std::move(*c));
    if (!second.ok()) return call.Fail(second.status());
    result = budget.Join(std::move(result), call.Await(*second), inserted);
    if (!result.status.ok()) return call.Fail(result.status);
  }
  call.server.Observe(call.tenant(), result);
  const std::string generated = call.engine().model().tokenizer().Decode(result.tokens);
  StopInfo stop = StopOf(result, generated, r.stop_sequences);
  if (tool_format == ToolCallFormat::kNone && !reasoning.parsed()) {
    return call.Send(MessageBody(meta, result, stop));
  }
  const ReasoningSplit split = SplitReasoning(reasoning, result.text);
  std::optional<ThinkingBlock> thinking;
  if (!split.reasoning.empty()) {
    thinking = ThinkingBlock{split.reasoning, ThinkingSignature(split.reasoning)};
  }
  std::string text = split.content;
  std::vector<ToolUseBlock> calls;
  if (tool_format != ToolCallFormat::kNone) calls = ToolUses(tool_format, split.content, &text);
  StopForTools(calls, &stop);
  call.Send(MessageBody(meta, result, stop, text, calls, thinking));
}

void HandleCountTokens(Call& call) {
  AnthropicRequest r;
  std::optional<ApiError> err = ParseCountTokensRequest(call.req.body, &r);
  if (!err) err = call.server.CheckModel(r.model);
  if (err) return call.Fail(*err);
  // Cut as /v1/messages would cut it (cutting may change a merge at a segment's ends).
  Result<AnthropicPrompt> p =
      BuildMessagesPrompt(call.server.encoder(), r, call.server.options().cache_control_ttl_scale,
                          SIZE_MAX, call.server.Segments(std::nullopt));
  if (!p.ok()) return call.Fail(p.status());
  call.Send("{\"input_tokens\":" + std::to_string(p->tokens.size()) + "}");
}

}  // namespace promptcache
