// Vocabulary-only GGUF files from Hugging Face tokenizers. A model author who has a
// `tokenizer.json` (and usually a `tokenizer_config.json`) but no GGUF gets the
// `tokenizer.ggml.*` keys that llama.cpp's converter would write for it, so the result works with
// `tokenize`, as `synth --vocab`, and in other GGUF engines. Two kinds are understood: byte-level
// BPE (`gpt2`: GPT-2, Llama 3, Qwen2/3, SmolLM) and SentencePiece-style BPE with byte fallback
// (`llama`: Llama 2, Phi-3, Gemma). Both JSON files are untrusted input: every problem is a Status
// naming the field, never an exception or a crash.
#pragma once

#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "gguf/gguf.h"

namespace promptcache {

struct HfVocabOptions {
  // tokenizer.ggml.pre for byte-level vocabularies; empty: recognised from the pre-tokenizer.
  std::string pre;
};

// What the converter found, in GGUF terms (ids are -1 when absent).
struct HfVocab {
  std::string model;  // "gpt2" or "llama"
  std::string pre;    // gpt2 only
  std::vector<std::string> tokens;
  std::vector<int32_t> types;       // TokenType values
  std::vector<float> scores;        // llama only: merge priority, higher first
  std::vector<std::string> merges;  // gpt2 only: "left right"
  int32_t bos = -1, eos = -1, unk = -1, sep = -1, pad = -1, cls = -1, mask = -1;
  std::optional<bool> add_bos, add_eos, add_space_prefix;
  // Added tokens that swallow the whitespace on their left or right when matched (Hugging Face's
  // lstrip/rstrip, e.g. Phi-3's <|end|>). GGUF has no key for these; they are written as
  // tokenizer.promptcache.{lstrip,rstrip} so that synth carries them along.
  std::vector<int32_t> lstrip, rstrip;
  std::string chat_template;  // the default one
  std::vector<std::pair<std::string, std::string>> named_templates;
  // Things Hugging Face does that the GGUF cannot express (shown to the user, not errors).
  std::vector<std::string> notes;
};

// Parses tokenizer.json (`tokenizer_json`) and tokenizer_config.json (`config_json`, may be
// empty). Errors name the file and the field.
Result<HfVocab> ParseHfTokenizer(std::string_view tokenizer_json, std::string_view config_json,
                                 const HfVocabOptions& options = {});

// Sets the tokenizer.* keys of `vocab` on `w` (a vocabulary-only file has no tensors).
void WriteHfVocab(const HfVocab& vocab, GgufWriter* w);

// nlohmann's message for a JSON file that does not parse, shortened for a one-line error:
// "at line 1, column 2: unexpected end of input; ..." (its own "[json.exception...] parse
// error" prefix and grammar state dropped).
std::string JsonProblem(const std::exception& e);

// Keys for the added-token attributes above (arrays of token ids).
inline constexpr const char* kLstripKey = "tokenizer.promptcache.lstrip";
inline constexpr const char* kRstripKey = "tokenizer.promptcache.rstrip";

}  // namespace promptcache
