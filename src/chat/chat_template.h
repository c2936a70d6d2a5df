// Chat templates: how a conversation of messages becomes prompt text.
//
// GGUF files carry their chat template as Jinja source (`tokenizer.chat_template`), and a user
// may give another (`--chat-template FILE`). ChatTemplate renders it with promptcache's own Jinja
// interpreter (src/jinja), with the variables Hugging Face passes (messages, tools,
// add_generation_prompt, bos_token, eos_token, raise_exception, strftime_now), so the prompt is
// the one the model was trained on, character for character (tested against Jinja2 itself on 17
// real models' templates), tool definitions and tool calls included.
//
// The hand-written families below (ChatML, Llama-3, Llama-2, Zephyr, plain) are the fallback:
// for a file without a template (plain "Role: text"), and for a template the interpreter cannot
// parse, which is then recognised by its markers as before (the caller is told, to warn).
//
// The rendered text contains special-token spellings ("<|im_start|>", "</s>", ...) that must
// become single tokens, while the same spellings inside a message must not (a user could end a
// turn or forge a system message): rendering marks the template's text as trusted and every
// string that came from the conversation (contents, tool arguments, names) as the user's, through
// whatever slicing, trimming or concatenation the template does, for
// Tokenizer::Encode(const MarkedText&, ...). Standard role names (system, user, assistant, tool,
// ipython, developer, function) count as the template's: some templates spell turn markers as
// '<|' + message['role'] + '|>'.
#pragma once

#include <ctime>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/marked_text.h"
#include "core/status.h"
#include "tokenizer/tokenizer.h"

namespace promptcache {

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

enum class ChatFormat {
  kChatMl,  // <|im_start|>role\n...<|im_end|>\n (Qwen2, SmolLM2, OpenHermes, ...)
  kLlama3,  // <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> (Llama 3.x)
  kLlama2,  // <s>[INST] <<SYS>>\n...\n<</SYS>>\n\n... [/INST] ... </s> (Llama-2-chat)
  kZephyr,  // <|role|>\n...</s>\n (Zephyr, TinyLlama-Chat)
  kPlain,   // System: ...\nUser: ...\nAssistant: (no template)
};

// "chatml", "llama3", "llama2", "zephyr", "plain".
std::string_view ChatFormatName(ChatFormat format);
// The inverse of ChatFormatName, for a command-line override; InvalidArgument lists the names.
Result<ChatFormat> ParseChatFormat(std::string_view name);

// The family of a `tokenizer.chat_template`, recognised by the markers it writes: ChatML
// "<|im_start|>", Llama-3 "<|start_header_id|>", Zephyr "<|user|>" with "</s>"/eos_token,
// Llama-2 "[INST]" with "<<SYS>>". An empty template gives kPlain. When the template is not
// empty and not one of those families, *guessed (if given) is set to true and the result is
// the closest rendering: kLlama2 for other "[INST]" templates (Mistral's), kPlain otherwise
// (Phi-3, Gemma, ...); the caller should warn that the prompt may not match the model's format.
ChatFormat DetectChatFormat(std::string_view jinja_template, bool* guessed = nullptr);

// The system prompt a ChatML template inserts when the conversation has no system message
// (SmolLM2's "You are a helpful AI assistant named SmolLM, ...", Qwen2's "You are a helpful
// assistant."), or "" when it inserts none. RenderChat does not add it by itself: to reproduce
// such a template, prepend {"system", DefaultSystemPrompt(...)} when messages[0] is no system
// message.
std::string DefaultSystemPrompt(std::string_view jinja_template);

// Renders `messages` as the family's official template does, followed, when
// add_generation_prompt is set, by the header that makes the model answer as the assistant
// (ChatML "<|im_start|>assistant\n", Llama-3 "<|start_header_id|>assistant<|end_header_id|>\n\n",
// Zephyr "<|assistant|>\n", plain "Assistant:"; Llama-2 has none: its prompt ends at " [/INST]").
//
// bos_text/eos_text are the vocabulary's BOS/EOS spellings (e.g. "<s>"/"</s>",
// "<|begin_of_text|>"); Llama-2 and Zephyr write eos_text after turns and Llama-2 writes
// bos_text before every user turn after the first. The BOS that starts Llama-2 and Llama-3
// prompts is left out unless include_leading_bos is set, because the engine adds the BOS token
// itself (Tokenizer::Encode with add_bos) and two BOS tokens would differ from training.
//
// Family details, as in the official templates: Llama-3 trims whitespace around each content;
// Llama-2 trims each user and assistant turn, folds the system message into the first user
// turn and requires user/assistant alternation after it; ChatML and Zephyr keep content as is.
// Llama-3 is rendered in its 3.0 form: 3.1+ templates also write a "Cutting Knowledge Date"
// header into the system turn, which is not reproduced.
//
// InvalidArgument for an empty conversation, a role other than system/user/assistant (naming
// it and its index), a Llama-2 conversation that does not alternate, and a Llama-2 or Zephyr
// rendering without the EOS text (or, for Llama-2, the BOS text) it needs.
Result<std::string> RenderChat(ChatFormat format, const std::vector<ChatMessage>& messages,
                               bool add_generation_prompt, std::string_view bos_text,
                               std::string_view eos_text, bool include_leading_bos = false);
// The same rendering with the messages' contents marked as user-written.
Result<MarkedText> RenderChatMarked(ChatFormat format, const std::vector<ChatMessage>& messages,
                                    bool add_generation_prompt, std::string_view bos_text,
                                    std::string_view eos_text, bool include_leading_bos = false);

// A conversation as chat templates see it, in the format of OpenAI's API and Hugging Face's
// apply_chat_template: message objects with "role" and "content" and, for tool use, "tool_calls"
// ([{"id", "type": "function", "function": {"name", "arguments"}}]), "tool_call_id" and "name";
// the tools offered ([{"type": "function", "function": {"name", "description", "parameters"}}]);
// and any further variables a template reads (date_string, documents, ...).
struct ChatInput {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;  // null: none given (the template sees no `tools` variable)
  bool add_generation_prompt = true;
  nlohmann::ordered_json extra_variables;  // null or an object of name -> value
};

namespace jinja {
class Template;
}

class ChatTemplate {
 public:
  struct Options {
    std::string bos_text;  // the vocabulary's BOS and EOS spellings: bos_token, eos_token
    std::string eos_text;
    // Keep a BOS the template writes at the very start. By default it is dropped, because the
    // engine adds the BOS token itself (Tokenizer::Encode with add_bos) and two would differ
    // from training.
    bool include_leading_bos = false;
    // The clock strftime_now() reads; unset: the local time.
    std::function<std::tm()> now;
  };

  // `source`: the Jinja text, empty for none. Never fails: a template the interpreter cannot
  // parse falls back to the family DetectChatFormat recognises (jinja_status() says why).
  ChatTemplate(std::string_view source, Options options);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  // Renders with the Jinja interpreter (else with fallback_format()).
  bool uses_jinja() const { return jinja_ != nullptr; }
  // OK, or why a non-empty template is not rendered as Jinja.
  const Status& jinja_status() const { return jinja_status_; }
  ChatFormat fallback_format() const { return fallback_; }
  // A non-empty template is rendered with a family chosen by a guess (the caller should warn).
  bool fallback_guessed() const { return guessed_; }
  // "jinja", or the fallback family's name ("chatml", "plain", ...).
  std::string FormatName() const;

  // The conversation as prompt text, the conversation's strings marked as user-written.
  // InvalidArgument when the template rejects the conversation (raise_exception("...") gives
  // "chat template: line N: ..."), or the fallback cannot render it (an unknown role, tool
  // messages); ResourceExhausted when the template runs past the interpreter's limits.
  Result<MarkedText> Render(const ChatInput& input) const;
  Result<MarkedText> Render(const std::vector<ChatMessage>& messages,
                            bool add_generation_prompt) const;
  // The variables Render gives the template: messages, tools (when given),
  // add_generation_prompt, bos_token, eos_token and the extra variables.
  nlohmann::ordered_json TemplateVariables(const ChatInput& input) const;

  // For prompts assembled turn by turn (PML role tags): the text the template writes before and
  // after a message of `role` ("system", "user", "assistant") in the middle of a conversation,
  // found by rendering a short conversation with and without one more message; nullopt when the
  // template refuses every conversation tried (Gemma has no system turns).
  std::optional<std::pair<std::string, std::string>> RoleWrap(const std::string& role) const;
  // What add_generation_prompt adds after a user turn ("<|im_start|>assistant\n"), "" if none.
  std::string GenerationPrompt() const;
  // A line for the log when the model's template is not what renders chats (it does not parse,
  // or its family was guessed); nullopt when all is well.
  std::optional<std::string> Warning() const;

 private:
  // What appending a message of `role` to `base` adds: the text before and after its content,
  // and the end of the shorter conversation that the longer one does not share (bos_token and
  // eos_token spelled as sentinels).
  struct Delta {
    std::string before, after, tail;
  };
  std::optional<Delta> MessageDelta(const std::vector<ChatMessage>& base,
                                    const std::string& role) const;
  Result<MarkedText> RenderWith(const ChatInput& input, const Options& options) const;
  static nlohmann::ordered_json TemplateVariables(const ChatInput& input, const Options& options);

  std::unique_ptr<jinja::Template> jinja_;
  Status jinja_status_;
  ChatFormat fallback_ = ChatFormat::kPlain;
  bool guessed_ = false;
  std::string default_system_;  // the fallback's ChatML default system prompt
  Options options_;
};

// Options with the vocabulary's BOS and EOS spellings (empty when it has none).
ChatTemplate::Options ChatTemplateOptions(const Tokenizer& tokenizer);

// Messages as ChatInput's JSON: [{"role": ..., "content": ...}, ...].
nlohmann::ordered_json ChatMessagesJson(const std::vector<ChatMessage>& messages);

}  // namespace promptcache
