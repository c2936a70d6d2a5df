// What the modular prompt cache is measured against: the full recompute of a modular prompt,
// every token the prompt includes run through the model in one forward pass with no cache of
// any kind. Two baselines, two questions:
//   - contiguous: the same tokens at positions 0..n-1, generation continuing at n. This is the
//     prompt a user would otherwise send plainly, so it is the headline: "does the cached prompt
//     answer like the same text?" It sees two differences at once: modules that never attended
//     to each other, and the gaps the schema leaves between them (positions of modules left out).
//   - gapped: the same tokens at the schema's positions, generation continuing where the engine
//     does. Only the missing cross-module attention differs: the approximation the Prompt Cache
//     paper measures.
// The same comparison measures segment reuse (CompletionRequest::segments) against the full
// recompute of the same tokens, which is the contiguous baseline.
// `promptcache eval-modules` reports, against each:
//   - margin-aware top-1 agreement (the headline): top-1 agreement over the steps where the full
//     recompute's two best tokens are at least kNearTieMargin apart, where a flip is an error and
//     not a near tie that any rounding may turn;
//   - top-1 agreement: teacher-forced on the modular run's greedy continuation, the fraction of
//     steps where the full recompute's most likely next token is the one the modular run chose;
//   - KL(full || modular) of the first generated token's distributions;
//   - whether the two greedy continuations are equal;
//   - KL(full || modular) averaged over every teacher-forced step, and for each step where the
//     top-1 differs, the full recompute's margin: its best logit minus its logit of the modular
//     token. On a small model many steps are near ties (on stories260K about 7% of steps have
//     their two best tokens within 0.1 logit), which any approximation may flip; the margins
//     tell such flips from real errors.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/runner.h"
#include "model/model.h"
#include "promptcache/engine.h"

namespace promptcache {

struct FullRunOptions {
  RunnerOptions runner;  // its batch_size is raised to the prompt's length: one forward pass
  int max_tokens = 128;
  SamplingParams sampling;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  // Teacher forcing: feed these tokens instead of sampled ones (max_tokens is their count).
  std::vector<int32_t> forced;
  bool keep_logits = false;  // keep the logits of every step
  std::function<bool(const std::string&)> on_text;
  // Polled before each generation step: true stops the run with an error (an engine shutting
  // down stops its background evaluation this way).
  std::function<bool()> cancelled;
};

struct FullRunResult {
  std::vector<int32_t> tokens;  // generated (or forced) ids
  std::string text;
  std::string finish_reason;               // "stop", "length" or "cancelled"
  std::vector<std::vector<float>> logits;  // per step, when keep_logits
  double prompt_ms = 0;  // the forward pass over the prompt, up to the first logits
  double generation_ms = 0;
};

Result<FullRunResult> RunFull(const Model& model, const ExpandedPrompt& prompt,
                              const FullRunOptions& options);

// `prompt`'s tokens at positions 0..n-1, continuing at n: the contiguous baseline.
ExpandedPrompt Contiguous(const ExpandedPrompt& prompt);
// `tokens` at positions 0..n-1, continuing at n: a plain prompt as its own full recompute.
ExpandedPrompt Contiguous(std::vector<int32_t> tokens);

// KL(P || Q) in nats between the softmax distributions of two logit vectors.
double KlDivergence(std::span<const float> p_logits, std::span<const float> q_logits);

// Index of the largest logit (lowest index on ties).
int32_t ArgMax(std::span<const float> logits);

// A disagreement whose margin is below this (in logits) is counted as a near tie, and a step
// whose two best logits are closer than this is left out of margin-aware agreement.
inline constexpr float kNearTieMargin = 0.1f;

// The largest logit minus the second largest (0 with fewer than two).
float TopTwoMargin(std::span<const float> logits);

struct FidelityReport {
  int steps = 0;       // teacher-forced steps compared
  int agreements = 0;  // steps whose full-recompute top-1 equals the modular token
  double top1_agreement = 0;
  // The same over the steps whose full-recompute top-2 margin is at least kNearTieMargin (1 when
  // there are none).
  int margin_steps = 0, margin_agreements = 0;
  double margin_top1_agreement = 1;
  double first_token_kl = 0;
  double mean_kl = 0;  // KL(full || modular) averaged over the teacher-forced steps
  // Per step where the top-1 differs: the full recompute's logit of its own top-1 minus its
  // logit of the modular token (> 0; small: a near tie).
  std::vector<float> disagreement_margins;
  bool greedy_equal = false;
  std::vector<int32_t> modular_tokens, full_tokens;  // the two greedy continuations
};

// How CompareWithFullRecompute compares.
struct CompareOptions {
  // false: a step agrees when the full recompute's top-1 is the modular token (the modular run
  // was greedy). true: when it is the top-1 of the modular run's logits at that step, whatever
  // token the run chose from them (sampled, or masked by a grammar): what the engine's sampled
  // evaluation of served requests (EngineOptions::fidelity_sample) compares. Either way the
  // recompute is teacher-forced on the modular tokens.
  bool against_logits_top1 = false;
  bool greedy = true;  // also run the full recompute greedily (greedy_equal, full_tokens)
  std::function<bool()> cancelled;  // FullRunOptions::cancelled
};

// Compares a modular run (its greedy tokens and the logits each was chosen from) with the full
// recompute of `prompt`: teacher-forced on the modular tokens, and greedy on its own.
Result<FidelityReport> CompareWithFullRecompute(
    const Model& model, const ExpandedPrompt& prompt, const std::vector<int32_t>& modular_tokens,
    const std::vector<std::vector<float>>& modular_logits, const RunnerOptions& runner,
    const CompareOptions& options = {});

}  // namespace promptcache
