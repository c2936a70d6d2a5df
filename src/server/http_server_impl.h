// The HTTP server's insides, shared by the files that implement its routes (server-internal:
// nothing outside src/server includes this). http_server.cc holds the server's life cycle,
// routing, authentication, errors and the small routes; openai_routes.cc the completion
// endpoints (JSON and streamed); cache_routes.cc the cache, schema and tokenizer routes;
// embedding_routes.cc (free functions, server/embedding_routes.h) the embedding endpoints.
#pragma once

#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "core/log.h"
#include "server/http_server.h"
#include "model/model.h"
#include "server/anthropic_response.h"
#include "server/cache_response.h"
#include "server/cors.h"
#include "server/embedding_routes.h"
#include "server/http_transport.h"
#include "server/anthropic_routes.h"
#include "server/metrics.h"
#include "server/openai_request.h"
#include "server/openai_response.h"
#include "server/prompt_encoder.h"
#include "server/savings_api.h"
#include "server/schema_api.h"
#include "server/tenants.h"
#include "server/text_channel.h"
#include "server/tool_request.h"
#include "server/web_ui.h"
#include "engine/fidelity.h"

namespace promptcache {
namespace server_internal {

using ojson = nlohmann::ordered_json;

// How long a stream waits for text before writing an SSE comment: the write is how a client
// that went away during a long prefill is noticed.
constexpr std::chrono::milliseconds kStreamPoll(250);

std::string Dump(const ojson& j);
ApiError MakeError(int http_status, std::string message, std::string type, std::string code = "",
                   std::string param = "");
// An engine or prompt-encoding Status as the error a client sees.
ApiError FromStatus(const Status& st, const std::string& param = "");
std::string RandomHex(int n);
int64_t UnixSeconds();

// One streaming request: its channel, its engine handle, and the thread that waits for its
// result. Destroyed when cpp-httplib releases the response, after the last write.
struct Stream {
  ResponseMeta meta;
  bool include_usage = false;
  bool started = false;
  std::shared_ptr<const CacheMapRequest> map;  // "cache_map": true
  std::vector<size_t> offsets;  // each choice's text so far, in bytes (echo included)
  // With tools: each choice's text so far and how much of it went out as content (the rest may
  // be a tool call: held back until the end).
  std::vector<std::string> texts;
  std::vector<size_t> sent;
  std::shared_ptr<TextChannel> channel = std::make_shared<TextChannel>();
  std::shared_ptr<RequestHandle> handle;
  std::thread waiter;
  uint64_t track_id = 0;
  std::string tenant;  // what its result is counted for

  ~Stream() {
    if (waiter.joinable()) waiter.join();
  }
};

}  // namespace server_internal

using server_internal::Stream;

class HttpServer::Impl {
 public:
  Impl(Engine* engine, ServerOptions options);

  Status Bind();
  int port() const { return port_; }
  Status Run();
  void Stop();
  const std::string& model_id() const { return model_id_; }

 private:
  using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;
  // Queues a prepared request: Engine::Submit for a token prompt, SubmitPrompt for a modular one.
  using Submitter =
      std::function<Result<std::shared_ptr<RequestHandle>>(CompletionRequest request)>;
  struct Route {
    std::string pattern;
    std::map<std::string, Handler> methods;  // "GET", "POST", "DELETE"
  };

  // Each route answers its methods; the others get 405 with an Allow header.
  void RegisterRoutes();
  void InstallHooks();
  // The tenant of an authorized request: "" for the --api-key holder (and everyone without
  // keys), the --api-keys file's name otherwise; nullopt: no valid key.
  std::optional<std::string> Tenant(const httplib::Request& req) const;
  // Routes that act on every tenant's cache or on the server's schemas: with --api-keys, only
  // the --api-key holder may use them.
  static bool AdminOnly(const httplib::Request& req);
  // The cache namespace of an authorized request with this cache_salt.
  std::string Namespace(const httplib::Request& req, const std::string& salt) const;
  httplib::Server::HandlerResponse FillError(const httplib::Request& req, httplib::Response& res);

  void SendError(httplib::Response& res, const ApiError& error) const;
  // In the shape the route's clients read: Anthropic's on /v1/messages, OpenAI's elsewhere.
  void SendErrorFor(const httplib::Request& req, httplib::Response& res,
                    const ApiError& error) const;
  // --cors: the headers of a request from an allowed origin; a preflight answered (true).
  bool HandleCors(const httplib::Request& req, httplib::Response& res) const;
  void InitMessages();
  void SendJson(httplib::Response& res, const server_internal::ojson& body, int status = 200) const;
  std::optional<ApiError> CheckModel(const std::string& name) const;
  // `tokens` prompt tokens, generation continuing at position `end` (== tokens for a plain
  // prompt; a modular prompt's positions have gaps).
  std::optional<ApiError> CheckLength(const ApiRequest& r, int tokens, int end,
                                      int* max_tokens) const;

  void HandleCompletion(const httplib::Request& req, httplib::Response& res, ApiKind kind);
  // Plans a modular request (schema + modules, or a PML prompt) and checks its length; false
  // after sending the error. *prompt: the planned prompt.
  bool PrepareModular(const ApiRequest& r, httplib::Response& res, CompletionRequest* creq,
                      Submitter* submit, PmlPrompt* prompt);
  // evaluate: the modular prompt whose fidelity the response reports ("evaluate": true).
  // map: what the cache map needs ("cache_map": true), or null.
  // The request is cancelled when its client closes the connection while it runs.
  void Respond(httplib::Response& res, const ResponseMeta& meta, CompletionRequest creq,
               const Submitter& submit, const PmlPrompt* evaluate,
               std::shared_ptr<const CacheMapRequest> map);
  // {"contiguous": {...}, "gapped": {...}}: the run against both full recomputes.
  server_internal::ojson Fidelity(const PmlPrompt& prompt, const CompletionResult& result,
                                  const std::vector<std::vector<float>>& logits) const;
  void StartStream(httplib::Response& res, const ResponseMeta& meta, bool include_usage,
                   CompletionRequest creq, const Submitter& submit,
                   std::shared_ptr<const CacheMapRequest> map);
  bool WriteStream(Stream& s, httplib::DataSink& sink);
  // Tools: appends a piece to a choice's text and gives what may go out as content now.
  static std::string ReleaseContent(Stream& s, int choice, const std::string& piece);
  // Tools, at the end: each choice's held-back content, or its calls as deltas.
  static std::string EndToolCalls(Stream& s, const CompletionResult& result);
  // Counts a finished request for the metrics, the server's and its tenant's.
  void Observe(const std::string& tenant, const CompletionResult& r);
  // The longest prompt a request may have: one token less than the context, and
  // --max-prompt-tokens (prompts surely longer are refused before they are tokenized).
  size_t PromptLimit() const;
  // The error for a prompt PromptEncoder refused as surely longer than PromptLimit(): named as
  // CheckLength names it (the context, or --max-prompt-tokens).
  ApiError PromptTooLong(const Status& st, const std::string& param) const;

  void HandleModels(const httplib::Request& req, httplib::Response& res);
  void HandleHealth(const httplib::Request& req, httplib::Response& res);
  void HandleMetrics(const httplib::Request& req, httplib::Response& res);
  void HandleTokenize(const httplib::Request& req, httplib::Response& res);
  void HandleDetokenize(const httplib::Request& req, httplib::Response& res);
  void HandleCacheList(const httplib::Request& req, httplib::Response& res);
  void HandleCacheTree(const httplib::Request& req, httplib::Response& res);
  void HandleWeb(const httplib::Request& req, httplib::Response& res);
  void HandleCacheDrop(const httplib::Request& req, httplib::Response& res);
  void HandleCacheSave(const httplib::Request& req, httplib::Response& res);
  void HandleCacheLoad(const httplib::Request& req, httplib::Response& res);
  void HandleCachePin(const httplib::Request& req, httplib::Response& res, bool pinned);
  void HandleCacheLookup(const httplib::Request& req, httplib::Response& res);
  void HandlePinList(const httplib::Request& req, httplib::Response& res);
  void HandlePinDrop(const httplib::Request& req, httplib::Response& res);
  void LookupModular(const PrefixRequest& r, httplib::Response& res);
  void HandleSavings(const httplib::Request& req, httplib::Response& res);
  void HandleSchemaLoad(const httplib::Request& req, httplib::Response& res);
  void HandleSchemaList(const httplib::Request& req, httplib::Response& res);
  void HandleSchemaGet(const httplib::Request& req, httplib::Response& res);
  void HandleSchemaDrop(const httplib::Request& req, httplib::Response& res);
  void SendSchema(httplib::Response& res, const SchemaInfo& info);
  // `max_tokens`: as PromptEncoder::Build.
  bool ReadPrefix(const httplib::Request& req, httplib::Response& res, PrefixRequest* r,
                  BuiltPrompt* prompt, size_t max_tokens = SIZE_MAX);

  // Running requests, so that Stop() can cancel them.
  uint64_t Track(std::shared_ptr<RequestHandle> handle);
  void Untrack(uint64_t id);

  Engine* engine_;
  ServerOptions options_;
  int context_ = 0;
  std::string model_id_, model_name_, fingerprint_;
  PromptEncoder encoder_;
  RequestLimits limits_;
  MessagesContext messages_;  // what /v1/messages needs of this server
  EmbeddingContext embeddings_;  // what /v1/embeddings and /api/embed need of it
  ServerMetrics metrics_;
  GuardedHttpServer http_;
  int port_ = -1;
  int listen_fd_ = -1;  // the listening socket, once bound
  int64_t created_ = server_internal::UnixSeconds();
  std::atomic<bool> stopping_{false};
  std::atomic<bool> stop_requested_{false};
  enum Phase { kIdle, kStarting, kReturned };
  std::atomic<Phase> phase_{kIdle};

  std::mutex savings_mu_;  // one /v1/bench/savings run at a time
  std::mutex mu_;
  uint64_t next_id_ = 1;
  std::map<uint64_t, std::shared_ptr<RequestHandle>> running_;
};

}  // namespace promptcache
