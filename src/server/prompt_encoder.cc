#include "server/prompt_encoder.h"

#include <algorithm>

namespace promptcache {

PromptEncoder::PromptEncoder(const Tokenizer& tokenizer, std::string_view chat_template,
                             bool trust_clients)
    : tok_(tokenizer),
      template_(chat_template, ChatTemplateOptions(tokenizer)),
      trust_clients_(trust_clients) {}

Result<std::vector<int32_t>> PromptEncoder::FromPrompt(const std::string& text,
                                                       const std::vector<int32_t>& ids,
                                                       bool is_tokens) const {
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
  std::vector<int32_t> tokens = tok_.Encode(text, /*add_bos=*/true, trust_clients_);
  if (tokens.empty()) return InvalidArgument("'prompt' is empty");
  return tokens;
}

std::vector<int32_t> PromptEncoder::EncodeChat(const MarkedText& text) const {
  if (trust_clients_) return tok_.Encode(text.text(), /*add_bos=*/true, /*parse_special=*/true);
  return tok_.Encode(text, /*add_bos=*/true);
}

Result<BuiltPrompt> PromptEncoder::FromMessages(const std::vector<ApiMessage>& messages,
                                                bool add_generation_prompt) const {
  if (messages.empty()) return InvalidArgument("'messages' must not be empty");
  std::vector<ChatMessage> chat;
  int last_breakpoint = -1;
  for (size_t i = 0; i < messages.size(); ++i) {
    chat.push_back({messages[i].role, messages[i].content});
    if (messages[i].cache_breakpoint) last_breakpoint = static_cast<int>(i);
  }
  Result<MarkedText> text = template_.Render(chat, add_generation_prompt);
  if (!text.ok()) return text.status();
  BuiltPrompt out;
  out.tokens = EncodeChat(*text);
  if (out.tokens.empty()) return InvalidArgument("the rendered conversation is empty");
  if (last_breakpoint >= 0) {
    const std::vector<ChatMessage> prefix(chat.begin(), chat.begin() + last_breakpoint + 1);
    // A template may refuse a conversation cut short (one that must end with a user turn, say):
    // the breakpoint then pins nothing rather than failing the request.
    Result<MarkedText> prefix_text = template_.Render(prefix, /*add_generation_prompt=*/false);
    if (!prefix_text.ok()) return out;
    const std::vector<int32_t> prefix_tokens = EncodeChat(*prefix_text);
    const size_t n = std::min(prefix_tokens.size(), out.tokens.size());
    const auto mismatch =
        std::mismatch(prefix_tokens.begin(), prefix_tokens.begin() + n, out.tokens.begin());
    out.pin_tokens = static_cast<int>(mismatch.first - prefix_tokens.begin());
  }
  return out;
}

Result<BuiltPrompt> PromptEncoder::Build(const ApiRequest& request) const {
  BuiltPrompt out;
  if (request.kind == ApiKind::kChat) {
    PC_ASSIGN_OR_RETURN(out, FromMessages(request.messages, /*add_generation_prompt=*/true));
  } else {
    PC_ASSIGN_OR_RETURN(out.tokens, FromPrompt(request.prompt_text, request.prompt_tokens,
                                               request.prompt_is_tokens));
  }
  if (request.pin) out.pin_tokens = -1;
  return out;
}

Result<BuiltPrompt> PromptEncoder::Build(const PrefixRequest& request) const {
  if (!request.messages.empty()) {
    return FromMessages(request.messages, request.add_generation_prompt);
  }
  BuiltPrompt out;
  PC_ASSIGN_OR_RETURN(
      out.tokens, FromPrompt(request.prompt_text, request.prompt_tokens, request.prompt_is_tokens));
  return out;
}

}  // namespace promptcache
