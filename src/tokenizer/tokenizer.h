// Tokenizers of GGUF files: `llama` (SentencePiece-style BPE over scored pieces, with byte
// fallback and a dummy-prefix space) and `gpt2` (byte-level BPE over ranked merges, after a
// pre-tokenizer regex named by `tokenizer.ggml.pre`). Built from a file's metadata alone, so the
// vocabulary-only GGUF files of the conformance tests load the same way a model does.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/marked_text.h"
#include "core/status.h"
#include "gguf/gguf.h"

namespace promptcache {

enum class TokenizerKind { kSpm, kBpe };

// ggml token types (tokenizer.ggml.token_type).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

class Tokenizer {
 public:
  // Reads tokenizer.ggml.* keys. Errors name the key (missing tokens, mismatched array lengths,
  // an unknown model or pre-tokenizer, ids out of range).
  static Result<std::unique_ptr<Tokenizer>> FromGguf(const GgufFile& file);
  virtual ~Tokenizer() = default;

  // Token ids for `text`. add_bos: prepend BOS if the vocabulary says to
  // (tokenizer.ggml.add_bos_token, default true for `llama`, false for `gpt2`); parse_special:
  // recognise control tokens written in the text (e.g. "<|im_start|>") as single tokens.
  // User-defined tokens (added vocabulary that is not special) are recognised either way, as
  // Hugging Face and llama.cpp do.
  std::vector<int32_t> Encode(std::string_view text, bool add_bos,
                              bool parse_special = false) const;
  // The same for text from several authors: control tokens are recognised only where all of
  // their spelling is trusted (a template's or schema's text), never in user-written ranges.
  // Plain text runs across the marks as if they were not there, so text without special
  // spellings tokenizes exactly as Encode(text.text(), add_bos, true) does.
  std::vector<int32_t> Encode(const MarkedText& text, bool add_bos) const;
  // Encode (of `marks` when given, else of `text` with parse_special) with the plain text also
  // cut at each byte offset of `cuts` (ascending): each piece is encoded on its own, as if a
  // special token stood at the cut but without one and without the dummy-prefix space a piece
  // after a special token gets (SentencePiece). So the tokens of a piece between two cuts are
  // the same whatever text surrounds it, as long as what precedes it is not a special token or
  // the start (those get the dummy prefix as Encode gives it). Only the merges across a cut
  // differ from Encode. token_at[k]: how many tokens (BOS included) come before cut k; a cut
  // inside a special token's spelling counts the plain text before it.
  std::vector<int32_t> EncodeCut(std::string_view text, bool add_bos, bool parse_special,
                                 const MarkedText* marks, const std::vector<size_t>& cuts,
                                 std::vector<int>* token_at) const;
  // The tokens of `text` as the continuation of other text (an answer the model is to write):
  // without BOS and without the dummy-prefix space SentencePiece puts at a text's start.
  std::vector<int32_t> EncodeContinuation(std::string_view text) const;
  // A lower bound on the tokens Encode makes of `text` (BOS aside), in one pass over its bytes:
  // no token stands for more input than the longest token's bytes (times what normalization
  // may compose into one byte), and whitespace a stripping special token may swallow is not
  // counted. For refusing a prompt that surely exceeds a context before tokenizing it.
  size_t MinTokens(std::string_view text) const;

  // The bytes a token stands for: "▁" becomes a space, byte tokens their byte, byte-level BPE's
  // printable stand-ins their original bytes. Control tokens (BOS/EOS) decode to "" unless
  // `special` is set. May be an incomplete UTF-8 sequence: see StreamDecoder.
  std::string TokenBytes(int32_t id, bool special = false) const;
  // The text of a whole sequence. Unlike concatenated TokenBytes, the SentencePiece dummy-prefix
  // space at the very start is dropped, so Decode(Encode(text)) == text.
  std::string Decode(const std::vector<int32_t>& ids, bool special = false) const;

  TokenizerKind kind() const { return kind_; }
  int32_t vocab_size() const { return static_cast<int32_t>(pieces_.size()); }
  const std::string& Piece(int32_t id) const { return pieces_.at(id); }  // raw vocabulary text
  TokenType Type(int32_t id) const { return types_.at(id); }
  int32_t bos() const { return bos_; }  // -1 when the vocabulary has none
  int32_t eos() const { return eos_; }
  bool adds_bos() const { return add_bos_; }
  // End of generation: EOS, and EOT-like tokens such as <|eot_id|>, <|im_end|>, <|end|>.
  bool IsEndOfGeneration(int32_t id) const;
  // Id of the token whose vocabulary text is exactly `piece`, or -1.
  int32_t Find(std::string_view piece) const;

 protected:
  Tokenizer() = default;
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // A stretch of the input: plain text, or one special token written in it.
  struct Fragment {
    std::string_view text;
    int32_t token = -1;  // >= 0: a special token (text empty)
  };
  // Cuts `text` around special tokens, leftmost and longest first: user-defined tokens always (as
  // HF and llama.cpp do), control and unknown tokens only with parse_special and, when `marks`
  // is given, only where marks->IsTrusted.
  void SplitSpecial(std::string_view text, bool parse_special, const MarkedText* marks,
                    std::vector<Fragment>* out) const;
  // Appends the tokens of `fragments` (the kinds differ in how plain stretches are encoded);
  // `ends` (may be null): out->size() after each fragment.
  virtual void EncodeFragments(const std::vector<Fragment>& fragments, std::vector<int32_t>* out,
                               std::vector<size_t>* ends) const = 0;
  // Reads the keys both kinds share: tokens, token types, special ids, add_bos, and the
  // whitespace-stripping attributes of added tokens.
  Status LoadCommon(const GgufFile& file);
  // After the pieces and their types (LoadCommon): BOS, EOS, UNK, add_bos and the
  // end-of-generation ids.
  Status LoadSpecialIds(const GgufFile& file);
  Status LoadStripAttributes(const GgufFile& file);
  void ApplyPhi3Attributes(const GgufFile& file);
  // The id of `text` among tokens that plain text may produce (not control, byte, unknown or
  // unused ones), or -1.
  int32_t FindText(std::string_view text) const;

  TokenizerKind kind_ = TokenizerKind::kSpm;
  std::vector<std::string> pieces_;
  std::vector<TokenType> types_;
  int32_t bos_ = -1, eos_ = -1, unk_ = -1;
  bool add_bos_ = false;
  bool strip_dummy_prefix_ = false;  // SentencePiece vocabularies that add a dummy prefix
  std::vector<int32_t> end_of_generation_;
  // Keys view into pieces_, which never changes after loading.
  std::unordered_map<std::string_view, int32_t> piece_ids_;
  std::vector<std::string> decoded_;  // per id: its bytes when not special
  // Special tokens by text, and per first byte their distinct lengths, longest first.
  std::unordered_map<std::string_view, int32_t> special_ids_;
  std::array<std::vector<uint32_t>, 256> special_lengths_;
  // Per token: kStripLeft / kStripRight when matching it also swallows the whitespace beside it.
  static constexpr uint8_t kStripLeft = 1, kStripRight = 2;
  std::vector<uint8_t> strip_;
  // Input bytes normalization may turn into one byte (MinTokens).
  int input_per_normalized_byte_ = 1;
  mutable std::atomic<size_t> max_token_bytes_{0};  // MinTokens: computed at its first call
};

// Turns a stream of token ids into text that never contains a broken UTF-8 sequence: bytes of an
// incomplete character are held back until the token that completes it arrives.
class StreamDecoder {
 public:
  // special: also show control tokens' text (as TokenBytes does).
  explicit StreamDecoder(const Tokenizer& tok, bool special = false)
      : tok_(tok), special_(special) {}
  // The text that token `id` completes; invalid sequences become U+FFFD at once.
  std::string Push(int32_t id);
  // Whatever is still held back; invalid leftovers become U+FFFD.
  std::string Flush();

 private:
  const Tokenizer& tok_;
  bool special_;
  std::string pending_;
};

}  // namespace promptcache
