// `promptcache tokenize`: the token ids the model would see for a text, or for each text of a JSON
// array (so that tests and scripts can tokenize thousands of strings with one process).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/log.h"
#include "tokenizer/hf_vocab.h"
#include "tools/cli_common.h"

namespace promptcache::cli {
namespace {

// The strings of a JSON array read from `path` ("-": stdin).
Result<std::vector<std::string>> ReadBatch(const std::string& path) {
  std::stringstream ss;
  if (path == "-") {
    ss << std::cin.rdbuf();
  } else {
    std::ifstream in(path, std::ios::binary);
    if (!in) return IoError(path + ": cannot open");
    ss << in.rdbuf();
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgument(path + ": not valid JSON " + JsonProblem(e));
  }
  if (!j.is_array()) return InvalidArgument(path + ": expected a JSON array of strings");
  std::vector<std::string> texts;
  texts.reserve(j.size());
  for (size_t i = 0; i < j.size(); ++i) {
    if (!j[i].is_string()) {
      return InvalidArgument(path + ": element " + std::to_string(i) + " is not a string");
    }
    texts.push_back(j[i].get<std::string>());
  }
  return texts;
}

class TokenizeCommand : public Command {
 public:
  void Register(CLI::App* sub) override {
    sub->add_option("-m,--model", model_path_, "GGUF model or vocabulary file")->required();
    text_option_ = sub->add_option("text", text_, "text to tokenize");
    sub->add_option("--batch", batch_path_,
                    "tokenize each string of the JSON array in this file (- for stdin) and print "
                    "one JSON array of id arrays");
    sub->add_flag("--no-bos", no_bos_, "do not add BOS even if the vocabulary says to");
    sub->add_flag("--special", special_, "recognise special tokens such as <|im_start|>");
    sub->add_flag("--pieces", pieces_, "print each id with its text");
  }

  int Execute() override {
    if (batch_path_.empty() == (text_option_->count() == 0)) {
      return Fail("tokenize: give either a text or --batch FILE");
    }
    // Only the vocabulary is needed, so vocabulary-only GGUF files work too.
    Result<std::unique_ptr<GgufFile>> file = GgufFile::Open(model_path_);
    if (!file.ok()) return Fail(file.status());
    Result<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromGguf(**file);
    if (!tok.ok()) return Fail(tok.status().WithContext(model_path_));
    if (!batch_path_.empty()) return RunBatch(**tok);
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
  int RunBatch(const Tokenizer& tok) {
    if (pieces_) return Fail("tokenize: --pieces does not go with --batch");
    Result<std::vector<std::string>> texts = ReadBatch(batch_path_);
    if (!texts.ok()) return Fail(texts.status());
    std::string out = "[";
    for (size_t t = 0; t < texts->size(); ++t) {
      out += t ? ",[" : "[";
      const std::vector<int32_t> ids = tok.Encode((*texts)[t], !no_bos_, special_);
      for (size_t i = 0; i < ids.size(); ++i) {
        if (i) out += ',';
        out += std::to_string(ids[i]);
      }
      out += ']';
    }
    out += "]\n";
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
  }

  CLI::Option* text_option_ = nullptr;  // an empty text is still a text
  std::string model_path_, text_, batch_path_;
  bool no_bos_ = false, special_ = false, pieces_ = false;
};

}  // namespace

std::unique_ptr<Command> MakeTokenizeCommand() { return std::make_unique<TokenizeCommand>(); }

}  // namespace promptcache::cli
