// The embedding endpoints' request parsing and response bodies, apart from the network and the
// engine (so that they are tested on their own): OpenAI's POST /v1/embeddings and Ollama's POST
// /api/embed. The routes themselves (embedding_routes.cc) tokenize the texts, run
// Engine::SubmitEmbedding and send these bodies (errors: server/api_error.h, Ollama's flavour on
// /api/embed).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "promptcache/engine.h"
#include "server/api_error.h"

namespace promptcache {

// A parsed embeddings request, either API's.
struct EmbeddingsApiRequest {
  std::string model;  // "" when not given (the served model)
  // The inputs: texts, or (OpenAI only) token ids taken as they are, no BOS added.
  std::vector<std::string> texts;
  std::vector<std::vector<int32_t>> token_inputs;
  bool is_tokens = false;
  bool base64 = false;   // OpenAI's encoding_format "base64": little-endian float32, base64
  int dimensions = 0;    // 0: not given
  bool truncate = true;  // Ollama: cut inputs to the context (false: refuse them, as Ollama does)
};

// POST /v1/embeddings: input string | string[] | int[] | int[][] (non-empty; no empty string;
// at most kMaxEmbeddingInputs), model, encoding_format "float" | "base64", dimensions (a
// positive integer; the route refuses any but the model's width), user (ignored); any other
// field is a 400 naming it. Returns the 400 to send, or nullopt when *out is valid.
std::optional<ApiError> ParseEmbeddingsRequest(std::string_view body, EmbeddingsApiRequest* out);
// POST /api/embed: model, input string | string[], truncate (bool, default true), dimensions,
// options and keep_alive (ignored; any other field is a 400).
std::optional<ApiError> ParseOllamaEmbedRequest(std::string_view body, EmbeddingsApiRequest* out);

// The little-endian bytes of `v`'s floats in base64 (what OpenAI's encoding_format "base64"
// sends, and its Python and Node clients decode as float32).
std::string Base64Floats(const std::vector<float>& v);

// OpenAI's response: {"object": "list", "data": [{"object": "embedding", "index", "embedding"}],
// "model", "usage": {"prompt_tokens", "total_tokens"}}. Each float is written in the shortest
// text that reads back as the same float32.
std::string EmbeddingsBody(const EmbeddingResult& result, const std::string& model, bool base64);
// Ollama's: {"model", "embeddings": [[...]], "total_duration", "load_duration",
// "prompt_eval_count"}, durations in nanoseconds (the model is loaded at start: load 0).
std::string OllamaEmbedBody(const EmbeddingResult& result, const std::string& model,
                            int64_t total_ns);

}  // namespace promptcache
