// The two tokenizer kinds behind Tokenizer::FromGguf (internal to pc_tokenizer).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"

namespace promptcache {

// The merge loop both kinds share. `symbols` is a linked list of adjacent symbols (n bytes, 0 once
// merged into the left neighbour; prev and next indices, -1 at the ends) and `queue` holds
// candidate pairs (left, right, size), best first. Each pair still current when it comes up is
// merged: `merged(left_symbol, pair)` makes whatever change the kind needs besides the size and
// the links, and `try_add(left, right)` queues the pairs the merged symbol forms with its
// neighbours.
template <typename Symbol, typename Queue, typename Merged, typename TryAdd>
void MergePairs(std::vector<Symbol>& symbols, Queue& queue, Merged merged, TryAdd try_add) {
  while (!queue.empty()) {
    const auto b = queue.top();
    queue.pop();
    Symbol& l = symbols[b.left];
    Symbol& r = symbols[b.right];
    if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;  // stale
    l.n += r.n;
    merged(l, b);
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }
}

// SentencePiece-style BPE (`llama`): starting from single characters, repeatedly merge the
// adjacent pair whose concatenation is the highest-scoring piece; characters left without a
// piece fall back to <0xXX> byte tokens.
class SpmTokenizer final : public Tokenizer {
 public:
  static Result<std::unique_ptr<Tokenizer>> Create(const GgufFile& file);

 private:
  SpmTokenizer() = default;
  void EncodeFragments(const std::vector<Fragment>& fragments, std::vector<int32_t>* out,
                       std::vector<size_t>* ends) const override;
  // Appends the tokens of one stretch of plain text ("▁" already substituted for spaces).
  void EncodeText(std::string_view text, std::vector<int32_t>* out) const;

  std::vector<float> scores_;
  bool add_space_prefix_ = true;
  int32_t byte_ids_[256];  // the token for each byte when no piece covers a character, or -1
};

// Byte-level BPE (`gpt2`): a pre-tokenizer regex cuts text into words, each word's bytes become
// GPT-2's printable stand-ins, and ranked merges (lowest rank first) join adjacent symbols.
class BpeTokenizer final : public Tokenizer {
 public:
  static Result<std::unique_ptr<Tokenizer>> Create(const GgufFile& file);

 private:
  void EncodeFragments(const std::vector<Fragment>& fragments, std::vector<int32_t>* out,
                       std::vector<size_t>* ends) const override;
  struct Merge {
    int32_t rank;
    int32_t result;  // symbol id of the merged text
  };
  BpeTokenizer() = default;
  Status LoadMerges(const GgufFile& file);
  // Symbol ids: vocabulary ids, then texts that merges name but the vocabulary lacks.
  int32_t Intern(std::string_view text);
  void EncodeWord(std::string_view word, std::vector<int32_t>* out) const;

  std::unique_ptr<PreTokenizer> pre_;
  std::unordered_map<std::string, int32_t> extra_symbols_;
  int32_t next_symbol_ = 0;
  std::unordered_map<uint64_t, Merge> merges_;  // (left << 32 | right) -> merge
  int32_t byte_symbols_[256];                   // symbol of each byte's stand-in character
  std::string byte_chars_[256];                 // the stand-in characters themselves
};

}  // namespace promptcache
