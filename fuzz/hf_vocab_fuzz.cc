// libFuzzer target for the Hugging Face tokenizer.json converter (`promptcache vocab`): parses
// arbitrary bytes as a tokenizer.json, with and without a tokenizer_config.json, and checks what
// must hold for any input: no exception or crash, and every accepted vocabulary (of a size worth
// writing) written as a GGUF that loads as a tokenizer and encodes text to ids in range.
//
// To reach deep into the parser without committed seeds, each input is tried twice: as is, and
// spliced into one of a few valid files (the first byte picks the file, the second where the rest
// of the input overwrites it); the config is a fixed valid one or the input itself.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "gguf/gguf.h"
#include "tokenizer/hf_vocab.h"
#include "tokenizer/tokenizer.h"

namespace promptcache {
namespace {

constexpr const char* kTemplates[] = {
    // Qwen2's shape: byte-level, list-form merges, added tokens, NFC.
    R"({"added_tokens":[{"id":5,"content":"<|im_end|>","special":true},{"id":6,"content":"<think>","special":false,"rstrip":true}],"normalizer":{"type":"NFC"},"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},{"type":"ByteLevel","use_regex":false}]},"decoder":{"type":"ByteLevel"},"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2,"Ġ":3,"Ġa":4},"merges":[["a","b"],["Ġ","a"]]}})",
    // GPT-2's shape: string merges, no added tokens.
    R"({"pre_tokenizer":{"type":"ByteLevel","use_regex":true},"post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"a"}},{"Sequence":{"id":"A"}}]},"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b"]}})",
    // SentencePiece's shape: byte fallback, prefix, unknown token, strip flags.
    R"({"added_tokens":[{"id":0,"content":"<unk>","special":true},{"id":1,"content":"<s>","special":true},{"id":9,"content":"<|end|>","special":true,"rstrip":true,"lstrip":true}],"normalizer":{"type":"Sequence","normalizers":[{"type":"Prepend","prepend":"▁"}]},"model":{"type":"BPE","byte_fallback":true,"unk_token":"<unk>","vocab":{"<unk>":0,"<s>":1,"<0x41>":3,"▁":4,"a":5,"b":6,"ab":7,"▁ab":8},"merges":["a b","▁ ab"]}})",
};

constexpr const char* kConfig =
    R"({"add_bos_token":true,"bos_token":{"content":"<s>"},"eos_token":"<|im_end|>","unk_token":"<unk>","pad_token":"a","chat_template":[{"name":"default","template":"x"},{"name":"tool_use","template":"y"}]})";

void CheckLoads(const HfVocab& v) {
  if (v.tokens.size() > 4096) return;  // valid, but too slow to write on every input
  GgufWriter w;
  WriteHfVocab(v, &w);
  static const std::string path = "/tmp/hf_vocab_fuzz_" + std::to_string(getpid()) + ".gguf";
  if (!w.Write(path).ok()) std::abort();
  auto file = GgufFile::Open(path);
  if (!file.ok()) std::abort();
  auto tok = Tokenizer::FromGguf(**file);
  if (!tok.ok()) {
    std::fprintf(stderr, "accepted vocabulary does not load: %s\n", tok.status().message().c_str());
    std::abort();
  }
  for (bool special : {false, true}) {
    for (int32_t id : (*tok)->Encode(" ab<|end|> \xC3\xA9<s>\xFF 12", true, special)) {
      if (id < 0 || id >= (*tok)->vocab_size()) std::abort();
    }
  }
}

void Exercise(std::string_view json) {
  for (std::string_view config : {std::string_view(), std::string_view(kConfig), json}) {
    Result<HfVocab> v = ParseHfTokenizer(json, config);
    if (v.ok()) {
      CheckLoads(*v);
    } else if (v.status().message().empty()) {
      std::abort();
    }
  }
}

}  // namespace
}  // namespace promptcache

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace promptcache;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  Exercise(input);
  if (size >= 2) {
    std::string spliced = kTemplates[data[0] % std::size(kTemplates)];
    const size_t at = spliced.size() * data[1] / 256;
    spliced.replace(at, std::min(size - 2, spliced.size() - at), input.substr(2));
    Exercise(spliced);
  }
  return 0;
}
