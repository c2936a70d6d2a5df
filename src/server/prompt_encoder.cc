#include "server/prompt_encoder.h"

#include <algorithm>
#include <ctime>
#include <functional>

#include "core/text.h"
#include "server/reasoning.h"

namespace promptcache {

PromptEncoder::PromptEncoder(const Tokenizer& tokenizer, std::string_view chat_template,
                             bool trust_clients)
    : tok_(tokenizer),
      template_(chat_template, ChatTemplateOptions(tokenizer)),
      trust_clients_(trust_clients),
      tool_format_(template_.uses_jinja() ? DetectToolCallFormat(chat_template)
                                          : ToolCallFormat::kNone),
      call_turn_(ProbeCallTurnForm(template_, ToolTemplateVariables(tool_format_, nullptr, {}))),
      harmony_(template_.uses_jinja() && TemplateIsHarmony(chat_template)),
      thinking_(harmony_ || (template_.uses_jinja() && TemplateHasThinking(chat_template))),
      reads_enable_thinking_(template_.uses_jinja() &&
                             chat_template.find("enable_thinking") != std::string_view::npos),
      reads_reasoning_effort_(template_.uses_jinja() &&
                              chat_template.find("reasoning_effort") != std::string_view::npos) {
  call_turn_.thinking_field = harmony_;
}

Status PromptEncoder::CheckBound(std::string_view text, size_t max_tokens) const {
  if (max_tokens == SIZE_MAX) return Status::Ok();
  const size_t at_least = tok_.MinTokens(text) + (tok_.adds_bos() && tok_.bos() >= 0 ? 1 : 0);
  if (at_least <= max_tokens) return Status::Ok();
  return OutOfRange("the prompt has at least " + std::to_string(at_least) + " tokens (its " +
                    std::to_string(text.size()) + " bytes of text; the limit is " +
                    std::to_string(max_tokens) + ")");
}

Result<std::vector<int32_t>> PromptEncoder::FromPrompt(const std::string& text,
                                                       const std::vector<int32_t>& ids,
                                                       bool is_tokens, size_t max_tokens) const {
  if (is_tokens) {
    if (ids.empty()) return InvalidArgument("'prompt' is an empty token array");
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0 || ids[i] >= tok_.vocab_size()) {
        return InvalidArgument("'prompt[" + std::to_string(i) + "]' is " + std::to_string(ids[i]) +
                               ", outside the vocabulary of " + std::to_string(tok_.vocab_size()) +
                               " tokens");
      }
    }
    return ids;
  }
  PC_RETURN_IF_ERROR(CheckBound(text, max_tokens));
  std::vector<int32_t> tokens = tok_.Encode(text, /*add_bos=*/true, trust_clients_);
  if (tokens.empty()) return InvalidArgument("'prompt' is empty");
  return tokens;
}

std::vector<int32_t> PromptEncoder::EncodeChat(const MarkedText& text) const {
  if (trust_clients_) return tok_.Encode(text.text(), /*add_bos=*/true, /*parse_special=*/true);
  return tok_.Encode(text, /*add_bos=*/true);
}

namespace {

// At most this many segments per prompt: finding each costs a search of the rendered text.
constexpr size_t kMaxSegments = 512;

// The first occurrence of `t` at or after byte `from` that lies inside one range the client
// wrote, or npos. Only those ranges are searched (a template's text, which a client's tool
// definitions may fill, never is), each in linear time (Boyer-Moore).
size_t FindInUserText(const MarkedText& text, std::string_view t, size_t from) {
  const std::string& s = text.text();
  const auto& ranges = text.user_ranges();
  const std::boyer_moore_searcher searcher(t.begin(), t.end());
  auto range = std::lower_bound(
      ranges.begin(), ranges.end(), from,
      [](const std::pair<size_t, size_t>& r, size_t at) { return r.second <= at; });
  for (; range != ranges.end(); ++range) {
    const size_t begin = std::max(range->first, from);
    if (range->second - begin < t.size()) continue;
    const auto end = s.begin() + static_cast<ptrdiff_t>(range->second);
    const auto it = std::search(s.begin() + static_cast<ptrdiff_t>(begin), end, searcher);
    if (it != end) return static_cast<size_t>(it - s.begin());
  }
  return std::string::npos;
}

// Token ranges from the token counts at each cut (pairs: a segment's begin and end).
std::vector<PromptSegment> SegmentsAt(const std::vector<int>& token_at) {
  std::vector<PromptSegment> out;
  for (size_t k = 0; k + 1 < token_at.size(); k += 2) {
    if (token_at[k + 1] > token_at[k]) out.push_back({token_at[k], token_at[k + 1]});
  }
  return out;
}

}  // namespace

void PromptEncoder::AddSegmentTexts(std::string_view text,
                                    std::vector<std::string_view>* out) const {
  const size_t min_bytes = static_cast<size_t>(std::max(cut_.min_tokens, 1));
  auto add = [&](std::string_view piece) {
    piece = Trim(piece);
    if (piece.size() >= min_bytes && out->size() < kMaxSegments) out->push_back(piece);
  };
  if (cut_.separator.empty()) return add(text);
  for (size_t at; (at = text.find(cut_.separator)) != std::string_view::npos;) {
    add(text.substr(0, at));
    text.remove_prefix(at + cut_.separator.size());
  }
  add(text);
}

std::vector<int32_t> PromptEncoder::EncodeChatSegments(const MarkedText& text,
                                                       const std::vector<ApiMessage>& messages,
                                                       std::vector<PromptSegment>* segments) const {
  std::vector<std::string_view> texts;
  for (const ApiMessage& m : messages) {
    if (m.parts.empty()) {
      AddSegmentTexts(m.content, &texts);
      continue;
    }
    const std::string_view content = m.content;
    for (const auto& [begin, end] : m.parts) {
      if (begin >= content.size()) break;  // a breakpoint's prefix keeps part of the content
      AddSegmentTexts(content.substr(begin, std::min(end, content.size()) - begin), &texts);
    }
  }
  // Each text where the template put it: the next occurrence inside text the client wrote (a
  // template that rewrites a message, trimming or escaping it, leaves that text uncut).
  const std::string& rendered = text.text();
  std::vector<size_t> cuts;
  size_t cursor = 0;
  for (std::string_view t : texts) {
    const size_t at = FindInUserText(text, t, cursor);
    if (at == std::string::npos) continue;
    cuts.push_back(at);
    cuts.push_back(at + t.size());
    cursor = at + t.size();
  }
  std::vector<int> token_at;
  std::vector<int32_t> tokens = tok_.EncodeCut(rendered, /*add_bos=*/true, /*parse_special=*/true,
                                               trust_clients_ ? nullptr : &text, cuts, &token_at);
  *segments = SegmentsAt(token_at);
  return tokens;
}

Result<BuiltPrompt> PromptEncoder::FromPromptSegments(const std::string& text,
                                                      const std::vector<int32_t>& ids,
                                                      bool is_tokens, size_t max_tokens) const {
  BuiltPrompt out;
  if (is_tokens) {
    PC_ASSIGN_OR_RETURN(out.tokens, FromPrompt(text, ids, is_tokens, max_tokens));
    return out;
  }
  PC_RETURN_IF_ERROR(CheckBound(text, max_tokens));
  std::vector<std::string_view> texts;
  AddSegmentTexts(text, &texts);
  std::vector<size_t> cuts;
  for (std::string_view t : texts) {
    cuts.push_back(static_cast<size_t>(t.data() - text.data()));
    cuts.push_back(cuts.back() + t.size());
  }
  std::vector<int> token_at;
  out.tokens = tok_.EncodeCut(text, /*add_bos=*/true, trust_clients_, nullptr, cuts, &token_at);
  if (out.tokens.empty()) return InvalidArgument("'prompt' is empty");
  out.segments = SegmentsAt(token_at);
  return out;
}

namespace {

// A message as chat templates see it (OpenAI's shape, as Hugging Face passes it): role and
// content, plus an assistant's tool_calls (content null when it has none) or a tool result's
// tool_call_id and name.
nlohmann::ordered_json MessageJson(const ApiMessage& m, CallTurnForm form) {
  nlohmann::ordered_json j = {{"role", m.role}, {"content", m.content}};
  if (m.reasoning_content) {
    j["reasoning_content"] = *m.reasoning_content;
    if (form.thinking_field) {
      j["thinking"] = *m.reasoning_content;
      if (!m.tool_calls.is_null()) j.erase("content");
    }
  }
  if (!m.tool_calls.is_null()) {
    if (m.content_null && !form.empty_content) j["content"] = nullptr;
    j["tool_calls"] = m.tool_calls;
    for (auto& call : j["tool_calls"]) {
      auto& args = call["function"]["arguments"];
      if (form.arguments_as_text && args.is_object()) args = args.dump();
    }
  }
  if (m.role == "tool") {
    j["tool_call_id"] = m.tool_call_id;
    if (!m.name.empty()) j["name"] = m.name;
  }
  return j;
}

}  // namespace

CallTurnForm ProbeCallTurnForm(const ChatTemplate& chat, const nlohmann::ordered_json& variables) {
  if (!chat.uses_jinja()) return {};
  auto renders = [&](const nlohmann::ordered_json& arguments,
                     const nlohmann::ordered_json& content) {
    ChatInput input;
    input.add_generation_prompt = false;
    input.extra_variables = variables;
    input.messages.push_back({{"role", "user"}, {"content", "x"}});
    nlohmann::ordered_json call = {{"id", "abcDEF123"},  // 9 characters, as Mistral's must be
                                   {"type", "function"},
                                   {"function", {{"name", "f"}, {"arguments", arguments}}}};
    input.messages.push_back({{"role", "assistant"},
                              {"content", content},
                              {"tool_calls", nlohmann::ordered_json::array({call})}});
    return chat.Render(input).ok();
  };
  // The forms in the order the reference tries them: as sent, arguments as text, then "" for
  // the content with each.
  for (const CallTurnForm form : {CallTurnForm{false, false}, CallTurnForm{true, false},
                                  CallTurnForm{false, true}, CallTurnForm{true, true}}) {
    const nlohmann::ordered_json arguments = form.arguments_as_text
                                                 ? nlohmann::ordered_json("{\"a\":1}")
                                                 : nlohmann::ordered_json{{"a", 1}};
    if (renders(arguments, form.empty_content ? nlohmann::ordered_json("") : nullptr)) {
      return form;
    }
  }
  return {};
}

nlohmann::ordered_json ToolTemplateVariables(ToolCallFormat format,
                                             const nlohmann::ordered_json& tools,
                                             const std::tm& now) {
  if (format != ToolCallFormat::kFireFunction) return nullptr;
  char datetime[64];
  std::strftime(datetime, sizeof(datetime), "%b %d %Y %H:%M:%S GMT", &now);
  return {{"functions", tools.is_null() ? "" : tools.dump(2)}, {"datetime", datetime}};
}

ChatInput RequestChatInput(const std::vector<ApiMessage>& messages, bool add_generation_prompt,
                           const nlohmann::ordered_json& tools, CallTurnForm form) {
  ChatInput chat;
  chat.tools = tools;
  chat.add_generation_prompt = add_generation_prompt;
  for (const ApiMessage& m : messages) chat.messages.push_back(MessageJson(m, form));
  return chat;
}

Result<BuiltPrompt> PromptEncoder::FromMessages(const std::vector<ApiMessage>& messages,
                                                bool add_generation_prompt,
                                                const nlohmann::ordered_json& tools,
                                                size_t max_tokens, bool segments,
                                                const nlohmann::ordered_json& variables) const {
  if (messages.empty()) return InvalidArgument("'messages' must not be empty");
  ChatInput chat = RequestChatInput(messages, add_generation_prompt, tools, call_turn_);
  chat.extra_variables = variables;
  if (tool_format_ == ToolCallFormat::kFireFunction) {
    // The day, not the second: a prompt that changed every second would never share a cached
    // prefix past the system turn, and sampling would not repeat.
    const std::time_t t = std::time(nullptr);
    std::tm today{};
    gmtime_r(&t, &today);
    today.tm_hour = today.tm_min = today.tm_sec = 0;
    const nlohmann::ordered_json tool_variables = ToolTemplateVariables(tool_format_, tools, today);
    if (!chat.extra_variables.is_object()) chat.extra_variables = nlohmann::ordered_json::object();
    for (const auto& [name, value] : tool_variables.items()) chat.extra_variables[name] = value;
  }
  int last_breakpoint = -1;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i].cache_breakpoint) last_breakpoint = static_cast<int>(i);
  }
  Result<MarkedText> text = template_.Render(chat);
  if (!text.ok()) return text.status();
  PC_RETURN_IF_ERROR(CheckBound(text->text(), max_tokens));
  BuiltPrompt out;
  out.tokens = segments ? EncodeChatSegments(*text, messages, &out.segments) : EncodeChat(*text);
  if (out.tokens.empty()) return InvalidArgument("the rendered conversation is empty");
  out.opens_thinking = thinking_ && add_generation_prompt && PromptOpensThinking(text->text());
  if (last_breakpoint >= 0) {
    // A template may refuse a conversation cut short (one that must end with a user turn, say):
    // the breakpoint then pins nothing rather than failing the request. With segments, cut as
    // the whole prompt is cut (else a cut would end the shared run early).
    out.pin_tokens =
        BreakpointCoverage(messages, last_breakpoint, messages[last_breakpoint].content.size(),
                           tools, segments, variables, out.tokens);
  }
  // OpenAI's explicit breakpoints, the latest kMaxPromptCacheBreakpoints.
  std::vector<std::pair<size_t, size_t>> cuts;
  for (size_t i = 0; i < messages.size(); ++i) {
    for (size_t end : messages[i].prompt_cache_breakpoints) cuts.emplace_back(i, end);
  }
  if (cuts.size() > kMaxPromptCacheBreakpoints) {
    cuts.erase(cuts.begin(), cuts.end() - kMaxPromptCacheBreakpoints);
  }
  for (const auto& [message, end] : cuts) {
    const int covered =
        BreakpointCoverage(messages, message, end, tools, segments, variables, out.tokens);
    if (covered > 0) out.breakpoint_tokens.push_back(covered);
  }
  return out;
}

int PromptEncoder::BreakpointCoverage(const std::vector<ApiMessage>& messages, size_t message,
                                      size_t content_end, const nlohmann::ordered_json& tools,
                                      bool segments, const nlohmann::ordered_json& variables,
                                      const std::vector<int32_t>& whole) const {
  std::vector<ApiMessage> prefix(messages.begin(), messages.begin() + message + 1);
  prefix.back().content.resize(std::min(content_end, prefix.back().content.size()));
  for (ApiMessage& m : prefix) {  // the prefix's own breakpoints are not asked about
    m.cache_breakpoint = false;
    m.prompt_cache_breakpoints.clear();
  }
  Result<BuiltPrompt> cut =
      FromMessages(prefix, /*add_generation_prompt=*/false, tools, SIZE_MAX, segments, variables);
  if (!cut.ok()) return 0;
  const size_t n = std::min(cut->tokens.size(), whole.size());
  return static_cast<int>(
      std::mismatch(cut->tokens.begin(), cut->tokens.begin() + n, whole.begin()).first -
      cut->tokens.begin());
}

nlohmann::ordered_json RequestTemplateVariables(const ApiRequest& request,
                                                bool reads_reasoning_effort) {
  nlohmann::ordered_json vars = request.template_kwargs;
  if (!request.reasoning_effort.empty() && reads_reasoning_effort) {
    if (!vars.is_object()) vars = nlohmann::ordered_json::object();
    if (!vars.contains("reasoning_effort")) vars["reasoning_effort"] = request.reasoning_effort;
  }
  return vars;
}

Result<BuiltPrompt> PromptEncoder::Build(const ApiRequest& request, size_t max_tokens,
                                         bool segments) const {
  BuiltPrompt out;
  if (request.kind == ApiKind::kChat) {
    PC_ASSIGN_OR_RETURN(out, FromMessages(request.messages, /*add_generation_prompt=*/true,
                                          request.tools_offered() ? request.tools : nullptr,
                                          max_tokens, segments, RequestVariables(request)));
  } else if (segments) {
    PC_ASSIGN_OR_RETURN(out, FromPromptSegments(request.prompt_text, request.prompt_tokens,
                                                request.prompt_is_tokens, max_tokens));
  } else {
    PC_ASSIGN_OR_RETURN(out.tokens, FromPrompt(request.prompt_text, request.prompt_tokens,
                                               request.prompt_is_tokens, max_tokens));
  }
  if (request.pin) out.pin_tokens = -1;
  return out;
}

Result<BuiltPrompt> PromptEncoder::Build(const PrefixRequest& request, size_t max_tokens,
                                         bool segments) const {
  if (!request.messages.empty()) {
    return FromMessages(request.messages, request.add_generation_prompt, request.tools, max_tokens,
                        segments, request.template_kwargs);
  }
  if (segments) {
    return FromPromptSegments(request.prompt_text, request.prompt_tokens, request.prompt_is_tokens,
                              max_tokens);
  }
  BuiltPrompt out;
  PC_ASSIGN_OR_RETURN(out.tokens, FromPrompt(request.prompt_text, request.prompt_tokens,
                                             request.prompt_is_tokens, max_tokens));
  return out;
}

}  // namespace promptcache
