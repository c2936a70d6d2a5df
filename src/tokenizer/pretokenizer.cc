#include "tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer/utf8.h"

namespace promptcache {
namespace {

// GPT-2 (openai/gpt-2 encoder.py): English contractions (lower case only), letters, digits and
// other symbols each with an optional leading space, and whitespace that leaves the last space
// to the following word.
constexpr const char* kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// The pieces the Llama 3 family shares. English contractions in either case: [sS] instead of
// (?i:s) so that Unicode case folding (e.g. U+017F) cannot widen the match.
#define PC_CONTRACTIONS R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]))"
// Whitespace: newline runs apart (with the spaces before them), and a space run leaves its last
// space to the following word.
#define PC_SPACES R"(\s*[\r\n]+|\s+(?!\S)|\s+)"

// Llama 3: contractions, a letter run with one optional leading non-letter, digits in groups of
// at most three, symbols keep trailing newlines.
constexpr const char* kLlama3 = PC_CONTRACTIONS R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|)"
                                                R"( ?[^\s\p{L}\p{N}]+[\r\n]*|)" PC_SPACES;

// Qwen2: Llama 3's expression with single digits.
constexpr const char* kQwen2 = PC_CONTRACTIONS R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|)"
                                               R"( ?[^\s\p{L}\p{N}]+[\r\n]*|)" PC_SPACES;

// GPT-4o (tiktoken's o200k_base, also gpt-oss's o200k_harmony): words split at case changes (a
// run of upper-case letters, then lower-case ones, either run may be empty but not both; title
// case, modifier and other letters and combining marks go with either), each with an optional
// contraction after it rather than before; digits in groups of at most three; symbols keep
// trailing newlines and slashes. Letters are matched by category as OpenAI's expression does;
// llama.cpp approximates the classes ("not a-z", "not A-Z") and so splits differently around
// combining marks and non-ASCII case changes (see tokenizer_test's Gpt4o tests).
#define PC_UPPER R"([\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])"
#define PC_LOWER R"([\p{Ll}\p{Lm}\p{Lo}\p{M}])"
// clang-format off
constexpr const char* kGpt4o =
    R"([^\r\n\p{L}\p{N}]?)" PC_UPPER "*" PC_LOWER "+" PC_CONTRACTIONS "?|"
    R"([^\r\n\p{L}\p{N}]?)" PC_UPPER "+" PC_LOWER "*" PC_CONTRACTIONS "?|"
    R"(\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|)" PC_SPACES;
// clang-format on
#undef PC_UPPER
#undef PC_LOWER
#undef PC_CONTRACTIONS
#undef PC_SPACES

// SmolLM (HF: Digits(individual_digits) then ByteLevel): every digit alone, then GPT-2's.
constexpr const char* kDigit = R"(\p{N})";

struct Preset {
  const char* names[3];
  std::vector<const char*> regexes;
  bool ignore_merges;
  bool nfc = false;
};

const std::vector<Preset>& Presets() {
  static const std::vector<Preset> presets = {
      {{"default", "gpt-2", nullptr}, {kGpt2}, false},
      {{"llama-bpe", "llama3", "llama-v3"}, {kLlama3}, true},
      {{"smollm", nullptr, nullptr}, {kDigit, kGpt2}, false},
      // Every Qwen2/2.5/3 tokenizer.json normalizes to NFC first; llama.cpp skips that step, so it
      // differs from Hugging Face on decomposed text ("e" + U+0301) and this does not.
      {{"qwen2", nullptr, nullptr}, {kQwen2}, false, true},
      // No whole-word lookup, as llama.cpp has it (tiktoken looks a whole piece up first; the two
      // differ only on a token that its own merges do not reach).
      {{"gpt-4o", nullptr, nullptr}, {kGpt4o}, false},
  };
  return presets;
}

pcre2_code* Code(void* p) { return static_cast<pcre2_code*>(p); }

}  // namespace

Result<std::unique_ptr<PreTokenizer>> PreTokenizer::Create(std::string_view name) {
  const std::string key = name.empty() ? "gpt-2" : std::string(name);
  const Preset* preset = nullptr;
  std::string known;
  for (const Preset& p : Presets()) {
    for (const char* n : p.names) {
      if (n == nullptr) continue;
      if (key == n) preset = &p;
      known += known.empty() ? n : std::string(", ") + n;
    }
  }
  if (preset == nullptr) {
    return Unimplemented("tokenizer.ggml.pre: unknown pre-tokenizer '" + key +
                         "' (known: " + known + ")");
  }
  std::unique_ptr<PreTokenizer> pre(new PreTokenizer());
  pre->name_ = key;
  pre->ignore_merges_ = preset->ignore_merges;
  pre->nfc_ = preset->nfc;
  for (const char* pattern : preset->regexes) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    pcre2_code* code =
        pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
                      PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
    if (code == nullptr) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof(message));
      return Internal("pre-tokenizer '" + key + "': regex error at " + std::to_string(offset) +
                      ": " + reinterpret_cast<char*>(message));
    }
    // Without JIT (unsupported CPU) matching still works, only slower.
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
    pre->regexes_.push_back(code);
  }
  return pre;
}

PreTokenizer::~PreTokenizer() {
  for (void* code : regexes_) pcre2_code_free(Code(code));
}

void PreTokenizer::Split(std::string_view text, std::vector<std::string_view>* words) const {
  if (text.empty()) return;
  std::vector<std::string_view> current = {text}, next;
  for (size_t r = 0; r < regexes_.size(); ++r) {
    std::vector<std::string_view>* dst = r + 1 == regexes_.size() ? words : &next;
    for (std::string_view piece : current) SplitOne(r, piece, dst);
    if (dst == &next) {
      current.swap(next);
      next.clear();
    }
  }
}

void PreTokenizer::SplitOne(size_t regex, std::string_view text,
                            std::vector<std::string_view>* words) const {
  pcre2_code* code = Code(regexes_[regex]);
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
  PC_CHECK(md != nullptr);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;      // where the next search starts
  size_t emitted = 0;  // end of the text already handed out
  while (pos < text.size()) {
    int rc = pcre2_match(code, subject, text.size(), pos, 0, md, nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT || rc == PCRE2_ERROR_NOMEMORY ||
        rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_HEAPLIMIT) {
      // A pathological run beat the JIT stack; the interpreter keeps its frames on the heap.
      rc = pcre2_match(code, subject, text.size(), pos, PCRE2_NO_JIT, md, nullptr);
    }
    if (rc < 0) break;  // no further match (or a limit even so): the rest is one piece
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    size_t start = ov[0], end = ov[1];
    if (end <= start) {  // an empty match: step over one character and search again
      if (start >= text.size()) break;
      pos = start + utf8::CharLen(text, start);
      continue;
    }
    if (start > emitted) words->push_back(text.substr(emitted, start - emitted));
    words->push_back(text.substr(start, end - start));
    emitted = pos = end;
  }
  if (emitted < text.size()) words->push_back(text.substr(emitted));
  pcre2_match_data_free(md);
}

}  // namespace promptcache
