// The PmlTextEncoder of a loaded model: its tokenizer and chat template, as PML schemas and
// prompts see them.
//
// Tokenization. PML tokenizes each text run (module text, always-included text, a parameter
// argument, the prompt's new text) on its own and never adds a separator between runs, so a run
// is tokenized as the continuation of a document: no BOS and no SentencePiece dummy-prefix space
// (the space SentencePiece puts before a whole text). Text is taken exactly as written: a run
// that should start a new word starts with a space (or a line break) in the schema. Special-token
// spellings ("<|im_start|>") become their tokens in the schema's text and the role markers, not
// in parameter arguments or the prompt's new text: those stay text, so a user cannot end a turn
// or write an EOS (trust_user_text lifts this for trusted callers). The full recompute that modules
// are compared with uses the very same token ids at the same positions, so with only
// always-included text and one module the two are identical.
//
// Chat roles. <system>, <user> and <assistant> wrap their text as the model's chat template writes
// a message of that role in the middle of a conversation (ChatTemplate::RoleWrap: the model's
// own Jinja template, rendered with and without one more message); a model without a template
// gets the plain "System: " ... "\n" rendering, and a role the template refuses (Gemma's system)
// the family's. A prompt whose new text ends with a <user> turn also gets the template's
// generation prompt (ChatML "<|im_start|>assistant\n", plain "Assistant:"), as a chat client
// would expect: see AddGenerationPrompt.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chat/chat_template.h"
#include "model/model.h"
#include "pml/pml.h"

namespace promptcache {

class ModelPmlEncoder : public PmlTextEncoder {
 public:
  // `context`: the positions a sequence may use (the engine's context; <= 0: the model's).
  // trust_user_text: special-token spellings in arguments and new text become tokens too.
  ModelPmlEncoder(const Model& model, int context, bool trust_user_text = false);

  std::vector<int32_t> Tokenize(const MarkedText& text) const override;
  std::optional<int32_t> Bos() const override;
  std::pair<std::string, std::string> RoleWrap(std::string_view role) const override;
  int ContextLength() const override { return context_; }
  int MaxTokenBytes() const override { return max_token_bytes_; }

  // The fallback family, and whether the model's Jinja template is used instead.
  ChatFormat format() const { return format_; }
  bool uses_jinja() const { return uses_jinja_; }
  // What makes the model answer as the assistant ("" for formats without one, e.g. Llama-2).
  const std::string& generation_prompt() const { return generation_prompt_; }

 private:
  std::vector<int32_t> EncodeRun(const MarkedText& text) const;

  const Tokenizer& tok_;
  int context_;
  int max_token_bytes_ = 0;  // the longest vocabulary entry, in bytes
  bool trust_user_text_;
  ChatFormat format_;
  bool uses_jinja_ = false;
  std::vector<int32_t> sentinel_;  // SentencePiece: the tokens of the dummy prefix + sentinel
  std::vector<std::pair<std::string, std::string>> wraps_;  // system, user, assistant
  std::string generation_prompt_;
};

// When the prompt's new text ends with a <user> turn, appends the encoder's generation prompt
// to the plan's new text (retokenizing the whole new text, so the boundary is tokenized as one
// run) and moves plan->end. OutOfRange when the result no longer fits the context.
Status AddGenerationPrompt(const PmlPrompt& prompt, const ModelPmlEncoder& encoder, PmlPlan* plan);

}  // namespace promptcache
