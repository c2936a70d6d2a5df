// `promptcache eval-modules`: how far serving prompts from cached modules is from computing them
// in full (the fidelity report of engine/fidelity.h), per prompt and on average: against the
// contiguous prompt (the headline: the same text sent plainly) and against the recompute at the
// schema's positions (gapped). The headline figure is margin-aware top-1 agreement: over the
// steps where the full recompute's two best tokens are at least 0.1 logit apart.
//
// --prompts FILE names the prompts: a text file with one PML prompt file per line (paths relative
// to FILE's folder; blank lines and lines starting with '#' are skipped), or a single PML prompt.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/log.h"
#include "engine/fidelity.h"
#include "nlohmann/json.hpp"
#include "tools/cli_common.h"

namespace promptcache::cli {
namespace {

namespace fs = std::filesystem;

// The prompt files a --prompts file names.
Result<std::vector<std::string>> PromptFiles(const std::string& list) {
  PC_ASSIGN_OR_RETURN(std::string text, ReadTextFile(list));
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '<') return std::vector<std::string>{list};
  std::vector<std::string> out;
  std::istringstream lines(text);
  std::string line;
  const fs::path base = fs::path(list).parent_path();
  while (std::getline(lines, line)) {
    const size_t b = line.find_first_not_of(" \t\r");
    if (b == std::string::npos || line[b] == '#') continue;
    const size_t e = line.find_last_not_of(" \t\r");
    const fs::path p = line.substr(b, e - b + 1);
    out.push_back(p.is_absolute() ? p.string() : (base / p).string());
  }
  if (out.empty()) return InvalidArgument(list + ": names no prompt files");
  return out;
}

class EvalModulesCommand : public Command {
 public:
  void Register(CLI::App* sub) override {
    model_.Register(sub);
    model_.RegisterChatTemplate(sub);
    modular_.Register(sub);
    sub->add_option("--schema", schema_, "PML schema file")->required();
    sub->add_option("--prompts", prompts_,
                    "a list of PML prompt files, one per line (or one PML prompt)")
        ->required();
    sub->add_option("-n,--n-predict", max_tokens_, "tokens of greedy continuation to compare")
        ->default_val(32);
    sub->add_flag("--json", json_, "print one JSON object instead of the table");
  }

  int Execute() override {
    if (Status st = model_.Validate(); !st.ok()) return Fail(st);
    if (Status st = SelectIsa(model_.isa); !st.ok()) return Fail(st);
    if (max_tokens_ < 1) return Fail("-n must be >= 1");
    SetLogLevel(LogLevel::kWarning);
    Result<std::vector<std::string>> files = PromptFiles(prompts_);
    if (!files.ok()) return Fail(files.status());
    Result<std::unique_ptr<Engine>> engine = MakeEngine(model_, "", modular_);
    if (!engine.ok()) return Fail(engine.status());
    Engine& e = **engine;
    if (Result<SchemaInfo> info = e.LoadSchemaFile(schema_); !info.ok()) return Fail(info.status());
    nlohmann::json rows = nlohmann::json::array();
    Means contiguous, gapped;
    if (!json_) {
      std::printf("%-28s %6s %5s | %-34s | %s\n", "", "", "", "contiguous (plain prompt)",
                  "gapped (schema positions)");
      std::printf("%-28s %6s %5s | %7s %7s %11s %6s | %7s %7s %11s %6s\n", "prompt", "reused",
                  "new", "m-top1", "top1", "KL(first)", "equal", "m-top1", "top1", "KL(first)",
                  "equal");
    }
    for (const std::string& file : *files) {
      Result<nlohmann::json> row = EvalOne(e, file);
      if (!row.ok()) return Fail(row.status());
      contiguous.Add(*row);
      gapped.Add((*row)["gapped"]);
      if (!json_) {
        const nlohmann::json& g = (*row)["gapped"];
        std::printf(
            "%-28s %6d %5d | %6.1f%% %6.1f%% %11.3g %6s | %6.1f%% %6.1f%% %11.3g %6s\n",
            file.c_str(), (*row)["reused_tokens"].get<int>(), (*row)["computed_tokens"].get<int>(),
            100 * (*row)["margin_top1_agreement"].get<double>(),
            100 * (*row)["top1_agreement"].get<double>(), (*row)["first_token_kl"].get<double>(),
            (*row)["greedy_equal"].get<bool>() ? "yes" : "no",
            100 * g["margin_top1_agreement"].get<double>(), 100 * g["top1_agreement"].get<double>(),
            g["first_token_kl"].get<double>(), g["greedy_equal"].get<bool>() ? "yes" : "no");
      }
      rows.push_back(std::move(row).value());
    }
    const size_t n = rows.size();
    nlohmann::json summary = contiguous.Summary(n);
    summary["prompts"] = n;
    summary["tokens_compared"] = max_tokens_;
    summary["gapped"] = gapped.Summary(n);
    if (json_) {
      summary["per_prompt"] = rows;
      std::printf("%s\n", summary.dump(2).c_str());
    } else {
      std::printf("mean against the contiguous prompt: %s\n", contiguous.Line(n).c_str());
      std::printf("mean against the gapped recompute:  %s\n", gapped.Line(n).c_str());
      std::printf("against the contiguous prompt, %s\n", contiguous.Disagreements(n).c_str());
      std::printf("(%d tokens each)\n", max_tokens_);
    }
    return 0;
  }

 private:
  Result<nlohmann::json> EvalOne(Engine& e, const std::string& file) {
    PC_ASSIGN_OR_RETURN(std::string text, ReadTextFile(file));
    PC_ASSIGN_OR_RETURN(PmlPrompt prompt, ParsePrompt(text, file));
    PmlPrompt at_schema = prompt;  // the baselines' tokens, at the schema's positions
    at_schema.positions = PmlPositions::kSchema;
    PC_ASSIGN_OR_RETURN(ExpandedPrompt x, e.ExpandPrompt(at_schema));
    CompletionRequest req;
    req.max_tokens = max_tokens_;
    req.sampling.temperature = 0;
    req.sampling.repeat_penalty = 1;
    req.ignore_eos = true;
    std::vector<std::vector<float>> logits;
    req.on_logits = [&](std::span<const float> l) { logits.emplace_back(l.begin(), l.end()); };
    PC_ASSIGN_OR_RETURN(auto handle, e.SubmitPrompt(prompt, std::move(req)));
    const CompletionResult r = handle->Wait();
    PC_RETURN_IF_ERROR(r.status);
    const RunnerOptions runner = model_.ToRunnerOptions();
    PC_ASSIGN_OR_RETURN(FidelityReport plain, CompareWithFullRecompute(e.model(), Contiguous(x),
                                                                       r.tokens, logits, runner));
    PC_ASSIGN_OR_RETURN(FidelityReport gapped,
                        CompareWithFullRecompute(e.model(), x, r.tokens, logits, runner));
    nlohmann::json row = ReportJson(e, plain);
    row["prompt"] = file;
    row["prompt_tokens"] = r.prompt_tokens;
    row["reused_tokens"] = r.cached_tokens;
    row["computed_tokens"] = r.computed_tokens;
    row["recomputed_tokens"] = r.recomputed_tokens;
    row["recompute_candidates"] = r.recompute_candidates;
    row["modular_text"] = e.model().tokenizer().Decode(r.tokens);
    row["gapped"] = ReportJson(e, gapped);
    return row;
  }

  static nlohmann::json ReportJson(Engine& e, const FidelityReport& rep) {
    return nlohmann::json{{"steps", rep.steps},
                          {"margin_top1_agreement", rep.margin_top1_agreement},
                          {"margin_steps", rep.margin_steps},
                          {"margin_agreements", rep.margin_agreements},
                          {"top1_agreement", rep.top1_agreement},
                          {"first_token_kl", rep.first_token_kl},
                          {"mean_kl", rep.mean_kl},
                          {"disagreement_margins", rep.disagreement_margins},
                          {"greedy_equal", rep.greedy_equal},
                          {"full_text", e.model().tokenizer().Decode(rep.full_tokens)}};
  }

  // Sums of one baseline's figures over the prompts.
  struct Means {
    double agree = 0, kl = 0, all_kl = 0;
    int equal = 0, steps = 0, disagreements = 0, near_ties = 0;
    int margin_steps = 0, margin_agreements = 0;  // pooled over the prompts' steps
    double MarginAgreement() const {
      return margin_steps > 0 ? double(margin_agreements) / margin_steps : 1;
    }
    void Add(const nlohmann::json& r) {
      margin_steps += r["margin_steps"].get<int>();
      margin_agreements += r["margin_agreements"].get<int>();
      agree += r["top1_agreement"].get<double>();
      kl += r["first_token_kl"].get<double>();
      all_kl += r["mean_kl"].get<double>();
      equal += r["greedy_equal"].get<bool>();
      steps += r["steps"].get<int>();
      for (const auto& m : r["disagreement_margins"]) {
        ++disagreements;
        near_ties += m.get<double>() < kNearTieMargin;
      }
    }
    nlohmann::json Summary(size_t n) const {
      return {{"margin_top1_agreement", MarginAgreement()},
              {"margin_steps", margin_steps},
              {"margin_agreements", margin_agreements},
              {"mean_top1_agreement", agree / double(n)},
              {"mean_first_token_kl", kl / double(n)},
              {"mean_kl", all_kl / double(n)},
              {"steps", steps},
              {"disagreements", disagreements},
              {"near_tie_disagreements", near_ties},
              {"greedy_equal", equal}};
    }
    // Where the steps differ: how many, how many of them near ties, the KL over every step.
    std::string Disagreements(size_t n) const {
      char buf[200];
      std::snprintf(buf, sizeof buf,
                    "%d of %d steps differ, %d of them near ties (the full recompute's best token "
                    "within %.1f logit); KL over all steps %.3g",
                    disagreements, steps, near_ties, kNearTieMargin, all_kl / double(n));
      return buf;
    }
    std::string Line(size_t n) const {
      char buf[320];
      std::snprintf(buf, sizeof buf,
                    "margin-aware top-1 agreement %.1f%% (%d of %d steps whose full-recompute "
                    "top two are >= %.1f logit apart), top-1 agreement %.1f%%, first-token KL "
                    "%.3g, greedy continuations equal in %d of %zu prompts",
                    100 * MarginAgreement(), margin_agreements, margin_steps, kNearTieMargin,
                    100 * agree / double(n), kl / double(n), equal, n);
      return buf;
    }
  };

  ModelOptions model_;
  ModularOptions modular_;
  std::string schema_, prompts_;
  int max_tokens_ = 32;
  bool json_ = false;
};

}  // namespace

std::unique_ptr<Command> MakeEvalModulesCommand() { return std::make_unique<EvalModulesCommand>(); }

}  // namespace promptcache::cli
