#include "tools/bench_plot.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <random>

#include "promptcache/engine.h"
#include "tools/plot_svg.h"

namespace promptcache::cli {
namespace {

constexpr int kTrials = 3;      // median of this many TTFTs per point
constexpr int kNewTokens = 16;  // the new ending after a cached prefix or the modules

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// About n points from `step` up to `max`, in multiples of `step`.
std::vector<int> Lengths(int max, int step, int n) {
  std::vector<int> out;
  const int stride = std::max(step, (max / n + step - 1) / step * step);
  for (int len = stride; len <= max; len += stride) out.push_back(len);
  if (out.empty()) out.push_back(std::max(1, max));
  return out;
}

// Generation of `len` tokens after a 1-token prompt, with and without the KV cache.
PlotPanel GenerationPanel(Session& session, const Model& model, int max_gen, nlohmann::json* rows) {
  PlotSeries with{"with KV cache", "#2e9e4f", {}}, without{"no KV cache", "#d1495b", {}};
  for (const int len : Lengths(max_gen, 16, 8)) {
    double ms[2];
    for (int use_cache = 1; use_cache >= 0; --use_cache) {
      const Result<double> t = TimeGeneration(session, model, len, use_cache == 1);
      ms[use_cache] = t.ok() ? *t : 0;
    }
    with.points.push_back({double(len), ms[1]});
    without.points.push_back({double(len), ms[0]});
    rows->push_back({{"tokens", len}, {"with_cache_ms", ms[1]}, {"no_cache_ms", ms[0]}});
  }
  return {"Generation: with vs without KV cache",
          "tokens generated",
          "ms",
          {without, with},
          {},
          "without the cache each token recomputes all before it"};
}

// Text of about `n` tokens taken from `source` at `offset` (wrapping around), for module text.
std::string TextOf(const Tokenizer& tok, const std::vector<int32_t>& source, int offset, int n) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back(source[(offset + i) % source.size()]);
  return tok.Decode(ids);
}

Result<double> Ttft(Result<std::shared_ptr<RequestHandle>> handle, int* prompt_tokens) {
  if (!handle.ok()) return handle.status();
  const CompletionResult r = (*handle)->Wait();
  if (!r.status.ok()) return r.status;
  *prompt_tokens = r.prompt_tokens;
  return r.ttft_ms;
}

// TTFT against prompt length through a real Engine: a cold prompt (random tokens nothing
// shares), the same prompt with its last kNewTokens replaced (a prefix hit), and a schema's four
// cached modules followed by kNewTokens of new text.
Result<PlotPanel> TtftPanel(const ModelOptions& mo, const Model& model, int max_prompt,
                            nlohmann::json* rows) {
  EngineOptions eo;
  eo.model_path = mo.model_path;
  eo.threads = mo.threads;
  eo.kv_type = mo.KvTypeValue();
  eo.parallel = 1;
  eo.context = mo.context;
  eo.allow_long_context = mo.allow_long_context;
  PC_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Create(eo));
  const int context = engine->model().config().context_length;
  const int limit = std::min(max_prompt, (context > 0 ? context : max_prompt) - 2 * kNewTokens);
  const Tokenizer& tok = model.tokenizer();
  const int n_vocab = model.config().n_vocab;
  std::mt19937 rng(7);
  // Module text comes from a story so that it reads as text (random ids would not round-trip).
  const std::vector<int32_t> story = tok.Encode(
      "Once upon a time, there was a little girl named Lily. She liked to play in the park with "
      "her dog Max. One day, they found a big red ball under a tree. Lily threw the ball and Max "
      "ran after it. They played all day and were very happy. ",
      false);
  PlotSeries cold{"cold", "#d1495b", {}}, hit{"prefix hit, new ending", "#2e9e4f", {}},
      mods{"schema modules + new text", "#e0a100", {}};
  auto request = [] {
    CompletionRequest c;
    c.max_tokens = 1;
    c.sampling.temperature = 0;
    return c;
  };
  for (const int len : Lengths(limit, 16, 8)) {
    std::vector<double> t_cold, t_hit, t_mod;
    int n_cold = len, n_hit = len, n_mod = len;
    // The schema: four modules of about len/4 tokens each.
    const std::string name = "plot" + std::to_string(len);
    std::string xml = "<schema name=\"" + name + "\">";
    for (int m = 0; m < 4; ++m) {
      xml += "<module name=\"m" + std::to_string(m) + "\"><![CDATA[" +
             TextOf(tok, story, m * 7 + len, std::max(1, (len - kNewTokens) / 4)) + "]]></module>";
    }
    xml += "</schema>";
    SchemaLoadOptions so;
    so.persist = false;
    PC_RETURN_IF_ERROR(engine->LoadSchemaText(xml, name + ".xml", so).status());
    for (int trial = 0; trial <= kTrials; ++trial) {  // trial 0 warms up
      std::vector<int32_t> prompt(len);
      for (int32_t& id : prompt) id = static_cast<int32_t>(rng() % n_vocab);
      CompletionRequest c = request();
      c.prompt = prompt;
      PC_ASSIGN_OR_RETURN(const double a, Ttft(engine->Submit(std::move(c)), &n_cold));
      for (int i = len - kNewTokens; i < len; ++i)
        prompt[i] = static_cast<int32_t>(rng() % n_vocab);
      c = request();
      c.prompt = prompt;
      PC_ASSIGN_OR_RETURN(const double b, Ttft(engine->Submit(std::move(c)), &n_hit));
      PromptBuilder pb(name);
      for (int m = 0; m < 4; ++m) pb.Module("m" + std::to_string(m));
      pb.Text(TextOf(tok, story, trial * 5, kNewTokens));
      PC_ASSIGN_OR_RETURN(const double d,
                          Ttft(engine->SubmitPrompt(pb.prompt(), request()), &n_mod));
      if (trial == 0) continue;
      t_cold.push_back(a);
      t_hit.push_back(b);
      t_mod.push_back(d);
    }
    (void)engine->DropSchema(name);
    cold.points.push_back({double(n_cold), Median(t_cold)});
    hit.points.push_back({double(n_hit), Median(t_hit)});
    mods.points.push_back({double(n_mod), Median(t_mod)});
    rows->push_back({{"prompt_tokens", len},
                     {"cold_ms", Median(t_cold)},
                     {"prefix_hit_ms", Median(t_hit)},
                     {"modules_ms", Median(t_mod)},
                     {"modules_prompt_tokens", n_mod}});
  }
  return PlotPanel{"Time to first token",
                   "prompt tokens",
                   "ms",
                   {cold, hit, mods},
                   {},
                   "median of 3; a hit or modules compute only the new 16 tokens"};
}

PlotPanel BytesPanel(const Model& model, nlohmann::json* rows) {
  PlotPanel p{"K/V bytes per token by KV type", "KV type (--kv-type)", "bytes", {}, {},
              "all layers, keys and values"};
  for (const auto& [name, type] :
       {std::pair{"f16", KvType::kF16}, std::pair{"f32", KvType::kF32},
        std::pair{"q8_0", KvType::kQ8_0}, std::pair{"q4_0", KvType::kQ4_0}}) {
    if (!CheckKvType(type, model.config().kv_dim()).ok()) continue;
    const double bytes = double(model.MakeKvLayout(type).bytes_per_token());
    p.bars.push_back({name, bytes});
    (*rows)[name] = bytes;
  }
  return p;
}

}  // namespace

Result<double> TimeGeneration(Session& session, const Model& model, int len, bool use_kv_cache) {
  const int32_t bos = std::max(0, model.tokenizer().bos());
  GenerateOptions o;
  o.max_tokens = len;
  o.sampling.temperature = 0;
  o.ignore_eos = true;
  o.use_kv_cache = use_kv_cache;
  PC_ASSIGN_OR_RETURN(GenerateResult r, session.Generate({&bos, 1}, o));
  return r.prompt_ms + r.generation_ms;
}

Result<nlohmann::json> WriteBenchPlot(const BenchPlotOptions& options, const ModelOptions& mo,
                                      Session& session, const Model& model) {
  nlohmann::json out;
  out["generation"] = nlohmann::json::array();
  out["ttft"] = nlohmann::json::array();
  out["kv_bytes_per_token"] = nlohmann::json::object();
  std::vector<PlotPanel> panels;
  panels.push_back(GenerationPanel(session, model, options.max_gen, &out["generation"]));
  PC_ASSIGN_OR_RETURN(PlotPanel ttft, TtftPanel(mo, model, options.max_prompt, &out["ttft"]));
  panels.push_back(std::move(ttft));
  panels.push_back(BytesPanel(model, &out["kv_bytes_per_token"]));
  std::string model_name = mo.model_path;
  if (const size_t slash = model_name.rfind('/'); slash != std::string::npos) {
    model_name = model_name.substr(slash + 1);
  }
  const std::string svg = RenderPlot("What caching saves: " + model_name, panels);
  std::ofstream f(options.path, std::ios::binary);
  if (!f || !(f << svg) || !(f.flush())) {
    return IoError("cannot write the plot to '" + options.path + "'");
  }
  out["path"] = options.path;
  return out;
}

}  // namespace promptcache::cli
