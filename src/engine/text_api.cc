// The public text helpers (include/promptcache/text.h): the engine's model's tokenizer and chat
// template, the same way `promptcache run` tokenizes (tools/cli_common.cc PromptTokens).
#include <algorithm>
#include <iterator>

#include "chat/chat_template.h"
#include "model/model.h"
#include "promptcache/text.h"

namespace promptcache {

ModelInfo GetModelInfo(const Engine& engine) {
  const Model& model = engine.model();
  const ModelConfig& config = model.config();
  const Tokenizer& tok = model.tokenizer();
  ModelInfo info;
  info.architecture = config.architecture;
  info.name = config.name;
  info.vocab_size = tok.vocab_size();
  info.trained_context = config.MaxContext();
  info.context_length =
      engine.options().context > 0 ? engine.options().context : config.context_length;
  info.bos = tok.bos();
  info.eos = tok.eos();
  info.adds_bos = tok.adds_bos() && tok.bos() >= 0;
  info.chat_template = model.chat_template();
  return info;
}

std::vector<int32_t> Tokenize(const Engine& engine, std::string_view text, bool add_bos,
                              bool special) {
  return engine.model().tokenizer().Encode(text, add_bos, special);
}

std::vector<int32_t> TokenizeForEmbedding(const Engine& engine, std::string_view text) {
  const Model& model = engine.model();
  const Tokenizer& tok = model.tokenizer();
  std::vector<int32_t> ids = tok.Encode(text, true, engine.options().special_tokens_in_text);
  const GgufValue* add_eos = model.file().Find("tokenizer.ggml.add_eos_token");
  bool add = false;
  if (add_eos != nullptr && add_eos->AsBool(&add) && add && tok.eos() >= 0) {
    ids.push_back(tok.eos());
  }
  return ids;
}

Result<std::vector<int32_t>> TokenizeChat(const Engine& engine,
                                          const std::vector<ChatTurn>& messages,
                                          bool add_generation_prompt) {
  const Model& model = engine.model();
  const Tokenizer& tok = model.tokenizer();
  std::vector<ChatMessage> chat;
  chat.reserve(messages.size());
  for (const ChatTurn& m : messages) chat.push_back({m.role, m.content});
  const ChatTemplate chat_template(model.chat_template(), ChatTemplateOptions(tok));
  PC_ASSIGN_OR_RETURN(MarkedText rendered, chat_template.Render(chat, add_generation_prompt));
  // Trusted callers' spellings become special tokens as in the engine's chat completions.
  if (engine.options().special_tokens_in_text) return tok.Encode(rendered.text(), true, true);
  return tok.Encode(rendered, /*add_bos=*/true);
}

std::string Detokenize(const Engine& engine, const std::vector<int32_t>& tokens, bool special) {
  const Tokenizer& tok = engine.model().tokenizer();
  std::vector<int32_t> valid;
  valid.reserve(tokens.size());
  std::copy_if(tokens.begin(), tokens.end(), std::back_inserter(valid),
               [&](int32_t id) { return id >= 0 && id < tok.vocab_size(); });
  return tok.Decode(valid, special);
}

bool IsEndOfGeneration(const Engine& engine, int32_t token) {
  const Tokenizer& tok = engine.model().tokenizer();
  return token >= 0 && token < tok.vocab_size() && tok.IsEndOfGeneration(token);
}

}  // namespace promptcache
