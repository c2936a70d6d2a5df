// Byte-level BPE over ranked merges (tokenizer.ggml.model = gpt2).
#include <queue>

#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace promptcache {
namespace {

constexpr const char* kMergesKey = "tokenizer.ggml.merges";

struct BpeSymbol {
  int32_t id;     // symbol id (vocabulary id, or an interned text beyond it)
  int32_t start;  // byte offset in the word
  int32_t n;      // bytes; 0 once merged into its left neighbour
  int32_t prev, next;
};

struct BpeBigram {
  int32_t rank;
  int32_t left, right;
  int32_t size;    // bytes of the merged text, to recognise stale entries
  int32_t result;  // symbol id after merging
};

// Lowest rank first; among equal ranks, the leftmost pair.
struct BpeBigramOrder {
  bool operator()(const BpeBigram& a, const BpeBigram& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

uint64_t PairKey(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

// Reverses the byte-level alphabet; characters outside it are kept as they are.
std::string DecodeByteLevel(std::string_view piece) {
  std::string out;
  out.reserve(piece.size());
  for (size_t pos = 0; pos < piece.size();) {
    const utf8::Seq q = utf8::Next(piece, pos);
    if (q.state == utf8::SeqState::kValid) {
      const int byte = utf8::CodepointToByte(utf8::DecodeValid(piece, pos, q.len));
      if (byte >= 0) {
        out.push_back(static_cast<char>(byte));
      } else {
        out.append(piece.substr(pos, q.len));
      }
    } else {
      out.append(piece.substr(pos, q.len));
    }
    pos += q.len;
  }
  return out;
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> BpeTokenizer::Create(const GgufFile& file) {
  std::unique_ptr<BpeTokenizer> tok(new BpeTokenizer());
  tok->kind_ = TokenizerKind::kBpe;
  PC_RETURN_IF_ERROR(tok->LoadCommon(file));
  std::string pre_name;
  if (const GgufValue* pre = file.Find("tokenizer.ggml.pre")) {
    if (!pre->AsString(&pre_name)) return InvalidArgument("tokenizer.ggml.pre: expected a string");
  }
  PC_ASSIGN_OR_RETURN(tok->pre_, PreTokenizer::Create(pre_name));
  // NFC composes at most 3 bytes into 1 (a Hangul syllable from its three jamo).
  if (tok->pre_->nfc()) tok->input_per_normalized_byte_ = 3;

  tok->next_symbol_ = tok->vocab_size();
  for (int b = 0; b < 256; ++b) {
    utf8::Append(utf8::ByteToCodepoint(static_cast<uint8_t>(b)), &tok->byte_chars_[b]);
    tok->byte_symbols_[b] = tok->Intern(tok->byte_chars_[b]);
  }
  PC_RETURN_IF_ERROR(tok->LoadMerges(file));

  const size_t n = tok->pieces_.size();
  tok->decoded_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const TokenType t = tok->types_[i];
    tok->decoded_[i] =
        t == TokenType::kUserDefined ? tok->pieces_[i] : DecodeByteLevel(tok->pieces_[i]);
  }
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

int32_t BpeTokenizer::Intern(std::string_view text) {
  if (int32_t id = Find(text); id >= 0) return id;
  auto [it, inserted] = extra_symbols_.emplace(std::string(text), next_symbol_);
  if (inserted) ++next_symbol_;
  return it->second;
}

Status BpeTokenizer::LoadMerges(const GgufFile& file) {
  const GgufValue* merges = file.Find(kMergesKey);
  if (merges == nullptr) return NotFound(std::string(kMergesKey) + ": missing");
  if (!merges->is_array() || merges->array_type != GgufValueType::kString) {
    return InvalidArgument(std::string(kMergesKey) + ": expected an array of strings");
  }
  merges_.reserve(merges->array.size());
  std::string merge;
  for (size_t i = 0; i < merges->array.size(); ++i) {
    if (!merges->array[i].AsString(&merge)) {
      return InvalidArgument(std::string(kMergesKey) + ": entry " + std::to_string(i) +
                             " is not a string");
    }
    // "left right"; the left part is never empty, so search from 1 (a left part may be " ").
    const size_t space = merge.size() > 1 ? merge.find(' ', 1) : std::string::npos;
    if (space == std::string::npos || space + 1 >= merge.size()) {
      return InvalidArgument(std::string(kMergesKey) + ": entry " + std::to_string(i) + " '" +
                             utf8::Sanitize(merge) + "' is not two space-separated parts");
    }
    const std::string_view m(merge);
    const int32_t left = Intern(m.substr(0, space));
    const int32_t right = Intern(m.substr(space + 1));
    std::string joined = merge.substr(0, space) + merge.substr(space + 1);
    const int32_t result = Intern(joined);
    // The first (best-ranked) entry for a pair wins.
    merges_.emplace(PairKey(left, right), Merge{static_cast<int32_t>(i), result});
  }
  return Status::Ok();
}

void BpeTokenizer::EncodeFragments(const std::vector<Fragment>& fragments,
                                   std::vector<int32_t>* out, std::vector<size_t>* ends) const {
  std::vector<std::string_view> words;
  std::string normalized;
  for (const Fragment& f : fragments) {
    if (f.token >= 0) {
      out->push_back(f.token);
      if (ends != nullptr) ends->push_back(out->size());
      continue;
    }
    words.clear();
    if (pre_->nfc()) {
      normalized = utf8::Nfc(f.text);
      pre_->Split(normalized, &words);
    } else {
      pre_->Split(f.text, &words);
    }
    for (std::string_view word : words) EncodeWord(word, out);
    if (ends != nullptr) ends->push_back(out->size());
  }
}

void BpeTokenizer::EncodeWord(std::string_view word, std::vector<int32_t>* out) const {
  if (pre_->ignore_merges()) {
    std::string mapped;
    for (char c : word) mapped += byte_chars_[static_cast<uint8_t>(c)];
    if (int32_t id = FindText(mapped); id >= 0) {
      out->push_back(id);
      return;
    }
  }
  const int32_t n = static_cast<int32_t>(word.size());
  std::vector<BpeSymbol> symbols(n);
  for (int32_t i = 0; i < n; ++i) {
    symbols[i] = {byte_symbols_[static_cast<uint8_t>(word[i])], i, 1, i - 1,
                  i + 1 < n ? i + 1 : -1};
  }
  std::vector<BpeBigram> heap_storage;
  heap_storage.reserve(n);
  std::priority_queue<BpeBigram, std::vector<BpeBigram>, BpeBigramOrder> queue(
      BpeBigramOrder(), std::move(heap_storage));
  auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    auto it = merges_.find(PairKey(symbols[left].id, symbols[right].id));
    if (it == merges_.end()) return;
    queue.push(
        {it->second.rank, left, right, symbols[left].n + symbols[right].n, it->second.result});
  };
  for (int32_t i = 1; i < n; ++i) try_add(i - 1, i);

  MergePairs(
      symbols, queue, [](BpeSymbol& l, const BpeBigram& b) { l.id = b.result; }, try_add);

  const int32_t vocab = vocab_size();
  for (int32_t i = n > 0 ? 0 : -1; i >= 0; i = symbols[i].next) {
    const BpeSymbol& s = symbols[i];
    if (s.id < vocab) {
      out->push_back(s.id);
      continue;
    }
    // A merge produced text the vocabulary lacks: fall back to the bytes' own tokens.
    for (int32_t j = s.start; j < s.start + s.n; ++j) {
      const int32_t id = byte_symbols_[static_cast<uint8_t>(word[j])];
      if (id < vocab) out->push_back(id);
    }
  }
}

}  // namespace promptcache
