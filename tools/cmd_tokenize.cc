// `promptcache tokenize`: the token ids the model would see for a text.
#include <cstdio>

#include "core/log.h"
#include "tools/cli_common.h"

namespace promptcache::cli {
namespace {

class TokenizeCommand : public Command {
 public:
  void Register(CLI::App* sub) override {
    sub->add_option("-m,--model", model_path_, "GGUF model or vocabulary file")->required();
    sub->add_option("text", text_, "text to tokenize")->required();
    sub->add_flag("--no-bos", no_bos_, "do not add BOS even if the vocabulary says to");
    sub->add_flag("--special", special_, "recognise special tokens such as <|im_start|>");
    sub->add_flag("--pieces", pieces_, "print each id with its text");
  }

  int Execute() override {
    // Only the vocabulary is needed, so vocabulary-only GGUF files work too.
    Result<std::unique_ptr<GgufFile>> file = GgufFile::Open(model_path_);
    if (!file.ok()) return Fail(file.status());
    Result<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromGguf(**file);
    if (!tok.ok()) return Fail(tok.status().WithContext(model_path_));
    const std::vector<int32_t> ids = (*tok)->Encode(text_, !no_bos_, special_);
    for (size_t i = 0; i < ids.size(); ++i) {
      if (pieces_) {
        std::printf("%d\t'%s'\n", ids[i], (*tok)->TokenBytes(ids[i], true).c_str());
      } else {
        std::printf(i ? " %d" : "%d", ids[i]);
      }
    }
    if (!pieces_) std::printf("\n");
    return 0;
  }

 private:
  std::string model_path_, text_;
  bool no_bos_ = false, special_ = false, pieces_ = false;
};

}  // namespace

std::unique_ptr<Command> MakeTokenizeCommand() { return std::make_unique<TokenizeCommand>(); }

}  // namespace promptcache::cli
