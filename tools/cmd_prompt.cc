// `promptcache prompt`: serves PML prompts against a schema through the engine's modular prompt
// cache and prints their continuations; --stats reports reuse and the time of each phase.
// --baseline computes each prompt fully without any cache, its tokens at positions 0..n-1 in one
// forward pass: the same text sent plainly (--baseline-gapped keeps the schema's positions, gaps
// and all); --prefix-only sends the same tokens as a plain prompt through the prefix cache.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/log.h"
#include "engine/fidelity.h"
#include "nlohmann/json.hpp"
#include "tools/cli_common.h"

namespace promptcache::cli {
namespace {

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

bool PrintPiece(const std::string& piece) {
  std::fwrite(piece.data(), 1, piece.size(), stdout);
  std::fflush(stdout);
  return true;
}

// What one prompt run reports.
struct RunStats {
  std::string mode;
  CompletionResult r;
};

class PromptCommand : public Command {
 public:
  void Register(CLI::App* sub) override {
    model_.Register(sub);
    model_.RegisterChatTemplate(sub);
    modular_.Register(sub);
    modular_.RegisterRedis(sub);
    sub->add_option("--schema", schema_, "PML schema file")->required();
    sub->add_option("--cache-dir", cache_dir_, "the disk tier (where `schema load` put modules)");
    sub->add_option("prompts", prompt_files_, "PML prompt files, served in order")->required();
    sub->add_option("-n,--n-predict", max_tokens_, "tokens to generate")->default_val(128);
    sampling_.Register(sub);
    sub->add_option("--repeat", repeat_, "serve the list of prompts this many times")
        ->default_val(1);
    sub->add_flag("--stats", stats_,
                  "reuse and timings on stderr, each prompt ending with one JSON line");
    auto* base = sub->add_flag("--baseline", baseline_,
                               "compute each prompt fully without any cache, its tokens at "
                               "positions 0..n-1 (the same text sent plainly), for comparison");
    auto* gapped = sub->add_flag("--baseline-gapped", baseline_gapped_,
                                 "the same at the schema's positions (gaps where modules are "
                                 "left out)");
    gapped->excludes(base);
    sub->add_flag("--prefix-only", prefix_only_,
                  "send the prompt's tokens as a plain prompt through the prefix cache")
        ->excludes(base)
        ->excludes(gapped);
    sub->add_flag("-q,--quiet", quiet_, "do not print the continuations");
    sub->add_flag("--preload", preload_,
                  "encode every module of the schema before the first prompt (as schema load)");
    sub->add_flag("--warmup", warmup_,
                  "run one untimed token through the model first (page in the weights)");
  }

  int Execute() override {
    if (Status st = model_.Validate(); !st.ok()) return Fail(st);
    if (Status st = SelectIsa(model_.isa); !st.ok()) return Fail(st);
    if (max_tokens_ < 0) return Fail("-n must be >= 0");
    if (repeat_ < 1) return Fail("--repeat must be >= 1");
    if (Status st = sampling_.params.Validate(); !st.ok()) return Fail(st);
    SetLogLevel(LogLevel::kWarning);
    Result<std::unique_ptr<Engine>> engine = MakeEngine(model_, cache_dir_, modular_);
    if (!engine.ok()) return Fail(engine.status());
    Engine& e = **engine;
    SchemaLoadOptions lo;
    lo.encode = preload_;  // otherwise the first prompt encodes the modules it misses
    lo.persist = false;
    if (Result<SchemaInfo> info = e.LoadSchemaFile(schema_, lo); !info.ok()) {
      return Fail(info.status());
    }
    std::vector<std::pair<std::string, PmlPrompt>> prompts;
    for (const std::string& file : prompt_files_) {
      Result<std::string> text = ReadTextFile(file, "prompt file");
      if (!text.ok()) return Fail(text.status());
      Result<PmlPrompt> p = ParsePrompt(*text, file);
      if (!p.ok()) return Fail(p.status());
      // Check every prompt before running any, so a bad one fails fast.
      if (Result<ExpandedPrompt> x = e.ExpandPrompt(*p); !x.ok()) return Fail(x.status());
      prompts.emplace_back(file, std::move(p).value());
    }
    if (warmup_) {
      CompletionRequest w;
      w.prompt = {0};
      w.max_tokens = 1;
      w.sampling.temperature = 0;
      Result<std::shared_ptr<RequestHandle>> h = e.Submit(std::move(w));
      if (!h.ok()) return Fail(h.status());
      (*h)->Wait();
    }
    // K/V held before the prompts (the modules preloaded): the peak beyond it is what serving
    // them took on top of the cache.
    const size_t kv_before = e.Stats().kv_bytes_in_use;
    std::vector<double> ttfts;
    long reused = 0, computed = 0;
    for (int rep = 0; rep < repeat_; ++rep) {
      for (const auto& [file, prompt] : prompts) {
        Result<CompletionResult> r = RunOne(e, prompt);
        if (!r.ok()) return Fail(r.status());
        if (!r->status.ok()) return Fail(r->status);
        if (!quiet_) std::fputc('\n', stdout);
        std::fflush(stdout);
        ttfts.push_back(r->ttft_ms);
        reused += r->cached_tokens;
        computed += r->computed_tokens;
        if (stats_) PrintStats(file, *r);
      }
    }
    if (stats_ && ttfts.size() > 1) {
      nlohmann::json j = {{"prompts", ttfts.size()},
                          {"mode", Mode()},
                          {"reused_tokens", reused},
                          {"computed_tokens", computed},
                          {"ttft_ms", Median(ttfts)},
                          {"ttft_ms_max", *std::max_element(ttfts.begin(), ttfts.end())},
                          {"ttft_ms_all", ttfts},
                          {"kv_bytes_before", kv_before},
                          {"kv_bytes_peak", e.Stats().kv_bytes_peak}};
      std::fprintf(stderr, "%s\n", j.dump().c_str());
    }
    return 0;
  }

 private:
  std::string Mode() const {
    return baseline_          ? "baseline"
           : baseline_gapped_ ? "baseline-gapped"
           : prefix_only_     ? "prefix-only"
                              : "modules";
  }

  CompletionRequest MakeRequest() const {
    CompletionRequest req;
    req.max_tokens = max_tokens_;
    req.sampling = sampling_.params;
    req.stop = sampling_.stop;
    req.ignore_eos = sampling_.ignore_eos;
    if (!quiet_) req.on_text = PrintPiece;
    return req;
  }

  Result<CompletionResult> RunOne(Engine& e, const PmlPrompt& prompt) {
    if (baseline_ || baseline_gapped_) return RunBaseline(e, prompt);
    CompletionRequest req = MakeRequest();
    Result<std::shared_ptr<RequestHandle>> h = [&]() -> Result<std::shared_ptr<RequestHandle>> {
      if (!prefix_only_) return e.SubmitPrompt(prompt, std::move(req));
      PC_ASSIGN_OR_RETURN(ExpandedPrompt x, e.ExpandPrompt(prompt));
      req.prompt = std::move(x.tokens);
      return e.Submit(std::move(req));
    }();
    if (!h.ok()) return h.status();
    return (*h)->Wait();
  }

  Result<CompletionResult> RunBaseline(Engine& e, const PmlPrompt& prompt) {
    PmlPrompt at_schema = prompt;
    at_schema.positions = PmlPositions::kSchema;
    PC_ASSIGN_OR_RETURN(ExpandedPrompt x, e.ExpandPrompt(at_schema));
    if (!baseline_gapped_) x = Contiguous(x);
    FullRunOptions o;
    o.runner = model_.ToRunnerOptions();
    o.max_tokens = max_tokens_;
    o.sampling = sampling_.params;
    o.stop = sampling_.stop;
    o.ignore_eos = sampling_.ignore_eos;
    if (!quiet_) o.on_text = PrintPiece;
    PC_ASSIGN_OR_RETURN(FullRunResult f, RunFull(e.model(), x, o));
    CompletionResult r;
    r.tokens = f.tokens;
    r.text = f.text;
    r.finish_reason = f.finish_reason;
    r.prompt_tokens = static_cast<int>(x.tokens.size());
    r.computed_tokens = r.prompt_tokens;
    r.prompt_ms = r.prefill_ms = r.ttft_ms = f.prompt_ms;
    r.generation_ms = f.generation_ms;
    return r;
  }

  void PrintStats(const std::string& file, const CompletionResult& r) const {
    std::fprintf(stderr, "%s (%s): %d prompt tokens: %d reused, %d computed", file.c_str(),
                 Mode().c_str(), r.prompt_tokens, r.cached_tokens, r.computed_tokens);
    if (r.modular) std::fprintf(stderr, " (%d encoded for missing modules)", r.encoded_tokens);
    if (r.recompute_candidates > 0) {
      std::fprintf(stderr, "; %d of %d candidates recomputed in %.2f ms", r.recomputed_tokens,
                   r.recompute_candidates, r.recompute_ms);
    }
    std::fprintf(stderr, "\n");
    if (r.modular) {
      std::fprintf(stderr,
                   "  gather %.2f ms, encode %.2f ms, prefill %.2f ms; first token after %.2f ms\n",
                   r.gather_ms, r.encode_ms, r.prefill_ms, r.ttft_ms);
    } else {
      std::fprintf(stderr, "  prompt %.2f ms; first token after %.2f ms\n", r.prompt_ms, r.ttft_ms);
    }
    const size_t n = r.tokens.size();
    std::fprintf(stderr, "  generated %zu tokens in %.1f ms (%s)\n", n, r.generation_ms,
                 r.finish_reason.c_str());
    nlohmann::json j = {{"prompt", file},
                        {"mode", Mode()},
                        {"prompt_tokens", r.prompt_tokens},
                        {"reused_tokens", r.cached_tokens},
                        {"computed_tokens", r.computed_tokens},
                        {"encoded_tokens", r.encoded_tokens},
                        {"recompute_candidates", r.recompute_candidates},
                        {"recomputed_tokens", r.recomputed_tokens},
                        {"recompute_ms", r.recompute_ms},
                        {"gather_ms", r.gather_ms},
                        {"encode_ms", r.encode_ms},
                        {"prefill_ms", r.modular ? r.prefill_ms : r.prompt_ms},
                        {"ttft_ms", r.ttft_ms},
                        {"generated_tokens", n},
                        {"generation_ms", r.generation_ms}};
    std::fprintf(stderr, "%s\n", j.dump().c_str());
  }

  ModelOptions model_;
  ModularOptions modular_;
  std::string schema_, cache_dir_;
  std::vector<std::string> prompt_files_;
  int max_tokens_ = 128, repeat_ = 1;
  SamplingOptions sampling_;
  bool stats_ = false, baseline_ = false, baseline_gapped_ = false, prefix_only_ = false,
       quiet_ = false;
  bool preload_ = false, warmup_ = false;
};

}  // namespace

std::unique_ptr<Command> MakePromptCommand() { return std::make_unique<PromptCommand>(); }

}  // namespace promptcache::cli
