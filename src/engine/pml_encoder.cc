#include "engine/pml_encoder.h"

#include <algorithm>

#include "core/log.h"

namespace promptcache {
namespace {

// A character no vocabulary merges with anything: text after it tokenizes as if it began the
// document, minus the dummy prefix, which goes before the sentinel.
constexpr std::string_view kSentinel = "\x01";

constexpr const char* kRoles[] = {"system", "user", "assistant"};

// The text the format writes before and after `role`'s content.
std::pair<std::string, std::string> RenderWrap(ChatFormat format, const std::string& role,
                                               const std::string& bos, const std::string& eos) {
  if (format == ChatFormat::kLlama2) {
    // Llama-2 folds the system message into the first user turn; PML renders each turn alone.
    if (role == "system") return {"<<SYS>>\n", "\n<</SYS>>\n\n"};
    if (role == "user") return {"[INST] ", " [/INST]"};
    return {" ", " " + eos};
  }
  const std::string marker(kSentinel);
  Result<std::string> text = RenderChat(format, {{role, marker}}, false, bos, eos);
  if (!text.ok()) return {"", "\n"};
  const size_t at = text->find(marker);
  if (at == std::string::npos) return {"", "\n"};
  return {text->substr(0, at), text->substr(at + marker.size())};
}

}  // namespace

ModelPmlEncoder::ModelPmlEncoder(const Model& model, int context, bool trust_user_text)
    : tok_(model.tokenizer()),
      context_(context > 0 ? context : model.config().context_length),
      trust_user_text_(trust_user_text) {
  // An entry's text is at least as long as the input it stands for: SentencePiece's "▁" is three
  // bytes for one space, GPT-2's byte map two for one byte, "<0x0A>" six for one.
  for (int32_t id = 0; id < tok_.vocab_size(); ++id) {
    max_token_bytes_ = std::max(max_token_bytes_, static_cast<int>(tok_.Piece(id).size()));
  }
  const ChatTemplate::Options options = ChatTemplateOptions(tok_);
  const ChatTemplate chat(model.chat_template(), options);
  if (std::optional<std::string> warning = chat.Warning()) {
    PC_LOG_WARN("%s (PML role tags too)", warning->c_str());
  }
  format_ = chat.fallback_format();
  uses_jinja_ = chat.uses_jinja();
  for (const char* role : kRoles) {
    // The model's own template where it writes this role; the fallback family where it does
    // not (Gemma's template refuses system turns).
    std::optional<std::pair<std::string, std::string>> wrap;
    if (chat.uses_jinja()) wrap = chat.RoleWrap(role);
    wraps_.push_back(wrap ? *wrap : RenderWrap(format_, role, options.bos_text, options.eos_text));
  }
  if (chat.uses_jinja() || format_ != ChatFormat::kLlama2) {
    generation_prompt_ = chat.GenerationPrompt();
  }
  if (tok_.kind() == TokenizerKind::kSpm) sentinel_ = tok_.Encode(kSentinel, false, true);
}

std::vector<int32_t> ModelPmlEncoder::EncodeRun(const MarkedText& text) const {
  if (trust_user_text_) return tok_.Encode(text.text(), /*add_bos=*/false, /*parse_special=*/true);
  return tok_.Encode(text, /*add_bos=*/false);
}

std::vector<int32_t> ModelPmlEncoder::Tokenize(const MarkedText& text) const {
  if (text.empty()) return {};
  if (sentinel_.empty()) return EncodeRun(text);
  // SentencePiece puts its dummy-prefix space before the text; put it before a sentinel instead
  // and drop both.
  MarkedText with = MarkedText::Trusted(kSentinel);
  with.Append(text);
  std::vector<int32_t> ids = EncodeRun(with);
  if (ids.size() >= sentinel_.size() &&
      std::equal(sentinel_.begin(), sentinel_.end(), ids.begin())) {
    ids.erase(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(sentinel_.size()));
    return ids;
  }
  return EncodeRun(text);  // a vocabulary that merges the sentinel: as is
}

std::optional<int32_t> ModelPmlEncoder::Bos() const {
  if (tok_.adds_bos() && tok_.bos() >= 0) return tok_.bos();
  return std::nullopt;
}

std::pair<std::string, std::string> ModelPmlEncoder::RoleWrap(std::string_view role) const {
  for (size_t i = 0; i < std::size(kRoles); ++i) {
    if (role == kRoles[i]) return wraps_[i];
  }
  return {"", ""};
}

Status AddGenerationPrompt(const PmlPrompt& prompt, const ModelPmlEncoder& encoder, PmlPlan* plan) {
  if (prompt.text.empty() || prompt.text.back().role != "user") return Status::Ok();
  if (encoder.generation_prompt().empty()) return Status::Ok();
  // The new text exactly as PlanPrompt renders it, plus the generation prompt, in one run.
  MarkedText text = RenderPromptText(prompt, encoder);
  text.AppendTrusted(encoder.generation_prompt());
  plan->new_text.tokens = encoder.Tokenize(text);
  plan->end = plan->new_text.end();
  const int context = encoder.ContextLength();
  if (context > 0 && plan->end > context) {
    return OutOfRange(prompt.file + ": prompt for schema '" + prompt.schema + "': needs " +
                      std::to_string(plan->end) + " positions with the assistant's header, " +
                      "more than the model's context of " + std::to_string(context));
  }
  return Status::Ok();
}

}  // namespace promptcache
