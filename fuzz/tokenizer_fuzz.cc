// libFuzzer target for the tokenizers: encodes arbitrary bytes with the GPT-2 (byte-level BPE)
// and Llama-2 (SentencePiece) vocabularies, with special-token parsing off and on, and checks
// what must hold for any input: ids in range, lossless decoding (both kinds represent every byte
// sequence), and a StreamDecoder that only ever emits valid UTF-8 and agrees with Decode. Every
// pre-tokenizer preset (GPT-2, Llama 3, SmolLM, Qwen2, GPT-4o) splits the bytes into non-empty
// words that concatenate to exactly them.
//
// The vocabularies are read once from $PC_SHARED_DIR/tokenizers if that is set, else from the
// PC_SHARED_DIR compile definition, else from shared/ beside the repository this file is in.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace promptcache {
namespace {

struct Vocab {
  std::unique_ptr<GgufFile> file;
  std::unique_ptr<Tokenizer> tok;
};

std::string SharedDir() {
  if (const char* env = std::getenv("PC_SHARED_DIR"); env != nullptr && *env != '\0') return env;
#ifdef PC_SHARED_DIR
  return PC_SHARED_DIR;
#else
  // The build compiles this file by its absolute path, REPO/fuzz/tokenizer_fuzz.cc, and shared/
  // lies beside the repository (the top-level PC_SHARED_DIR default).
  std::string path = __FILE__;
  for (int i = 0; i < 2; ++i) {  // drop "/tokenizer_fuzz.cc", then "/fuzz"
    const size_t slash = path.find_last_of('/');
    path.resize(slash == std::string::npos ? 0 : slash);
  }
  return path.empty() ? "../shared" : path + "/../shared";
#endif
}

Vocab LoadOrDie(const std::string& name) {
  const std::string path = SharedDir() + "/tokenizers/" + name;
  auto file = GgufFile::Open(path);
  if (!file.ok()) {
    std::fprintf(stderr, "tokenizer_fuzz: %s (set PC_SHARED_DIR)\n",
                 file.status().message().c_str());
    std::abort();
  }
  Vocab v;
  v.file = std::move(file).value();
  auto tok = Tokenizer::FromGguf(*v.file);
  if (!tok.ok()) {
    std::fprintf(stderr, "tokenizer_fuzz: %s: %s\n", path.c_str(), tok.status().message().c_str());
    std::abort();
  }
  v.tok = std::move(tok).value();
  return v;
}

const std::vector<Vocab>& Vocabs() {
  static const std::vector<Vocab>* vocabs = [] {
    auto* v = new std::vector<Vocab>();
    v->push_back(LoadOrDie("ggml-vocab-gpt-2.gguf"));
    v->push_back(LoadOrDie("ggml-vocab-llama-spm.gguf"));
    return v;
  }();
  return *vocabs;
}

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "tokenizer_fuzz: violated: %s\n", what);
    std::abort();
  }
}

std::string ReplaceAll(std::string s, std::string_view from, std::string_view to) {
  for (size_t pos = 0; (pos = s.find(from, pos)) != std::string::npos; pos += to.size()) {
    s.replace(pos, from.size(), to);
  }
  return s;
}

void Exercise(const Tokenizer& tok, std::string_view text, bool parse_special) {
  const std::vector<int32_t> ids = tok.Encode(text, /*add_bos=*/true, parse_special);
  for (int32_t id : ids) Check(id >= 0 && id < tok.vocab_size(), "id in range");

  const std::string plain = tok.Decode(ids);
  const std::string with_special = tok.Decode(ids, /*special=*/true);
  if (!parse_special) {
    // Decode drops SentencePiece's dummy-prefix space again, and a "▁" written in the text comes
    // back as the space it stands for; byte-level BPE reproduces the bytes exactly.
    std::string expected(text);
    if (tok.kind() == TokenizerKind::kSpm) expected = ReplaceAll(expected, "\xE2\x96\x81", " ");
    Check(plain == expected, "Decode(Encode(text)) reproduces the text");
  } else if (tok.kind() == TokenizerKind::kBpe) {
    Check(with_special == text, "special tokens decode to their own text");
  }

  StreamDecoder stream(tok);
  std::string streamed;
  for (int32_t id : ids) {
    const std::string chunk = stream.Push(id);
    Check(utf8::Sanitize(chunk) == chunk, "StreamDecoder emits valid UTF-8");
    streamed += chunk;
  }
  const std::string tail = stream.Flush();
  Check(utf8::Sanitize(tail) == tail, "StreamDecoder::Flush emits valid UTF-8");
  streamed += tail;
  // Streaming emits each token's bytes as they are (dummy-prefix space included).
  std::string literal;
  for (int32_t id : ids) literal += tok.TokenBytes(id);
  Check(streamed == utf8::Sanitize(literal), "StreamDecoder agrees with TokenBytes");
}

const std::vector<std::unique_ptr<PreTokenizer>>& PreTokenizers() {
  static const auto* all = [] {
    auto* v = new std::vector<std::unique_ptr<PreTokenizer>>();
    for (const char* name : {"gpt-2", "llama-bpe", "smollm", "qwen2", "gpt-4o"}) {
      auto p = PreTokenizer::Create(name);
      Check(p.ok(), "a known pre-tokenizer");
      v->push_back(std::move(p).value());
    }
    return v;
  }();
  return *all;
}

void ExerciseSplits(std::string_view text) {
  std::vector<std::string_view> words;
  for (const auto& pre : PreTokenizers()) {
    words.clear();
    pre->Split(text, &words);
    std::string joined;
    for (std::string_view w : words) {
      Check(!w.empty(), "a pre-tokenizer's word is not empty");
      joined += w;
    }
    Check(joined == text, "a pre-tokenizer's words concatenate to the text");
  }
}

}  // namespace
}  // namespace promptcache

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace promptcache;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  ExerciseSplits(text);
  for (const Vocab& v : Vocabs()) {
    Exercise(*v.tok, text, /*parse_special=*/false);
    Exercise(*v.tok, text, /*parse_special=*/true);
  }
  return 0;
}
