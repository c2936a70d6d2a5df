// `promptcache eval-kv`: how far a quantized KV cache (--kv-type q8_0 or q4_0) is from f16 K/V
// (--baseline), on plain text prompts, with engine/fidelity.h's measures: each prompt is
// continued greedily with the tested KV type, served by an Engine; the baseline is then
// teacher-forced on that continuation, and at every step the KL divergence KL(baseline || tested)
// of the next-token distributions is taken, and whether the baseline's most likely token is the one
// the tested run chose (top-1 agreement); finally the baseline's own greedy continuation is
// compared with the tested one (greedy equality).
//
// --prompts FILE: one prompt per line (blank lines and lines starting with '#' skipped).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/log.h"
#include "engine/create_engine.h"
#include "engine/fidelity.h"
#include "nlohmann/json.hpp"
#include "tools/cli_common.h"

namespace promptcache::cli {
namespace {

Result<std::vector<std::string>> PromptLines(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": cannot open file");
  std::vector<std::string> out;
  std::string line;
  while (std::getline(in, line)) {
    const size_t b = line.find_first_not_of(" \t\r");
    if (b == std::string::npos || line[b] == '#') continue;
    out.push_back(line.substr(b, line.find_last_not_of(" \t\r") - b + 1));
  }
  if (out.empty()) return InvalidArgument(path + ": holds no prompts");
  return out;
}

// Figures summed over prompts.
struct Totals {
  int prompts = 0, steps = 0, agreements = 0, greedy_equal = 0;
  double kl = 0, max_kl = 0;
};

class EvalKvCommand : public Command {
 public:
  void Register(CLI::App* sub) override {
    model_.Register(sub);
    sub->add_option("--baseline", baseline_, "KV type compared against")->default_val("f16");
    sub->add_option("--prompts", prompts_, "text file: one prompt per line")->required();
    sub->add_option("-n,--n-predict", max_tokens_, "tokens generated and compared per prompt")
        ->default_val(32);
    sub->add_flag("--json", json_, "print one JSON object instead of the table");
  }

  int Execute() override {
    if (Status st = model_.Validate(); !st.ok()) return Fail(st);
    if (Status st = SelectIsa(model_.isa); !st.ok()) return Fail(st);
    const Result<KvType> baseline = ParseKvType(baseline_);
    if (!baseline.ok()) return Fail("--baseline: " + baseline.status().message());
    if (max_tokens_ < 1) return Fail("-n must be >= 1");
    SetLogLevel(LogLevel::kWarning);
    Result<std::vector<std::string>> prompts = PromptLines(prompts_);
    if (!prompts.ok()) return Fail(prompts.status());
    std::unique_ptr<Model> model = LoadModelOrReport(model_.model_path);
    if (!model) return 1;
    if (Status st = model_.Check(*model); !st.ok()) return Fail(st);
    if (Status st = CheckKvType(*baseline, model->config().kv_dim()); !st.ok()) return Fail(st);
    RunnerOptions base = model_.ToRunnerOptions();
    base.kv_type = *baseline;
    // The tested KV type serves each prompt through an Engine, as a server would; the baseline
    // is fidelity's full recompute (engine/fidelity.h) with the baseline's type.
    EngineOptions eo = model_.ToEngineOptions();
    eo.parallel = 1;
    eo.prefix_cache = false;  // each prompt alone, as the baseline computes it
    Result<std::unique_ptr<Engine>> engine = CreateEngine(eo, std::move(model));
    if (!engine.ok()) return Fail(engine.status());
    Totals t;
    nlohmann::json rows = nlohmann::json::array();
    for (const std::string& text : *prompts) {
      Result<nlohmann::json> row = EvalOne(**engine, text, base, &t);
      if (!row.ok()) return Fail(row.status());
      rows.push_back(std::move(row).value());
    }
    nlohmann::json summary = {{"kv_type", model_.kv_type},
                              {"baseline", baseline_},
                              {"prompts", t.prompts},
                              {"steps", t.steps},
                              {"mean_kl", t.kl / t.steps},
                              {"max_kl", t.max_kl},
                              {"top1_agreement", double(t.agreements) / t.steps},
                              {"greedy_equal", t.greedy_equal},
                              {"greedy_equal_rate", double(t.greedy_equal) / t.prompts}};
    if (json_) {
      summary["per_prompt"] = rows;
      std::printf("%s\n", summary.dump(2).c_str());
    } else {
      std::printf(
          "%s against %s, %d prompts x %d tokens: mean KL %.3g (max %.3g), top-1 agreement "
          "%.2f%%, greedy continuations equal in %d of %d\n",
          model_.kv_type.c_str(), baseline_.c_str(), t.prompts, max_tokens_, t.kl / t.steps,
          t.max_kl, 100.0 * t.agreements / t.steps, t.greedy_equal, t.prompts);
    }
    return 0;
  }

 private:
  Result<nlohmann::json> EvalOne(Engine& engine, const std::string& text, const RunnerOptions& base,
                                 Totals* t) const {
    const Model& model = engine.model();
    ExpandedPrompt prompt;
    prompt.tokens = model.tokenizer().Encode(text, /*add_bos=*/true);
    for (size_t i = 0; i < prompt.tokens.size(); ++i) prompt.positions.push_back(int32_t(i));
    prompt.end = static_cast<int>(prompt.tokens.size());
    CompletionRequest req;
    req.prompt = prompt.tokens;
    req.max_tokens = max_tokens_;
    req.sampling.temperature = 0;
    req.sampling.repeat_penalty = 1;
    req.ignore_eos = true;
    std::vector<std::vector<float>> logits;  // the tested run's, one per generated token
    req.on_logits = [&](std::span<const float> l) { logits.emplace_back(l.begin(), l.end()); };
    PC_ASSIGN_OR_RETURN(std::shared_ptr<RequestHandle> handle, engine.Submit(std::move(req)));
    const CompletionResult run = handle->Wait();
    PC_RETURN_IF_ERROR(run.status);
    FullRunOptions forced;
    forced.runner = base;
    forced.forced = run.tokens;
    forced.keep_logits = true;
    PC_ASSIGN_OR_RETURN(FullRunResult teacher, RunFull(model, prompt, forced));
    FullRunOptions greedy;
    greedy.runner = base;
    greedy.max_tokens = max_tokens_;
    greedy.sampling.temperature = 0;
    greedy.sampling.repeat_penalty = 1;
    greedy.ignore_eos = true;
    PC_ASSIGN_OR_RETURN(FullRunResult own, RunFull(model, prompt, greedy));
    double kl_sum = 0;
    int agree = 0;
    for (size_t s = 0; s < run.tokens.size(); ++s) {
      const double kl = KlDivergence(teacher.logits[s], logits[s]);
      kl_sum += kl;
      t->max_kl = std::max(t->max_kl, kl);
      agree += ArgMax(teacher.logits[s]) == run.tokens[s];
    }
    const int steps = static_cast<int>(run.tokens.size());
    const bool equal = own.tokens == run.tokens;
    ++t->prompts;
    t->steps += steps;
    t->agreements += agree;
    t->kl += kl_sum;
    t->greedy_equal += equal;
    return nlohmann::json{{"prompt_tokens", prompt.tokens.size()},
                          {"mean_kl", kl_sum / steps},
                          {"top1_agreement", double(agree) / steps},
                          {"greedy_equal", equal}};
  }

  ModelOptions model_;
  std::string baseline_ = "f16", prompts_;
  int max_tokens_ = 32;
  bool json_ = false;
};

}  // namespace

std::unique_ptr<Command> MakeEvalKvCommand() { return std::make_unique<EvalKvCommand>(); }

}  // namespace promptcache::cli
