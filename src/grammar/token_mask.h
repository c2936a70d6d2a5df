// Which tokens of a vocabulary a grammar allows next.
//
// The vocabulary's token texts (their bytes) are arranged once in a byte trie. The tokens a
// GrammarState allows are found by walking the trie from the state, advancing a copy of it by
// each byte and cutting off every subtree whose prefix the grammar rejects: tokens that share a
// prefix share its work. Constrained sampling (ConstrainedSampler) first tries the token the
// sampler drew from the unmasked logits, which costs one Accepts call and is exact (a draw
// conditioned on landing in the allowed set is a draw from the masked distribution; greedy picks
// the allowed maximum either way), and computes the full mask only when that token is refused;
// masks are cached by state, since structured output revisits the same states (inside a string,
// after a comma, ...). A mask's walk has a work budget (kMaxMaskWork) besides each step's
// (grammar.h): a state too ambiguous to walk ends the request with error(), never a long stall
// of the thread that decodes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"

namespace promptcache {

// The work one mask may take, in grammar.h's units (about 1.5-5 ns each here: a grammar that
// exhausts it has held the decoding thread for 1.5-2 s). Measured on GPT-2's 50k vocabulary, the
// costliest JSON masks (inside a string, every token a candidate) take 33M units at nesting
// depth 1 and 64M at depth 32: this leaves room for a 150k vocabulary at depth 64.
inline constexpr size_t kMaxMaskWork = size_t{1} << 30;

class VocabTrie {
 public:
  // token_bytes[id]: the token's text; empty for tokens the grammar never allows (control
  // tokens). end_tokens: the ids that end generation (allowed when the grammar is complete).
  VocabTrie(std::vector<std::string> token_bytes, std::vector<int32_t> end_tokens);

  int32_t vocab_size() const { return static_cast<int32_t>(bytes_.size()); }
  const std::string& bytes(int32_t id) const { return bytes_[id]; }
  bool IsEnd(int32_t id) const { return is_end_[id]; }
  // allowed[id] = 1 for every token `state` allows. False (and nothing allowed) when the walk
  // ran past `budget` units or a step past the recognizer's bounds.
  bool Allowed(const GrammarState& state, std::vector<uint8_t>* allowed,
               size_t budget = kMaxMaskWork) const;

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;  // byte, node
    std::vector<int32_t> tokens;                        // tokens ending here
  };
  std::vector<std::string> bytes_;
  std::vector<uint8_t> is_end_;
  std::vector<Node> nodes_;
};

// Per-request grammar state for the engine: checks and masks tokens, advances on each one.
class GrammarConstraint {
 public:
  GrammarConstraint(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const VocabTrie> trie)
      : state_(std::move(grammar)), trie_(std::move(trie)) {}

  // Whether `token` may come next.
  bool Allows(int32_t token) const;
  // The allowed tokens (cached by state); none once error() is set.
  const std::vector<uint8_t>& Mask();
  // Takes `token` (which must be allowed).
  void Accept(int32_t token);
  // Set (InvalidArgument) once the recognizer outgrew its bounds: the request should end with
  // it, as no token is allowed from here on.
  const Status& error() const { return error_; }
  // The text so far is a complete sentence and nothing else may follow.
  bool Finished() const { return state_.Finished(); }
  bool Complete() const { return state_.Complete(); }

 private:
  const std::vector<uint8_t>& Fail();

  GrammarState state_;
  std::shared_ptr<const VocabTrie> trie_;
  std::unordered_map<std::string, std::vector<uint8_t>> masks_;
  Status error_;
  std::vector<uint8_t> empty_;
};

}  // namespace promptcache
