// `promptcache bench --plot OUT.svg`: measures what caching saves on the model given
// (engine/savings.h: generation time with and without the KV cache against length, time to
// first token against prompt length cold / prefix hit / schema modules, K/V bytes per token for
// each KV type) and draws it as three charts in one SVG (tools/plot_svg.h).
#pragma once

#include <string>

#include "core/status.h"
#include "nlohmann/json.hpp"
#include "tools/cli_common.h"

namespace promptcache::cli {

struct BenchPlotOptions {
  std::string path;      // the SVG to write
  int max_gen = 128;     // longest generation timed (with and without the KV cache)
  int max_prompt = 512;  // longest prompt timed for time to first token
};

// Runs the measurements on a Runner of `model` (the KV-cache comparison) and an Engine loaded
// from the same file (the TTFT series, through its real prefix cache and schemas), writes the
// SVG and returns the numbers plotted.
Result<nlohmann::json> WriteBenchPlot(const BenchPlotOptions& options, const ModelOptions& mo,
                                      Runner& session, const Model& model);

}  // namespace promptcache::cli
