// Chat templates: how a conversation of system/user/assistant messages becomes prompt text.
//
// GGUF files carry their chat template as Jinja source (`tokenizer.chat_template`). Rather than
// interpret Jinja, promptcache recognises the handful of families that Llama-architecture models
// use and renders each in C++, character for character what the official template produces
// (checked against the real templates rendered by Jinja). A template of no known family falls
// back to a plain "Role: text" transcript, and the caller is told so it can warn.
//
// The rendered text contains special-token spellings ("<|im_start|>", "</s>", ...) that must
// become single tokens, while the same spellings inside a message must not (a user could end a
// turn or forge a system message): RenderChatMarked marks the template's text as trusted and the
// messages' contents as the user's, for Tokenizer::Encode(const MarkedText&, ...).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/marked_text.h"
#include "core/status.h"

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

}  // namespace promptcache
