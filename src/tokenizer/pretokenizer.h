// Pre-tokenizers of byte-level BPE vocabularies: the regular expressions that cut text into words
// before merges run (merges never cross a word boundary), selected by `tokenizer.ggml.pre`.
// PCRE2 in UTF + UCP mode with JIT; invalid UTF-8 never matches, so it ends up in pieces of its
// own and still round-trips through the byte-level alphabet.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace promptcache {

class PreTokenizer {
 public:
  // `name` is the value of tokenizer.ggml.pre ("" when the key is missing, meaning GPT-2's).
  // Known: "default" and "gpt-2" (GPT-2), "llama-bpe"/"llama3" (Llama 3), "smollm", "qwen2",
  // "gpt-4o".
  static Result<std::unique_ptr<PreTokenizer>> Create(std::string_view name);
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // Appends the words of `text` in order: every match, and any unmatched text between matches as
  // a word of its own, so that the pieces concatenate to exactly `text`. Thread-safe.
  void Split(std::string_view text, std::vector<std::string_view>* words) const;

  // Llama 3 looks a whole word up in the vocabulary before merging (HF's `ignore_merges`).
  bool ignore_merges() const { return ignore_merges_; }
  // Text is put in Unicode normalization form C before it is split (Qwen2).
  bool nfc() const { return nfc_; }
  const std::string& name() const { return name_; }

 private:
  PreTokenizer() = default;
  void SplitOne(size_t regex, std::string_view text, std::vector<std::string_view>* words) const;

  std::string name_;
  bool ignore_merges_ = false;
  bool nfc_ = false;
  std::vector<void*> regexes_;  // pcre2_code_8*, applied in sequence, each to the previous pieces
};

}  // namespace promptcache
