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
// after a comma, ...).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"

namespace promptcache {

class VocabTrie {
 public:
  // token_bytes[id]: the token's text; empty for tokens the grammar never allows (control
  // tokens). end_tokens: the ids that end generation (allowed when the grammar is complete).
  VocabTrie(std::vector<std::string> token_bytes, std::vector<int32_t> end_tokens);

  int32_t vocab_size() const { return static_cast<int32_t>(bytes_.size()); }
  const std::string& bytes(int32_t id) const { return bytes_[id]; }
  bool IsEnd(int32_t id) const { return is_end_[id]; }
  // allowed[id] = 1 for every token `state` allows.
  void Allowed(const GrammarState& state, std::vector<uint8_t>* allowed) const;

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
  // The allowed tokens (cached by state).
  const std::vector<uint8_t>& Mask();
  // Takes `token` (which must be allowed).
  void Accept(int32_t token);
  // The text so far is a complete sentence and nothing else may follow.
  bool Finished() const { return state_.Finished(); }
  bool Complete() const { return state_.Complete(); }

 private:
  GrammarState state_;
  std::shared_ptr<const VocabTrie> trie_;
  std::unordered_map<std::string, std::vector<uint8_t>> masks_;
};

}  // namespace promptcache
