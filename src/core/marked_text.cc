#include "core/marked_text.h"

#include <algorithm>

namespace promptcache {

void MarkedText::AppendUser(std::string_view text) {
  if (text.empty()) return;
  const size_t begin = text_.size();
  text_ += text;
  if (!user_.empty() && user_.back().second == begin) {
    user_.back().second = text_.size();
  } else {
    user_.emplace_back(begin, text_.size());
  }
}

void MarkedText::Append(const MarkedText& other) {
  size_t at = 0;
  for (const auto& [begin, end] : other.user_) {
    AppendTrusted(std::string_view(other.text_).substr(at, begin - at));
    AppendUser(std::string_view(other.text_).substr(begin, end - begin));
    at = end;
  }
  AppendTrusted(std::string_view(other.text_).substr(at));
}

void MarkedText::Truncate(size_t n) {
  if (n >= text_.size()) return;
  text_.resize(n);
  while (!user_.empty() && user_.back().first >= n) user_.pop_back();
  if (!user_.empty()) user_.back().second = std::min(user_.back().second, n);
}

bool MarkedText::IsTrusted(size_t begin, size_t end) const {
  // The first user range that ends after `begin` is the only one that can overlap first.
  auto it = std::upper_bound(
      user_.begin(), user_.end(), begin,
      [](size_t pos, const std::pair<size_t, size_t>& r) { return pos < r.second; });
  return it == user_.end() || it->first >= end;
}

}  // namespace promptcache
