// `promptcache logits`: evaluates token ids in one batch at positions 0..n-1 and writes every
// position's logits, n rows of n_vocab little-endian float32: the same file llama.cpp's
// reference tool writes, so any two engines can be compared on the same model file.
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>

#include "core/log.h"
#include "tools/cli_common.h"

namespace promptcache::cli {
namespace {

class LogitsCommand : public Command {
 public:
  void Register(CLI::App* sub) override {
    model_.Register(sub);
    sub->add_option("-o,--output", output_, "file to write (n rows of n_vocab float32)")
        ->required();
    sub->add_option("-p,--prompt", prompt_,
                    "text to tokenize instead of ids (BOS as the model says)");
    sub->add_option("ids", ids_, "token ids");
  }

  int Execute() override {
    if (Status st = model_.Validate(); !st.ok()) return Fail(st);
    if (Status st = SelectIsa(model_.isa); !st.ok()) return Fail(st);
    if (prompt_.has_value() == !ids_.empty()) {
      return Fail("give either token ids or -p TEXT");
    }
    std::unique_ptr<Model> model = LoadModelOrReport(model_.model_path);
    if (!model) return 1;
    if (Status st = model_.Check(*model); !st.ok()) return Fail(st);
    const int n_vocab = model->config().n_vocab;
    std::vector<int32_t> tokens;
    if (prompt_) {
      tokens = model->tokenizer().Encode(*prompt_, /*add_bos=*/true);
    } else {
      for (int64_t id : ids_) {
        if (id < 0 || id >= n_vocab) {
          return Fail("token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                      std::to_string(n_vocab - 1) + ")");
        }
        tokens.push_back(static_cast<int32_t>(id));
      }
    }
    if (tokens.empty()) return Fail("no tokens to evaluate");
    RunnerOptions options = model_.ToRunnerOptions();
    // One batch, as the reference does (results do not depend on the split, but this is what
    // the command promises).
    options.batch_size = static_cast<int>(tokens.size());
    if (options.context == 0 || options.context < static_cast<int>(tokens.size())) {
      options.context = std::max<int>(static_cast<int>(tokens.size()), options.context);
    }
    Runner session(*model, options);
    std::vector<BatchToken> batch(tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i) {
      batch[i] = {tokens[i], static_cast<int32_t>(i), session.sequence(), true};
    }
    std::vector<float> logits(tokens.size() * static_cast<size_t>(n_vocab));
    if (Status st = session.EvalBatch(batch, logits.data()); !st.ok()) return Fail(st);
    FILE* f = std::fopen(output_.c_str(), "wb");
    if (f == nullptr) return Fail(output_ + ": cannot open for writing: " + std::strerror(errno));
    const size_t written = std::fwrite(logits.data(), sizeof(float), logits.size(), f);
    if (std::fclose(f) != 0 || written != logits.size()) {
      return Fail(output_ + ": write failed: " + std::strerror(errno));
    }
    PC_LOG_INFO("wrote %zu x %d logits to %s", tokens.size(), n_vocab, output_.c_str());
    return 0;
  }

 private:
  ModelOptions model_;
  std::string output_;
  std::optional<std::string> prompt_;
  std::vector<int64_t> ids_;
};

}  // namespace

std::unique_ptr<Command> MakeLogitsCommand() { return std::make_unique<LogitsCommand>(); }

}  // namespace promptcache::cli
