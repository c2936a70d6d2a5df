// Anthropic's Messages API on the HTTP server: POST /v1/messages (a JSON message, or
// Anthropic's named Server-Sent Events with "stream": true) and POST /v1/messages/count_tokens,
// registered by server/http_server.cc from what MessagesContext gives them. Parsing is
// server/anthropic_request.h, the bodies server/anthropic_response.h.
//
// A request's cache_control breakpoints become timed pins of its prompt's prefixes, applied
// when it ends; its usage reports the prompt tokens read from the cache, those computed into a
// pinned prefix, and the rest (anthropic_response.h). Errors, including those the server's
// hooks send for these paths (a missing key, an unknown model), are Anthropic's error object.
#pragma once

#include <httplib.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "promptcache/engine.h"
#include "server/openai_request.h"
#include "server/prompt_encoder.h"

namespace promptcache {

// What the routes need of the server they are registered with.
struct MessagesContext {
  Engine* engine = nullptr;
  const PromptEncoder* encoder = nullptr;
  RequestLimits limits;
  int context = 0;            // tokens per request
  int max_prompt_tokens = 0;  // 0: the context only
  // Multiplies cache_control TTLs (1; a test-only server flag shortens them).
  double ttl_scale = 1;
  std::function<std::optional<ApiError>(const std::string& model)> check_model;
  // The cache namespace of the request's tenant (no cache_salt in this API), and the tenant
  // (who its pins are charged to; "" the default one).
  std::function<std::string(const httplib::Request&)> cache_namespace;
  std::function<std::string(const httplib::Request&)> tenant;
  // Whether the client of the request served on this thread has gone (server/http_transport.h).
  std::function<bool()> client_gone;
  // Running requests, so that the server's Stop() can cancel them.
  std::function<uint64_t(std::shared_ptr<RequestHandle>)> track;
  std::function<void(uint64_t)> untrack;
  std::function<bool()> stopping;
  // Metrics, with the tenant the result is counted for.
  std::function<void(const std::string& tenant, const CompletionResult&)> observe;
};

// Waits for a request that is answered in one body (not streamed), cancelling it as soon as
// `give_up` says so (the client closed its connection, the server is stopping): checked every
// 100 ms, so an abandoned request frees its sequence within about that, not when it would
// have ended.
CompletionResult WaitWatching(RequestHandle& handle, const std::function<bool()>& give_up);

// Whether a path is one of these routes (errors there take Anthropic's shape).
bool IsMessagesPath(const std::string& path);

void HandleMessages(const MessagesContext& ctx, const httplib::Request& req,
                    httplib::Response& res);
void HandleCountTokens(const MessagesContext& ctx, const httplib::Request& req,
                       httplib::Response& res);

// Sends `error` as Anthropic's error object with its status.
void SendMessagesError(httplib::Response& res, const ApiError& error);

}  // namespace promptcache
