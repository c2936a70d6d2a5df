// Incremental detokenizer with stop strings: feed generated tokens one at a time, get the text
// that is safe to show now. Never broken UTF-8 (tokenizer/tokenizer.h StreamDecoder holds back
// an incomplete character), and never the possible start of a stop string: a tail that could
// still grow into one is held back until it can no longer; on a match the text stops before it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace promptcache {

class TextStream {
 public:
  // special: control tokens' text is part of the stream (StreamDecoder's `special`).
  TextStream(const Tokenizer& tok, std::vector<std::string> stop, bool special = false)
      : dec_(tok, special), stop_(std::move(stop)) {}
  // Adds a token; returns text now final. Sets *stopped when a stop string appeared.
  std::string Push(int32_t id, bool* stopped);
  // Whatever is held back at the end of generation (not called after a stop).
  std::string Finish();
  const std::string& text() const { return emitted_; }

 private:
  std::string Release(bool* stopped);

  StreamDecoder dec_;
  std::vector<std::string> stop_;
  std::string held_;  // decoded but not yet emitted: might begin a stop string
  std::string emitted_;
};

}  // namespace promptcache
