#include "server/embedding_routes.h"

#include <chrono>

#include "promptcache/text.h"
#include "server/embedding_api.h"
#include "server/http_server_impl.h"

namespace promptcache {
namespace {

using Clock = std::chrono::steady_clock;

// The engine's inputs: token ids as given, or each text tokenized as llama.cpp tokenizes
// embedding inputs (TokenizeForEmbedding). `truncate`: cut to the context (Ollama's default).
EmbeddingRequest Inputs(const EmbeddingContext& ctx, EmbeddingsApiRequest& r, bool truncate) {
  EmbeddingRequest out;
  if (r.is_tokens) {
    out.inputs = std::move(r.token_inputs);
  } else {
    out.inputs.reserve(r.texts.size());
    for (const std::string& text : r.texts) {
      out.inputs.push_back(TokenizeForEmbedding(*ctx.engine, text));
      if (truncate && ctx.context > 0 && out.inputs.back().size() > size_t(ctx.context)) {
        out.inputs.back().resize(size_t(ctx.context));
      }
    }
  }
  out.dimensions = r.dimensions;
  out.normalize = true;
  return out;
}

// Runs the request through the engine's queue, cancelling it when its client goes away or the
// server stops (checked every 100 ms). The error to send, or nullopt with *out filled.
std::optional<ApiError> Run(const EmbeddingContext& ctx, EmbeddingRequest request,
                            EmbeddingResult* out) {
  auto param = [](const Status& st) -> std::string {
    if (st.message().rfind("dimensions", 0) == 0) return "dimensions";
    return st.code() == StatusCode::kInvalidArgument ? "input" : "";
  };
  Result<std::shared_ptr<EmbeddingHandle>> handle = ctx.engine->SubmitEmbedding(std::move(request));
  if (!handle.ok()) return server_internal::FromStatus(handle.status(), param(handle.status()));
  bool cancelled = false;
  while (!(*handle)->WaitFor(0.1)) {
    if (!cancelled && (ctx.stopping() || ctx.client_gone())) {
      (*handle)->Cancel();
      cancelled = true;
    }
  }
  *out = (*handle)->Wait();
  if (!out->status.ok()) return server_internal::FromStatus(out->status);
  if (out->cancelled) {
    return server_internal::MakeError(503, "the request was cancelled (the server is stopping)",
                                      "server_error", "cancelled");
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

void HandleEmbeddings(const EmbeddingContext& ctx, const httplib::Request& req,
                      httplib::Response& res) {
  EmbeddingsApiRequest r;
  std::optional<ApiError> err = ParseEmbeddingsRequest(req.body, &r);
  if (!err && !r.model.empty()) err = ctx.check_model(r.model);
  EmbeddingResult result;
  if (!err) err = Run(ctx, Inputs(ctx, r, false), &result);
  if (err) return ctx.send_error(res, *err);
  res.status = 200;
  res.set_content(EmbeddingsBody(result, r.model.empty() ? ctx.model_id : r.model, r.base64),
                  "application/json");
}

void HandleOllamaEmbed(const EmbeddingContext& ctx, const httplib::Request& req,
                       httplib::Response& res) {
  const Clock::time_point start = Clock::now();
  EmbeddingsApiRequest r;
  std::optional<ApiError> err = ParseOllamaEmbedRequest(req.body, &r);
  if (!err && !r.model.empty()) err = ctx.check_model(r.model);
  EmbeddingResult result;
  if (!err) err = Run(ctx, Inputs(ctx, r, r.truncate), &result);
  if (err) {
    res.status = err->http_status;
    if (err->http_status == 503) res.set_header("Retry-After", "1");
    return res.set_content(OllamaErrorBody(err->message), "application/json");
  }
  const int64_t ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
  res.status = 200;
  res.set_content(OllamaEmbedBody(result, r.model.empty() ? ctx.model_id : r.model, ns),
                  "application/json");
}

}  // namespace promptcache
