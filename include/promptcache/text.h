// Text in and out of the token ids an Engine works on, with the tokenizer and chat template of
// the engine's model: what a program embedding promptcache needs to build a CompletionRequest
// from text (CompletionRequest::prompt is token ids) and to read the model's particulars.
//
// Tokenize and TokenizeChat give exactly the prompt `promptcache run -p TEXT` (and `--chat`)
// gives, so a program and the CLI agree on the same input. All of these are cheap and may be
// called from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "promptcache/engine.h"
#include "promptcache/status.h"

namespace promptcache {

// What the engine's model file says about itself.
struct ModelInfo {
  std::string architecture;   // general.architecture: "llama", "qwen2", "gemma3", ...
  std::string name;           // general.name, for display ("" when the file has none)
  int32_t vocab_size = 0;     // token ids are in [0, vocab_size)
  int context_length = 0;     // positions a sequence may use in this engine
  int trained_context = 0;    // what the model was trained for
  int32_t bos = -1;           // beginning-of-sequence id; -1: none
  int32_t eos = -1;           // end-of-sequence id; -1: none
  bool adds_bos = false;      // Tokenize(..., add_bos = true) prepends `bos`
  std::string chat_template;  // the Jinja chat template in use ("" when there is none)
};

// The engine's model's particulars.
ModelInfo GetModelInfo(const Engine& engine);

// Token ids of `text`, with BOS in front when `add_bos` is set and the vocabulary adds one.
// Special-token spellings ("<|im_end|>", "</s>") in the text stay text unless `special` is set.
std::vector<int32_t> Tokenize(const Engine& engine, std::string_view text, bool add_bos = true,
                              bool special = false);

// Token ids of one embedding input (EmbeddingRequest::inputs): BOS in front as the vocabulary
// says, and EOS at the end when the model file asks for it (tokenizer.ggml.add_eos_token, which
// embedding models such as Qwen3-Embedding set: their last-token pooling reads it), as llama.cpp
// tokenizes embedding inputs. Special-token spellings stay text unless
// EngineOptions::special_tokens_in_text.
std::vector<int32_t> TokenizeForEmbedding(const Engine& engine, std::string_view text);

// One message of a conversation: role "system", "user" or "assistant", and its text.
struct ChatTurn {
  std::string role;
  std::string content;
};

// The token ids of a conversation rendered through the model's chat template (or
// EngineOptions::chat_template), ending with the header that makes the model answer as the
// assistant when `add_generation_prompt` is set; BOS as the vocabulary wants. Special-token
// spellings in the messages stay text (unless EngineOptions::special_tokens_in_text). A one-line
// error when the template fails on them (e.g. a role it does not know).
Result<std::vector<int32_t>> TokenizeChat(const Engine& engine,
                                          const std::vector<ChatTurn>& messages,
                                          bool add_generation_prompt = true);

// The text of `tokens`; control tokens (BOS, EOS) are left out unless `special`, and ids outside
// [0, vocab_size) are skipped.
std::string Detokenize(const Engine& engine, const std::vector<int32_t>& tokens,
                       bool special = false);

// Whether generating `token` ends a completion: EOS, and end-of-turn tokens such as <|eot_id|>,
// <|im_end|>, <end_of_turn>.
bool IsEndOfGeneration(const Engine& engine, int32_t token);

}  // namespace promptcache
