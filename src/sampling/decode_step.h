// The decode step, written once for every loop that generates text: the Engine's per-token
// handling (engine/decode.cc) and fidelity's free and teacher-forced runs (engine/fidelity.cc).
// The caller runs the model and picks each next token (DecodeStep::Sample, the sampler's draw;
// or a grammar's or a forced choice); Take then does the rest of the step, in this order:
//   1. an end-of-generation token ends the generation ("stop") and is not kept, unless
//      ignore_eos is set or the token was forced;
//   2. the token is kept (tokens(), and the caller's `on_token`);
//   3. its text goes through the TextStream, and what is final now goes to `emit` (returning
//      false cancels: "cancelled");
//   4. a stop string ends the generation ("stop"), as does the caller's own end (`last`: a
//      grammar that admits nothing more);
//   5. max_tokens kept, or no room in the context to feed the token back: "length".
// At a "length" end, Flush gives the text held back for a stop string that never came.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "sampling/sampler.h"
#include "sampling/text_stream.h"
#include "tokenizer/tokenizer.h"

namespace promptcache {

// How a step ended the generation (kNone: it goes on).
enum class DecodeEnd { kNone, kStop, kLength, kCancelled };
// The OpenAI finish_reason of an end: "stop", "length" or "cancelled" ("" for kNone).
const char* FinishReason(DecodeEnd end);

struct DecodeOptions {
  int max_tokens = 128;
  std::vector<std::string> stop;  // the text stops before the first match
  bool ignore_eos = false;        // end-of-generation tokens are kept like any other
  bool special_text = false;      // control tokens' text is part of text() (TextStream)
};

class DecodeStep {
 public:
  // `sampling` must pass Validate() (Sampler checks it).
  DecodeStep(const Tokenizer& tok, const SamplingParams& sampling, DecodeOptions options);

  // One token picked by the caller, and where it stands.
  struct Token {
    int32_t id = -1;
    bool room = true;     // the context has a position for it to be fed back at
    bool forced = false;  // teacher forcing: kept even when it ends generation
    bool last = false;    // the caller's own end after this token (a finished grammar)
  };

  // The sampler's draw from logits[0..n_vocab) after `history` (prompt and generated tokens).
  int32_t Sample(const float* logits, int32_t n_vocab, std::span<const int32_t> history) {
    return sampler_.Sample(logits, n_vocab, history);
  }
  Sampler& sampler() { return sampler_; }

  // True when no token may be kept at all (max_tokens 0): the generation ends "length" before
  // its first step.
  bool Exhausted() const { return static_cast<int>(tokens_.size()) >= options_.max_tokens; }

  // The rest of one step for `token` (see the top of this file). `emit` receives text only when
  // there is some; `on_token` (may be empty) sees each kept token before its text is emitted.
  DecodeEnd Take(const Token& token, const std::function<bool(const std::string&)>& emit,
                 const std::function<void(int32_t)>& on_token = nullptr);
  // After a "length" end: the text still held back, now final (and part of text()).
  std::string Flush() { return stream_.Finish(); }

  const std::vector<int32_t>& tokens() const { return tokens_; }  // kept (generated) tokens
  const std::string& text() const { return stream_.text(); }      // their final text

 private:
  const Tokenizer& tok_;
  DecodeOptions options_;
  Sampler sampler_;
  TextStream stream_;
  std::vector<int32_t> tokens_;
};

}  // namespace promptcache
