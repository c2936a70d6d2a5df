// `promptcache eval-segments`: the segment cache (docs/modules.md "Segments") on a retrieval
// workload. Each request is a system text, k of N documents in random order (each a segment) and
// a question; the same seeded sequence of requests is served by a fresh engine for each setting
// (encoding, border tokens, recompute share) and, unless --no-fidelity, every request that reused
// a segment (something to repair) is compared with the full recompute of its text
// (engine/fidelity.h): margin-aware top-1 agreement (the headline: steps whose full-recompute
// top-2 margin is >= 0.1 logit), plain top-1 agreement, first-token KL. Also per setting: the
// segment hit rate, the share of prompt tokens reused, the time to the first token (mean, p95)
// and the K/V bytes the cache holds at the end. --baselines adds the full recompute (no cache)
// and the prefix cache alone.
//
// --rag DIR reads DIR/system.txt, DIR/docs.txt (documents separated by lines "---") and
// DIR/questions.txt (one per line); --synthetic makes them of random token ids of the given
// lengths instead (for timing on a model whose text does not matter, e.g. a synth model).
#include <algorithm>
#include <cmath>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>

#include "core/log.h"
#include "engine/fidelity.h"
#include "nlohmann/json.hpp"
#include "tools/cli_common.h"

namespace promptcache::cli {
namespace {

std::string Trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

// The workload's pieces as token ids.
struct Corpus {
  std::vector<int32_t> system;
  std::vector<std::vector<int32_t>> docs, questions;
};

// Text pieces: each starts a new line (the system text after BOS, with a leading space).
Result<Corpus> ReadCorpus(const Tokenizer& tok, const std::string& dir) {
  Corpus c;
  PC_ASSIGN_OR_RETURN(std::string system, ReadTextFile(dir + "/system.txt"));
  c.system = tok.Encode(" " + Trim(system), false);
  PC_ASSIGN_OR_RETURN(std::string docs, ReadTextFile(dir + "/docs.txt"));
  std::istringstream lines(docs);
  std::string line, doc;
  auto flush = [&] {
    if (!Trim(doc).empty()) c.docs.push_back(tok.Encode("\n" + Trim(doc), false));
    doc.clear();
  };
  while (std::getline(lines, line)) {
    if (Trim(line) == "---") {
      flush();
    } else {
      doc += line + "\n";
    }
  }
  flush();
  PC_ASSIGN_OR_RETURN(std::string questions, ReadTextFile(dir + "/questions.txt"));
  std::istringstream qs(questions);
  while (std::getline(qs, line)) {
    if (!Trim(line).empty()) c.questions.push_back(tok.Encode("\n" + Trim(line), false));
  }
  if (c.docs.empty() || c.questions.empty()) {
    return InvalidArgument(dir + ": needs documents in docs.txt and questions in questions.txt");
  }
  return c;
}

Corpus SyntheticCorpus(int n_vocab, int system, int docs, int doc_tokens, int question,
                       uint32_t seed) {
  std::mt19937 rng(seed ^ 0x5eed);
  std::uniform_int_distribution<int32_t> id(3, n_vocab - 1);  // past the usual special ids
  auto make = [&](int n) {
    std::vector<int32_t> v(n);
    for (int32_t& t : v) t = id(rng);
    return v;
  };
  Corpus c;
  c.system = make(system);
  for (int i = 0; i < docs; ++i) c.docs.push_back(make(doc_tokens));
  for (int i = 0; i < 8; ++i) c.questions.push_back(make(question));
  return c;
}

struct RagRequest {
  std::vector<int32_t> tokens;
  std::vector<PromptSegment> segments;
};

// BOS, the system text, k documents drawn without replacement in random order, a question.
std::vector<RagRequest> MakeRequests(const Corpus& c, int32_t bos, int k, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<RagRequest> out;
  std::vector<int> order(c.docs.size());
  for (int i = 0; i < n; ++i) {
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    RagRequest r;
    if (bos >= 0) r.tokens.push_back(bos);
    r.tokens.insert(r.tokens.end(), c.system.begin(), c.system.end());
    for (int j = 0; j < k; ++j) {
      const std::vector<int32_t>& d = c.docs[order[j]];
      const int begin = static_cast<int>(r.tokens.size());
      r.tokens.insert(r.tokens.end(), d.begin(), d.end());
      r.segments.push_back({begin, static_cast<int>(r.tokens.size())});
    }
    const std::vector<int32_t>& q = c.questions[i % c.questions.size()];
    r.tokens.insert(r.tokens.end(), q.begin(), q.end());
    out.push_back(std::move(r));
  }
  return out;
}

// One engine setting.
struct Setting {
  std::string name;
  bool prefix = true, segments = true;
  SegmentEncoding encoding = SegmentEncoding::kInContext;
  int border = 4;
  double recompute = 0;
};

// What one setting measured.
struct Outcome {
  int requests = 0, scored = 0, lookups = 0, hits = 0;
  long prompt_tokens = 0, cached_tokens = 0, recomputed = 0, candidates = 0;
  int margin_steps = 0, margin_agreements = 0, steps = 0, agreements = 0;
  double kl = 0;  // summed over the scored requests
  std::vector<double> ttft;
  size_t kv_bytes = 0;

  double Ttft(double q) const {
    if (ttft.empty()) return 0;
    std::vector<double> v = ttft;
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, static_cast<size_t>(std::ceil(q * v.size())) - 1)];
  }
  double TtftMean() const {
    return ttft.empty() ? 0 : std::accumulate(ttft.begin(), ttft.end(), 0.0) / ttft.size();
  }
  nlohmann::json Json(const Setting& s) const {
    return {
        {"setting", s.name},
        {"requests", requests},
        {"scored_requests", scored},
        {"segment_lookups", lookups},
        {"segment_hits", hits},
        {"hit_rate", lookups > 0 ? double(hits) / lookups : 0},
        {"prompt_tokens", prompt_tokens},
        {"cached_tokens", cached_tokens},
        {"recomputed_tokens", recomputed},
        {"recompute_candidates", candidates},
        {"margin_top1_agreement", margin_steps > 0 ? double(margin_agreements) / margin_steps : 1},
        {"margin_steps", margin_steps},
        {"margin_agreements", margin_agreements},
        {"top1_agreement", steps > 0 ? double(agreements) / steps : 1},
        {"mean_first_token_kl", scored > 0 ? kl / scored : 0},
        {"ttft_mean_ms", TtftMean()},
        {"ttft_p50_ms", Ttft(0.5)},
        {"ttft_p95_ms", Ttft(0.95)},
        {"kv_bytes_cached", kv_bytes}};
  }
};

class EvalSegmentsCommand : public Command {
 public:
  void Register(CLI::App* sub) override {
    model_.Register(sub);
    sub->add_option("--rag", rag_dir_, "folder with system.txt, docs.txt, questions.txt");
    sub->add_flag("--synthetic", synthetic_, "random token ids instead of --rag (timing only)");
    sub->add_option("--system-tokens", system_tokens_, "--synthetic: system text length")
        ->default_val(200);
    sub->add_option("--docs", n_docs_, "--synthetic: documents")->default_val(16);
    sub->add_option("--doc-tokens", doc_tokens_, "--synthetic: document length")->default_val(300);
    sub->add_option("--question-tokens", question_tokens_, "--synthetic: question length")
        ->default_val(20);
    sub->add_option("-k", k_, "documents per request")->default_val(4);
    sub->add_option("--requests", requests_, "requests per setting")->default_val(64);
    sub->add_option("--seed", seed_, "seed of the documents' draw and order")->default_val(1);
    sub->add_option("-n,--n-predict", max_tokens_, "tokens of greedy continuation compared")
        ->default_val(16);
    sub->add_option("--recompute", ratios_, "recompute shares, comma-separated")
        ->delimiter(',')
        ->default_str("0,0.05,0.15,0.3");
    sub->add_option("--border", borders_, "border tokens recomputed, comma-separated")
        ->delimiter(',')
        ->default_str("4");
    sub->add_option("--encoding", encoding_, "in-context, alone or both")->default_val("both");
    sub->add_option("--min-tokens", min_tokens_, "segment_min_tokens")->default_val(64);
    sub->add_flag("--baselines", baselines_, "also the full recompute and the prefix cache alone");
    sub->add_option("--only", only_, "run only the settings whose name contains this text");
    sub->add_flag("--no-segments", no_segments_, "only the baselines (with --baselines)");
    sub->add_flag("--no-fidelity", no_fidelity_, "timing only: no comparison with the recompute");
    sub->add_flag("--json", json_, "print one JSON object instead of the table");
  }

  int Execute() override {
    if (Status st = model_.Validate(); !st.ok()) return Fail(st);
    if (Status st = SelectIsa(model_.isa); !st.ok()) return Fail(st);
    if (rag_dir_.empty() == !synthetic_) return Fail("give one of --rag DIR and --synthetic");
    if (ratios_.empty()) ratios_ = {0, 0.05, 0.15, 0.3};
    if (borders_.empty()) borders_ = {4};
    if (max_tokens_ < 1 || requests_ < 1 || k_ < 1) return Fail("-n, -k, --requests must be >= 1");
    for (double r : ratios_) {
      if (!(r >= 0 && r <= 1)) return Fail("--recompute shares must be from 0 to 1");
    }
    std::vector<SegmentEncoding> encodings;
    if (encoding_ == "in-context" || encoding_ == "both") {
      encodings.push_back(SegmentEncoding::kInContext);
    }
    if (encoding_ == "alone" || encoding_ == "both") encodings.push_back(SegmentEncoding::kAlone);
    if (encodings.empty()) return Fail("--encoding must be in-context, alone or both");
    SetLogLevel(LogLevel::kWarning);
    std::unique_ptr<Model> model = LoadModelOrReport(model_.model_path);
    if (!model) return 1;
    const Tokenizer& tok = model->tokenizer();
    Corpus corpus;
    if (synthetic_) {
      corpus = SyntheticCorpus(model->config().n_vocab, system_tokens_, n_docs_, doc_tokens_,
                               question_tokens_, seed_);
    } else {
      Result<Corpus> c = ReadCorpus(tok, rag_dir_);
      if (!c.ok()) return Fail(c.status());
      corpus = std::move(c).value();
    }
    if (k_ > static_cast<int>(corpus.docs.size())) return Fail("-k is more than the documents");
    const std::vector<RagRequest> requests = MakeRequests(corpus, tok.bos(), k_, requests_, seed_);
    std::vector<Setting> settings;
    if (baselines_) {
      settings.push_back({"full recompute", false, false});
      settings.push_back({"prefix cache only", true, false});
    }
    for (SegmentEncoding enc : no_segments_ ? std::vector<SegmentEncoding>{} : encodings) {
      for (int border : borders_) {
        for (double ratio : ratios_) {
          char name[96];
          std::snprintf(name, sizeof name, "%s, border %d, recompute %g%%",
                        enc == SegmentEncoding::kAlone ? "alone" : "in context", border,
                        100 * ratio);
          settings.push_back({name, true, true, enc, border, ratio});
        }
      }
    }
    if (!only_.empty()) {
      std::erase_if(settings,
                    [&](const Setting& s) { return s.name.find(only_) == std::string::npos; });
    }
    nlohmann::json rows = nlohmann::json::array();
    if (!json_) PrintHeader(requests);
    for (const Setting& s : settings) {
      Result<Outcome> o = Run(*model, s, requests);
      if (!o.ok()) return Fail(o.status());
      if (!json_) PrintRow(s, *o);
      if (json_) std::fprintf(stderr, "%s\n", o->Json(s).dump().c_str());  // progress
      rows.push_back(o->Json(s));
    }
    if (json_) {
      nlohmann::json out{{"requests", requests_},
                         {"k", k_},
                         {"documents", corpus.docs.size()},
                         {"tokens_compared", max_tokens_},
                         {"settings", rows}};
      std::printf("%s\n", out.dump(2).c_str());
    }
    return 0;
  }

 private:
  Result<Outcome> Run(const Model& model, const Setting& s,
                      const std::vector<RagRequest>& requests) {
    EngineOptions o;
    o.model_path = model_.model_path;
    o.threads = model_.threads;
    o.context = model_.context;
    o.kv_type = model_.KvTypeValue();
    o.parallel = 1;
    o.prefix_cache = s.prefix;
    o.segment_cache = s.segments;
    o.segment_encoding = s.encoding;
    o.segment_border_tokens = s.border;
    o.segment_recompute = s.recompute;
    o.segment_min_tokens = min_tokens_;
    PC_ASSIGN_OR_RETURN(std::unique_ptr<Engine> e, Engine::Create(o));
    const RunnerOptions runner = model_.ToRunnerOptions();
    Outcome out;
    for (const RagRequest& rr : requests) {
      CompletionRequest req;
      req.prompt = rr.tokens;
      req.segments = rr.segments;
      req.max_tokens = no_fidelity_ ? 1 : max_tokens_;
      req.sampling.temperature = 0;
      req.sampling.repeat_penalty = 1;
      req.ignore_eos = true;
      std::vector<std::vector<float>> logits;
      if (!no_fidelity_) {
        req.on_logits = [&](std::span<const float> l) { logits.emplace_back(l.begin(), l.end()); };
      }
      PC_ASSIGN_OR_RETURN(auto handle, e->Submit(std::move(req)));
      const CompletionResult r = handle->Wait();
      PC_RETURN_IF_ERROR(r.status);
      ++out.requests;
      out.lookups += r.segment_lookups;
      out.hits += r.segment_hits;
      out.prompt_tokens += r.prompt_tokens;
      out.cached_tokens += r.cached_tokens;
      out.recomputed += r.recomputed_tokens;
      out.candidates += r.recompute_candidates;
      out.ttft.push_back(r.ttft_ms);
      if (no_fidelity_ || r.segment_hits == 0) continue;  // nothing approximated
      PC_ASSIGN_OR_RETURN(FidelityReport rep, CompareWithFullRecompute(model, Contiguous(rr.tokens),
                                                                       r.tokens, logits, runner));
      ++out.scored;
      out.margin_steps += rep.margin_steps;
      out.margin_agreements += rep.margin_agreements;
      out.steps += rep.steps;
      out.agreements += rep.agreements;
      out.kl += rep.first_token_kl;
    }
    out.kv_bytes = e->Stats().cache_ram_bytes;
    return out;
  }

  void PrintHeader(const std::vector<RagRequest>& requests) const {
    const size_t tokens = requests.empty() ? 0 : requests[0].tokens.size();
    std::printf("%d requests of about %zu tokens (k=%d), %s\n", requests_, tokens, k_,
                no_fidelity_ ? "timing only"
                             : "fidelity over the requests that reused a segment, against "
                               "the full recompute of the same text");
    std::printf("%-36s %6s %7s %7s | %8s %7s %10s | %9s %9s %9s %10s\n", "setting", "scored",
                "hits", "reused", "m-top1", "top1", "KL(first)", "TTFT mean", "TTFT p50",
                "TTFT p95", "K/V MiB");
  }

  void PrintRow(const Setting& s, const Outcome& o) const {
    const nlohmann::json j = o.Json(s);
    char fid[64] = "       -       -          -";
    if (!no_fidelity_ && o.scored > 0) {
      std::snprintf(
          fid, sizeof fid, "%7.1f%% %6.1f%% %10.3g", 100 * j["margin_top1_agreement"].get<double>(),
          100 * j["top1_agreement"].get<double>(), j["mean_first_token_kl"].get<double>());
    }
    std::printf("%-36s %6d %6.1f%% %6.1f%% | %s | %9.1f %9.1f %9.1f %10.2f\n", s.name.c_str(),
                o.scored, 100 * j["hit_rate"].get<double>(),
                o.prompt_tokens > 0 ? 100.0 * o.cached_tokens / o.prompt_tokens : 0, fid,
                o.TtftMean(), o.Ttft(0.5), o.Ttft(0.95), o.kv_bytes / 1048576.0);
  }

  ModelOptions model_;
  std::string rag_dir_;
  bool synthetic_ = false;
  int system_tokens_ = 200, n_docs_ = 16, doc_tokens_ = 300, question_tokens_ = 20;
  int k_ = 4, requests_ = 64, max_tokens_ = 16, min_tokens_ = 64;
  uint32_t seed_ = 1;
  std::vector<double> ratios_;
  std::vector<int> borders_;
  std::string encoding_ = "both", only_;
  bool baselines_ = false, no_segments_ = false, no_fidelity_ = false, json_ = false;
};

}  // namespace

std::unique_ptr<Command> MakeEvalSegmentsCommand() {
  return std::make_unique<EvalSegmentsCommand>();
}

}  // namespace promptcache::cli
