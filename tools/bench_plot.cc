#include "tools/bench_plot.h"

#include <fstream>

#include "promptcache/engine.h"
#include "engine/savings.h"
#include "tools/plot_svg.h"

namespace promptcache::cli {
namespace {

// Generation of `len` tokens after a 1-token prompt, with and without the KV cache.
Result<PlotPanel> GenerationPanel(Runner& session, int max_gen, nlohmann::json* rows) {
  PlotSeries with{"with KV cache", "#2e9e4f", {}}, without{"no KV cache", "#d1495b", {}};
  PC_ASSIGN_OR_RETURN(const std::vector<GenerationTiming> timings,
                      MeasureGeneration(session, max_gen));
  for (const GenerationTiming& t : timings) {
    with.points.push_back({double(t.tokens), t.with_cache_ms});
    without.points.push_back({double(t.tokens), t.no_cache_ms});
    rows->push_back(
        {{"tokens", t.tokens}, {"with_cache_ms", t.with_cache_ms}, {"no_cache_ms", t.no_cache_ms}});
  }
  return PlotPanel{"Generation: with vs without KV cache",
                   "tokens generated",
                   "ms",
                   {without, with},
                   {},
                   "without the cache each token recomputes all before it"};
}

// TTFT against prompt length through a real Engine loaded from the same file (its prefix cache
// and schemas): cold, prefix hit with a new ending, schema modules with new text.
Result<PlotPanel> TtftPanel(const ModelOptions& mo, int max_prompt, nlohmann::json* rows) {
  EngineOptions eo;
  eo.model_path = mo.model_path;
  eo.threads = mo.threads;
  eo.kv_type = mo.KvTypeValue();
  eo.parallel = 1;
  eo.context = mo.context;
  eo.allow_long_context = mo.allow_long_context;
  PC_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Create(eo));
  PC_ASSIGN_OR_RETURN(const std::vector<TtftTiming> timings, MeasureTtft(*engine, max_prompt));
  PlotSeries cold{"cold", "#d1495b", {}}, hit{"prefix hit, new ending", "#2e9e4f", {}},
      mods{"schema modules + new text", "#e0a100", {}};
  for (const TtftTiming& t : timings) {
    cold.points.push_back({double(t.prompt_tokens), t.cold_ms});
    hit.points.push_back({double(t.prompt_tokens), t.prefix_hit_ms});
    mods.points.push_back({double(t.modules_prompt_tokens), t.modules_ms});
    rows->push_back({{"prompt_tokens", t.prompt_tokens},
                     {"cold_ms", t.cold_ms},
                     {"prefix_hit_ms", t.prefix_hit_ms},
                     {"modules_ms", t.modules_ms},
                     {"modules_prompt_tokens", t.modules_prompt_tokens}});
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
  for (const KvTypeBytes& t : KvBytesByType(model)) {
    p.bars.push_back({t.type, double(t.bytes_per_token)});
    (*rows)[t.type] = t.bytes_per_token;
  }
  return p;
}

}  // namespace

Result<nlohmann::json> WriteBenchPlot(const BenchPlotOptions& options, const ModelOptions& mo,
                                      Runner& session, const Model& model) {
  nlohmann::json out;
  out["generation"] = nlohmann::json::array();
  out["ttft"] = nlohmann::json::array();
  out["kv_bytes_per_token"] = nlohmann::json::object();
  std::vector<PlotPanel> panels;
  PC_ASSIGN_OR_RETURN(PlotPanel generation,
                      GenerationPanel(session, options.max_gen, &out["generation"]));
  panels.push_back(std::move(generation));
  PC_ASSIGN_OR_RETURN(PlotPanel ttft, TtftPanel(mo, options.max_prompt, &out["ttft"]));
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
