// POST /v1/embeddings (OpenAI's shape) and POST /api/embed (Ollama's): the texts tokenized as
// llama.cpp tokenizes embedding inputs (TokenizeForEmbedding) or token ids as given, embedded by
// Engine::SubmitEmbedding through the engine's queue like every request, pooled as the server's
// --pooling (else the model file) says and always L2-normalized (as OpenAI's and Ollama's
// vectors are). Parsing and bodies are server/embedding_api.h.
#include <chrono>

#include "promptcache/text.h"
#include "server/embedding_api.h"
#include "server/routes.h"

namespace promptcache {
namespace {

using Clock = std::chrono::steady_clock;

// The engine's inputs. `truncate`: cut each text's tokens to the context (Ollama's default).
EmbeddingRequest Inputs(const Call& call, EmbeddingsApiRequest& r, bool truncate) {
  EmbeddingRequest out;
  if (r.is_tokens) {
    out.inputs = std::move(r.token_inputs);
  } else {
    const size_t context = size_t(call.server.context());
    out.inputs.reserve(r.texts.size());
    for (const std::string& text : r.texts) {
      out.inputs.push_back(TokenizeForEmbedding(call.engine(), text));
      if (truncate && out.inputs.back().size() > context) out.inputs.back().resize(context);
    }
  }
  out.dimensions = r.dimensions;
  out.normalize = true;
  return out;
}

// Runs the request, cancelling it when its client goes away or the server stops (checked every
// 100 ms, as Call::Await does for completions). The error to send, or nullopt with *out filled.
std::optional<ApiError> Run(const Call& call, EmbeddingRequest request, EmbeddingResult* out) {
  auto param = [](const Status& st) -> std::string {
    if (st.message().rfind("dimensions", 0) == 0) return "dimensions";
    return st.code() == StatusCode::kInvalidArgument ? "input" : "";
  };
  Result<std::shared_ptr<EmbeddingHandle>> handle =
      call.engine().SubmitEmbedding(std::move(request));
  if (!handle.ok()) return FromStatus(handle.status(), param(handle.status()));
  bool cancelled = false;
  while (!(*handle)->WaitFor(0.1)) {
    if (!cancelled && (call.server.stopping() || RequestClientGone())) {
      (*handle)->Cancel();
      cancelled = true;
    }
  }
  *out = (*handle)->Wait();
  if (!out->status.ok()) return FromStatus(out->status);
  if (out->cancelled) {
    return MakeError(503, "the request was cancelled (the server is stopping)", "server_error",
                     "cancelled");
  }
  if (out->pooling == Pooling::kNone) {  // the model file's own pooling_type 0
    return ApiError::BadRequest(
        "this model's pooling is none (a vector per token), which this API cannot carry; start "
        "the server with --pooling mean, last or cls",
        "", "unsupported");
  }
  return std::nullopt;
}

}  // namespace

void HandleEmbeddings(Call& call) {
  EmbeddingsApiRequest r;
  std::optional<ApiError> err = ParseEmbeddingsRequest(call.req.body, &r);
  if (!err && !r.model.empty()) err = call.server.CheckModel(r.model);
  EmbeddingResult result;
  if (!err) err = Run(call, Inputs(call, r, false), &result);
  if (err) return call.Fail(*err);
  const std::string& model = r.model.empty() ? call.server.model_id() : r.model;
  call.Send(EmbeddingsBody(result, model, r.base64));
}

void HandleOllamaEmbed(Call& call) {
  const Clock::time_point start = Clock::now();
  EmbeddingsApiRequest r;
  std::optional<ApiError> err = ParseOllamaEmbedRequest(call.req.body, &r);
  if (!err && !r.model.empty()) err = call.server.CheckModel(r.model);
  EmbeddingResult result;
  if (!err) err = Run(call, Inputs(call, r, r.truncate), &result);
  if (err) return call.Fail(*err);
  const int64_t ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
  const std::string& model = r.model.empty() ? call.server.model_id() : r.model;
  call.Send(OllamaEmbedBody(result, model, ns));
}

}  // namespace promptcache
