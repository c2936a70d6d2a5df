// "evaluate": true (docs/server.md): a response's run compared with the full recompute of its
// prompt (engine/fidelity.h), as JSON.
#include "server/evaluate_api.h"

#include "engine/fidelity.h"
#include "model/model.h"

namespace promptcache {

namespace {

using ojson = nlohmann::ordered_json;

// One comparison with a full recompute (engine/fidelity.h): top-1 agreement over every step and
// over the steps whose top two tokens are at least kNearTieMargin apart (margin-aware), the
// first token's KL and whether the greedy continuations are equal.
ojson FidelityJson(const FidelityReport& rep) {
  return ojson{{"steps", rep.steps},
               {"top1_agreement", rep.top1_agreement},
               {"margin_steps", rep.margin_steps},
               {"margin_top1_agreement", rep.margin_top1_agreement},
               {"first_token_kl", rep.first_token_kl},
               {"greedy_equal", rep.greedy_equal}};
}

// The full recomputes run as the engine runs its model.
RunnerOptions RecomputeOptions(const Engine& engine) {
  RunnerOptions so;
  so.threads = engine.options().threads;
  so.kv_type = engine.options().kv_type;
  return so;
}

}  // namespace

ojson Fidelity(Engine& engine, const PmlPrompt& prompt, const CompletionResult& result,
               const std::vector<std::vector<float>>& logits) {
  PmlPrompt at_schema = prompt;  // the baselines' tokens, at the schema's positions
  at_schema.positions = PmlPositions::kSchema;
  Result<ExpandedPrompt> x = engine.ExpandPrompt(at_schema);
  if (!x.ok()) return ojson{{"error", x.status().message()}};
  const RunnerOptions so = RecomputeOptions(engine);
  ojson out;
  for (const bool contiguous : {true, false}) {
    Result<FidelityReport> rep = CompareWithFullRecompute(
        engine.model(), contiguous ? Contiguous(*x) : *x, result.tokens, logits, so);
    if (!rep.ok()) return ojson{{"error", rep.status().message()}};
    out[contiguous ? "contiguous" : "gapped"] = FidelityJson(*rep);
  }
  return out;
}

ojson SegmentFidelity(Engine& engine, const std::vector<int32_t>& prompt,
                      const CompletionResult& result,
                      const std::vector<std::vector<float>>& logits) {
  Result<FidelityReport> rep = CompareWithFullRecompute(
      engine.model(), Contiguous(prompt), result.tokens, logits, RecomputeOptions(engine));
  if (!rep.ok()) return ojson{{"error", rep.status().message()}};
  return ojson{{"contiguous", FidelityJson(*rep)}};
}

}  // namespace promptcache
