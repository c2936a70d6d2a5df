// Helpers for the tests that tokenize with real vocabularies, here and in the modules above
// (model_test.cc, server/prompt_encoder_test.cc): a vocabulary GGUF opened with its tokenizer,
// and stories260K's reference greedy continuation of "Once upon a time", which the tokenizer
// tests decode and the model tests generate.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace promptcache {

struct LoadedTokenizer {
  std::unique_ptr<GgufFile> file;
  std::unique_ptr<Tokenizer> tok;
};

// Opens the GGUF at `path` and reads its tokenizer; on an error the test fails and `tok` (and
// perhaps `file`) stays null.
inline LoadedTokenizer LoadTokenizer(const std::string& path) {
  LoadedTokenizer l;
  auto file = GgufFile::Open(path);
  EXPECT_TRUE(file.ok()) << file.status().message();
  if (!file.ok()) return l;
  l.file = std::move(file).value();
  auto tok = Tokenizer::FromGguf(*l.file);
  EXPECT_TRUE(tok.ok()) << tok.status().message();
  if (tok.ok()) l.tok = std::move(tok).value();
  return l;
}

// stories260K's greedy continuation (F32 weights) of "Once upon a time", BOS first, as the ids
// and as the text they decode to (without the BOS).
inline const std::vector<int32_t> kStoriesGreedyIds = {
    1,   403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338,
    401, 396, 267, 337, 410, 408, 419, 292, 411, 322, 265, 282, 295, 433, 426, 385, 328,
    432, 358, 394, 261, 370, 432, 352, 266, 268, 388, 426, 338, 391, 266, 267, 337, 335,
    312, 432, 398, 312, 286, 267, 414, 270, 333, 415, 426, 13,  438, 310, 439, 419, 357,
    336, 432, 313, 438, 310, 432, 278, 316, 439, 419, 298, 414, 267};
inline const std::string kStoriesGreedyText =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
    "park. One day, she saw a big, red ball. She wanted to play with it, but it was too high.\n"
    "Lily's mom said, \"Lily, let's go to";

}  // namespace promptcache
