// The route table: the single list of what the server answers. Each row is a path pattern
// (cpp-httplib's regex; captures are Call::PathParam), a method, its handler, whose API it is
// (the shape of its errors) and whether it is admin-only (with --api-keys, only the --api-key
// holder may call it: routes over every tenant's cache or over the server's schemas).
// http_server.cc registers every row; a pattern's other methods answer 405 with an Allow header.
// Rows are matched in order: fixed paths come before the patterns that would match them too.
//
// Adding a route: write `void HandleX(Call& call)` in the file of its API (openai_routes.cc,
// anthropic_routes.cc, cache_routes.cc, schema_routes.cc, tokenizer_routes.cc, page_routes.cc,
// system_routes.cc, embedding_routes.cc, or a new one), declare it below, and add its row in
// routes.cc.
#pragma once

#include <span>
#include <string>

#include "server/api_error.h"
#include "server/call.h"

namespace promptcache {

struct Route {
  const char* pattern;
  const char* method;  // GET, POST, DELETE
  void (*handle)(Call& call);
  ApiFlavour flavour;
  bool admin_only;
};

// Every route, in match order.
std::span<const Route> Routes();

// What the hooks that run before routing (authentication, and refusals with no route at all)
// need of the table. AdminOnly: the route the request would reach, by the first pattern that
// matches its path, is admin-only; for a method that pattern does not answer (a 405), any of its
// routes is. FlavourOf: the flavour of the route whose fixed prefix is the longest one `path`
// starts with (so /v1/messages/anything is Anthropic's); OpenAI's when none.
bool AdminOnly(const std::string& method, const std::string& path);
ApiFlavour FlavourOf(const std::string& path);

// openai_routes.cc: POST /v1/completions, /v1/chat/completions.
void HandleCompletions(Call& call);
void HandleChatCompletions(Call& call);
// responses_routes.cc: POST /v1/responses, GET and DELETE /v1/responses/{id},
// GET /v1/responses/{id}/input_items.
void HandleResponses(Call& call);
void HandleResponseGet(Call& call);
void HandleResponseDelete(Call& call);
void HandleResponseInputItems(Call& call);
// anthropic_routes.cc: POST /v1/messages, /v1/messages/count_tokens.
void HandleMessages(Call& call);
void HandleCountTokens(Call& call);
// tokenizer_routes.cc: POST /tokenize, /detokenize.
void HandleTokenize(Call& call);
void HandleDetokenize(Call& call);
// cache_routes.cc: /v1/cache and below.
void HandleCacheList(Call& call);
void HandleCacheDrop(Call& call);
void HandleCacheSave(Call& call);
void HandleCacheTree(Call& call);
void HandleCacheLoad(Call& call);
void HandleCachePin(Call& call);
void HandleCacheUnpin(Call& call);
void HandleCacheLookup(Call& call);
void HandlePinList(Call& call);
void HandlePinDrop(Call& call);
// schema_routes.cc: /v1/schemas.
void HandleSchemaList(Call& call);
void HandleSchemaLoad(Call& call);
void HandleSchemaGet(Call& call);
void HandleSchemaDrop(Call& call);
// page_routes.cc: the web page and its savings measurement.
void HandleWeb(Call& call);
void HandleSavings(Call& call);
// embedding_routes.cc: POST /v1/embeddings (OpenAI's), /api/embed (Ollama's).
void HandleEmbeddings(Call& call);
void HandleOllamaEmbed(Call& call);
// ollama_routes.cc: Ollama's /api/chat, /api/generate, /api/tags, /api/show, /api/version,
// /api/ps.
void HandleOllamaChat(Call& call);
void HandleOllamaGenerate(Call& call);
void HandleOllamaTags(Call& call);
void HandleOllamaShow(Call& call);
void HandleOllamaVersion(Call& call);
void HandleOllamaPs(Call& call);
// system_routes.cc: /v1/models, /health, /metrics.
void HandleModels(Call& call);
void HandleHealth(Call& call);
void HandleMetrics(Call& call);

// Shared by the route files: parses a prefix body (server/openai_request.h PrefixRequest) and
// turns it into tokens (`max_tokens`: as PromptEncoder::Build); false after failing the call.
// `lookup`: cut the prompt into segments as a completion would be (/v1/cache/lookup).
bool ReadPrefix(Call& call, PrefixRequest* r, BuiltPrompt* prompt, size_t max_tokens = SIZE_MAX,
                bool lookup = false);

// openai_routes.cc, shared with the Responses route: a plain (not modular) request `r` as the
// engine's request (sampling, stop, grammar, log-probabilities, namespace, the prompt built and
// its length checked; errors about the prompt name `param`); false after failing the call.
// *opens_thinking (when given): the prompt opened a thinking model's thinking.
bool PrepareChat(Call& call, const ApiRequest& r, CompletionRequest* creq, const std::string& param,
                 bool* opens_thinking = nullptr);

}  // namespace promptcache
