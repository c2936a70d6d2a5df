// Guesses for speculative decoding (EngineOptions::draft_max): the tokens that probably come
// next, read off text the generation is likely to repeat, so that one forward pass can check
// several of them. Two sources, both free to compute:
//   1. the request's prediction (OpenAI's Predicted Outputs: the text the caller expects, such as
//      the file being edited): followed from its start while the output matches it, and after a
//      difference picked up again where the output's last n tokens (4 down to 1) reappear in it;
//   2. without a prediction, the sequence itself, prompt and output (prompt lookup): the tokens
//      that followed the most recent earlier occurrence of its last n tokens (n from ngram_max
//      down to ngram_min).
// A guess is only ever a guess: the engine keeps a token only if its own sampling picks it
// from the logits it would have had anyway, so the output is the same with or without drafts.
// What drafting costs is rows in the forward pass that are thrown away (on a CPU a row costs
// about a prompt token: a quarter of a decode step for a 1B model at 2 threads). So the proposal's
// length adapts to how many of the last one's guesses were confirmed, and after a proposal of
// which none was, drafting pauses for 1, 3, 7, then 8 steps (until one is confirmed again):
// text whose repeats mislead costs a row every few steps, not every step.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace promptcache {

struct DraftOptions {
  int max = 8;        // the most guesses in one step; 0: no drafting
  int ngram_min = 2;  // the shortest repeated run of tokens trusted to continue as before
  int ngram_max = 4;
};

class Drafter {
 public:
  Drafter() = default;
  Drafter(const DraftOptions& options, std::vector<int32_t> prediction);

  bool enabled() const { return options_.max > 0; }

  // At most min(limit, the adaptive length) guesses for the tokens after `text` (the prompt then
  // the output so far), the last `generated` of which are output. Empty when nothing repeats.
  std::vector<int32_t> Propose(std::span<const int32_t> text, int generated, int limit);

  // How many of the last proposal's `drafted` guesses the model confirmed, in order.
  void Observe(int drafted, int accepted);

 private:
  // Whether the output so far is the prediction's start, checking only what is new since the last
  // call.
  bool FollowsPrediction(std::span<const int32_t> output);

  DraftOptions options_{0, 2, 4};
  std::vector<int32_t> prediction_;
  int checked_ = 0;        // output tokens compared with the prediction's start
  bool diverged_ = false;  // one of them differed
  int resume_ = 0;         // where in the prediction the last guesses from it ended
  int length_ = 0;         // the adaptive proposal length, 1..max
  int pause_ = 0;          // steps to propose nothing (a wrong proposal's pause)
  int backoff_ = 0;        // the last pause's length: 0 after a guess was confirmed
};

// The longest pause after proposals none of whose guesses were confirmed.
inline constexpr int kMaxDraftPause = 8;

// Where `key` (n tokens) occurs in `hay` followed by at least one more token (j + n < hay.size()):
// the first such start j >= from, else the last one before `from`; -1 when there is none.
// (Exposed for tests.)
int FindRepeat(std::span<const int32_t> hay, std::span<const int32_t> key, size_t from);

}  // namespace promptcache
