// The real chat templates in ../shared/templates, for the tests that render or inspect each one
// (chat_template_conformance_test; the server's tool_prompt_test and tool_calls_test): their
// sources by file name, and the BOS and EOS spellings of each model's vocabulary.
#pragma once

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace promptcache::chat_testing {

struct TestTemplate {
  std::string file;    // its file name, e.g. "Qwen-Qwen2.5-7B-Instruct.jinja"
  std::string source;  // the Jinja text
};

// Every .jinja file of PC_SHARED_DIR/templates, sorted by file name.
inline std::vector<TestTemplate> LoadTestTemplates() {
  std::vector<TestTemplate> out;
  const std::filesystem::path dir = std::filesystem::path(PC_SHARED_DIR) / "templates";
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".jinja") continue;
    std::ifstream in(entry.path(), std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    out.push_back({entry.path().filename().string(), text.str()});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.file < b.file; });
  return out;
}

// The BOS and EOS spellings of the vocabulary of the model whose template `file` is.
inline std::pair<std::string, std::string> SpecialTokens(const std::string& file) {
  if (file.find("Qwen") != std::string::npos) return {"", "<|im_end|>"};
  if (file.find("gemma") != std::string::npos) return {"<bos>", "<eos>"};
  if (file.find("Mistral") != std::string::npos) return {"<s>", "</s>"};
  if (file.find("Phi") != std::string::npos) return {"<s>", "<|endoftext|>"};
  if (file.find("Hermes") != std::string::npos) return {"<|begin_of_text|>", "<|im_end|>"};
  if (file.find("CohereForAI") != std::string::npos) {
    return {"<BOS_TOKEN>", "<|END_OF_TURN_TOKEN|>"};
  }
  if (file.find("deepseek") != std::string::npos) {
    return {"<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"};
  }
  return {"<|begin_of_text|>", "<|eot_id|>"};  // Llama 3.x, Functionary, FireFunction
}

}  // namespace promptcache::chat_testing
