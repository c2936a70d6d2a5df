// Text that knows who wrote which part of it.
//
// A prompt is assembled from pieces a trusted author wrote (a chat template's turn markers, a PML
// schema's module text) and pieces a user wrote (a chat message, a PML argument or new text). A
// special token such as "<|im_end|>" or "</s>" spelled out in the first kind becomes that token;
// spelled out in the second kind it must stay text, or a user could end a turn, forge a system
// message or stop generation by writing it. The tokenizer reads the marks (Tokenizer::Encode).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace promptcache {

class MarkedText {
 public:
  MarkedText() = default;
  static MarkedText Trusted(std::string_view text) {
    MarkedText t;
    t.AppendTrusted(text);
    return t;
  }
  static MarkedText User(std::string_view text) {
    MarkedText t;
    t.AppendUser(text);
    return t;
  }

  void AppendTrusted(std::string_view text) { text_ += text; }
  void AppendUser(std::string_view text);
  void Append(const MarkedText& other);
  // Keeps the first n bytes (n <= size()).
  void Truncate(size_t n);

  const std::string& text() const { return text_; }
  size_t size() const { return text_.size(); }
  bool empty() const { return text_.empty(); }
  // Whether bytes [begin, end) were all written by trusted authors.
  bool IsTrusted(size_t begin, size_t end) const;
  // The user-written byte ranges [begin, end), in order, never adjacent.
  const std::vector<std::pair<size_t, size_t>>& user_ranges() const { return user_; }

 private:
  std::string text_;
  std::vector<std::pair<size_t, size_t>> user_;
};

}  // namespace promptcache
