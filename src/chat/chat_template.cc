#include "chat/chat_template.h"

#include <algorithm>
#include <array>
#include <string>

#include "core/text.h"
#include "jinja/template.h"

namespace promptcache {
namespace {

constexpr std::array<std::pair<ChatFormat, std::string_view>, 5> kNames = {{
    {ChatFormat::kChatMl, "chatml"},
    {ChatFormat::kLlama3, "llama3"},
    {ChatFormat::kLlama2, "llama2"},
    {ChatFormat::kZephyr, "zephyr"},
    {ChatFormat::kPlain, "plain"},
}};

Status ValidateMessages(const std::vector<ChatMessage>& messages) {
  if (messages.empty()) return InvalidArgument("no chat messages to render");
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    if (role != "system" && role != "user" && role != "assistant") {
      return InvalidArgument("unknown chat role \"" + role + "\" in message " + std::to_string(i) +
                             " (expected system, user or assistant)");
    }
  }
  return Status::Ok();
}

// Renderers write the template's own text as trusted and message contents as the user's, so a
// special-token spelling inside a message stays text (MarkedText).

void RenderChatMl(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                  MarkedText& out) {
  for (const ChatMessage& m : messages) {
    out.AppendTrusted("<|im_start|>" + m.role + "\n");
    out.AppendUser(m.content);
    out.AppendTrusted("<|im_end|>\n");
  }
  if (add_generation_prompt) out.AppendTrusted("<|im_start|>assistant\n");
}

void RenderLlama3(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                  MarkedText& out) {
  for (const ChatMessage& m : messages) {
    out.AppendTrusted("<|start_header_id|>" + m.role + "<|end_header_id|>\n\n");
    out.AppendUser(Trim(m.content));
    out.AppendTrusted("<|eot_id|>");
  }
  if (add_generation_prompt) {
    out.AppendTrusted("<|start_header_id|>assistant<|end_header_id|>\n\n");
  }
}

Status RenderLlama2(const std::vector<ChatMessage>& messages, std::string_view bos_text,
                    std::string_view eos_text, bool include_leading_bos, MarkedText& out) {
  if (bos_text.empty() || eos_text.empty()) {
    return InvalidArgument("llama2 chat format needs the BOS and EOS token texts");
  }
  const bool has_system = messages[0].role == "system";
  const size_t first = has_system ? 1 : 0;
  if (first == messages.size()) {
    return InvalidArgument("llama2 chat format needs a user message after the system message");
  }
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    const size_t turn = i - first;
    const std::string_view expected = turn % 2 == 0 ? "user" : "assistant";
    if (m.role != expected) {
      return InvalidArgument("llama2 chat format: message " + std::to_string(i) + " has role \"" +
                             m.role + "\" where \"" + std::string(expected) +
                             "\" was expected (roles must alternate user/assistant after an "
                             "optional first system message)");
    }
    if (m.role == "assistant") {
      out.AppendTrusted(" ");
      out.AppendUser(Trim(m.content));
      out.AppendTrusted(" ");
      out.AppendTrusted(eos_text);
      continue;
    }
    if (turn > 0 || include_leading_bos) out.AppendTrusted(bos_text);
    out.AppendTrusted("[INST] ");
    if (turn == 0 && has_system) {
      // The template strips the system block and the user text as one string; it starts with
      // "<<SYS>>", so only its end can be trimmed.
      MarkedText merged = MarkedText::Trusted("<<SYS>>\n");
      merged.AppendUser(messages[0].content);
      merged.AppendTrusted("\n<</SYS>>\n\n");
      merged.AppendUser(m.content);
      const std::string_view whole = merged.text();
      merged.Truncate(Trim(whole).size());
      out.Append(merged);
    } else {
      out.AppendUser(Trim(m.content));
    }
    out.AppendTrusted(" [/INST]");
  }
  return Status::Ok();
}

void RenderZephyr(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                  std::string_view eos_text, MarkedText& out) {
  for (const ChatMessage& m : messages) {
    out.AppendTrusted("<|" + m.role + "|>\n");
    out.AppendUser(m.content);
    out.AppendTrusted(eos_text);
    out.AppendTrusted("\n");
  }
  if (add_generation_prompt) out.AppendTrusted("<|assistant|>\n");
}

void RenderPlain(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                 MarkedText& out) {
  for (const ChatMessage& m : messages) {
    out.AppendTrusted(m.role == "system" ? "System: "
                      : m.role == "user" ? "User: "
                                         : "Assistant: ");
    out.AppendUser(m.content);
    out.AppendTrusted("\n");
  }
  if (add_generation_prompt) out.AppendTrusted("Assistant:");
}

// Unescapes `body`, the inside of a Jinja string literal delimited by `quote`, into `out`;
// false when an unescaped `quote` shows that the literal closes within `body`.
bool LiteralBody(std::string_view body, char quote, std::string& out) {
  out.clear();
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (c == quote) return false;  // the literal closed before <|im_end|>
    if (c != '\\') {
      out += c;
      continue;
    }
    if (++i == body.size()) return false;
    switch (body[i]) {
      case 'n':
        out += '\n';
        break;
      case 't':
        out += '\t';
        break;
      case 'r':
        out += '\r';
        break;
      default:
        out += body[i];
        break;  // \\, \', \"
    }
  }
  return true;
}

}  // namespace

std::string_view ChatFormatName(ChatFormat format) {
  for (const auto& [f, name] : kNames) {
    if (f == format) return name;
  }
  PC_CHECK(false);
  return {};
}

Result<ChatFormat> ParseChatFormat(std::string_view name) {
  std::string known;
  for (const auto& [f, n] : kNames) {
    if (n == name) return f;
    known += known.empty() ? "" : ", ";
    known += n;
  }
  return InvalidArgument("unknown chat format \"" + std::string(name) + "\" (known: " + known +
                         ")");
}

ChatFormat DetectChatFormat(std::string_view jinja_template, bool* guessed) {
  auto has = [&](std::string_view marker) {
    return jinja_template.find(marker) != std::string_view::npos;
  };
  if (guessed != nullptr) *guessed = false;
  if (Trim(jinja_template).empty()) return ChatFormat::kPlain;
  if (has("<|im_start|>")) return ChatFormat::kChatMl;
  if (has("<|start_header_id|>")) return ChatFormat::kLlama3;
  // Phi-3 also writes <|user|> and <|assistant|> but ends turns with <|end|>.
  if (has("<|user|>") && has("<|assistant|>") && !has("<|end|>") &&
      (has("eos_token") || has("</s>"))) {
    return ChatFormat::kZephyr;
  }
  if (guessed != nullptr) *guessed = true;
  // Mistral's [INST] templates differ from Llama-2's in spacing and BOS placement only.
  if (has("[INST]")) {
    if (has("<<SYS>>") && guessed != nullptr) *guessed = false;
    return ChatFormat::kLlama2;
  }
  return ChatFormat::kPlain;
}

std::string DefaultSystemPrompt(std::string_view jinja_template) {
  // Looks for a string literal '<|im_start|>system\n...<|im_end|>' with text in the middle; a
  // literal that closes right after the header ('<|im_start|>system\n' + messages[0]...) is the
  // template writing the caller's own system message, not a default.
  constexpr std::string_view kHead = "<|im_start|>system";
  constexpr std::string_view kEnd = "<|im_end|>";
  std::string body;
  for (size_t pos = jinja_template.find(kHead); pos != std::string_view::npos;
       pos = jinja_template.find(kHead, pos + 1)) {
    if (pos == 0) continue;
    const char quote = jinja_template[pos - 1];
    if (quote != '\'' && quote != '"') continue;
    size_t begin = pos + kHead.size();
    if (jinja_template.substr(begin, 1) == "\n") {
      begin += 1;
    } else if (jinja_template.substr(begin, 2) == "\\n") {
      begin += 2;
    } else {
      continue;
    }
    const size_t end = jinja_template.find(kEnd, begin);
    if (end == std::string_view::npos) break;
    if (LiteralBody(jinja_template.substr(begin, end - begin), quote, body) && !body.empty()) {
      return body;
    }
  }
  return "";
}

Result<std::string> RenderChat(ChatFormat format, const std::vector<ChatMessage>& messages,
                               bool add_generation_prompt, std::string_view bos_text,
                               std::string_view eos_text, bool include_leading_bos) {
  PC_ASSIGN_OR_RETURN(MarkedText text, RenderChatMarked(format, messages, add_generation_prompt,
                                                        bos_text, eos_text, include_leading_bos));
  return text.text();
}

Result<MarkedText> RenderChatMarked(ChatFormat format, const std::vector<ChatMessage>& messages,
                                    bool add_generation_prompt, std::string_view bos_text,
                                    std::string_view eos_text, bool include_leading_bos) {
  PC_RETURN_IF_ERROR(ValidateMessages(messages));
  MarkedText out;
  switch (format) {
    case ChatFormat::kChatMl:
      RenderChatMl(messages, add_generation_prompt, out);
      break;
    case ChatFormat::kLlama3:
      if (include_leading_bos) out.AppendTrusted(bos_text);
      RenderLlama3(messages, add_generation_prompt, out);
      break;
    case ChatFormat::kLlama2:
      PC_RETURN_IF_ERROR(RenderLlama2(messages, bos_text, eos_text, include_leading_bos, out));
      break;
    case ChatFormat::kZephyr:
      if (eos_text.empty()) return InvalidArgument("zephyr chat format needs the EOS token text");
      RenderZephyr(messages, add_generation_prompt, eos_text, out);
      break;
    case ChatFormat::kPlain:
      RenderPlain(messages, add_generation_prompt, out);
      break;
  }
  return out;
}

namespace {

// `text` without its first n bytes, marks kept.
MarkedText DropPrefix(const MarkedText& text, size_t n) {
  MarkedText out;
  size_t at = n;
  const std::string_view bytes(text.text());
  for (const auto& [begin, end] : text.user_ranges()) {
    if (end <= n) continue;
    const size_t b = std::max(begin, n);
    out.AppendTrusted(bytes.substr(at, b - at));
    out.AppendUser(bytes.substr(b, end - b));
    at = end;
  }
  out.AppendTrusted(bytes.substr(at));
  return out;
}

// Templates build turn markers from roles ('<|' + message['role'] + '|>'), so a standard role
// name is the template's text; any other role stays the user's (a role "im_end" must not make
// "<|im_end|>").
bool IsStandardRole(std::string_view key, std::string_view value) {
  static constexpr std::string_view kRoles[] = {"system",  "user",      "assistant", "tool",
                                                "ipython", "developer", "function"};
  return key == "role" &&
         std::find(std::begin(kRoles), std::end(kRoles), value) != std::end(kRoles);
}

std::vector<ChatMessage> PlainMessages(const nlohmann::ordered_json& messages) {
  std::vector<ChatMessage> out;
  for (const auto& m : messages) {
    ChatMessage c;
    if (m.is_object()) {
      const auto role = m.find("role");
      if (role != m.end() && role->is_string()) c.role = role->get<std::string>();
      const auto content = m.find("content");
      if (content != m.end() && content->is_string()) {
        c.content = content->get<std::string>();
      } else if (content != m.end() && !content->is_null()) {
        c.content = content->dump();
      }
    }
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace

ChatTemplate::ChatTemplate(std::string_view source, Options options)
    : options_(std::move(options)) {
  fallback_ = DetectChatFormat(source, &guessed_);
  default_system_ = DefaultSystemPrompt(source);
  if (Trim(source).empty()) return;
  Result<jinja::Template> t = jinja::Template::Parse(source);
  if (!t.ok()) {
    jinja_status_ = t.status().WithContext("chat template");
    return;
  }
  jinja_ = std::make_unique<jinja::Template>(std::move(t).value());
  guessed_ = false;
}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

std::string ChatTemplate::FormatName() const {
  return uses_jinja() ? "jinja" : std::string(ChatFormatName(fallback_));
}

nlohmann::ordered_json ChatTemplate::TemplateVariables(const ChatInput& input) const {
  return TemplateVariables(input, options_);
}

nlohmann::ordered_json ChatTemplate::TemplateVariables(const ChatInput& input,
                                                       const Options& options) {
  nlohmann::ordered_json vars = nlohmann::ordered_json::object();
  if (input.extra_variables.is_object()) {
    for (const auto& [name, value] : input.extra_variables.items()) vars[name] = value;
  }
  vars["messages"] = input.messages;
  if (!input.tools.is_null()) vars["tools"] = input.tools;
  vars["add_generation_prompt"] = input.add_generation_prompt;
  vars["bos_token"] = options.bos_text;
  vars["eos_token"] = options.eos_text;
  return vars;
}

Result<MarkedText> ChatTemplate::Render(const ChatInput& input) const {
  return RenderWith(input, options_);
}

Result<MarkedText> ChatTemplate::RenderWith(const ChatInput& input, const Options& options) const {
  if (!input.messages.is_array()) return InvalidArgument("chat messages must be a JSON array");
  if (input.messages.empty()) return InvalidArgument("no chat messages to render");
  if (!uses_jinja()) {
    std::vector<ChatMessage> messages = PlainMessages(input.messages);
    if (!default_system_.empty() && fallback_ == ChatFormat::kChatMl &&
        messages[0].role != "system") {
      messages.insert(messages.begin(), {"system", default_system_});
    }
    return RenderChatMarked(fallback_, messages, input.add_generation_prompt, options.bos_text,
                            options.eos_text, options.include_leading_bos);
  }
  jinja::Variables vars;
  const nlohmann::ordered_json variables = TemplateVariables(input, options);
  for (const auto& [name, value] : variables.items()) {
    if (name == "bos_token" || name == "eos_token") {
      vars.SetString(name, value.get<std::string>(), /*user_written=*/false);
    } else if (name == "add_generation_prompt") {
      vars.SetBool(name, value.get<bool>());
    } else if (name == "messages") {
      PC_RETURN_IF_ERROR(
          vars.SetJson(name, value, /*user_written=*/true, IsStandardRole).WithContext(name));
    } else {
      PC_RETURN_IF_ERROR(vars.SetJson(name, value, /*user_written=*/true).WithContext(name));
    }
  }
  jinja::RenderOptions render;
  render.now = options.now;
  Result<MarkedText> text = jinja_->Render(vars, render);
  if (!text.ok()) return text.status().WithContext("chat template");
  const std::string& bos = options.bos_text;
  if (!options.include_leading_bos && !bos.empty() && text->text().starts_with(bos) &&
      text->IsTrusted(0, bos.size())) {
    return DropPrefix(*text, bos.size());
  }
  return text;
}

Result<MarkedText> ChatTemplate::Render(const std::vector<ChatMessage>& messages,
                                        bool add_generation_prompt) const {
  ChatInput input;
  input.messages = ChatMessagesJson(messages);
  input.add_generation_prompt = add_generation_prompt;
  return Render(input);
}

namespace {

// Characters no template writes and no vocabulary merges: they mark where a message's text goes
// and stand for bos_token and eos_token, so that a template's own text is never mistaken for
// them (Phi-3 ends a conversation with eos_token "</s>" where the next turn starts "<|user|>").
constexpr std::string_view kSentinel = "\x01";
constexpr std::string_view kBos = "\x02";
constexpr std::string_view kEos = "\x03";

size_t CommonPrefix(std::string_view a, std::string_view b) {
  return std::mismatch(a.begin(), a.begin() + std::min(a.size(), b.size()), b.begin()).first -
         a.begin();
}

std::string Unmark(std::string s, const std::string& bos, const std::string& eos) {
  std::string out;
  for (char c : s) {
    if (c == kBos[0]) {
      out += bos;
    } else if (c == kEos[0]) {
      out += eos;
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::optional<ChatTemplate::Delta> ChatTemplate::MessageDelta(const std::vector<ChatMessage>& base,
                                                              const std::string& role) const {
  Options marked = options_;
  marked.bos_text = kBos;
  marked.eos_text = kEos;
  marked.include_leading_bos = false;
  std::vector<ChatMessage> longer = base;
  longer.push_back({role, std::string(kSentinel)});
  ChatInput input;
  input.messages = ChatMessagesJson(longer);
  input.add_generation_prompt = false;
  Result<MarkedText> full = RenderWith(input, marked);
  if (!full.ok()) return std::nullopt;
  std::string shorter;
  if (!base.empty()) {
    input.messages = ChatMessagesJson(base);
    Result<MarkedText> b = RenderWith(input, marked);
    if (!b.ok()) return std::nullopt;
    shorter = b->text();
  }
  const std::string& f = full->text();
  const size_t at = f.find(kSentinel);
  if (at == std::string::npos || f.find(kSentinel, at + 1) != std::string::npos) {
    return std::nullopt;
  }
  const size_t common = CommonPrefix(shorter, f);
  if (common > at) return std::nullopt;
  return Delta{f.substr(common, at - common), f.substr(at + kSentinel.size()),
               shorter.substr(common)};
}

std::optional<std::pair<std::string, std::string>> ChatTemplate::RoleWrap(
    const std::string& role) const {
  if (!uses_jinja()) return std::nullopt;
  // Conversations the new message is appended to: as little as the template accepts, and no
  // system message before a user turn (Mistral folds it into the last user turn).
  std::vector<std::vector<ChatMessage>> bases;
  if (role == "system") {
    bases = {{}};
  } else if (role == "user") {
    bases = {{{"user", "U"}, {"assistant", "A"}}, {}, {{"system", "S"}}};
  } else {
    bases = {{{"user", "U"}}, {{"system", "S"}, {"user", "U"}}};
  }
  for (const std::vector<ChatMessage>& base : bases) {
    std::optional<Delta> d = MessageDelta(base, role);
    if (!d) continue;
    // What a conversation has after its last turn (Phi-3's eos_token) is not the message's: the
    // shorter conversation shows it, or, with nothing before the message, a user turn's.
    std::string tail = d->tail;
    if (base.empty()) {
      std::optional<Delta> user = MessageDelta({{"user", "U"}, {"assistant", "A"}}, "user");
      if (user) tail = user->tail;
    }
    std::string after = std::move(d->after);
    if (!tail.empty() && after.size() >= tail.size() &&
        after.compare(after.size() - tail.size(), tail.size(), tail) == 0) {
      after.resize(after.size() - tail.size());
    }
    return std::make_pair(Unmark(d->before, options_.bos_text, options_.eos_text),
                          Unmark(after, options_.bos_text, options_.eos_text));
  }
  return std::nullopt;
}

std::string ChatTemplate::GenerationPrompt() const {
  Options marked = options_;
  marked.bos_text = kBos;
  marked.eos_text = kEos;
  ChatInput input;
  input.messages = ChatMessagesJson({{"user", "x"}});
  input.add_generation_prompt = false;
  Result<MarkedText> without = RenderWith(input, marked);
  input.add_generation_prompt = true;
  Result<MarkedText> with = RenderWith(input, marked);
  if (!without.ok() || !with.ok()) return "";
  return Unmark(with->text().substr(CommonPrefix(without->text(), with->text())), options_.bos_text,
                options_.eos_text);
}

std::optional<std::string> ChatTemplate::Warning() const {
  if (!jinja_status_.ok()) {
    return jinja_status_.message() + "; chat prompts use the " +
           std::string(ChatFormatName(fallback_)) + " format";
  }
  if (guessed_) {
    return "unrecognised chat template; chat prompts use the " +
           std::string(ChatFormatName(fallback_)) + " format";
  }
  return std::nullopt;
}

ChatTemplate::Options ChatTemplateOptions(const Tokenizer& tokenizer) {
  ChatTemplate::Options o;
  if (tokenizer.bos() >= 0) o.bos_text = tokenizer.Piece(tokenizer.bos());
  if (tokenizer.eos() >= 0) o.eos_text = tokenizer.Piece(tokenizer.eos());
  return o;
}

nlohmann::ordered_json ChatMessagesJson(const std::vector<ChatMessage>& messages) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const ChatMessage& m : messages) out.push_back({{"role", m.role}, {"content", m.content}});
  return out;
}

}  // namespace promptcache
