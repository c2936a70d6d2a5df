#include "jinja/text.h"

#include <algorithm>

namespace promptcache::jinja {

Text::Text(std::string bytes, bool user) : bytes_(std::move(bytes)) {
  if (user && !bytes_.empty()) user_.emplace_back(0, bytes_.size());
}

bool Text::IsUser(size_t pos) const {
  auto it =
      std::upper_bound(user_.begin(), user_.end(), pos,
                       [](size_t p, const std::pair<size_t, size_t>& r) { return p < r.second; });
  return it != user_.end() && it->first <= pos;
}

Text Text::Slice(size_t begin, size_t end) const {
  TextBuilder b;
  b.Append(*this, begin, end);
  return b.Finish();
}

MarkedText Text::ToMarkedText() const {
  MarkedText out;
  size_t at = 0;
  for (const auto& [begin, end] : user_) {
    out.AppendTrusted(std::string_view(bytes_).substr(at, begin - at));
    out.AppendUser(std::string_view(bytes_).substr(begin, end - begin));
    at = end;
  }
  out.AppendTrusted(std::string_view(bytes_).substr(at));
  return out;
}

bool TextBuilder::Reserve(size_t n) {
  if (overflow_ || n > cap_ - text_.bytes_.size()) {
    overflow_ = true;
    return false;
  }
  return true;
}

void TextBuilder::AppendMarked(std::string_view s, bool user) {
  if (s.empty() || !Reserve(s.size())) return;
  const size_t begin = text_.bytes_.size();
  text_.bytes_ += s;
  if (!user) return;
  auto& ranges = text_.user_;
  if (!ranges.empty() && ranges.back().second == begin) {
    ranges.back().second = text_.bytes_.size();
  } else {
    ranges.emplace_back(begin, text_.bytes_.size());
  }
}

void TextBuilder::Append(const Text& t, size_t begin, size_t end) {
  end = std::min(end, t.size());
  if (begin >= end) return;
  const std::string_view bytes(t.bytes_);
  size_t at = begin;
  auto it =
      std::upper_bound(t.user_.begin(), t.user_.end(), begin,
                       [](size_t p, const std::pair<size_t, size_t>& r) { return p < r.second; });
  for (; it != t.user_.end() && it->first < end; ++it) {
    const size_t ub = std::max(it->first, begin);
    const size_t ue = std::min(it->second, end);
    AppendTrusted(bytes.substr(at, ub - at));
    AppendUser(bytes.substr(ub, ue - ub));
    at = ue;
  }
  AppendTrusted(bytes.substr(at, end - at));
}

}  // namespace promptcache::jinja
