#include "sampling/text_stream.h"

#include <algorithm>

namespace promptcache {

std::string TextStream::Push(int32_t id, bool* stopped) {
  held_ += dec_.Push(id);
  return Release(stopped);
}

std::string TextStream::Finish() {
  held_ += dec_.Flush();
  bool stopped = false;
  std::string out = Release(&stopped);
  if (!stopped) {
    out += held_;
    emitted_ += held_;
    held_.clear();
  }
  return out;
}

// Emits all held text except a tail that could still grow into a stop string; on a match,
// emits the text before it and drops the rest.
std::string TextStream::Release(bool* stopped) {
  // Emitted text never ends with a proper prefix of a stop string, so a match lies in held_.
  size_t cut = std::string::npos;
  for (const std::string& s : stop_) {
    if (s.empty()) continue;
    const size_t at = held_.find(s);
    if (at != std::string::npos && at < cut) cut = at;
  }
  if (cut != std::string::npos) {
    *stopped = true;
    std::string out = held_.substr(0, cut);
    emitted_ += out;
    held_.clear();
    return out;
  }
  size_t keep = 0;  // longest suffix of held_ that is a proper prefix of a stop string
  for (const std::string& s : stop_) {
    if (s.empty()) continue;
    for (size_t n = std::min(s.size() - 1, held_.size()); n > keep; --n) {
      if (held_.compare(held_.size() - n, n, s, 0, n) == 0) {
        keep = n;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  emitted_ += out;
  return out;
}

}  // namespace promptcache
