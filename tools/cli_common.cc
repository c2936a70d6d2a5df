#include "tools/cli_common.h"

#include <strings.h>
#include <sys/resource.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>

#include "chat/chat_template.h"
#include "core/log.h"
#include "ops/targets.h"

namespace promptcache::cli {

void ModelOptions::Register(CLI::App* sub) {
  sub->add_option("-m,--model", model_path, "GGUF model file")->required();
  sub->add_option(
      "-t,--threads", threads,
      "threads (default: one per physical core this process may run on, within its CPU quota)");
  sub->add_option("-c,--context", context, "context size in tokens (default: the model's)");
  sub->add_flag("--allow-long-context", allow_long_context,
                "accept a context beyond what the model was trained for");
  sub->add_option(
         "--kv-type", kv_type,
         "KV cache storage: f16, f32, q8_0 (half of f16's bytes) or q4_0 (about a quarter); "
         "q8_0/q4_0 need a head size that is a multiple of 32")
      ->default_val("f16");
  sub->add_option("-b,--batch-size", batch_size,
                  "prompt tokens per forward pass (default: what fits 32 MiB of scratch, <= 512)");
  sub->add_flag("--static-cache", static_cache,
                "preallocate the KV cache for the whole context (default: grows)");
  sub->add_flag("--no-trim-sliding", no_trim_sliding,
                "keep the K/V of sliding-window layers that no later token can see (default: "
                "released once the window has passed; for comparisons)");
  AddIsaOption(sub, &isa);
  sub->add_flag("--special", special,
                "special-token spellings (<|im_end|>, </s>) in the prompt's text, PML arguments "
                "and new text become special tokens (default: they stay text; only templates "
                "and schemas write special tokens)");
}

void ModelOptions::RegisterChatTemplate(CLI::App* sub) {
  sub->add_option("--chat-template", chat_template_path,
                  "Jinja chat template file to use instead of the model's "
                  "tokenizer.chat_template");
}

Result<std::string> ModelOptions::ChatTemplateText() const {
  return ReadChatTemplateFile(chat_template_path);
}

Result<std::string> ReadTextFile(const std::string& path, std::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": cannot open " + std::string(what));
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

Result<std::string> ReadChatTemplateFile(const std::string& path) {
  if (path.empty()) return std::string();
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("--chat-template: cannot read '" + path + "'");
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) return IoError("--chat-template: cannot read '" + path + "'");
  if (text.str().find_first_not_of(" \t\r\n") == std::string::npos) {
    return InvalidArgument("--chat-template: '" + path + "' is empty");
  }
  // Parsed now: a template given on purpose must run as written, not fall back to a family.
  ChatTemplate parsed(text.str(), {});
  if (!parsed.jinja_status().ok()) {
    return parsed.jinja_status().WithContext("--chat-template " + path);
  }
  return text.str();
}

Status ModelOptions::ApplyChatTemplate(Model* model) const {
  PC_ASSIGN_OR_RETURN(std::string text, ChatTemplateText());
  if (!text.empty()) model->set_chat_template(std::move(text));
  return Status::Ok();
}

void SamplingOptions::Register(CLI::App* sub) {
  sub->add_option("--temp", params.temperature, "temperature (0: greedy)")->default_val(0.8);
  sub->add_option("--seed", params.seed, "random seed (0: random)");
  sub->add_option("--top-k", params.top_k, "top-k cut (0: off)")->default_val(40);
  sub->add_option("--top-p", params.top_p, "nucleus cut (1: off)")->default_val(0.95);
  sub->add_option("--min-p", params.min_p, "min-p cut (0: off)")->default_val(0.05);
  sub->add_option("--repeat-penalty", params.repeat_penalty, "repetition penalty (1: off)")
      ->default_val(1.0);
  // llama.cpp's further samplers, with its flag names.
  sub->add_option("--typical", params.typical_p, "locally typical sampling (1: off)");
  sub->add_option("--top-n-sigma", params.top_n_sigma,
                  "keep logits within N standard deviations of the best (-1: off)");
  sub->add_option("--xtc-probability", params.xtc_probability,
                  "XTC: chance per token of removing the top choices (0: off)");
  sub->add_option("--xtc-threshold", params.xtc_threshold,
                  "XTC: how probable a token must be to count as a top choice");
  sub->add_option("--dynatemp-range", params.dynatemp_range,
                  "dynamic temperature: temp +/- this by the entropy (0: off)");
  sub->add_option("--dynatemp-exp", params.dynatemp_exponent, "dynamic temperature's exponent");
  sub->add_option("--min-keep", params.min_keep, "the fewest tokens a cut may leave");
  sub->add_option("--mirostat", params.mirostat, "Mirostat 1 or 2 instead of the cuts (0: off)");
  sub->add_option("--mirostat-ent", params.mirostat_tau, "Mirostat's target surprise in bits");
  sub->add_option("--mirostat-lr", params.mirostat_eta, "Mirostat's learning rate");
  sub->add_option("--stop", stop, "stop string (repeatable)");
  sub->add_flag("--ignore-eos", ignore_eos, "keep generating after end-of-generation tokens");
}

void DraftFlags::Register(CLI::App* sub) {
  sub->add_option("--draft-max", max,
                  "speculative decoding: the most guessed tokens checked per decode step, read "
                  "off the prompt's or the output's repeats (and a request's prediction); the "
                  "output is the same either way (0: off)")
      ->default_val(max)
      ->check(CLI::Range(0, 64));
  sub->add_option("--draft-ngram", ngram_min,
                  "speculative decoding: the shortest run of tokens whose earlier continuation "
                  "is guessed")
      ->default_val(ngram_min)
      ->check(CLI::Range(1, 16));
}

void AddIsaOption(CLI::App* sub, std::string* isa) {
  sub->add_option("--isa", *isa,
                  "instruction set for the kernels, one this CPU supports (e.g. AVX2; default: "
                  "the best)");
}

Status SelectIsa(const std::string& isa) {
  static std::optional<ScopedOpsTarget> selected;  // for the rest of the process
  if (isa.empty()) return Status::Ok();
  std::string names;
  for (int64_t t : OpsTargets()) {
    const std::string name = OpsTargetName(t);
    if (strcasecmp(name.c_str(), isa.c_str()) == 0) {
      selected.reset();
      selected.emplace(t);
      return Status::Ok();
    }
    names += (names.empty() ? "" : ", ") + name;
  }
  return InvalidArgument("--isa '" + isa + "' is not one this CPU runs: " + names);
}

Status ModelOptions::Validate() const {
  if (threads < 0) return InvalidArgument("--threads must be >= 0");
  if (threads > 1024) return InvalidArgument("--threads must be <= 1024");
  if (context < 0) return InvalidArgument("--context must be >= 0");
  if (batch_size < 0) return InvalidArgument("--batch-size must be >= 0");
  PC_RETURN_IF_ERROR(ParseKvType(kv_type).status());
  return Status::Ok();
}

Status ModelOptions::Check(Model& model) const {
  PC_RETURN_IF_ERROR(CheckContext(model.config(), context, allow_long_context));
  PC_RETURN_IF_ERROR(CheckKvType(KvTypeValue(), model.config().kv_dim()));
  model.UseContext(context > 0 ? context : model.config().context_length);
  return Status::Ok();
}

KvType ModelOptions::KvTypeValue() const {
  const Result<KvType> t = ParseKvType(kv_type);
  return t.ok() ? *t : KvType::kF16;  // Validate() has refused anything else
}

RunnerOptions ModelOptions::ToRunnerOptions() const {
  RunnerOptions o;
  o.threads = threads;
  o.context = context;
  o.kv_type = KvTypeValue();
  o.static_cache = static_cache;
  o.batch_size = batch_size;
  o.trim_sliding_kv = !no_trim_sliding;
  return o;
}

EngineOptions ModelOptions::ToEngineOptions() const {
  EngineOptions o;
  o.model_path = model_path;
  o.threads = threads;
  o.context = context;
  o.allow_long_context = allow_long_context;
  o.kv_type = KvTypeValue();
  o.batch_size = batch_size;
  o.trim_sliding_kv = !no_trim_sliding;
  o.special_tokens_in_text = special;
  return o;
}

Result<std::string> UnescapeC(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\') {
      out += text[i];
      continue;
    }
    if (++i == text.size()) return InvalidArgument("a '\\' ends the text (write \\\\)");
    const char c = text[i];
    static constexpr std::string_view kFrom = "ntrfvab\\\"'", kTo = "\n\t\r\f\v\a\b\\\"'";
    if (const size_t k = kFrom.find(c); k != std::string_view::npos) {
      out += kTo[k];
      continue;
    }
    if (c == 'x' && i + 2 < text.size() && std::isxdigit(static_cast<unsigned char>(text[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(text[i + 2]))) {
      out += static_cast<char>(std::stoi(std::string(text.substr(i + 1, 2)), nullptr, 16));
      i += 2;
      continue;
    }
    return InvalidArgument("unknown escape '\\" + std::string(1, c) +
                           "' (known: \\n \\t \\r \\f \\v \\a \\b \\\\ \\\" \\' \\xHH)");
  }
  return out;
}

int Fail(const Status& status) { return Fail(status.message()); }

int Fail(const std::string& message) {
  std::fprintf(stderr, "promptcache: error: %s\n", message.c_str());
  return 1;
}

std::unique_ptr<Model> LoadModelOrReport(const std::string& path, bool pack) {
  const auto t0 = std::chrono::steady_clock::now();
  Result<std::unique_ptr<Model>> m = Model::Load(path, pack);
  if (!m.ok()) {
    Fail(m.status());
    return nullptr;
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const ModelConfig& c = (*m)->config();
  PC_LOG_INFO("loaded %s: %d layers, n_embd %d, %d heads (%d KV), vocab %d, %s, in %.0f ms",
              path.c_str(), c.n_layers, c.n_embd, c.n_heads, c.n_kv_heads, c.n_vocab,
              GgmlTypeName((*m)->weight_type()).c_str(), ms);
  return std::move(m).value();
}

Result<std::vector<int32_t>> PromptTokens(const Model& model, const std::string& text, bool chat,
                                          bool add_bos, bool special) {
  const Tokenizer& tok = model.tokenizer();
  if (!chat) return tok.Encode(text, add_bos, special);
  const ChatTemplate chat_template(model.chat_template(), ChatTemplateOptions(tok));
  if (std::optional<std::string> warning = chat_template.Warning()) {
    PC_LOG_WARN("%s", warning->c_str());
  }
  PC_ASSIGN_OR_RETURN(MarkedText rendered, chat_template.Render({{"user", text}}, true));
  if (special) return tok.Encode(rendered.text(), add_bos, /*parse_special=*/true);
  return tok.Encode(rendered, add_bos);
}

size_t PeakRssBytes() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<size_t>(ru.ru_maxrss) * 1024;
}

}  // namespace promptcache::cli
