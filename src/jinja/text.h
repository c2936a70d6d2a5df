// Text: a string that knows which of its bytes a user wrote.
//
// A chat template mixes its own text (turn markers, special-token spellings) with the
// conversation's (message contents, tool arguments). The second kind must never become a special
// token, however the template slices, trims, replaces or concatenates it, so every string value of
// the interpreter carries the byte ranges that came from the user, through every operation, into
// the rendered MarkedText. Strings that a filter writes out of user data (tojson, repr, escaping)
// keep the mark on each character that came from it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/marked_text.h"

namespace promptcache::jinja {

class TextBuilder;

class Text {
 public:
  Text() = default;
  explicit Text(std::string bytes, bool user = false);

  const std::string& str() const { return bytes_; }
  size_t size() const { return bytes_.size(); }
  bool empty() const { return bytes_.empty(); }
  // markupsafe's Markup (the `safe` filter): `+` with a Markup operand HTML-escapes the other.
  bool markup() const { return markup_; }
  void set_markup(bool markup) { markup_ = markup; }

  bool IsUser(size_t pos) const;
  bool HasUser() const { return !user_.empty(); }
  // The user-written byte ranges [begin, end), sorted, never adjacent.
  const std::vector<std::pair<size_t, size_t>>& user_ranges() const { return user_; }
  // Bytes [begin, end) with their marks.
  Text Slice(size_t begin, size_t end) const;
  MarkedText ToMarkedText() const;

 private:
  friend class TextBuilder;
  std::string bytes_;
  std::vector<std::pair<size_t, size_t>> user_;
  bool markup_ = false;
};

// Builds a Text piece by piece, up to a size cap: past it, appends are dropped and overflow() is
// set, so a template cannot grow one string without bound.
class TextBuilder {
 public:
  explicit TextBuilder(size_t cap = std::numeric_limits<size_t>::max()) : cap_(cap) {}

  void Append(const Text& t) { Append(t, 0, t.size()); }
  // Bytes [begin, end) of t, with their marks.
  void Append(const Text& t, size_t begin, size_t end);
  void AppendTrusted(std::string_view s) { AppendMarked(s, false); }
  void AppendUser(std::string_view s) { AppendMarked(s, true); }
  void AppendMarked(std::string_view s, bool user);
  // `s`, marked as user-written wherever byte `pos` of `from` is: for text a filter writes in
  // place of that byte (an escape sequence, a case change).
  void AppendLike(std::string_view s, const Text& from, size_t pos) {
    AppendMarked(s, from.IsUser(pos));
  }

  size_t size() const { return text_.bytes_.size(); }
  bool overflow() const { return overflow_; }
  size_t cap() const { return cap_; }
  Text Finish() { return std::move(text_); }

 private:
  bool Reserve(size_t n);

  Text text_;
  size_t cap_;
  bool overflow_ = false;
};

}  // namespace promptcache::jinja
