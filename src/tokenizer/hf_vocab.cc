#include "tokenizer/hf_vocab.h"

#include <algorithm>
#include <exception>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "tokenizer/tokenizer.h"

namespace promptcache {
namespace {

using Json = nlohmann::json;

// Larger than any real vocabulary (Gemma's 262k), small enough that a hostile id cannot make the
// converter allocate gigabytes.
constexpr int64_t kMaxVocab = int64_t{1} << 22;

// The pre-tokenizer expressions of Hugging Face's tokenizer.json files, as those files spell them,
// with the tokenizer.ggml.pre name llama.cpp gives each.
struct KnownSplit {
  const char* regex;
  const char* pre;
};
constexpr KnownSplit kKnownSplits[] = {
    {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|)"
     R"( ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
     "llama-bpe"},
    {R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|)"
     R"( ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
     "qwen2"},
    {R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+)"
     R"((?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+)"
     R"([\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}|)"
     R"( ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
     "gpt-4o"},
};

const char* TypeName(const Json& j) { return j.type_name(); }

// obj[key] when obj is an object holding key, else null.
const Json* Member(const Json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

bool BoolMember(const Json& obj, const char* key, bool def) {
  const Json* v = Member(obj, key);
  return v != nullptr && v->is_boolean() ? v->get<bool>() : def;
}

std::string StringMember(const Json& obj, const char* key) {
  const Json* v = Member(obj, key);
  return v != nullptr && v->is_string() ? v->get<std::string>() : std::string();
}

Status ParseJson(std::string_view text, const char* file, Json* out) {
  try {
    *out = Json::parse(text.begin(), text.end());
  } catch (const Json::exception& e) {
    return InvalidArgument(std::string(file) + ": not valid JSON " + JsonProblem(e));
  }
  if (!out->is_object()) {
    return InvalidArgument(std::string(file) + ": expected a JSON object, found " + TypeName(*out));
  }
  return Status::Ok();
}

// The same rule as llama.cpp's converter: added tokens that some models leave non-special although
// they are control tokens (<|...|> spellings, Gemma's <unusedN>, <mask>, ...).
bool LooksSpecial(std::string_view t) {
  auto wraps = [&](std::string_view open, std::string_view close) {
    return t.size() >= std::max(open.size(), close.size()) && t.substr(0, open.size()) == open &&
           t.substr(t.size() - close.size()) == close;
  };
  return t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]" || wraps("<|", "|>") ||
         wraps("<\xEF\xBD\x9C", "\xEF\xBD\x9C>") || wraps("<unused", ">");
}

bool IsByteToken(std::string_view t) {
  auto hex = [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
  };
  return t.size() == 6 && t.substr(0, 3) == "<0x" && hex(t[3]) && hex(t[4]) && t[5] == '>';
}

std::string ReplaceAll(std::string s, std::string_view from, std::string_view to) {
  for (size_t pos = 0; (pos = s.find(from, pos)) != std::string::npos; pos += to.size()) {
    s.replace(pos, from.size(), to);
  }
  return s;
}

struct AddedToken {
  int32_t id;
  std::string content;
  bool special, lstrip, rstrip, normalized;
};

// Reads an id field: an integer in [0, kMaxVocab).
Status ReadId(const Json& v, const std::string& what, int32_t* id) {
  if (!v.is_number_integer()) {
    return InvalidArgument(what + ": expected an integer id, found " + TypeName(v));
  }
  const int64_t x =
      v.is_number_unsigned()
          ? static_cast<int64_t>(std::min<uint64_t>(v.get<uint64_t>(), uint64_t{1} << 62))
          : v.get<int64_t>();
  if (x < 0 || x >= kMaxVocab) {
    return InvalidArgument(what + ": id " + std::to_string(x) + " is out of range [0, " +
                           std::to_string(kMaxVocab) + ")");
  }
  *id = static_cast<int32_t>(x);
  return Status::Ok();
}

// Fills vocab->tokens from model.vocab ({text: id}); ids without a token stay empty for now.
Status ReadBaseVocab(const Json& model, HfVocab* vocab, std::vector<bool>* present) {
  const Json* v = Member(model, "vocab");
  if (v == nullptr || !v->is_object()) {
    return InvalidArgument("tokenizer.json: model.vocab: expected an object of token ids");
  }
  if (v->empty()) return InvalidArgument("tokenizer.json: model.vocab: empty");
  for (const auto& [text, id_json] : v->items()) {
    int32_t id = 0;
    PC_RETURN_IF_ERROR(ReadId(id_json, "tokenizer.json: model.vocab['" + text + "']", &id));
    if (static_cast<size_t>(id) >= present->size()) {
      present->resize(id + 1, false);
      vocab->tokens.resize(id + 1);
    }
    if ((*present)[id]) {
      return InvalidArgument("tokenizer.json: model.vocab: id " + std::to_string(id) +
                             " is given to both '" + vocab->tokens[id] + "' and '" + text + "'");
    }
    (*present)[id] = true;
    vocab->tokens[id] = text;
  }
  return Status::Ok();
}

Status ReadAddedTokens(const Json& root, std::vector<AddedToken>* out) {
  const Json* added = Member(root, "added_tokens");
  if (added == nullptr || added->is_null()) return Status::Ok();
  if (!added->is_array()) {
    return InvalidArgument(std::string("tokenizer.json: added_tokens: expected an array, found ") +
                           TypeName(*added));
  }
  for (size_t i = 0; i < added->size(); ++i) {
    const Json& a = (*added)[i];
    const std::string what = "tokenizer.json: added_tokens[" + std::to_string(i) + "]";
    const Json* id = Member(a, "id");
    const Json* content = Member(a, "content");
    if (id == nullptr || content == nullptr || !content->is_string()) {
      return InvalidArgument(what + ": expected an object with an id and a content string");
    }
    AddedToken t;
    PC_RETURN_IF_ERROR(ReadId(*id, what + ".id", &t.id));
    t.content = content->get<std::string>();
    if (t.content.empty()) return InvalidArgument(what + ": empty content");
    t.special = BoolMember(a, "special", false);
    t.lstrip = BoolMember(a, "lstrip", false);
    t.rstrip = BoolMember(a, "rstrip", false);
    t.normalized = BoolMember(a, "normalized", !t.special);
    out->push_back(std::move(t));
  }
  return Status::Ok();
}

// "gpt2" for byte-level BPE, "llama" for SentencePiece-style BPE with byte fallback.
Result<std::string> DetectModel(const Json& root, const Json& model) {
  const std::string type = StringMember(model, "type");
  if (type != "BPE") {
    return Unimplemented("tokenizer.json: model.type '" + type +
                         "' is not supported (only BPE: byte-level as in GPT-2, Llama 3 and Qwen, "
                         "or SentencePiece-style with byte_fallback as in Llama 2 and Gemma)");
  }
  if (BoolMember(model, "byte_fallback", false)) return std::string("llama");
  // Byte-level vocabularies name ByteLevel in their pre-tokenizer or decoder.
  const Json* pre = Member(root, "pre_tokenizer");
  const Json* dec = Member(root, "decoder");
  const std::string dumped = pre != nullptr ? pre->dump() : "";
  const std::string decoder = dec != nullptr ? dec->dump() : "";
  if (dumped.find("\"ByteLevel\"") != std::string::npos ||
      decoder.find("\"ByteLevel\"") != std::string::npos) {
    return std::string("gpt2");
  }
  return Unimplemented(
      "tokenizer.json: a BPE model that is neither byte-level (no ByteLevel pre-tokenizer or "
      "decoder) nor SentencePiece-style (byte_fallback is false) is not supported");
}

// The pre-tokenizer steps, flattened out of Sequence.
void FlattenPre(const Json& pre, std::vector<const Json*>* steps) {
  if (!pre.is_object()) return;
  if (StringMember(pre, "type") == "Sequence") {
    const Json* list = Member(pre, "pretokenizers");
    if (list != nullptr && list->is_array()) {
      for (const Json& p : *list) FlattenPre(p, steps);
    }
    return;
  }
  steps->push_back(&pre);
}

Result<std::string> DetectPre(const Json& root) {
  std::vector<const Json*> steps;
  if (const Json* pre = Member(root, "pre_tokenizer")) FlattenPre(*pre, &steps);
  std::string shape;  // e.g. "Split(qwen2),ByteLevel(regex=false)"
  for (const Json* s : steps) {
    const std::string type = StringMember(*s, "type");
    if (!shape.empty()) shape += ",";
    if (type == "ByteLevel") {
      shape += BoolMember(*s, "use_regex", true) ? "ByteLevel(gpt2)" : "ByteLevel";
    } else if (type == "Digits") {
      shape += BoolMember(*s, "individual_digits", false) ? "Digits(1)" : "Digits";
    } else if (type == "Split") {
      const Json* pattern = Member(*s, "pattern");
      const std::string regex = pattern != nullptr ? StringMember(*pattern, "Regex") : "";
      std::string name = "?";
      for (const KnownSplit& k : kKnownSplits) {
        if (regex == k.regex) name = k.pre;
      }
      shape += "Split(" + name + ")";
    } else {
      shape += type.empty() ? "?" : type;
    }
  }
  if (shape == "ByteLevel(gpt2)") return std::string("gpt-2");
  if (shape == "Split(llama-bpe),ByteLevel") return std::string("llama-bpe");
  if (shape == "Split(qwen2),ByteLevel") return std::string("qwen2");
  if (shape == "Split(gpt-4o),ByteLevel") return std::string("gpt-4o");
  if (shape == "Digits(1),ByteLevel(gpt2)") return std::string("smollm");
  return Unimplemented(
      "tokenizer.json: pre_tokenizer not recognised (" + (shape.empty() ? "none" : shape) +
      "); known: GPT-2's ByteLevel (gpt-2), Llama 3's split (llama-bpe), Qwen2's split (qwen2), "
      "o200k's split (gpt-4o), single digits then ByteLevel (smollm); if the model uses one of "
      "these, name it with --pre");
}

// Merges as "left right" strings. The list form ([left, right]) may hold spaces inside a part,
// which the string form cannot; llama.cpp writes them as U+0120, and so does this.
Status ReadMerges(const Json& model, HfVocab* vocab) {
  const Json* merges = Member(model, "merges");
  if (merges == nullptr || !merges->is_array()) {
    return InvalidArgument("tokenizer.json: model.merges: expected an array");
  }
  vocab->merges.reserve(merges->size());
  for (size_t i = 0; i < merges->size(); ++i) {
    const Json& m = (*merges)[i];
    const std::string what = "tokenizer.json: model.merges[" + std::to_string(i) + "]";
    if (m.is_string()) {
      std::string s = m.get<std::string>();
      const size_t space = s.size() > 1 ? s.find(' ', 1) : std::string::npos;
      if (space == std::string::npos || space + 1 >= s.size()) {
        return InvalidArgument(what + ": expected two space-separated parts");
      }
      vocab->merges.push_back(std::move(s));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string() &&
               !m[0].get_ref<const std::string&>().empty() &&
               !m[1].get_ref<const std::string&>().empty()) {
      vocab->merges.push_back(ReplaceAll(m[0].get<std::string>(), " ", "\xC4\xA0") + " " +
                              ReplaceAll(m[1].get<std::string>(), " ", "\xC4\xA0"));
    } else {
      return InvalidArgument(what + ": expected \"left right\" or [left, right]");
    }
  }
  return Status::Ok();
}

// SentencePiece scores from the merge list. Hugging Face's SentencePiece-to-BPE conversion lists a
// merge for every split of every piece, in the order of the pieces' scores, so a piece's first
// merge rank orders pieces as their scores did; pieces no merge produces come last.
Status ScoresFromMerges(const Json& model, HfVocab* vocab) {
  const Json* merges = Member(model, "merges");
  if (merges == nullptr || !merges->is_array()) {
    return InvalidArgument("tokenizer.json: model.merges: expected an array");
  }
  std::unordered_map<std::string, int32_t> ids;
  ids.reserve(vocab->tokens.size());
  for (size_t i = 0; i < vocab->tokens.size(); ++i) {
    ids.emplace(vocab->tokens[i], static_cast<int32_t>(i));
  }
  const float last = -static_cast<float>(merges->size()) - 1.0f;
  vocab->scores.assign(vocab->tokens.size(), last);
  std::vector<bool> ranked(vocab->tokens.size(), false);
  for (size_t i = 0; i < merges->size(); ++i) {
    const Json& m = (*merges)[i];
    std::string joined;
    if (m.is_string()) {
      joined = m.get<std::string>();
      const size_t space = joined.size() > 1 ? joined.find(' ', 1) : std::string::npos;
      if (space == std::string::npos) {
        return InvalidArgument("tokenizer.json: model.merges[" + std::to_string(i) +
                               "]: expected two space-separated parts");
      }
      joined.erase(space, 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      joined = m[0].get<std::string>() + m[1].get<std::string>();
    } else {
      return InvalidArgument("tokenizer.json: model.merges[" + std::to_string(i) +
                             "]: expected \"left right\" or [left, right]");
    }
    auto it = ids.find(joined);
    if (it == ids.end() || ranked[it->second]) continue;
    ranked[it->second] = true;
    vocab->scores[it->second] = -static_cast<float>(i);
  }
  return Status::Ok();
}

// Token types as llama.cpp's converter assigns them.
void AssignTypes(const std::vector<bool>& present, const std::vector<AddedToken>& added,
                 const std::string& unk_text, HfVocab* vocab) {
  const bool spm = vocab->model == "llama";
  const size_t n = vocab->tokens.size();
  vocab->types.assign(n, static_cast<int32_t>(TokenType::kNormal));
  for (size_t i = 0; i < n; ++i) {
    if (!present[i]) {
      vocab->tokens[i] = "[PAD" + std::to_string(i) + "]";
      vocab->types[i] = static_cast<int32_t>(TokenType::kUnused);
    } else if (spm && IsByteToken(vocab->tokens[i])) {
      vocab->types[i] = static_cast<int32_t>(TokenType::kByte);
    }
  }
  size_t normalized = 0;
  for (const AddedToken& a : added) {
    if (a.special || LooksSpecial(a.content)) {
      vocab->types[a.id] = static_cast<int32_t>(TokenType::kControl);
      vocab->tokens[a.id] = a.content;
    } else {
      // Kept as Hugging Face spells them. llama.cpp's converter turns Gemma's "▁▁" runs into
      // spaces so that its raw-text match finds them; spelled with "▁", spaces still reach them
      // through the merges (as in Hugging Face) and a literal "▁▁" in the text matches too.
      vocab->types[a.id] = static_cast<int32_t>(TokenType::kUserDefined);
      vocab->tokens[a.id] = a.content;
    }
    if (spm && !unk_text.empty() && a.content == unk_text) {
      vocab->types[a.id] = static_cast<int32_t>(TokenType::kUnknown);
    }
    if (a.lstrip) vocab->lstrip.push_back(a.id);
    if (a.rstrip) vocab->rstrip.push_back(a.id);
    normalized += a.normalized && !a.special;
  }
  if (normalized > 0) {
    vocab->notes.push_back(std::to_string(normalized) +
                           " added tokens are matched in normalized text by Hugging Face, here in "
                           "the raw text");
  }
}

// A special token named in tokenizer_config.json: a string or an object with "content".
std::string ConfigTokenText(const Json& config, const std::string& key) {
  const Json* v = Member(config, key.c_str());
  if (v == nullptr) return std::string();
  if (v->is_string()) return v->get<std::string>();
  return StringMember(*v, "content");
}

// BOS/EOS addition from the post-processor's template, as llama.cpp's converter reads it: a
// special token first means add_bos, one last means add_eos.
void ReadPostProcessor(const Json& root, bool have_config, std::string* bos, std::string* eos,
                       HfVocab* vocab) {
  const Json* post = Member(root, "post_processor");
  if (post == nullptr || !post->is_object()) return;
  std::vector<const Json*> processors = {post};
  if (const Json* list = Member(*post, "processors"); list != nullptr && list->is_array()) {
    processors.clear();
    for (const Json& p : *list) processors.push_back(&p);
  }
  for (const Json* p : processors) {
    if (StringMember(*p, "type") != "TemplateProcessing") continue;
    const Json* single = Member(*p, "single");
    if (single == nullptr || !single->is_array() || single->size() < 2) continue;
    auto special_id = [](const Json& item) {
      const Json* s = Member(item, "SpecialToken");
      return s != nullptr ? StringMember(*s, "id") : std::string();
    };
    if (std::string first = special_id(single->front()); !first.empty()) {
      if (!have_config) *bos = first;
      vocab->add_bos = first == *bos;
    }
    if (std::string last = special_id(single->back()); !last.empty()) {
      if (!have_config) *eos = last;
      vocab->add_eos = last == *eos;
    }
  }
}

int32_t FindAdded(const std::vector<AddedToken>& added, const std::string& text) {
  if (text.empty()) return -1;
  for (const AddedToken& a : added) {
    if (a.content == text) return a.id;
  }
  return -1;
}

Status ReadSpecials(const Json& root, const Json& model, const Json* config,
                    const std::vector<AddedToken>& added, HfVocab* vocab) {
  const Json empty = Json::object();
  const Json& c = config != nullptr ? *config : empty;
  std::string bos = ConfigTokenText(c, "bos_token"), eos = ConfigTokenText(c, "eos_token");
  ReadPostProcessor(root, config != nullptr, &bos, &eos, vocab);
  vocab->bos = FindAdded(added, bos);
  vocab->eos = FindAdded(added, eos);
  vocab->unk = FindAdded(added, ConfigTokenText(c, "unk_token"));
  vocab->sep = FindAdded(added, ConfigTokenText(c, "sep_token"));
  vocab->pad = FindAdded(added, ConfigTokenText(c, "pad_token"));
  vocab->cls = FindAdded(added, ConfigTokenText(c, "cls_token"));
  vocab->mask = FindAdded(added, ConfigTokenText(c, "mask_token"));
  if (vocab->unk < 0 && vocab->model == "llama") {
    // SentencePiece-style models name their unknown token in the model itself.
    const std::string unk = StringMember(model, "unk_token");
    for (size_t i = 0; i < vocab->tokens.size() && !unk.empty(); ++i) {
      if (vocab->tokens[i] == unk) vocab->unk = static_cast<int32_t>(i);
    }
  }
  if (const Json* v = Member(c, "add_bos_token"); v != nullptr && v->is_boolean()) {
    vocab->add_bos = v->get<bool>();
  }
  if (const Json* v = Member(c, "add_eos_token"); v != nullptr && v->is_boolean()) {
    vocab->add_eos = v->get<bool>();
  }
  return Status::Ok();
}

Status ReadChatTemplates(const Json& config, HfVocab* vocab) {
  const Json* t = Member(config, "chat_template");
  if (t == nullptr || t->is_null()) return Status::Ok();
  if (t->is_string()) {
    vocab->chat_template = t->get<std::string>();
    return Status::Ok();
  }
  if (!t->is_array()) {
    return InvalidArgument(
        std::string("tokenizer_config.json: chat_template: expected a string or a list, found ") +
        TypeName(*t));
  }
  for (const Json& item : *t) {
    const std::string name = StringMember(item, "name");
    const Json* text = Member(item, "template");
    if (name.empty() || text == nullptr || !text->is_string()) {
      return InvalidArgument(
          "tokenizer_config.json: chat_template: expected entries {\"name\", \"template\"}");
    }
    if (name == "default") {
      vocab->chat_template = text->get<std::string>();
    } else {
      vocab->named_templates.emplace_back(name, text->get<std::string>());
    }
  }
  return Status::Ok();
}

// Whether SentencePiece-style text gets a leading "▁": Llama 2's Prepend normalizer, or a
// Metaspace pre-tokenizer that prepends one.
bool AddsSpacePrefix(const Json& root) {
  const Json* norm = Member(root, "normalizer");
  const std::string normalizer = norm != nullptr ? norm->dump() : "";
  if (normalizer.find("\"Prepend\"") != std::string::npos) return true;
  std::vector<const Json*> steps;
  if (const Json* pre = Member(root, "pre_tokenizer")) FlattenPre(*pre, &steps);
  for (const Json* s : steps) {
    if (StringMember(*s, "type") != "Metaspace") continue;
    const std::string scheme = StringMember(*s, "prepend_scheme");
    if (scheme == "always" || scheme == "first") return true;
    if (BoolMember(*s, "add_prefix_space", false) && scheme.empty()) return true;
  }
  return false;
}

Result<HfVocab> Parse(const Json& root, const Json* config, const HfVocabOptions& options) {
  const Json* model = Member(root, "model");
  if (model == nullptr || !model->is_object()) {
    return InvalidArgument("tokenizer.json: model: expected an object");
  }
  HfVocab vocab;
  PC_ASSIGN_OR_RETURN(vocab.model, DetectModel(root, *model));
  std::vector<bool> present;
  PC_RETURN_IF_ERROR(ReadBaseVocab(*model, &vocab, &present));
  std::vector<AddedToken> added;
  PC_RETURN_IF_ERROR(ReadAddedTokens(root, &added));
  for (const AddedToken& a : added) {
    if (static_cast<size_t>(a.id) >= present.size()) {
      present.resize(a.id + 1, false);
      vocab.tokens.resize(a.id + 1);
    }
    present[a.id] = true;
  }
  std::string unk_text = config != nullptr ? ConfigTokenText(*config, "unk_token") : "";
  if (unk_text.empty()) unk_text = StringMember(*model, "unk_token");
  AssignTypes(present, added, unk_text, &vocab);
  if (vocab.model == "gpt2") {
    if (options.pre.empty()) {
      PC_ASSIGN_OR_RETURN(vocab.pre, DetectPre(root));
    } else {
      vocab.pre = options.pre;
    }
    PC_RETURN_IF_ERROR(ReadMerges(*model, &vocab));
    const Json* norm = Member(root, "normalizer");
    const std::string normalizer = norm != nullptr ? StringMember(*norm, "type") : "";
    if (!normalizer.empty() && !(normalizer == "NFC" && vocab.pre == "qwen2")) {
      vocab.notes.push_back("the " + normalizer + " normalizer is not applied with pre-tokenizer " +
                            vocab.pre);
    }
  } else {
    PC_RETURN_IF_ERROR(ScoresFromMerges(*model, &vocab));
    vocab.add_space_prefix = AddsSpacePrefix(root);
    const Json* pre = Member(root, "pre_tokenizer");
    if (pre != nullptr && pre->dump().find("\"prepend_scheme\":\"first\"") != std::string::npos) {
      vocab.notes.push_back(
          "Metaspace prepend_scheme 'first': Hugging Face adds the leading space only at the "
          "start of the text; here (as in llama.cpp) it also comes after each special token");
    }
  }
  PC_RETURN_IF_ERROR(ReadSpecials(root, *model, config, added, &vocab));
  if (config != nullptr) PC_RETURN_IF_ERROR(ReadChatTemplates(*config, &vocab));
  return vocab;
}

}  // namespace

std::string JsonProblem(const std::exception& e) {
  std::string m = e.what();
  if (m.rfind("[json.exception.", 0) == 0) {
    const size_t end = m.find("] ");
    if (end != std::string::npos) m.erase(0, end + 2);
  }
  if (m.rfind("parse error ", 0) == 0) m.erase(0, 12);
  const size_t colon = m.find(": "), dash = m.find(" - ");
  if (colon != std::string::npos && dash != std::string::npos && colon < dash) {
    m = m.substr(0, colon + 2) + m.substr(dash + 3);
  }
  return m;
}

Result<HfVocab> ParseHfTokenizer(std::string_view tokenizer_json, std::string_view config_json,
                                 const HfVocabOptions& options) {
  Json root, config;
  PC_RETURN_IF_ERROR(ParseJson(tokenizer_json, "tokenizer.json", &root));
  if (!config_json.empty()) {
    PC_RETURN_IF_ERROR(ParseJson(config_json, "tokenizer_config.json", &config));
  }
  // The readers check every type before reading, so this only catches what slipped through.
  try {
    return Parse(root, config_json.empty() ? nullptr : &config, options);
  } catch (const Json::exception& e) {
    return InvalidArgument("tokenizer.json: unexpected content: " + JsonProblem(e));
  }
}

}  // namespace promptcache
