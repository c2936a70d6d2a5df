// The embedding routes on the HTTP server: OpenAI's POST /v1/embeddings and Ollama's POST
// /api/embed, as free functions registered by server/http_server.cc from what EmbeddingContext
// gives them (so that they move as they are into the server's route table). Parsing and bodies
// are server/embedding_api.h; the vectors are Engine::SubmitEmbedding's, through the engine's
// queue like every request, pooled as the server's --pooling (else the model file) says, always
// L2-normalized (as OpenAI's and Ollama's are).
#pragma once

#include <httplib.h>

#include <functional>
#include <optional>
#include <string>

#include "promptcache/engine.h"
#include "server/openai_request.h"

namespace promptcache {

// What the routes need of the server they are registered with.
struct EmbeddingContext {
  Engine* engine = nullptr;
  std::string model_id;  // the name answered when a request names no model
  int context = 0;       // tokens per input (Ollama's truncate cuts inputs to it)
  std::function<std::optional<ApiError>(const std::string& model)> check_model;
  // Whether the client of the request served on this thread has gone (server/http_transport.h),
  // and whether the server is stopping: either cancels the request.
  std::function<bool()> client_gone;
  std::function<bool()> stopping;
  // OpenAI's error object with its status (and Retry-After on 503).
  std::function<void(httplib::Response&, const ApiError&)> send_error;
};

void HandleEmbeddings(const EmbeddingContext& ctx, const httplib::Request& req,
                      httplib::Response& res);
void HandleOllamaEmbed(const EmbeddingContext& ctx, const httplib::Request& req,
                       httplib::Response& res);

}  // namespace promptcache
