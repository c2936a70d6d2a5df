// `promptcache embed`: embeddings of texts through the Engine (Engine::Embed), printed as JSON
// in the shape of OpenAI's embeddings response: one vector per -p text (or, with --pooling
// none, one per token), with the pooling and normalization used and the tokens computed.
#include <cstdio>
#include <optional>
#include <string>

#include "promptcache/text.h"
#include "tools/cli_common.h"

namespace promptcache::cli {
namespace {

// A JSON string literal (control characters escaped; UTF-8 passed through).
std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

// Floats with 9 significant digits: each reads back as the same float.
void PrintVector(const float* v, int n) {
  std::fputc('[', stdout);
  for (int i = 0; i < n; ++i) std::printf(i == 0 ? "%.9g" : ",%.9g", double(v[i]));
  std::fputc(']', stdout);
}

class EmbedCommand : public Command {
 public:
  void Register(CLI::App* sub) override {
    model_.Register(sub);
    sub->add_option("-p,--prompt", prompts_, "a text to embed (repeat for several)")->required();
    sub->add_option("--pooling", pooling_,
                    "mean, last, cls or none (one vector per token); default: the model file's "
                    "{arch}.pooling_type, else mean");
    sub->add_flag("--no-normalize", no_normalize_,
                  "print the pooled hidden states as they are (default: divided by their "
                  "Euclidean norm)");
    sub->add_option("--dimensions", dimensions_,
                    "the vectors' length asked for: only the model's n_embd is supported");
  }

  int Execute() override {
    if (Status st = model_.Validate(); !st.ok()) return Fail(st);
    if (Status st = SelectIsa(model_.isa); !st.ok()) return Fail(st);
    Result<Pooling> pooling = ParsePooling(pooling_);
    if (!pooling.ok()) return Fail("--pooling: " + pooling.status().message());
    EngineOptions o;
    o.model_path = model_.model_path;
    o.threads = model_.threads;
    o.context = model_.context;
    o.allow_long_context = model_.allow_long_context;
    o.kv_type = model_.KvTypeValue();
    if (model_.batch_size > 0) o.batch_size = model_.batch_size;
    o.special_tokens_in_text = model_.special;
    o.parallel = 1;
    o.prefix_cache = false;  // embeddings neither use nor fill it
    o.pooling = *pooling;
    Result<std::unique_ptr<Engine>> engine = Engine::Create(o);
    if (!engine.ok()) return Fail(engine.status());
    EmbeddingRequest request;
    for (const std::string& p : prompts_)
      request.inputs.push_back(TokenizeForEmbedding(**engine, p));
    request.normalize = !no_normalize_;
    request.dimensions = dimensions_;
    Result<EmbeddingResult> result = (*engine)->Embed(std::move(request));
    if (!result.ok()) return Fail(result.status());
    Print(*result, GetModelInfo(**engine));
    return 0;
  }

 private:
  void Print(const EmbeddingResult& r, const ModelInfo& info) const {
    const std::string model = info.name.empty() ? model_.model_path : info.name;
    std::printf("{\"object\": \"list\", \"model\": %s, \"pooling\": \"%s\", \"normalized\": %s, ",
                Quote(model).c_str(), PoolingName(r.pooling).c_str(),
                r.normalized ? "true" : "false");
    std::printf("\"dimensions\": %d,\n \"data\": [", r.dimensions);
    for (size_t i = 0; i < r.embeddings.size(); ++i) {
      const std::vector<float>& v = r.embeddings[i];
      std::printf("%s\n  {\"object\": \"embedding\", \"index\": %zu, \"embedding\": ",
                  i == 0 ? "" : ",", i);
      if (r.pooling == Pooling::kNone) {
        std::fputc('[', stdout);
        for (size_t at = 0; at < v.size(); at += r.dimensions) {
          if (at > 0) std::fputc(',', stdout);
          PrintVector(v.data() + at, r.dimensions);
        }
        std::fputc(']', stdout);
      } else {
        PrintVector(v.data(), static_cast<int>(v.size()));
      }
      std::fputc('}', stdout);
    }
    std::printf("\n ],\n \"usage\": {\"prompt_tokens\": %d, \"total_tokens\": %d}}\n",
                r.prompt_tokens, r.prompt_tokens);
  }

  ModelOptions model_;
  std::vector<std::string> prompts_;
  std::string pooling_ = "default";
  bool no_normalize_ = false;
  int dimensions_ = 0;
};

}  // namespace

std::unique_ptr<Command> MakeEmbedCommand() { return std::make_unique<EmbedCommand>(); }

}  // namespace promptcache::cli
