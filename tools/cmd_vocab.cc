// `promptcache vocab`: a vocabulary-only GGUF from a Hugging Face tokenizer.json (and its
// tokenizer_config.json), usable by `tokenize`, as `synth --vocab`, and by other GGUF engines.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "tokenizer/hf_vocab.h"
#include "tokenizer/tokenizer.h"
#include "tools/cli_common.h"

namespace promptcache::cli {
namespace {

// JSON files of real tokenizers are tens of MB; far larger input is a mistake, not a vocabulary.
constexpr std::streamoff kMaxJsonBytes = std::streamoff{1} << 30;

Result<std::string> ReadJsonFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return IoError(path + ": cannot open");
  const std::streamoff size = in.tellg();
  if (size < 0) return IoError(path + ": cannot read");
  if (size > kMaxJsonBytes) return InvalidArgument(path + ": larger than 1 GiB");
  std::string text(static_cast<size_t>(size), '\0');
  in.seekg(0);
  if (!in.read(text.data(), size)) return IoError(path + ": cannot read");
  return text;
}

class VocabCommand : public Command {
 public:
  void Register(CLI::App* sub) override {
    sub->add_option("--hf", tokenizer_path_, "Hugging Face tokenizer.json")->required();
    sub->add_option("--config", config_path_,
                    "its tokenizer_config.json (special tokens, add_bos, chat template)");
    sub->add_option("--pre", pre_,
                    "pre-tokenizer of a byte-level vocabulary (gpt-2, llama-bpe, qwen2, smollm) "
                    "when it is not recognised");
    sub->add_option("-o,--output", out_path_, "output GGUF file")->required();
  }

  int Execute() override {
    Result<std::string> json = ReadJsonFile(tokenizer_path_);
    if (!json.ok()) return Fail(json.status());
    std::string config;
    if (!config_path_.empty()) {
      Result<std::string> c = ReadJsonFile(config_path_);
      if (!c.ok()) return Fail(c.status());
      config = std::move(*c);
    }
    HfVocabOptions options;
    options.pre = pre_;
    Result<HfVocab> vocab = ParseHfTokenizer(*json, config, options);
    if (!vocab.ok()) return Fail(vocab.status());
    json->clear();
    json->shrink_to_fit();
    GgufWriter w;
    WriteHfVocab(*vocab, &w);
    if (Status st = w.Write(out_path_); !st.ok()) return Fail(st);
    // The file must load as a tokenizer, or it is of no use to anyone.
    Result<std::unique_ptr<GgufFile>> file = GgufFile::Open(out_path_);
    if (!file.ok()) return Fail(file.status());
    Result<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromGguf(**file);
    if (!tok.ok()) {
      std::remove(out_path_.c_str());
      return Fail(tok.status().WithContext("the converted vocabulary does not load"));
    }
    for (const std::string& note : vocab->notes) {
      std::fprintf(stderr, "promptcache: note: %s\n", note.c_str());
    }
    const std::string kind =
        vocab->pre.empty() ? vocab->model : vocab->model + " (" + vocab->pre + ")";
    std::printf("wrote %s: %s, %zu tokens, %zu merges, bos %d, eos %d%s\n", out_path_.c_str(),
                kind.c_str(), vocab->tokens.size(), vocab->merges.size(), vocab->bos, vocab->eos,
                vocab->chat_template.empty() ? "" : ", chat template");
    return 0;
  }

 private:
  std::string tokenizer_path_, config_path_, pre_, out_path_;
};

}  // namespace

std::unique_ptr<Command> MakeVocabCommand() { return std::make_unique<VocabCommand>(); }

}  // namespace promptcache::cli
