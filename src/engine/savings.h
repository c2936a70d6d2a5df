// What caching saves, measured on a loaded model rather than estimated: the numbers behind
// `promptcache bench --plot` and the web page's Savings panel. Three series:
//   - generation of N tokens with the KV cache (each step one token of work) and without it
//     (each step recomputes the whole sequence): linear against quadratic;
//   - time to first token against prompt length for a cold prompt, the same prompt with a new
//     ending (a prefix hit) and a schema's cached modules followed by new text;
//   - K/V bytes per token for each KV storage type (exact, from the model's layout).
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "engine/runner.h"
#include "promptcache/engine.h"

namespace promptcache {

struct TtftTiming {
  int prompt_tokens = 0;                                  // of the cold and the prefix-hit prompts
  double cold_ms = 0, prefix_hit_ms = 0, modules_ms = 0;  // medians
  int modules_prompt_tokens = 0;  // what the modular prompt came to (modules + new text)
};

struct KvTypeBytes {
  std::string type;  // the --kv-type name
  size_t bytes_per_token = 0;
};

// About `n` lengths from `step` up to `max`, in multiples of `step` (at least one).
std::vector<int> SavingsLengths(int max, int step, int n);

// Greedy generation of `len` tokens after a 1-token prompt (BOS), with or without the KV cache
// (without: every step recomputes all before it), one forward pass per Step: a caller may run
// other work between the passes (the engine runs each as a task between its own steps), and
// only the passes are timed.
class GenerationTimer {
 public:
  GenerationTimer(Runner* runner, int len, bool use_kv_cache);
  // Runs the next forward pass (and picks its token); false once the generation is complete.
  Result<bool> Step();
  double ms() const { return ms_; }

 private:
  Runner* runner_;
  int len_;
  bool use_kv_cache_;
  std::vector<int32_t> tokens_, positions_;
  std::vector<float> logits_;
  int generated_ = 0;
  double ms_ = 0;
};

// Milliseconds to generate `len` tokens greedily after BOS (GenerationTimer run to its end).
Result<double> TimeGeneration(Runner& runner, int len, bool use_kv_cache);

// Generation with and without the KV cache at about eight lengths up to `max_tokens`.
Result<std::vector<GenerationTiming>> MeasureGeneration(Runner& runner, int max_tokens);

// Time to first token through `engine`'s real prefix cache and schemas at about eight prompt
// lengths up to `max_prompt` (capped by the context), the median of `trials` after a warm-up.
// Loads and drops temporary schemas named "_savings<RUN>_<N>" (RUN: a number of this run's own
// in the process, so that runs at once never meet); the random prompts it sends stay in the
// cache as any unpinned prompt does.
Result<std::vector<TtftTiming>> MeasureTtft(Engine& engine, int max_prompt, int trials = 3);

// K/V bytes per token of `model` for every KV type the engine supports.
std::vector<KvTypeBytes> KvBytesByType(const Model& model);

}  // namespace promptcache
