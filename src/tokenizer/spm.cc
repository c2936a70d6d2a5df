// SentencePiece-style BPE over scored pieces (tokenizer.ggml.model = llama).
#include <cstdio>
#include <queue>

#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace promptcache {
namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

// Replaces each ' ' with "▁".
std::string EscapeSpaces(std::string_view text) {
  std::string out;
  out.reserve(text.size() + text.size() / 4);
  for (char c : text) {
    if (c == ' ') {
      out.append(kSpace);
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// The value of a "<0xXX>" piece, or -1.
int ParseByteToken(const std::string& piece) {
  unsigned value = 0;
  char tail = 0;
  if (piece.size() != 6 || std::sscanf(piece.c_str(), "<0x%2X%c", &value, &tail) != 2 ||
      tail != '>') {
    return -1;
  }
  return static_cast<int>(value);
}

struct Symbol {
  const char* text;
  int32_t n;  // bytes; 0 once merged into its left neighbour
  int32_t prev, next;
};

struct Bigram {
  float score;
  int32_t left, right;
  int32_t size;  // bytes of the merged text, to recognise entries made stale by other merges
};

// Highest score first; among equal scores, the leftmost pair.
struct BigramOrder {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

}  // namespace

Result<std::unique_ptr<Tokenizer>> SpmTokenizer::Create(const GgufFile& file) {
  std::unique_ptr<SpmTokenizer> tok(new SpmTokenizer());
  tok->kind_ = TokenizerKind::kSpm;
  PC_RETURN_IF_ERROR(tok->LoadCommon(file));
  const size_t n = tok->pieces_.size();
  tok->scores_.assign(n, 0.0f);
  if (const GgufValue* scores = file.Find("tokenizer.ggml.scores")) {
    if (!scores->is_array()) return InvalidArgument("tokenizer.ggml.scores: expected an array");
    if (scores->array.size() != n) {
      return InvalidArgument("tokenizer.ggml.scores: " + std::to_string(scores->array.size()) +
                             " entries for " + std::to_string(n) + " tokens");
    }
    for (size_t i = 0; i < n; ++i) {
      double s = 0;
      if (!scores->array[i].AsDouble(&s)) {
        return InvalidArgument("tokenizer.ggml.scores: entry " + std::to_string(i) +
                               " is not a number");
      }
      tok->scores_[i] = static_cast<float>(s);
    }
  }
  if (const GgufValue* v = file.Find("tokenizer.ggml.add_space_prefix")) {
    if (!v->AsBool(&tok->add_space_prefix_)) {
      return InvalidArgument("tokenizer.ggml.add_space_prefix: expected a boolean");
    }
  }
  tok->strip_dummy_prefix_ = tok->add_space_prefix_;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    int32_t id = tok->Find(name);
    if (id < 0) id = tok->FindText(std::string(1, static_cast<char>(b)));
    if (id < 0) id = tok->unk_;
    tok->byte_ids_[b] = id;
  }
  tok->decoded_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const std::string& piece = tok->pieces_[i];
    std::string& out = tok->decoded_[i];
    const int byte = tok->types_[i] == TokenType::kByte ? ParseByteToken(piece) : -1;
    if (byte >= 0) {
      out.assign(1, static_cast<char>(byte));
    } else {
      for (size_t pos = 0; pos < piece.size();) {
        if (piece.compare(pos, kSpace.size(), kSpace) == 0) {
          out.push_back(' ');
          pos += kSpace.size();
        } else {
          out.push_back(piece[pos++]);
        }
      }
    }
  }
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

void SpmTokenizer::EncodeFragments(const std::vector<Fragment>& fragments,
                                   std::vector<int32_t>* out, std::vector<size_t>* ends) const {
  // The dummy prefix goes before the text, and again after each special token (llama.cpp).
  bool after_special = true;
  for (const Fragment& f : fragments) {
    if (f.token >= 0) {
      out->push_back(f.token);
      after_special = true;
      if (ends != nullptr) ends->push_back(out->size());
      continue;
    }
    std::string escaped = EscapeSpaces(f.text);
    if (add_space_prefix_ && after_special) escaped.insert(0, kSpace);
    EncodeText(escaped, out);
    after_special = false;
    if (ends != nullptr) ends->push_back(out->size());
  }
}

void SpmTokenizer::EncodeText(std::string_view text, std::vector<int32_t>* out) const {
  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const size_t len = utf8::CharLen(text, pos);
    const int32_t index = static_cast<int32_t>(symbols.size());
    symbols.push_back({text.data() + pos, static_cast<int32_t>(len), index - 1, index + 1});
    pos += len;
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;

  std::vector<Bigram> heap_storage;
  heap_storage.reserve(symbols.size());
  std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue(BigramOrder(),
                                                                      std::move(heap_storage));
  auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = symbols[left];
    const int32_t size = l.n + symbols[right].n;
    const int32_t id = FindText(std::string_view(l.text, size));  // symbols are contiguous
    if (id < 0) return;
    queue.push({scores_[id], left, right, size});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) try_add(i - 1, i);

  MergePairs(
      symbols, queue, [](Symbol&, const Bigram&) {}, try_add);

  for (int32_t i = 0; i >= 0; i = symbols[i].next) {
    const Symbol& s = symbols[i];
    const int32_t id = FindText(std::string_view(s.text, s.n));
    if (id >= 0) {
      out->push_back(id);
      continue;
    }
    // Merged symbols are pieces by construction, so this is a single character without one.
    for (int32_t j = 0; j < s.n; ++j) {
      const int32_t byte_id = byte_ids_[static_cast<uint8_t>(s.text[j])];
      if (byte_id >= 0) out->push_back(byte_id);
    }
  }
}

}  // namespace promptcache
