// "evaluate": true on a completion or chat request (docs/server.md, "Evaluate"): the run compared
// with the full recompute of its prompt, teacher-forced on the tokens it generated
// (engine/fidelity.h), as the JSON the response carries under `fidelity`. Each object has
// `steps`, `top1_agreement`, the margin-aware `margin_steps` and `margin_top1_agreement`,
// `first_token_kl` and `greedy_equal`; a failed recompute gives {"error": message}. The
// recomputes run on the caller's thread and cost a full prefill each.
#pragma once

#include <cstdint>
#include <vector>

#include "nlohmann/json.hpp"
#include "promptcache/engine.h"

namespace promptcache {

// {"contiguous": {...}, "gapped": {...}}: a modular prompt's run against the full recompute of
// its tokens at positions 0..n-1 and at the schema's positions. `logits`: those each generated
// token was sampled from.
nlohmann::ordered_json Fidelity(Engine& engine, const PmlPrompt& prompt,
                                const CompletionResult& result,
                                const std::vector<std::vector<float>>& logits);

// {"contiguous": {...}}: a prompt with segments against the full recompute of its tokens, laid
// end to end as it was served (segments have no other baseline).
nlohmann::ordered_json SegmentFidelity(Engine& engine, const std::vector<int32_t>& prompt,
                                       const CompletionResult& result,
                                       const std::vector<std::vector<float>>& logits);

}  // namespace promptcache
