// A stand-in for the model's tokenizer and chat template, for PML tests and the PML fuzzer:
// one token per whitespace-separated word (or per byte), so positions are easy to count.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/hash.h"
#include "pml/pml.h"

namespace promptcache {

class FakePmlEncoder : public PmlTextEncoder {
 public:
  enum class Mode { kWords, kBytes };

  explicit FakePmlEncoder(Mode mode = Mode::kWords, std::optional<int32_t> bos = std::nullopt,
                          int context = 4096)
      : mode_(mode), bos_(bos), context_(context) {}

  // kWords: a stable id per word (>= 16); kBytes: the byte value + 16.
  std::vector<int32_t> Tokenize(const MarkedText& marked) const override {
    const std::string_view text = marked.text();
    std::vector<int32_t> out;
    if (mode_ == Mode::kBytes) {
      for (unsigned char c : text) out.push_back(16 + c);
      return out;
    }
    size_t i = 0;
    while (i < text.size()) {
      while (i < text.size() && IsSpace(text[i])) ++i;
      size_t j = i;
      while (j < text.size() && !IsSpace(text[j])) ++j;
      if (j > i) out.push_back(WordId(text.substr(i, j - i)));
      i = j;
    }
    return out;
  }
  std::vector<int32_t> Tokenize(std::string_view text) const {
    return Tokenize(MarkedText::Trusted(text));
  }
  std::optional<int32_t> Bos() const override { return bos_; }
  // "[user]\n" ... "\n[/user]\n": one token before and one after the content in kWords mode.
  std::pair<std::string, std::string> RoleWrap(std::string_view role) const override {
    return {"[" + std::string(role) + "]\n", "\n[/" + std::string(role) + "]\n"};
  }
  int ContextLength() const override { return context_; }

  static int32_t WordId(std::string_view word) {
    return 16 + static_cast<int32_t>(Hash64(word.data(), word.size()) % 1000003);
  }

 private:
  static bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

  Mode mode_;
  std::optional<int32_t> bos_;
  int context_;
};

}  // namespace promptcache
