// Writing an HfVocab as the tokenizer.ggml.* keys of a GGUF file. Split from hf_vocab.cc, which
// reads the Hugging Face JSON files into the HfVocab.
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tokenizer/hf_vocab.h"

namespace promptcache {
namespace {

GgufValue StringArray(const std::vector<std::string>& items) {
  GgufValue g;
  g.type = GgufValueType::kArray;
  g.array_type = GgufValueType::kString;
  g.array.reserve(items.size());
  for (const std::string& s : items) {
    GgufValue e;
    e.type = GgufValueType::kString;
    e.scalar = s;
    g.array.push_back(std::move(e));
  }
  return g;
}

template <typename T>
GgufValue NumberArray(GgufValueType type, const std::vector<T>& items) {
  GgufValue g;
  g.type = GgufValueType::kArray;
  g.array_type = type;
  g.array.reserve(items.size());
  for (T x : items) {
    GgufValue e;
    e.type = type;
    if constexpr (std::is_floating_point_v<T>) {
      e.scalar = static_cast<double>(x);
    } else {
      e.scalar = static_cast<int64_t>(x);
    }
    g.array.push_back(std::move(e));
  }
  return g;
}

}  // namespace

void WriteHfVocab(const HfVocab& v, GgufWriter* w) {
  w->SetString("tokenizer.ggml.model", v.model);
  if (!v.pre.empty()) w->SetString("tokenizer.ggml.pre", v.pre);
  w->SetValue("tokenizer.ggml.tokens", StringArray(v.tokens));
  if (!v.scores.empty()) {
    w->SetValue("tokenizer.ggml.scores", NumberArray(GgufValueType::kF32, v.scores));
  }
  w->SetValue("tokenizer.ggml.token_type", NumberArray(GgufValueType::kI32, v.types));
  if (!v.merges.empty()) w->SetValue("tokenizer.ggml.merges", StringArray(v.merges));
  const std::pair<const char*, int32_t> ids[] = {
      {"tokenizer.ggml.bos_token_id", v.bos},     {"tokenizer.ggml.eos_token_id", v.eos},
      {"tokenizer.ggml.unknown_token_id", v.unk}, {"tokenizer.ggml.seperator_token_id", v.sep},
      {"tokenizer.ggml.padding_token_id", v.pad}, {"tokenizer.ggml.cls_token_id", v.cls},
      {"tokenizer.ggml.mask_token_id", v.mask},
  };
  for (const auto& [key, id] : ids) {
    if (id >= 0) w->SetU32(key, static_cast<uint32_t>(id));
  }
  if (v.add_bos) w->SetBool("tokenizer.ggml.add_bos_token", *v.add_bos);
  if (v.add_eos) w->SetBool("tokenizer.ggml.add_eos_token", *v.add_eos);
  if (v.add_space_prefix) w->SetBool("tokenizer.ggml.add_space_prefix", *v.add_space_prefix);
  if (!v.lstrip.empty()) w->SetValue(kLstripKey, NumberArray(GgufValueType::kI32, v.lstrip));
  if (!v.rstrip.empty()) w->SetValue(kRstripKey, NumberArray(GgufValueType::kI32, v.rstrip));
  if (!v.chat_template.empty()) w->SetString("tokenizer.chat_template", v.chat_template);
  for (const auto& [name, text] : v.named_templates) {
    w->SetString("tokenizer.chat_template." + name, text);
  }
}

}  // namespace promptcache
