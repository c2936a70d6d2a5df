#include "engine/fidelity.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "sampling/decode_step.h"

namespace promptcache {
namespace {

double MsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

// log-softmax of `logits` into `out`.
void LogSoftmax(std::span<const float> logits, std::vector<double>* out) {
  double mx = -INFINITY;
  for (float v : logits) mx = std::max(mx, static_cast<double>(v));
  double sum = 0;
  for (float v : logits) sum += std::exp(v - mx);
  const double log_z = mx + std::log(sum);
  out->resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) (*out)[i] = logits[i] - log_z;
}

}  // namespace

Result<FullRunResult> RunFull(const Model& model, const ExpandedPrompt& prompt,
                              const FullRunOptions& o) {
  if (prompt.tokens.empty()) return InvalidArgument("the prompt is empty");
  PC_CHECK(prompt.tokens.size() == prompt.positions.size());
  PC_RETURN_IF_ERROR(o.sampling.Validate());
  RunnerOptions so = o.runner;
  so.batch_size = std::max<int>(so.batch_size, static_cast<int>(prompt.tokens.size()));
  Runner runner(model, so);
  if (prompt.end >= runner.context()) {
    return OutOfRange("the prompt ends at position " + std::to_string(prompt.end) +
                      ", beyond the " + std::to_string(runner.context()) + "-token context");
  }
  const int n_vocab = model.config().n_vocab;
  const bool forced = !o.forced.empty();
  FullRunResult r;
  std::vector<float> logits(n_vocab);
  KvSequence* seq = runner.sequence();
  seq->Clear();
  const auto t0 = std::chrono::steady_clock::now();
  PC_RETURN_IF_ERROR(runner.Eval(prompt.tokens, prompt.positions, seq, logits.data()));
  r.prompt_ms = MsSince(t0);
  const auto t1 = std::chrono::steady_clock::now();
  DecodeStep decode(model.tokenizer(), o.sampling,
                    {forced ? static_cast<int>(o.forced.size()) : o.max_tokens, o.stop,
                     o.ignore_eos});
  const auto emit = [&](const std::string& piece) { return !o.on_text || o.on_text(piece); };
  std::vector<int32_t> history = prompt.tokens;
  const auto keep = [&](int32_t id) { history.push_back(id); };
  int pos = prompt.end;
  DecodeEnd end = decode.Exhausted() ? DecodeEnd::kLength : DecodeEnd::kNone;
  for (int step = 0; end == DecodeEnd::kNone; ++step) {
    if (o.cancelled && o.cancelled()) return Internal("the full recompute was cancelled");
    if (o.keep_logits) r.logits.push_back(logits);
    const int32_t next = forced ? o.forced[step] : decode.Sample(logits.data(), n_vocab, history);
    end = decode.Take({next, pos + 1 < runner.context(), forced}, emit, keep);
    if (end != DecodeEnd::kNone) break;
    const int32_t p = pos++;
    PC_RETURN_IF_ERROR(runner.Eval(std::span<const int32_t>(&next, 1),
                                   std::span<const int32_t>(&p, 1), seq, logits.data()));
  }
  r.finish_reason = FinishReason(end);
  if (end == DecodeEnd::kLength) {
    const std::string rest = decode.Flush();
    if (!rest.empty() && o.on_text) o.on_text(rest);
  }
  r.tokens = decode.tokens();
  r.text = decode.text();
  r.generation_ms = MsSince(t1);
  return r;
}

ExpandedPrompt Contiguous(const ExpandedPrompt& prompt) {
  ExpandedPrompt out = prompt;
  for (size_t i = 0; i < out.positions.size(); ++i) out.positions[i] = static_cast<int32_t>(i);
  out.end = static_cast<int>(out.tokens.size());
  return out;
}

ExpandedPrompt Contiguous(std::vector<int32_t> tokens) {
  ExpandedPrompt out;
  out.tokens = std::move(tokens);
  out.positions.resize(out.tokens.size());
  return Contiguous(out);
}

double KlDivergence(std::span<const float> p_logits, std::span<const float> q_logits) {
  PC_CHECK(p_logits.size() == q_logits.size());
  std::vector<double> lp, lq;
  LogSoftmax(p_logits, &lp);
  LogSoftmax(q_logits, &lq);
  double kl = 0;
  for (size_t i = 0; i < lp.size(); ++i) kl += std::exp(lp[i]) * (lp[i] - lq[i]);
  return std::max(0.0, kl);
}

float TopTwoMargin(std::span<const float> logits) {
  if (logits.size() < 2) return 0;
  float best = -INFINITY, second = -INFINITY;
  for (const float v : logits) {
    if (v > best) {
      second = best;
      best = v;
    } else if (v > second) {
      second = v;
    }
  }
  return best - second;
}

int32_t ArgMax(std::span<const float> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

Result<FidelityReport> CompareWithFullRecompute(
    const Model& model, const ExpandedPrompt& prompt, const std::vector<int32_t>& modular_tokens,
    const std::vector<std::vector<float>>& modular_logits, const RunnerOptions& runner,
    const CompareOptions& options) {
  if (modular_tokens.empty() || modular_logits.empty()) {
    return InvalidArgument("the modular run generated nothing to compare");
  }
  FidelityReport rep;
  rep.modular_tokens = modular_tokens;
  FullRunOptions forced;
  forced.runner = runner;
  forced.forced = modular_tokens;
  forced.keep_logits = true;
  forced.cancelled = options.cancelled;
  PC_ASSIGN_OR_RETURN(FullRunResult tf, RunFull(model, prompt, forced));
  rep.steps = static_cast<int>(std::min(tf.logits.size(), modular_tokens.size()));
  const int with_logits = static_cast<int>(std::min<size_t>(rep.steps, modular_logits.size()));
  if (options.against_logits_top1) rep.steps = with_logits;  // no logits, no top-1 to compare
  for (int i = 0; i < rep.steps; ++i) {
    const int32_t top = ArgMax(tf.logits[i]);
    const bool clear = TopTwoMargin(tf.logits[i]) >= kNearTieMargin;
    const int32_t mine =
        options.against_logits_top1 ? ArgMax(modular_logits[i]) : modular_tokens[i];
    rep.margin_steps += clear;
    if (top == mine) {
      ++rep.agreements;
      rep.margin_agreements += clear;
    } else {
      rep.disagreement_margins.push_back(tf.logits[i][top] - tf.logits[i][mine]);
    }
    if (i < with_logits) rep.mean_kl += KlDivergence(tf.logits[i], modular_logits[i]);
  }
  rep.top1_agreement = rep.steps > 0 ? double(rep.agreements) / rep.steps : 0;
  if (rep.margin_steps > 0)
    rep.margin_top1_agreement = double(rep.margin_agreements) / rep.margin_steps;
  rep.mean_kl = with_logits > 0 ? rep.mean_kl / with_logits : 0;
  rep.first_token_kl = KlDivergence(tf.logits[0], modular_logits[0]);
  if (!options.greedy) return rep;
  FullRunOptions greedy;
  greedy.runner = runner;
  greedy.max_tokens = static_cast<int>(modular_tokens.size());
  greedy.sampling.temperature = 0;
  greedy.sampling.repeat_penalty = 1;
  greedy.ignore_eos = true;
  greedy.cancelled = options.cancelled;
  PC_ASSIGN_OR_RETURN(FullRunResult g, RunFull(model, prompt, greedy));
  rep.full_tokens = g.tokens;
  rep.greedy_equal = g.tokens == modular_tokens;
  return rep;
}

}  // namespace promptcache
