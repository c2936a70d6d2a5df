#include "engine/savings.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <random>

#include "engine/engine_impl.h"
#include "kv/kv_cache.h"

namespace promptcache {
namespace {

constexpr int kNewTokens = 16;  // the new ending after a cached prefix or the modules

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
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

CompletionRequest OneTokenRequest() {
  CompletionRequest c;
  c.max_tokens = 1;
  c.sampling.temperature = 0;
  return c;
}

// A schema of four modules of about `tokens`/4 tokens each, its text from a story so that it
// reads as text (random ids would not round-trip through the tokenizer).
std::string ModulesSchema(const std::string& name, const Tokenizer& tok,
                          const std::vector<int32_t>& story, int tokens) {
  std::string xml = "<schema name=\"" + name + "\">";
  for (int m = 0; m < 4; ++m) {
    xml += "<module name=\"m" + std::to_string(m) + "\"><![CDATA[" +
           TextOf(tok, story, m * 7 + tokens, std::max(1, tokens / 4)) + "]]></module>";
  }
  return xml + "</schema>";
}

}  // namespace

std::vector<int> SavingsLengths(int max, int step, int n) {
  std::vector<int> out;
  const int stride = std::max(step, (max / n + step - 1) / step * step);
  for (int len = stride; len <= max; len += stride) out.push_back(len);
  if (out.empty()) out.push_back(std::max(1, max));
  return out;
}

GenerationTimer::GenerationTimer(Runner* runner, int len, bool use_kv_cache)
    : runner_(runner),
      len_(len),
      use_kv_cache_(use_kv_cache),
      logits_(size_t(runner->model().config().n_vocab)) {}

Result<bool> GenerationTimer::Step() {
  if (len_ < 1 || len_ + 1 > runner_->context()) {
    return InvalidArgument("a generation of " + std::to_string(len_) +
                           " tokens does not fit the context");
  }
  const auto t0 = std::chrono::steady_clock::now();
  KvSequence* seq = runner_->sequence();
  Status st;
  if (tokens_.empty()) {  // the prompt: BOS
    seq->Clear();
    tokens_ = {std::max(0, runner_->model().tokenizer().bos())};
    positions_ = {0};
    st = runner_->Eval(tokens_, positions_, seq, logits_.data(), false, true);
  } else {
    // The token the last pass's logits pick (greedy), then the pass that continues from it.
    const int32_t next =
        static_cast<int32_t>(std::max_element(logits_.begin(), logits_.end()) - logits_.begin());
    tokens_.push_back(next);
    positions_.push_back(static_cast<int32_t>(positions_.size()));
    ++generated_;
    if (use_kv_cache_) {
      st = runner_->Eval({&tokens_.back(), 1}, {&positions_.back(), 1}, seq, logits_.data(), false,
                          true);
    } else {
      st = runner_->Recompute(tokens_, seq, logits_.data());  // the baseline: all again
    }
  }
  ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  PC_RETURN_IF_ERROR(st);
  // The last token is picked without a pass after it, as generation does.
  if (generated_ + 1 < len_) return true;
  const auto t1 = std::chrono::steady_clock::now();
  tokens_.push_back(
      static_cast<int32_t>(std::max_element(logits_.begin(), logits_.end()) - logits_.begin()));
  ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count();
  return false;
}

Result<double> TimeGeneration(Runner& runner, int len, bool use_kv_cache) {
  GenerationTimer timer(&runner, len, use_kv_cache);
  for (;;) {
    PC_ASSIGN_OR_RETURN(const bool more, timer.Step());
    if (!more) return timer.ms();
  }
}

Result<std::vector<GenerationTiming>> MeasureGeneration(Runner& runner, int max_tokens) {
  std::vector<GenerationTiming> out;
  for (const int len : SavingsLengths(max_tokens, 16, 8)) {
    PC_ASSIGN_OR_RETURN(const double with_cache, TimeGeneration(runner, len, true));
    PC_ASSIGN_OR_RETURN(const double no_cache, TimeGeneration(runner, len, false));
    out.push_back({len, with_cache, no_cache});
  }
  return out;
}

Result<std::vector<TtftTiming>> MeasureTtft(Engine& engine, int max_prompt, int trials) {
  const int context = engine.model().config().context_length;
  const int limit = std::min(max_prompt, (context > 0 ? context : max_prompt) - 2 * kNewTokens);
  if (limit < 1) return InvalidArgument("the context is too short to measure time to first token");
  const Tokenizer& tok = engine.model().tokenizer();
  const int n_vocab = engine.model().config().n_vocab;
  std::mt19937 rng(7);
  const std::vector<int32_t> story = tok.Encode(
      "Once upon a time, there was a little girl named Lily. She liked to play in the park with "
      "her dog Max. One day, they found a big red ball under a tree. Lily threw the ball and Max "
      "ran after it. They played all day and were very happy. ",
      false);
  // Each run's schemas have names of their own: two runs at once never replace or drop each
  // other's.
  static std::atomic<uint64_t> runs{0};
  const std::string run = std::to_string(++runs);
  std::vector<TtftTiming> out;
  for (const int len : SavingsLengths(limit, 16, 8)) {
    TtftTiming row;
    row.prompt_tokens = row.modules_prompt_tokens = len;
    std::vector<double> t_cold, t_hit, t_mod;
    const std::string name = "_savings" + run + "_" + std::to_string(len);
    SchemaLoadOptions so;
    so.persist = false;
    PC_RETURN_IF_ERROR(
        engine
            .LoadSchemaText(ModulesSchema(name, tok, story, std::max(4, len - kNewTokens)),
                            name + ".xml", so)
            .status());
    Status failed;
    for (int trial = 0; trial <= trials && failed.ok(); ++trial) {  // trial 0 warms up
      std::vector<int32_t> prompt(len);
      for (int32_t& id : prompt) id = static_cast<int32_t>(rng() % n_vocab);
      CompletionRequest c = OneTokenRequest();
      c.prompt = prompt;
      const Result<double> cold = Ttft(engine.Submit(std::move(c)), &row.prompt_tokens);
      for (int i = std::max(0, len - kNewTokens); i < len; ++i)
        prompt[i] = static_cast<int32_t>(rng() % n_vocab);
      c = OneTokenRequest();
      c.prompt = prompt;
      const Result<double> hit = Ttft(engine.Submit(std::move(c)), &row.prompt_tokens);
      PromptBuilder pb(name);
      for (int m = 0; m < 4; ++m) pb.Module("m" + std::to_string(m));
      pb.Text(TextOf(tok, story, trial * 5, kNewTokens));
      const Result<double> mod =
          Ttft(engine.SubmitPrompt(pb.prompt(), OneTokenRequest()), &row.modules_prompt_tokens);
      for (const Result<double>* r : {&cold, &hit, &mod}) {
        if (!r->ok() && failed.ok()) failed = r->status();
      }
      if (trial == 0 || !failed.ok()) continue;
      t_cold.push_back(*cold);
      t_hit.push_back(*hit);
      t_mod.push_back(*mod);
    }
    (void)engine.DropSchema(name);
    PC_RETURN_IF_ERROR(failed);
    row.cold_ms = Median(t_cold);
    row.prefix_hit_ms = Median(t_hit);
    row.modules_ms = Median(t_mod);
    out.push_back(row);
  }
  return out;
}

std::vector<KvTypeBytes> KvBytesByType(const Model& model) {
  std::vector<KvTypeBytes> out;
  for (const KvType type : {KvType::kF16, KvType::kF32, KvType::kQ8_0, KvType::kQ4_0}) {
    if (!CheckKvType(type, model.config().kv_dim()).ok()) continue;  // rows it cannot store
    out.push_back({KvTypeName(type), model.MakeKvLayout(type).bytes_per_token()});
  }
  return out;
}

Result<std::vector<GenerationTiming>> EngineImpl::MeasureGeneration(int max_tokens) {
  if (max_tokens < 1 || max_tokens + 1 > context_) {
    return InvalidArgument("max_tokens must be between 1 and " + std::to_string(context_ - 1));
  }
  RunnerOptions so;
  so.threads = options_.threads;
  so.context = max_tokens + 1;
  so.kv_type = options_.kv_type;
  std::unique_ptr<Runner> runner;
  RunOnEngineThread([&] { runner = std::make_unique<Runner>(*model_, so); });
  // One forward pass per task, on the engine thread between steps: requests wait for each (so
  // that the timing is not shared with them) but never for more than one pass of at most
  // max_tokens tokens.
  std::vector<GenerationTiming> out;
  for (const int len : SavingsLengths(max_tokens, 16, 8)) {
    GenerationTiming t{len, 0, 0};
    for (const bool use_cache : {true, false}) {
      GenerationTimer timer(runner.get(), len, use_cache);
      Result<bool> more = true;
      while (more.ok() && *more) RunOnEngineThread([&] { more = timer.Step(); });
      if (!more.ok()) return more.status();
      (use_cache ? t.with_cache_ms : t.no_cache_ms) = timer.ms();
    }
    out.push_back(t);
  }
  RunOnEngineThread([&] { runner.reset(); });
  return out;
}

}  // namespace promptcache
