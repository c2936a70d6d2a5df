// `promptcache run`: prints a prompt's continuation on stdout as it is generated, through an
// Engine serving this one request (--no-kv-cache: its recompute_each_step baseline).
#include <cstdio>

#include "core/log.h"
#include "engine/create_engine.h"
#include "tools/cli_common.h"

namespace promptcache::cli {
namespace {

class RunCommand : public Command {
 public:
  void Register(CLI::App* sub) override {
    model_.Register(sub);
    model_.RegisterChatTemplate(sub);
    sub->add_option("-p,--prompt", prompt_, "prompt text")->required();
    sub->add_option("-n,--n-predict", max_tokens_, "tokens to generate")->default_val(128);
    sampling_.Register(sub);
    draft_.Register(sub);
    sub->add_option("--prediction", prediction_,
                    "the output expected (the text being edited, say): its tokens are checked "
                    "as drafts; the output is the same either way");
    sub->add_flag("--chat", chat_, "wrap the prompt in the model's chat template");
    sub->add_flag("--no-kv-cache", no_kv_cache_,
                  "recompute the whole sequence for every new token (the baseline)");
    sub->add_flag("-v,--verbose", verbose_, "more logging");
  }

  int Execute() override {
    if (verbose_) SetLogLevel(LogLevel::kDebug);
    if (Status st = model_.Validate(); !st.ok()) return Fail(st);
    if (Status st = SelectIsa(model_.isa); !st.ok()) return Fail(st);
    if (max_tokens_ < 0) return Fail("-n must be >= 0");
    if (!model_.chat_template_path.empty() && !chat_) return Fail("--chat-template needs --chat");
    if (Status st = sampling_.params.Validate(); !st.ok()) return Fail(st);
    std::unique_ptr<Model> model = LoadModelOrReport(model_.model_path);
    if (!model) return 1;
    if (Status st = model_.Check(*model); !st.ok()) return Fail(st);
    if (Status st = model_.ApplyChatTemplate(model.get()); !st.ok()) return Fail(st);
    Result<std::vector<int32_t>> prompt =
        PromptTokens(*model, prompt_, chat_, /*add_bos=*/true, model_.special);
    if (!prompt.ok()) return Fail(prompt.status());
    const int context = model_.context > 0 ? model_.context : model->config().context_length;
    if (prompt->size() >= static_cast<size_t>(context)) {
      return Fail("the prompt has " + std::to_string(prompt->size()) +
                  " tokens; the context size " + std::to_string(context) +
                  " leaves room for at most " + std::to_string(context - 1));
    }
    // A one-request loop is still an Engine: the same queue, steps and decode step as serving.
    EngineOptions eo = model_.ToEngineOptions();
    eo.parallel = 1;
    eo.prefix_cache = false;  // nothing to reuse within one request
    draft_.Apply(&eo);
    const std::vector<int32_t> prediction = model->tokenizer().EncodeContinuation(prediction_);
    Result<std::unique_ptr<Engine>> engine =
        CreateEngine(eo, std::move(model), model_.static_cache);
    if (!engine.ok()) return Fail(engine.status());

    CompletionRequest req;
    req.prompt = std::move(prompt).value();
    req.max_tokens = max_tokens_;
    req.sampling = sampling_.params;
    req.stop = sampling_.stop;
    req.ignore_eos = sampling_.ignore_eos;
    req.recompute_each_step = no_kv_cache_;
    req.prediction = prediction;
    req.on_text = [](const std::string& piece) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
      return true;
    };
    Result<std::shared_ptr<RequestHandle>> handle = (*engine)->Submit(std::move(req));
    if (!handle.ok()) return Fail(handle.status());
    const CompletionResult r = (*handle)->Wait();
    if (!r.status.ok()) return Fail(r.status);
    std::fputc('\n', stdout);
    std::fflush(stdout);
    const int n = static_cast<int>(r.tokens.size());
    PC_LOG_INFO("prompt: %d tokens in %.1f ms (%.1f tokens/s)", r.prompt_tokens, r.prompt_ms,
                r.prompt_tokens * 1000.0 / std::max(r.prompt_ms, 1e-3));
    PC_LOG_INFO("generation: %d tokens in %.1f ms (%.1f tokens/s), %s, kv cache %s", n,
                r.generation_ms, n * 1000.0 / std::max(r.generation_ms, 1e-3),
                r.finish_reason.c_str(), no_kv_cache_ ? "off" : "on");
    if (r.draft_tokens > 0) {
      PC_LOG_INFO("drafts: %d of %d guessed tokens confirmed", r.accepted_draft_tokens,
                  r.draft_tokens);
    }
    return 0;
  }

 private:
  ModelOptions model_;
  std::string prompt_;
  int max_tokens_ = 128;
  SamplingOptions sampling_;
  DraftFlags draft_;
  std::string prediction_;
  bool chat_ = false, no_kv_cache_ = false, verbose_ = false;
};

}  // namespace

std::unique_ptr<Command> MakeRunCommand() { return std::make_unique<RunCommand>(); }

}  // namespace promptcache::cli
