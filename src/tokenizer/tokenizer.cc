#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <limits>

#include "tokenizer/hf_vocab.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace promptcache {
namespace {

constexpr const char* kTokensKey = "tokenizer.ggml.tokens";
constexpr const char* kTypesKey = "tokenizer.ggml.token_type";

// Reads an optional token id; u32 max and -1 mean "none" (written by converters for absent ids).
Status ReadTokenId(const GgufFile& file, const std::string& key, int32_t vocab_size, int32_t* id) {
  const GgufValue* v = file.Find(key);
  if (v == nullptr) return Status::Ok();
  int64_t x = 0;
  if (!v->AsInt64(&x)) return InvalidArgument(key + ": expected an integer token id");
  if (x == -1 || x == std::numeric_limits<uint32_t>::max()) {
    *id = -1;
    return Status::Ok();
  }
  if (x < 0 || x >= vocab_size) {
    return InvalidArgument(key + ": token id " + std::to_string(x) +
                           " is out of range (the vocabulary has " + std::to_string(vocab_size) +
                           " tokens)");
  }
  *id = static_cast<int32_t>(x);
  return Status::Ok();
}

// End of `text` with trailing Unicode whitespace removed (text is searched from `begin`).
size_t TrimEnd(std::string_view text, size_t begin, size_t end) {
  size_t kept = begin;
  for (size_t pos = begin; pos < end;) {
    const utf8::Seq q = utf8::Next(text.substr(0, end), pos);
    const bool space = q.state == utf8::SeqState::kValid &&
                       utf8::IsWhiteSpace(utf8::DecodeValid(text, pos, q.len));
    pos += q.state == utf8::SeqState::kValid ? q.len : 1;
    if (!space) kept = pos;
  }
  return kept;
}

// The first position at or after `pos` that is not Unicode whitespace.
size_t SkipSpace(std::string_view text, size_t pos) {
  while (pos < text.size()) {
    const utf8::Seq q = utf8::Next(text, pos);
    if (q.state != utf8::SeqState::kValid ||
        !utf8::IsWhiteSpace(utf8::DecodeValid(text, pos, q.len))) {
      break;
    }
    pos += q.len;
  }
  return pos;
}

Status ReadBool(const GgufFile& file, const std::string& key, bool* out) {
  const GgufValue* v = file.Find(key);
  if (v == nullptr) return Status::Ok();
  if (!v->AsBool(out)) return InvalidArgument(key + ": expected a boolean");
  return Status::Ok();
}

// The token pieces (tokenizer.ggml.tokens).
Result<std::vector<std::string>> ReadPieces(const GgufFile& file) {
  const GgufValue* tokens = file.Find(kTokensKey);
  if (tokens == nullptr) return NotFound(std::string(kTokensKey) + ": missing");
  if (!tokens->is_array() || tokens->array_type != GgufValueType::kString) {
    return InvalidArgument(std::string(kTokensKey) + ": expected an array of strings");
  }
  if (tokens->array.empty()) return InvalidArgument(std::string(kTokensKey) + ": empty");
  if (tokens->array.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max() / 2)) {
    return InvalidArgument(std::string(kTokensKey) + ": too many tokens");
  }
  const size_t n = tokens->array.size();
  std::vector<std::string> pieces(n);
  for (size_t i = 0; i < n; ++i) {
    if (!tokens->array[i].AsString(&pieces[i])) {
      return InvalidArgument(std::string(kTokensKey) + ": entry " + std::to_string(i) +
                             " is not a string");
    }
  }
  return pieces;
}

// The types of the `n` tokens (tokenizer.ggml.token_type; all normal without it).
Result<std::vector<TokenType>> ReadTypes(const GgufFile& file, size_t n) {
  std::vector<TokenType> types(n, TokenType::kNormal);
  if (const GgufValue* v = file.Find(kTypesKey)) {
    if (!v->is_array()) return InvalidArgument(std::string(kTypesKey) + ": expected an array");
    if (v->array.size() != n) {
      return InvalidArgument(std::string(kTypesKey) + ": " + std::to_string(v->array.size()) +
                             " entries for " + std::to_string(n) + " tokens");
    }
    for (size_t i = 0; i < n; ++i) {
      int64_t t = 0;
      if (!v->array[i].AsInt64(&t)) {
        return InvalidArgument(std::string(kTypesKey) + ": entry " + std::to_string(i) +
                               " is not an integer");
      }
      // Types newer than this code are treated as undefined (decoded as text), as llama.cpp does.
      types[i] = t >= 0 && t <= 6 ? static_cast<TokenType>(t) : TokenType::kUndefined;
    }
  }
  return types;
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> Tokenizer::FromGguf(const GgufFile& file) {
  const GgufValue* model = file.Find("tokenizer.ggml.model");
  std::string name;
  if (model == nullptr) return NotFound("tokenizer.ggml.model: missing (no tokenizer in the file)");
  if (!model->AsString(&name)) return InvalidArgument("tokenizer.ggml.model: expected a string");
  if (name == "llama") return SpmTokenizer::Create(file);
  if (name == "gpt2") return BpeTokenizer::Create(file);
  return Unimplemented("tokenizer.ggml.model: unsupported tokenizer model '" + name +
                       "' (supported: llama, gpt2)");
}

Status Tokenizer::LoadCommon(const GgufFile& file) {
  PC_ASSIGN_OR_RETURN(pieces_, ReadPieces(file));
  PC_ASSIGN_OR_RETURN(types_, ReadTypes(file, pieces_.size()));
  // Later duplicates win, as in llama.cpp.
  const size_t n = pieces_.size();
  piece_ids_.reserve(n);
  for (size_t i = 0; i < n; ++i) piece_ids_[pieces_[i]] = static_cast<int32_t>(i);
  PC_RETURN_IF_ERROR(LoadSpecialIds(file));
  for (size_t i = 0; i < n; ++i) {
    const TokenType t = types_[i];
    if (pieces_[i].empty()) continue;
    if (t != TokenType::kControl && t != TokenType::kUserDefined && t != TokenType::kUnknown) {
      continue;
    }
    special_ids_[pieces_[i]] = static_cast<int32_t>(i);
  }
  PC_RETURN_IF_ERROR(LoadStripAttributes(file));
  for (const auto& [text, id] : special_ids_) {
    special_lengths_[static_cast<uint8_t>(text[0])].push_back(static_cast<uint32_t>(text.size()));
  }
  for (auto& lengths : special_lengths_) {
    std::sort(lengths.rbegin(), lengths.rend());
    lengths.erase(std::unique(lengths.begin(), lengths.end()), lengths.end());
  }
  return Status::Ok();
}

Status Tokenizer::LoadSpecialIds(const GgufFile& file) {
  const int32_t size = vocab_size();
  const bool spm = kind_ == TokenizerKind::kSpm;
  bos_ = spm ? Find("<s>") : Find("<|endoftext|>");
  eos_ = spm ? Find("</s>") : Find("<|endoftext|>");
  unk_ = spm ? Find("<unk>") : -1;
  int32_t eot = -1, eom = -1;
  PC_RETURN_IF_ERROR(ReadTokenId(file, "tokenizer.ggml.bos_token_id", size, &bos_));
  PC_RETURN_IF_ERROR(ReadTokenId(file, "tokenizer.ggml.eos_token_id", size, &eos_));
  PC_RETURN_IF_ERROR(ReadTokenId(file, "tokenizer.ggml.unknown_token_id", size, &unk_));
  PC_RETURN_IF_ERROR(ReadTokenId(file, "tokenizer.ggml.eot_token_id", size, &eot));
  PC_RETURN_IF_ERROR(ReadTokenId(file, "tokenizer.ggml.eom_token_id", size, &eom));
  add_bos_ = spm;
  PC_RETURN_IF_ERROR(ReadBool(file, "tokenizer.ggml.add_bos_token", &add_bos_));

  for (int32_t id : {eos_, eot, eom}) {
    if (id >= 0) end_of_generation_.push_back(id);
  }
  for (const char* name : {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|endoftext|>", "</s>",
                           "<end_of_turn>", "<|eom_id|>", "<|return|>", "<|call|>"}) {
    if (int32_t id = Find(name); id >= 0) end_of_generation_.push_back(id);
  }
  // Harmony (gpt-oss): a turn ends in <|return|> (the answer) or <|call|> (a tool call), while
  // <|end|> only closes one message of it (the analysis before the answer), even when the file
  // names it as EOT. Phi-3's <|end|> does end a turn; its vocabulary has neither of the others.
  const int32_t ret = Find("<|return|>"), call = Find("<|call|>"), end = Find("<|end|>");
  if (ret >= 0 && call >= 0 && end >= 0) {
    end_of_generation_.erase(std::remove(end_of_generation_.begin(), end_of_generation_.end(), end),
                             end_of_generation_.end());
  }
  std::sort(end_of_generation_.begin(), end_of_generation_.end());
  end_of_generation_.erase(std::unique(end_of_generation_.begin(), end_of_generation_.end()),
                           end_of_generation_.end());
  return Status::Ok();
}

Status Tokenizer::LoadStripAttributes(const GgufFile& file) {
  strip_.assign(pieces_.size(), 0);
  if (file.Find(kLstripKey) == nullptr && file.Find(kRstripKey) == nullptr) {
    ApplyPhi3Attributes(file);
    return Status::Ok();
  }
  for (const auto& [key, bit] : {std::pair{kLstripKey, kStripLeft}, {kRstripKey, kStripRight}}) {
    const GgufValue* v = file.Find(key);
    if (v == nullptr) continue;
    if (!v->is_array()) return InvalidArgument(std::string(key) + ": expected an array of ids");
    for (const GgufValue& e : v->array) {
      int64_t id = -1;
      if (!e.AsInt64(&id) || id < 0 || id >= vocab_size()) {
        return InvalidArgument(std::string(key) + ": expected token ids below " +
                               std::to_string(vocab_size()));
      }
      strip_[id] |= bit;
    }
  }
  return Status::Ok();
}

void Tokenizer::ApplyPhi3Attributes(const GgufFile& file) {
  // Phi-3/3.5 files from llama.cpp's converter lack the flags, yet their tokenizer_config.json
  // gives every control token but <unk>, <s>, <|endoftext|> (and the text token </s>) rstrip;
  // recognised by architecture (llama.cpp goes by general.name) and a SentencePiece vocabulary.
  std::string arch;
  const GgufValue* v = file.Find("general.architecture");
  if (kind_ != TokenizerKind::kSpm || v == nullptr || !v->AsString(&arch) || arch != "phi3") {
    return;
  }
  for (size_t i = 0; i < pieces_.size(); ++i) {
    const std::string& p = pieces_[i];
    if ((types_[i] == TokenType::kControl && p != "<unk>" && p != "<s>" && p != "<|endoftext|>") ||
        p == "</s>") {
      strip_[i] |= kStripRight;
    }
  }
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool add_bos,
                                       bool parse_special) const {
  std::vector<int32_t> out;
  if (add_bos && add_bos_ && bos_ >= 0) out.push_back(bos_);
  std::vector<Fragment> fragments;
  SplitSpecial(text, parse_special, nullptr, &fragments);
  EncodeFragments(fragments, &out, nullptr);
  return out;
}

std::vector<int32_t> Tokenizer::Encode(const MarkedText& text, bool add_bos) const {
  std::vector<int32_t> out;
  if (add_bos && add_bos_ && bos_ >= 0) out.push_back(bos_);
  std::vector<Fragment> fragments;
  SplitSpecial(text.text(), /*parse_special=*/true, &text, &fragments);
  EncodeFragments(fragments, &out, nullptr);
  return out;
}

std::vector<int32_t> Tokenizer::EncodeContinuation(std::string_view text) const {
  // A cut after a character of its own: the text after it is encoded as a piece that follows
  // other text (EncodeCut), and nothing merges across the cut.
  std::vector<int> at;
  const std::vector<int32_t> ids =
      EncodeCut("\n" + std::string(text), false, false, nullptr, {1}, &at);
  return std::vector<int32_t>(ids.begin() + at[0], ids.end());
}

std::vector<int32_t> Tokenizer::EncodeCut(std::string_view text, bool add_bos, bool parse_special,
                                          const MarkedText* marks, const std::vector<size_t>& cuts,
                                          std::vector<int>* token_at) const {
  std::vector<int32_t> out;
  if (add_bos && add_bos_ && bos_ >= 0) out.push_back(bos_);
  const size_t base = out.size();
  std::vector<Fragment> fragments;
  SplitSpecial(text, parse_special || marks != nullptr, marks, &fragments);
  // Plain fragments split at the cuts inside them; each piece's byte range (special tokens:
  // none, begin == end == SIZE_MAX).
  std::vector<Fragment> pieces;
  std::vector<std::pair<size_t, size_t>> spans;
  size_t next = 0;
  for (const Fragment& f : fragments) {
    if (f.token >= 0) {
      pieces.push_back(f);
      spans.emplace_back(SIZE_MAX, SIZE_MAX);
      continue;
    }
    size_t begin = static_cast<size_t>(f.text.data() - text.data());
    const size_t end = begin + f.text.size();
    while (next < cuts.size() && cuts[next] <= begin) ++next;
    for (; next < cuts.size() && cuts[next] < end; ++next) {
      pieces.push_back({text.substr(begin, cuts[next] - begin), -1});
      spans.emplace_back(begin, cuts[next]);
      begin = cuts[next];
    }
    pieces.push_back({text.substr(begin, end - begin), -1});
    spans.emplace_back(begin, end);
  }
  std::vector<size_t> ends;
  EncodeFragments(pieces, &out, &ends);
  // Per cut (ascending, so one sweep): the tokens of the plain pieces ending at or before it and
  // of the special tokens between them; a piece starting at the cut starts its count.
  token_at->clear();
  size_t i = 0, at = base;
  for (size_t cut : cuts) {
    for (; i < pieces.size(); ++i) {
      if (spans[i].first == SIZE_MAX) continue;
      if (spans[i].first >= cut) {
        if (spans[i].first == cut) at = i == 0 ? base : ends[i - 1];
        break;
      }
      if (spans[i].second <= cut) at = ends[i];
    }
    token_at->push_back(static_cast<int>(at));
  }
  return out;
}

size_t Tokenizer::MinTokens(std::string_view text) const {
  size_t longest = max_token_bytes_.load(std::memory_order_relaxed);
  if (longest == 0) {
    // The input bytes a token stands for: its bytes for text tokens (a byte-level or "▁"
    // spelling is longer than what it covers), its spelling for tokens matched by it; an
    // unknown token stands for one character, up to 4 bytes.
    longest = 4;
    for (size_t i = 0; i < pieces_.size(); ++i) {
      const TokenType t = types_[i];
      const bool spelled = t == TokenType::kControl || t == TokenType::kUserDefined ||
                           t == TokenType::kUnknown || t == TokenType::kUnused;
      longest = std::max(longest,
                         spelled || i >= decoded_.size() ? pieces_[i].size() : decoded_[i].size());
    }
    max_token_bytes_.store(longest, std::memory_order_relaxed);
  }
  size_t counted = text.size();
  if (std::any_of(strip_.begin(), strip_.end(), [](uint8_t s) { return s != 0; })) {
    counted = 0;
    for (size_t pos = 0; pos < text.size();) {
      const utf8::Seq q = utf8::Next(text, pos);
      const size_t len = q.state == utf8::SeqState::kValid ? q.len : 1;
      if (q.state != utf8::SeqState::kValid ||
          !utf8::IsWhiteSpace(utf8::DecodeValid(text, pos, q.len))) {
        counted += len;
      }
      pos += len;
    }
  }
  return counted / (longest * size_t(input_per_normalized_byte_));
}

void Tokenizer::SplitSpecial(std::string_view text, bool parse_special, const MarkedText* marks,
                             std::vector<Fragment>* out) const {
  size_t plain_start = 0;
  size_t i = 0;
  while (i < text.size()) {
    const auto& lengths = special_lengths_[static_cast<uint8_t>(text[i])];
    int32_t found = -1;
    size_t found_len = 0;
    for (uint32_t len : lengths) {
      if (len > text.size() - i) continue;
      auto it = special_ids_.find(text.substr(i, len));
      if (it == special_ids_.end()) continue;
      if (types_[it->second] != TokenType::kUserDefined &&
          (!parse_special || (marks != nullptr && !marks->IsTrusted(i, i + len)))) {
        continue;
      }
      found = it->second;
      found_len = len;
      break;
    }
    if (found < 0) {
      ++i;
      continue;
    }
    // Hugging Face's lstrip/rstrip: the whitespace beside the token goes with it.
    const size_t plain_end = strip_[found] & kStripLeft ? TrimEnd(text, plain_start, i) : i;
    if (plain_end > plain_start) {
      out->push_back({text.substr(plain_start, plain_end - plain_start), -1});
    }
    out->push_back({std::string_view(), found});
    i += found_len;
    if (strip_[found] & kStripRight) i = SkipSpace(text, i);
    plain_start = i;
  }
  if (plain_start < text.size()) out->push_back({text.substr(plain_start), -1});
}

int32_t Tokenizer::Find(std::string_view piece) const {
  auto it = piece_ids_.find(piece);
  return it == piece_ids_.end() ? -1 : it->second;
}

int32_t Tokenizer::FindText(std::string_view text) const {
  const int32_t id = Find(text);
  if (id < 0) return -1;
  switch (types_[id]) {
    case TokenType::kControl:
    case TokenType::kByte:
    case TokenType::kUnknown:
    case TokenType::kUnused:
      return -1;
    default:
      return id;
  }
}

std::string Tokenizer::TokenBytes(int32_t id, bool special) const {
  if (id < 0 || id >= vocab_size()) return std::string();
  const TokenType t = types_[id];
  if (t == TokenType::kControl || t == TokenType::kUnknown || t == TokenType::kUnused) {
    return special ? pieces_[id] : std::string();
  }
  return decoded_[id];
}

std::string Tokenizer::Decode(const std::vector<int32_t>& ids, bool special) const {
  std::string out;
  bool first = true;
  for (int32_t id : ids) {
    const std::string bytes = TokenBytes(id, special);
    if (bytes.empty()) continue;
    // As SentencePiece does, drop the dummy-prefix space that encoding put before the text.
    if (first && strip_dummy_prefix_ && bytes[0] == ' ') {
      out.append(bytes, 1);
    } else {
      out += bytes;
    }
    first = false;
  }
  return out;
}

bool Tokenizer::IsEndOfGeneration(int32_t id) const {
  return std::binary_search(end_of_generation_.begin(), end_of_generation_.end(), id);
}

std::string StreamDecoder::Push(int32_t id) {
  pending_ += tok_.TokenBytes(id, special_);
  std::string out;
  size_t i = 0;
  while (i < pending_.size()) {
    const utf8::Seq q = utf8::Next(pending_, i);
    if (q.state == utf8::SeqState::kIncomplete) break;  // wait for the bytes that complete it
    if (q.state == utf8::SeqState::kValid) {
      out.append(pending_, i, q.len);
    } else {
      out.append(utf8::kReplacement);
    }
    i += q.len;
  }
  pending_.erase(0, i);
  return out;
}

std::string StreamDecoder::Flush() {
  std::string out = utf8::Sanitize(pending_);
  pending_.clear();
  return out;
}

}  // namespace promptcache
