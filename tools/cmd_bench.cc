// `promptcache bench`: prompt-processing and generation speed (median of repeats), peak RSS and
// KV cache cost, and with --compare-no-cache the cost of generating without a KV cache; --plot
// draws what caching saves as SVG (tools/bench_plot.h); --profile shows where the time of one
// more prompt and generation goes, per operation, layer and thread (tools/bench_profile.h).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>

#include "core/log.h"
#include "core/profile.h"
#include "model/config.h"
#include "nlohmann/json.hpp"
#include "ops/targets.h"
#include "engine/savings.h"
#include "tools/bench_plot.h"
#include "tools/bench_profile.h"
#include "tools/cli_common.h"

namespace promptcache::cli {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int32_t Greedy(const float* logits, int n_vocab) {
  return static_cast<int32_t>(std::max_element(logits, logits + n_vocab) - logits);
}

// Each weight type the model's matrices have, with the name of the matmul kernel that runs it
// (several, comma-separated, should matrices of one type run different ones).
std::map<std::string, std::string> KernelsByType(const Model& model) {
  std::map<std::string, std::string> kernels;
  for (const auto& [name, w] : model.Matrices()) {
    std::string& k = kernels[GgmlTypeName(w->type)];
    const std::string kernel = MatMulKernelName(*w);
    if (("," + k + ",").find("," + kernel + ",") == std::string::npos) {
      k += (k.empty() ? "" : ",") + kernel;
    }
  }
  return kernels;
}

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Attaches a profiler (when not null) to the pool until the scope ends, replacing any before.
class ScopedProfiler {
 public:
  ScopedProfiler(ThreadPool* pool, Profiler* p) : pool_(p != nullptr ? pool : nullptr) {
    if (pool_ != nullptr) pool_->set_profiler(p);
  }
  ~ScopedProfiler() {
    if (pool_ != nullptr) pool_->set_profiler(nullptr);
  }
  ScopedProfiler(const ScopedProfiler&) = delete;
  ScopedProfiler& operator=(const ScopedProfiler&) = delete;

 private:
  ThreadPool* pool_;
};

class BenchCommand : public Command {
 public:
  void Register(CLI::App* sub) override {
    model_.Register(sub);
    sub->add_option("-p,--n-prompt", n_prompt_, "prompt tokens to process")->default_val(512);
    sub->add_option("-d,--depth", depth_,
                    "tokens already in the KV cache before the timed prompt and generation "
                    "(attention over a long context; computed once, untimed)")
        ->default_val(0);
    sub->add_option("-n,--n-gen", n_gen_, "tokens to generate")->default_val(128);
    sub->add_option("-s,--sequences", n_seq_,
                    "sequences served at once: each forks the depth tokens (shared blocks), "
                    "processes its own prompt, and they generate in one batch per step "
                    "(aggregate tokens/s)")
        ->default_val(1);
    sub->add_option("-r,--repetitions", reps_, "repetitions (the median is reported)")
        ->default_val(3);
    sub->add_flag("--json", json_, "end with one JSON object on stdout");
    sub->add_flag("--profile", profile_,
                  "after the timed repetitions, run the prompt and generation once more with "
                  "the profiler on and print where their time goes: per operation (matmul by "
                  "tensor, attention, norms, rope, activations) its time, parallel jobs "
                  "(synchronization points) per pass and per layer, time the calling thread runs "
                  "alone, imbalance (slowest/mean thread), waiting, and bytes of weights and "
                  "K/V read (MiB per pass, GB/s); per thread its busy, wake-up and join-wait "
                  "time and the bytes its tasks read");
    sub->add_flag("--compare-no-cache", compare_,
                  "also time generation with and without the KV cache for growing lengths");
    sub->add_option("--plot", plot_,
                    "also measure what caching saves and write it as SVG charts to this file: "
                    "generation with and without the KV cache up to -n tokens, time to first "
                    "token cold, on a prefix hit and from schema modules up to -p prompt "
                    "tokens, K/V bytes per token by KV type");
  }

  int Execute() override {
    SetLogLevel(LogLevel::kWarning);
    if (Status st = CheckFlags(); !st.ok()) return Fail(st);
    std::unique_ptr<Model> model = LoadModelOrReport(model_.model_path);
    if (!model) return 1;
    if (Status st = model_.Check(*model); !st.ok()) return Fail(st);
    Result<SessionOptions> so = SessionFor(*model);
    if (!so.ok()) return Fail(so.status());
    Session session(*model, *so);
    std::vector<int32_t> prompt, positions;
    KvSequence seq(session.block_pool());
    if (Status st = PrepareTokens(*model, &session, &seq, &prompt, &positions); !st.ok()) {
      return Fail(st);
    }

    std::vector<double> pp, tg;
    // One untimed warm-up of each, so page faults of the mapping are not counted.
    for (int r = 0; r <= reps_; ++r) {
      const Status st = n_seq_ > 1 ? TimeSequences(&session, seq, prompt, &pp, &tg)
                                   : TimeOne(&session, &seq, prompt, positions, &pp, &tg);
      if (!st.ok()) return Fail(st);
      if (r == 0) {
        pp.clear();
        tg.clear();
      }
    }
    nlohmann::json profile_json;
    std::string profile_text;
    if (profile_) {
      const Status st =
          ProfileRun(&session, &seq, prompt, positions, *model, &profile_text, &profile_json);
      if (!st.ok()) return Fail(st);
    }
    seq.Clear();

    const std::map<std::string, std::string> kernels = KernelsByType(*model);
    nlohmann::json out = ResultJson(session, *model, kernels, pp, tg);
    PrintResult(session, *model, kernels, pp, tg);
    if (profile_) {
      std::printf("%s", profile_text.c_str());
      out["profile"] = profile_json;
    }
    if (compare_) out["compare_no_cache"] = CompareNoCache(session, *model);
    if (!plot_.empty()) {
      Result<nlohmann::json> plot =
          WriteBenchPlot({plot_, n_gen_, n_prompt_}, model_, session, *model);
      if (!plot.ok()) return Fail(plot.status());
      PrintPlot(*plot);
      out["plot"] = std::move(plot).value();
    }
    if (json_) std::printf("%s\n", out.dump().c_str());
    return 0;
  }

 private:
  // The flags' bounds, and a --plot file that can be written (before any measuring).
  Status CheckFlags() {
    PC_RETURN_IF_ERROR(model_.Validate());
    PC_RETURN_IF_ERROR(SelectIsa(model_.isa));
    if (n_prompt_ < 1 || n_gen_ < 1 || reps_ < 1) {
      return InvalidArgument("-p, -n and -r must be >= 1");
    }
    if (depth_ < 0) return InvalidArgument("-d must be >= 0");
    if (n_seq_ < 1 || n_seq_ > 256) return InvalidArgument("-s must be from 1 to 256");
    if (!plot_.empty() && !std::ofstream(plot_, std::ios::app)) {
      return InvalidArgument("cannot write the plot to '" + plot_ + "'");
    }
    return Status::Ok();
  }

  // The session's options: without -c, the context -d, -p and -n need, checked as a -c of that
  // size would have been; -d plus -p or -n must fit in it.
  Result<SessionOptions> SessionFor(const Model& model) const {
    SessionOptions so = model_.ToSessionOptions();
    if (so.context == 0) {
      so.context = depth_ + std::max(n_prompt_, n_gen_ + 1);
      PC_RETURN_IF_ERROR(CheckContext(model.config(), so.context, model_.allow_long_context));
    }
    if (depth_ + n_prompt_ > so.context || depth_ + n_gen_ + 1 > so.context) {
      return InvalidArgument("-d plus -p or -n must fit in the context (" +
                             std::to_string(so.context) + ")");
    }
    return so;
  }

  // Random tokens (seed 42): the -d depth tokens, evaluated into `seq`, then the prompt after
  // them.
  Status PrepareTokens(const Model& model, Session* session, KvSequence* seq,
                       std::vector<int32_t>* prompt, std::vector<int32_t>* positions) const {
    const int n_vocab = model.config().n_vocab;
    std::mt19937 rng(42);
    auto random_tokens = [&](int n, int first_pos, std::vector<int32_t>* ids,
                             std::vector<int32_t>* pos) {
      for (int i = 0; i < n; ++i) {
        ids->push_back(static_cast<int32_t>(rng() % n_vocab));
        pos->push_back(first_pos + i);
      }
    };
    std::vector<int32_t> context, context_pos;
    random_tokens(depth_, 0, &context, &context_pos);
    random_tokens(n_prompt_, depth_, prompt, positions);
    if (depth_ > 0) PC_RETURN_IF_ERROR(session->Eval(context, context_pos, seq, nullptr));
    return Status::Ok();
  }

  // --profile: one more timed run of each phase with profilers, as text and JSON.
  Status ProfileRun(Session* session, KvSequence* seq, const std::vector<int32_t>& prompt,
                    const std::vector<int32_t>& positions, const Model& model, std::string* text,
                    nlohmann::json* json) {
    const int nt = session->pool()->size();
    Profiler prompt_prof(nt), gen_prof(nt);
    std::vector<double> ppp, ptg;
    const Status st =
        n_seq_ > 1 ? TimeSequences(session, *seq, prompt, &ppp, &ptg, &prompt_prof, &gen_prof)
                   : TimeOne(session, seq, prompt, positions, &ppp, &ptg, &prompt_prof, &gen_prof);
    if (!st.ok()) return st;
    const int n_layers = model.config().n_layers;
    const std::string each = n_seq_ > 1 ? std::to_string(n_seq_) + "x" : "";
    *text = FormatProfile(prompt_prof, "prompt (" + each + "pp" + std::to_string(n_prompt_) + ")",
                          double(n_seq_) * n_prompt_ / ppp[0], n_layers) +
            FormatProfile(gen_prof, "generation (" + each + "tg" + std::to_string(n_gen_) + ")",
                          double(n_seq_) * n_gen_ / ptg[0], n_layers);
    *json = {{"prompt", ProfileJson(prompt_prof, n_layers)},
             {"generation", ProfileJson(gen_prof, n_layers)}};
    return Status::Ok();
  }

  // The --json line's fields.
  nlohmann::json ResultJson(Session& session, const Model& model,
                            const std::map<std::string, std::string>& kernels,
                            const std::vector<double>& pp, const std::vector<double>& tg) const {
    const KvLayout kv = session.block_pool()->layout();
    return {
        {"model", model_.model_path},
        {"weight_type", GgmlTypeName(model.weight_type())},
        {"threads", session.pool()->size()},
        {"n_prompt", n_prompt_},
        {"n_gen", n_gen_},
        {"depth", depth_},
        {"sequences", n_seq_},
        {"repetitions", reps_},
        {"prompt_tps", Median(pp)},
        {"gen_tps", Median(tg)},
        {"peak_rss_bytes", PeakRssBytes()},
        {"file_bytes", model.file().file_size()},
        {"repacked_bytes", model.packed_bytes()},
        {"kv_type", model_.kv_type},
        {"kv_bytes_per_token", kv.bytes_per_token()},
        {"kv_peak_bytes", session.block_pool()->peak_bytes_in_use()},
        {"isa", OpsActiveTargetName()},
        {"target", OpsActiveTargetName()},
        {"kernels", kernels},
    };
  }

  // The human-readable report.
  void PrintResult(Session& session, const Model& model,
                   const std::map<std::string, std::string>& kernels, const std::vector<double>& pp,
                   const std::vector<double>& tg) const {
    const KvLayout kv = session.block_pool()->layout();
    std::printf("model            %s (%s, %.1f MiB file, %.1f MiB repacked)\n",
                model_.model_path.c_str(), GgmlTypeName(model.weight_type()).c_str(),
                model.file().file_size() / 1048576.0, model.packed_bytes() / 1048576.0);
    std::printf("threads          %d\n", session.pool()->size());
    std::string kernel_list;
    for (const auto& [type, kernel] : kernels) {
      kernel_list += (kernel_list.empty() ? "" : ", ") + type + " " + kernel;
    }
    std::printf("kernels          %s: %s\n", OpsActiveTargetName().c_str(), kernel_list.c_str());
    if (depth_ > 0) std::printf("depth            %d tokens in the KV cache first\n", depth_);
    const std::string each = n_seq_ > 1 ? std::to_string(n_seq_) + "x" : "";
    if (n_seq_ > 1) std::printf("sequences        %d at once, sharing the depth tokens\n", n_seq_);
    std::printf("prompt (%spp%d)   %8.1f tokens/s  (median of %d; min %.1f, max %.1f)\n",
                each.c_str(), n_prompt_, Median(pp), reps_, *std::min_element(pp.begin(), pp.end()),
                *std::max_element(pp.begin(), pp.end()));
    std::printf("generation (%stg%d) %6.1f tokens/s  (median of %d; min %.1f, max %.1f)\n",
                each.c_str(), n_gen_, Median(tg), reps_, *std::min_element(tg.begin(), tg.end()),
                *std::max_element(tg.begin(), tg.end()));
    std::printf("peak RSS         %.1f MiB\n", PeakRssBytes() / 1048576.0);
    const bool trimmed = !model_.no_trim_sliding && depth_ == 0 && n_seq_ == 1;
    std::printf("KV cache         %zu bytes/token (%s), peak %.1f MiB%s\n", kv.bytes_per_token(),
                model_.kv_type.c_str(), session.block_pool()->peak_bytes_in_use() / 1048576.0,
                !kv.has_sliding() ? ""
                : trimmed         ? ", sliding layers trimmed past their window"
                                  : ", sliding layers kept");
  }

  // The prompt after the depth tokens, then n_gen_ tokens decoded one at a time (greedy).
  // Appends tokens/s. With profilers, each phase's passes are profiled by its own.
  Status TimeOne(Session* session, KvSequence* seq, const std::vector<int32_t>& prompt,
                 const std::vector<int32_t>& positions, std::vector<double>* pp,
                 std::vector<double>* tg, Profiler* pp_prof = nullptr,
                 Profiler* tg_prof = nullptr) {
    const int n_vocab = session->model().config().n_vocab;
    std::vector<float> logits(n_vocab);
    seq->Truncate(depth_);
    // Without depth tokens the sequence only moves forward until it is cleared: sliding layers'
    // K/V are released as the window passes, as in generation. (Depth tokens are read again by
    // the next repetition, from its first position.)
    const bool forward_only = depth_ == 0;
    const ScopedProfiler prompt_profiled(session->pool(), pp_prof);
    auto t0 = std::chrono::steady_clock::now();
    PC_RETURN_IF_ERROR(session->Eval(prompt, positions, seq, logits.data(), false, forward_only));
    pp->push_back(n_prompt_ / SecondsSince(t0));

    seq->Truncate(depth_);
    int32_t tok = prompt[0];
    const ScopedProfiler gen_profiled(session->pool(), tg_prof);
    t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n_gen_; ++i) {
      const int32_t pos = depth_ + i;
      PC_RETURN_IF_ERROR(
          session->Eval({&tok, 1}, {&pos, 1}, seq, logits.data(), false, forward_only));
      tok = Greedy(logits.data(), n_vocab);
    }
    tg->push_back(n_gen_ / SecondsSince(t0));
    return Status::Ok();
  }

  // n_seq_ sequences forked from `base` (the depth tokens, shared): their prompts (the same
  // tokens; each sequence computes its own) in one batch, then n_gen_ steps of one batch with
  // a token of each, as a server decodes its active requests. Appends aggregate tokens/s.
  Status TimeSequences(Session* session, const KvSequence& base, const std::vector<int32_t>& prompt,
                       std::vector<double>* pp, std::vector<double>* tg,
                       Profiler* pp_prof = nullptr, Profiler* tg_prof = nullptr) {
    const int n_vocab = session->model().config().n_vocab;
    std::vector<KvSequence> seqs;
    for (int i = 0; i < n_seq_; ++i) seqs.push_back(base.Fork());
    std::vector<BatchToken> batch;
    for (KvSequence& sq : seqs) {
      for (int i = 0; i < n_prompt_; ++i) {
        batch.push_back({prompt[i], depth_ + i, &sq, i + 1 == n_prompt_});
      }
    }
    std::vector<float> logits(size_t(n_seq_) * n_vocab);
    const ScopedProfiler prompt_profiled(session->pool(), pp_prof);
    auto t0 = std::chrono::steady_clock::now();
    PC_RETURN_IF_ERROR(session->EvalBatch(batch, logits.data()));
    pp->push_back(double(n_seq_) * n_prompt_ / SecondsSince(t0));

    for (KvSequence& sq : seqs) sq.Truncate(depth_);
    std::vector<int32_t> tok(n_seq_, prompt[0]);
    const ScopedProfiler gen_profiled(session->pool(), tg_prof);
    t0 = std::chrono::steady_clock::now();
    for (int step = 0; step < n_gen_; ++step) {
      batch.clear();
      for (int i = 0; i < n_seq_; ++i) batch.push_back({tok[i], depth_ + step, &seqs[i], true});
      PC_RETURN_IF_ERROR(session->EvalBatch(batch, logits.data()));
      for (int i = 0; i < n_seq_; ++i)
        tok[i] = Greedy(logits.data() + size_t(i) * n_vocab, n_vocab);
    }
    tg->push_back(double(n_seq_) * n_gen_ / SecondsSince(t0));
    return Status::Ok();
  }

  // Generation of L tokens after a 1-token prompt, with the cache (each step one token of work)
  // and without (each step recomputes all): linear against quadratic.
  nlohmann::json CompareNoCache(Session& session, const Model& model) {
    nlohmann::json rows = nlohmann::json::array();
    std::printf("\n%8s %14s %14s %9s\n", "tokens", "with cache ms", "no cache ms", "speedup");
    for (int len = 16; len <= std::max(16, n_gen_); len *= 2) {
      double ms[2];
      for (int use_cache = 1; use_cache >= 0; --use_cache) {
        Result<double> r = TimeGeneration(session, len, use_cache == 1);
        PC_CHECK(r.ok());
        ms[use_cache] = *r;
      }
      std::printf("%8d %14.1f %14.1f %8.1fx\n", len, ms[1], ms[0], ms[0] / ms[1]);
      rows.push_back({{"tokens", len}, {"with_cache_ms", ms[1]}, {"no_cache_ms", ms[0]}});
    }
    return rows;
  }

  void PrintPlot(const nlohmann::json& plot) {
    std::printf("\n%8s %14s %14s\n", "tokens", "with cache ms", "no cache ms");
    for (const auto& r : plot["generation"]) {
      std::printf("%8d %14.2f %14.2f\n", r["tokens"].get<int>(), r["with_cache_ms"].get<double>(),
                  r["no_cache_ms"].get<double>());
    }
    std::printf("\n%8s %12s %15s %12s  (time to first token)\n", "prompt", "cold ms",
                "prefix hit ms", "modules ms");
    for (const auto& r : plot["ttft"]) {
      std::printf("%8d %12.2f %15.2f %12.2f\n", r["prompt_tokens"].get<int>(),
                  r["cold_ms"].get<double>(), r["prefix_hit_ms"].get<double>(),
                  r["modules_ms"].get<double>());
    }
    std::printf("\nwrote %s\n", plot["path"].get<std::string>().c_str());
  }

  ModelOptions model_;
  std::string plot_;
  int n_prompt_ = 512, n_gen_ = 128, reps_ = 3, depth_ = 0, n_seq_ = 1;
  bool json_ = false, compare_ = false, profile_ = false;
};

}  // namespace

std::unique_ptr<Command> MakeBenchCommand() { return std::make_unique<BenchCommand>(); }

}  // namespace promptcache::cli
