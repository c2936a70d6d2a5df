#include "server/http_server.h"

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
#include "model/model.h"
#include "server/anthropic_response.h"
#include "server/cache_map.h"
#include "server/cors.h"
#include "server/http_transport.h"
#include "server/messages_api.h"
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
#include "serving/fidelity.h"

namespace promptcache {
namespace {

using ojson = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

// How long a stream waits for text before writing an SSE comment: the write is how a client
// that went away during a long prefill is noticed.
constexpr std::chrono::milliseconds kStreamPoll(250);

std::string Dump(const ojson& j) { return j.dump(-1, ' ', false, ojson::error_handler_t::replace); }

ApiError MakeError(int http_status, std::string message, std::string type, std::string code = "",
                   std::string param = "") {
  ApiError e;
  e.http_status = http_status;
  e.message = std::move(message);
  e.type = std::move(type);
  e.code = std::move(code);
  e.param = std::move(param);
  return e;
}

// An engine or prompt-encoding Status as the error a client sees.
ApiError FromStatus(const Status& st, const std::string& param = "") {
  switch (st.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
      return ApiError::BadRequest(st.message(), param);
    case StatusCode::kNotFound:
      return MakeError(404, st.message(), "invalid_request_error", "not_found", param);
    case StatusCode::kResourceExhausted:
      return MakeError(503, st.message() + " (the server is busy; retry later)", "server_error",
                       "overloaded");
    case StatusCode::kUnimplemented:
      return ApiError::BadRequest(st.message(), param, "unsupported");
    default:
      return MakeError(500, st.message(), "server_error");
  }
}

bool ConstantTimeEquals(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

std::string RandomHex(int n) {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  static const char kHex[] = "0123456789abcdef";
  std::string s;
  for (int i = 0; i < n; ++i) s += kHex[rng() & 15];
  return s;
}

int64_t UnixSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

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

  ~Stream() {
    if (waiter.joinable()) waiter.join();
  }
};

// The handler, given the whole body as read here rather than by cpp-httplib: the library parses
// form-encoded bodies itself (curl -d's default Content-Type) and refuses those over 8192 bytes,
// whatever --max-body-bytes says. Every body is JSON to this server; the library still enforces
// --max-body-bytes while reading (a 413).
// The library checks a body's Content-Length against the limit, not a chunked body's size: this
// reader keeps at most `max_bytes` however the body is framed (413, filled in by FillError). The
// rest is read and dropped, so the client gets its answer rather than a reset connection, up to
// a bound past which the connection is closed.
// 10 -> "10", 0.5 -> "0.5".
std::string FormatSeconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", s);
  return buf;
}

httplib::Server::HandlerWithContentReader ReadingBody(
    std::function<void(const httplib::Request&, httplib::Response&)> handler, size_t max_bytes) {
  return [handler, max_bytes](const httplib::Request& req, httplib::Response& res,
                              const httplib::ContentReader& read) {
    httplib::Request whole = req;
    // No Content-Length and not chunked: no body (`curl -X POST URL`), not an unreadable one.
    if (!req.has_header("Content-Length") && !req.has_header("Transfer-Encoding")) {
      handler(whole, res);
      return;
    }
    bool too_large = false;
    size_t dropped = 0;
    const size_t drain_limit = std::max(max_bytes * 8, size_t(64) << 20);
    const bool complete = read([&](const char* data, size_t n) {
      if (!too_large && n > max_bytes - whole.body.size()) {
        too_large = true;
        whole.body.clear();
        whole.body.shrink_to_fit();
      }
      if (too_large) {
        dropped += n;
        return dropped <= drain_limit;
      }
      whole.body.append(data, n);
      return true;
    });
    if (too_large) {
      res.status = 413;
      res.set_header("Connection", "close");
      return;
    }
    if (!complete) {
      if (res.status < 400) res.status = 400;
      return;
    }
    handler(whole, res);
  };
}

}  // namespace

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
  void SendJson(httplib::Response& res, const ojson& body, int status = 200) const;
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
  void Respond(httplib::Response& res, const ResponseMeta& meta, CompletionRequest creq,
               const Submitter& submit, const PmlPrompt* evaluate,
               std::shared_ptr<const CacheMapRequest> map);
  // {"contiguous": {...}, "gapped": {...}}: the run against both full recomputes.
  ojson Fidelity(const PmlPrompt& prompt, const CompletionResult& result,
                 const std::vector<std::vector<float>>& logits) const;
  void StartStream(httplib::Response& res, const ResponseMeta& meta, bool include_usage,
                   CompletionRequest creq, const Submitter& submit,
                   std::shared_ptr<const CacheMapRequest> map);
  bool WriteStream(Stream& s, httplib::DataSink& sink);
  // Tools: appends a piece to a choice's text and gives what may go out as content now.
  static std::string ReleaseContent(Stream& s, int choice, const std::string& piece);
  // Tools, at the end: each choice's held-back content, or its calls as deltas.
  static std::string EndToolCalls(Stream& s, const CompletionResult& result);
  void Observe(const CompletionResult& r);

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
  void LookupModular(const PrefixRequest& r, httplib::Response& res);
  void HandleSavings(const httplib::Request& req, httplib::Response& res);
  void HandleSchemaLoad(const httplib::Request& req, httplib::Response& res);
  void HandleSchemaList(const httplib::Request& req, httplib::Response& res);
  void HandleSchemaGet(const httplib::Request& req, httplib::Response& res);
  void HandleSchemaDrop(const httplib::Request& req, httplib::Response& res);
  void SendSchema(httplib::Response& res, const SchemaInfo& info);
  bool ReadPrefix(const httplib::Request& req, httplib::Response& res, PrefixRequest* r,
                  BuiltPrompt* prompt);

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
  ServerMetrics metrics_;
  GuardedHttpServer http_;
  int port_ = -1;
  int listen_fd_ = -1;  // the listening socket, once bound
  int64_t created_ = UnixSeconds();
  std::atomic<bool> stopping_{false};
  std::atomic<bool> stop_requested_{false};
  enum Phase { kIdle, kStarting, kReturned };
  std::atomic<Phase> phase_{kIdle};

  std::mutex mu_;
  uint64_t next_id_ = 1;
  std::map<uint64_t, std::shared_ptr<RequestHandle>> running_;
};

HttpServer::Impl::Impl(Engine* engine, ServerOptions options)
    : engine_(engine),
      options_(std::move(options)),
      encoder_(engine->model().tokenizer(), engine->model().chat_template(),
               engine->options().special_tokens_in_text),
      http_(options_.transport) {
  const Model& model = engine_->model();
  context_ =
      engine_->options().context > 0 ? engine_->options().context : model.config().context_length;
  model_id_ = std::filesystem::path(engine_->options().model_path).stem().string();
  model_name_ = model.config().name;
  fingerprint_ = "fp_" + model.fingerprint().substr(0, 12);
  limits_.max_tokens_limit = options_.max_tokens_limit;
  if (std::optional<std::string> warning = encoder_.chat_template().Warning()) {
    PC_LOG_WARN("%s", warning->c_str());
  }
  http_.set_payload_max_length(options_.max_body_bytes);
  // Streamed chunks are small writes right after the headers: without TCP_NODELAY, Nagle's
  // algorithm holds them until the client's (delayed) ACK, adding up to 40 ms to the time a
  // client sees its first token.
  http_.set_tcp_nodelay(true);
  // What the Keep-Alive response header announces; the transport applies it.
  http_.set_keep_alive_timeout(std::max<time_t>(1, time_t(options_.transport.idle_timeout_s)));
  // cpp-httplib's default options add SO_REUSEPORT, which lets a second server bind the same
  // port and the kernel split connections between the two: a busy port must be an error.
  // SO_REUSEADDR alone still lets a restarted server bind past TIME_WAIT.
  http_.set_socket_options([this](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    listen_fd_ = sock;
  });
  InitMessages();
  RegisterRoutes();
  InstallHooks();
}

void HttpServer::Impl::InitMessages() {
  MessagesContext& m = messages_;
  m.engine = engine_;
  m.encoder = &encoder_;
  m.limits = limits_;
  m.context = context_;
  m.max_prompt_tokens = options_.max_prompt_tokens;
  m.ttl_scale = options_.cache_control_ttl_scale;
  m.check_model = [this](const std::string& name) { return CheckModel(name); };
  m.cache_namespace = [this](const httplib::Request& req) { return Namespace(req, ""); };
  m.track = [this](std::shared_ptr<RequestHandle> h) { return Track(std::move(h)); };
  m.untrack = [this](uint64_t id) { Untrack(id); };
  m.stopping = [this] { return stopping_.load(); };
  m.observe = [this](const CompletionResult& r) { Observe(r); };
}

void HttpServer::Impl::RegisterRoutes() {
  auto bind = [this](void (Impl::*fn)(const httplib::Request&, httplib::Response&)) -> Handler {
    return
        [this, fn](const httplib::Request& req, httplib::Response& res) { (this->*fn)(req, res); };
  };
  // Fixed paths come before the /v1/cache/{key} pattern, which would match them too.
  const std::vector<Route> routes = {
      {"/v1/completions",
       {{"POST", [this](const httplib::Request& q,
                        httplib::Response& s) { HandleCompletion(q, s, ApiKind::kCompletion); }}}},
      {"/v1/chat/completions",
       {{"POST", [this](const httplib::Request& q,
                        httplib::Response& s) { HandleCompletion(q, s, ApiKind::kChat); }}}},
      {"/v1/messages",
       {{"POST", [this](const httplib::Request& q,
                        httplib::Response& s) { HandleMessages(messages_, q, s); }}}},
      {"/v1/messages/count_tokens",
       {{"POST", [this](const httplib::Request& q,
                        httplib::Response& s) { HandleCountTokens(messages_, q, s); }}}},
      {"/v1/models", {{"GET", bind(&Impl::HandleModels)}}},
      {"/v1/models/([^/]+)", {{"GET", bind(&Impl::HandleModels)}}},
      {"/health", {{"GET", bind(&Impl::HandleHealth)}}},
      {"/metrics", {{"GET", bind(&Impl::HandleMetrics)}}},
      {"/tokenize", {{"POST", bind(&Impl::HandleTokenize)}}},
      {"/detokenize", {{"POST", bind(&Impl::HandleDetokenize)}}},
      {"/v1/cache",
       {{"GET", bind(&Impl::HandleCacheList)}, {"DELETE", bind(&Impl::HandleCacheDrop)}}},
      {"/v1/cache/save", {{"POST", bind(&Impl::HandleCacheSave)}}},
      {"/v1/cache/tree", {{"GET", bind(&Impl::HandleCacheTree)}}},
      {"/v1/cache/load", {{"POST", bind(&Impl::HandleCacheLoad)}}},
      {"/v1/cache/pin",
       {{"POST",
         [this](const httplib::Request& q, httplib::Response& s) { HandleCachePin(q, s, true); }}}},
      {"/v1/cache/unpin",
       {{"POST", [this](const httplib::Request& q,
                        httplib::Response& s) { HandleCachePin(q, s, false); }}}},
      {"/v1/cache/lookup", {{"POST", bind(&Impl::HandleCacheLookup)}}},
      {"/v1/cache/([^/]+)", {{"DELETE", bind(&Impl::HandleCacheDrop)}}},
      {"/v1/bench/savings", {{"POST", bind(&Impl::HandleSavings)}}},
      {"/v1/schemas",
       {{"GET", bind(&Impl::HandleSchemaList)}, {"POST", bind(&Impl::HandleSchemaLoad)}}},
      {"/", {{"GET", bind(&Impl::HandleWeb)}}},
      {"/ui/([^/]+)", {{"GET", bind(&Impl::HandleWeb)}}},
      {"/v1/schemas/([^/]+)",
       {{"GET", bind(&Impl::HandleSchemaGet)}, {"DELETE", bind(&Impl::HandleSchemaDrop)}}},
  };
  for (const Route& route : routes) {
    std::string allow;
    for (const auto& [method, handler] : route.methods)
      allow += (allow.empty() ? "" : ", ") + method;
    for (const char* method : {"GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}) {
      auto it = route.methods.find(method);
      Handler h;
      if (it != route.methods.end()) {
        h = it->second;
      } else {
        h = [this, allow](const httplib::Request& req, httplib::Response& res) {
          res.set_header("Allow", allow);
          SendErrorFor(req, res,
                       MakeError(405,
                                 "method " + req.method + " is not allowed on " + req.path +
                                     " (allowed: " + allow + ")",
                                 "invalid_request_error", "method_not_allowed"));
        };
      }
      const std::string m = method;
      if (m == "GET") http_.Get(route.pattern, h);
      if (m == "POST") http_.Post(route.pattern, ReadingBody(h, options_.max_body_bytes));
      if (m == "PUT") http_.Put(route.pattern, ReadingBody(h, options_.max_body_bytes));
      if (m == "PATCH") http_.Patch(route.pattern, ReadingBody(h, options_.max_body_bytes));
      if (m == "DELETE") http_.Delete(route.pattern, h);
      if (m == "OPTIONS") http_.Options(route.pattern, h);
    }
  }
}

// Authentication before routing, OpenAI-style bodies for every error, and response counting.
void HttpServer::Impl::InstallHooks() {
  http_.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (HandleCors(req, res)) return httplib::Server::HandlerResponse::Handled;
    const std::optional<std::string> tenant = Tenant(req);
    if (tenant && !tenant->empty() && AdminOnly(req)) {
      SendErrorFor(req, res,
                   MakeError(403,
                             "this route acts on every tenant's cache or on the server's "
                             "schemas: it needs the --api-key key, not a tenant's",
                             "invalid_request_error", "admin_only"));
      return httplib::Server::HandlerResponse::Handled;
    }
    if (tenant) return httplib::Server::HandlerResponse::Unhandled;
    SendErrorFor(req, res,
                 MakeError(401,
                           "invalid or missing API key: send the header "
                           "'Authorization: Bearer KEY' (or 'x-api-key: KEY')",
                           "invalid_request_error", "invalid_api_key"));
    return httplib::Server::HandlerResponse::Handled;
  });
  http_.set_error_handler(httplib::Server::HandlerWithResponse(
      [this](const httplib::Request& req, httplib::Response& res) { return FillError(req, res); }));
  http_.set_exception_handler(
      [this](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown exception";
        try {
          if (ep) std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        PC_LOG_ERROR("server: handler failed: %s", what.c_str());
        SendError(res, MakeError(500, "internal error: " + what, "server_error"));
      });
  http_.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    metrics_.CountResponse(res.status);
    PC_LOG_DEBUG("%s %s -> %d", req.method.c_str(), req.path.c_str(), res.status);
  });
}

std::optional<std::string> HttpServer::Impl::Tenant(const httplib::Request& req) const {
  const bool keys = !options_.api_key.empty() || !options_.api_keys.empty();
  if (!keys || req.path == "/health" || IsWebPath(req.path)) return "";
  if (req.path == "/metrics" && options_.metrics_public) return "";
  std::string got = req.get_header_value("Authorization");
  // Anthropic's clients send the key as x-api-key.
  if (got.empty() && req.has_header("x-api-key"))
    got = "Bearer " + req.get_header_value("x-api-key");
  if (!options_.api_key.empty() && ConstantTimeEquals(got, "Bearer " + options_.api_key)) {
    return "";
  }
  // Every key is compared (in constant time each): how long this takes says nothing of which
  // key matched.
  std::optional<std::string> tenant;
  for (const auto& [key, name] : options_.api_keys) {
    if (ConstantTimeEquals(got, "Bearer " + key)) tenant = name;
  }
  return tenant;
}

bool HttpServer::Impl::AdminOnly(const httplib::Request& req) {
  const std::string& p = req.path;
  if (p == "/v1/cache" || p == "/v1/cache/save") return true;
  if (p.rfind("/v1/cache/", 0) == 0) {
    return p != "/v1/cache/load" && p != "/v1/cache/pin" && p != "/v1/cache/unpin" &&
           p != "/v1/cache/lookup";
  }
  if (p == "/v1/bench/savings") return true;  // it holds the engine and loads schemas
  return p.rfind("/v1/schemas", 0) == 0 && req.method != "GET";
}

std::string HttpServer::Impl::Namespace(const httplib::Request& req,
                                        const std::string& salt) const {
  return CacheNamespace(options_.cache_secret, Tenant(req).value_or(""), salt);
}

// Statuses that cpp-httplib answers by itself (no route, body too large, unreadable request)
// get an OpenAI-style body too.
httplib::Server::HandlerResponse HttpServer::Impl::FillError(const httplib::Request& req,
                                                             httplib::Response& res) {
  if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
  ApiError e;
  if (const MissedDeadline missed = RequestMissedDeadline(); missed != MissedDeadline::kNone) {
    const bool headers = missed == MissedDeadline::kHeaders;
    res.status = 408;
    res.set_header("Connection", "close");
    e = MakeError(408,
                  std::string("the request's ") + (headers ? "headers" : "body") +
                      " did not arrive within " +
                      FormatSeconds(headers ? options_.transport.header_timeout_s
                                            : options_.transport.body_timeout_s) +
                      (headers ? " s (--header-timeout)" : " s (--body-timeout)"),
                  "invalid_request_error", "request_timeout");
    res.set_content(IsMessagesPath(req.path) ? AnthropicErrorBody(e) : ErrorBody(e),
                    "application/json");
    return httplib::Server::HandlerResponse::Handled;
  }
  switch (res.status) {
    case 404:
      e = MakeError(404, "unknown URL: " + req.method + " " + req.path, "invalid_request_error",
                    "unknown_url");
      break;
    case 413:
      e = MakeError(413,
                    "the request body is larger than the server's limit of " +
                        std::to_string(options_.max_body_bytes) + " bytes (--max-body-bytes)",
                    "invalid_request_error", "request_too_large");
      break;
    default:
      e = MakeError(res.status,
                    "the request could not be processed (HTTP " + std::to_string(res.status) + ")",
                    res.status >= 500 ? "server_error" : "invalid_request_error");
  }
  res.set_content(IsMessagesPath(req.path) ? AnthropicErrorBody(e) : ErrorBody(e),
                  "application/json");
  return httplib::Server::HandlerResponse::Handled;
}

void HttpServer::Impl::SendError(httplib::Response& res, const ApiError& error) const {
  res.status = error.http_status;
  if (error.http_status == 503) res.set_header("Retry-After", "1");
  res.set_content(ErrorBody(error), "application/json");
}

void HttpServer::Impl::SendErrorFor(const httplib::Request& req, httplib::Response& res,
                                    const ApiError& error) const {
  if (IsMessagesPath(req.path)) return SendMessagesError(res, error);
  SendError(res, error);
}

bool HttpServer::Impl::HandleCors(const httplib::Request& req, httplib::Response& res) const {
  if (options_.cors_origins.empty()) return false;
  const std::string allow = CorsAllowOrigin(options_.cors_origins, req.get_header_value("Origin"));
  if (allow.empty()) return false;
  if (req.method == "OPTIONS" && req.has_header("Access-Control-Request-Method")) {
    for (const auto& [name, value] :
         CorsPreflightHeaders(allow, req.get_header_value("Access-Control-Request-Headers"))) {
      res.set_header(name, value);
    }
    res.status = 204;
    return true;
  }
  res.set_header("Access-Control-Allow-Origin", allow);
  if (allow != "*") res.set_header("Vary", "Origin");
  return false;
}

void HttpServer::Impl::SendJson(httplib::Response& res, const ojson& body, int status) const {
  res.status = status;
  res.set_content(Dump(body), "application/json");
}

std::optional<ApiError> HttpServer::Impl::CheckModel(const std::string& name) const {
  if (name == model_id_ || (!model_name_.empty() && name == model_name_)) return std::nullopt;
  const std::vector<std::string>& aliases = options_.aliases;
  if (std::find(aliases.begin(), aliases.end(), name) != aliases.end()) return std::nullopt;
  return MakeError(404,
                   "the model '" + name + "' does not exist; this server serves '" + model_id_ +
                       "'" + (model_name_.empty() ? "" : " (also called '" + model_name_ + "')"),
                   "invalid_request_error", "model_not_found", "model");
}

std::optional<ApiError> HttpServer::Impl::CheckLength(const ApiRequest& r, int n, int end,
                                                      int* max_tokens) const {
  const std::string param = r.kind == ApiKind::kChat && !r.modular() ? "messages" : "prompt";
  if (options_.max_prompt_tokens > 0 && n > options_.max_prompt_tokens) {
    return ApiError::BadRequest(
        "the prompt has " + std::to_string(n) + " tokens, more than this server's limit of " +
            std::to_string(options_.max_prompt_tokens) + " (--max-prompt-tokens)",
        param, "prompt_too_long");
  }
  // A modular prompt's length is where its text ends: the schema reserves the positions before.
  const std::string length = end == n ? "the prompt has " + std::to_string(n) + " tokens"
                                      : "the prompt ends at position " + std::to_string(end);
  if (end >= context_) {
    return ApiError::BadRequest("this model's maximum context length is " +
                                    std::to_string(context_) + " tokens, but " + length,
                                param, "context_length_exceeded");
  }
  if (r.max_tokens && end + *r.max_tokens > context_) {
    return ApiError::BadRequest(
        "this model's maximum context length is " + std::to_string(context_) + " tokens, but " +
            std::to_string(end + *r.max_tokens) + " were requested (" +
            (end == n ? std::to_string(n) + " in the prompt, "
                      : "the prompt ends at position " + std::to_string(end) + ", ") +
            std::to_string(*r.max_tokens) + " for the completion)",
        "max_tokens", "context_length_exceeded");
  }
  *max_tokens = r.max_tokens ? *r.max_tokens : context_ - end;
  if (!r.max_tokens && options_.max_tokens_limit > 0) {
    *max_tokens = std::min(*max_tokens, options_.max_tokens_limit);
  }
  return std::nullopt;
}

void HttpServer::Impl::HandleCompletion(const httplib::Request& req, httplib::Response& res,
                                        ApiKind kind) {
  ApiRequest r;
  std::optional<ApiError> err = kind == ApiKind::kChat
                                    ? ParseChatRequest(req.body, limits_, &r)
                                    : ParseCompletionRequest(req.body, limits_, &r);
  if (!err) err = CheckModel(r.model);
  if (!err && kind == ApiKind::kChat) err = ApplyToolChoice(encoder_.tool_format(), &r);
  if (err) return SendError(res, *err);

  CompletionRequest creq;
  std::shared_ptr<CacheMapRequest> map;
  if (r.cache_map) {
    map = std::make_shared<CacheMapRequest>();
    map->block_size = engine_->options().block_size;
  }
  creq.sampling = r.sampling;
  creq.stop = r.stop;
  creq.ignore_eos = r.ignore_eos;
  creq.cache_namespace = Namespace(req, r.cache_salt);
  creq.n = r.n;
  creq.logprobs = r.logprobs;
  creq.prompt_logprobs = r.echo && r.logprobs >= 0;
  creq.grammar = r.grammar;
  Submitter submit;
  PmlPrompt modular;
  if (r.modular()) {
    if (!PrepareModular(r, res, &creq, &submit, &modular)) return;
    if (map) {
      // Planned once more for its tokens and positions: cheap next to serving.
      Result<ExpandedPrompt> x = engine_->ExpandPrompt(modular);
      if (x.ok()) {
        map->prompt = std::move(x->tokens);
        map->positions = std::move(x->positions);
      }
    }
  } else {
    Result<BuiltPrompt> prompt = encoder_.Build(r);
    if (!prompt.ok()) {
      return SendError(res,
                       FromStatus(prompt.status(), kind == ApiKind::kChat ? "messages" : "prompt"));
    }
    const int n = static_cast<int>(prompt->tokens.size());
    if ((err = CheckLength(r, n, n, &creq.max_tokens))) return SendError(res, *err);
    creq.prompt = std::move(prompt->tokens);
    creq.pin_tokens = prompt->pin_tokens;
    if (map) map->prompt = creq.prompt;
    submit = [this](CompletionRequest c) { return engine_->Submit(std::move(c)); };
  }

  ResponseMeta meta;
  meta.kind = kind;
  meta.id = (kind == ApiKind::kChat ? "chatcmpl-" : "cmpl-") + RandomHex(24);
  meta.created = UnixSeconds();
  meta.model = r.model;
  meta.system_fingerprint = fingerprint_;
  if (r.tools_offered()) meta.tool_format = encoder_.tool_format();
  if (r.logprobs >= 0) {
    meta.logprobs = true;
    const Tokenizer& tok = engine_->model().tokenizer();
    meta.token_text = [&tok](int32_t id) { return tok.TokenBytes(id); };
  }
  if (r.echo) {
    meta.echo = true;
    meta.prompt_tokens = creq.prompt;
    meta.prompt_text = engine_->model().tokenizer().Decode(creq.prompt);
  }
  if (r.stream) return StartStream(res, meta, r.include_usage, std::move(creq), submit, map);
  Respond(res, meta, std::move(creq), submit, r.evaluate ? &modular : nullptr, map);
}

bool HttpServer::Impl::PrepareModular(const ApiRequest& r, httplib::Response& res,
                                      CompletionRequest* creq, Submitter* submit,
                                      PmlPrompt* planned) {
  // Errors name the field the client wrote: the PML prompt, or the schema/modules fields.
  const std::string param = r.pml_xml ? "prompt" : "modules";
  if (!r.pml_xml) {
    if (Result<SchemaInfo> s = engine_->GetSchema(r.schema); !s.ok()) {
      SendError(res, FromStatus(s.status(), "schema"));
      return false;
    }
  }
  Result<PmlPrompt> prompt = ModularPrompt(r);
  if (!prompt.ok()) {
    SendError(res, FromStatus(prompt.status(), param));
    return false;
  }
  // Plans the prompt against its schema (every PML error comes back here, before queueing) and
  // gives its length. SubmitPrompt plans it again; planning is cheap next to serving.
  Result<ExpandedPrompt> expanded = engine_->ExpandPrompt(*prompt);
  if (!expanded.ok()) {
    SendError(res, FromStatus(expanded.status(), param));
    return false;
  }
  const int n = static_cast<int>(expanded->tokens.size());
  if (std::optional<ApiError> err = CheckLength(r, n, expanded->end, &creq->max_tokens)) {
    SendError(res, *err);
    return false;
  }
  *planned = *prompt;
  *submit = [this, p = std::move(prompt).value()](CompletionRequest c) {
    return engine_->SubmitPrompt(p, std::move(c));
  };
  return true;
}

void HttpServer::Impl::Respond(httplib::Response& res, const ResponseMeta& meta,
                               CompletionRequest creq, const Submitter& submit,
                               const PmlPrompt* evaluate,
                               std::shared_ptr<const CacheMapRequest> map) {
  // No text callback is needed; this one only lets Stop() end the request early.
  creq.on_text = [this](const std::string&) { return !stopping_.load(); };
  auto logits = std::make_shared<std::vector<std::vector<float>>>();
  if (evaluate != nullptr) {
    creq.on_logits = [logits](std::span<const float> l) {
      logits->emplace_back(l.begin(), l.end());
    };
  }
  Result<std::shared_ptr<RequestHandle>> handle = submit(std::move(creq));
  if (!handle.ok()) return SendError(res, FromStatus(handle.status()));
  const uint64_t id = Track(*handle);
  const CompletionResult result = (*handle)->Wait();
  Untrack(id);
  if (!result.status.ok()) return SendError(res, FromStatus(result.status));
  Observe(result);
  res.status = 200;
  std::string body = CompletionBody(meta, result);
  if (map) {
    body =
        AddJsonField(body, "cache_map", CacheMapJson(*map, result, engine_->model().tokenizer()));
  }
  if (evaluate != nullptr) {
    body = AddJsonField(body, "fidelity", Fidelity(*evaluate, result, *logits));
  }
  res.set_content(body, "application/json");
}

ojson HttpServer::Impl::Fidelity(const PmlPrompt& prompt, const CompletionResult& result,
                                 const std::vector<std::vector<float>>& logits) const {
  PmlPrompt at_schema = prompt;  // the baselines' tokens, at the schema's positions
  at_schema.positions = PmlPositions::kSchema;
  Result<ExpandedPrompt> x = engine_->ExpandPrompt(at_schema);
  if (!x.ok()) return ojson{{"error", x.status().message()}};
  SessionOptions so;
  so.threads = engine_->options().threads;
  so.kv_type = engine_->options().kv_type;
  ojson out;
  for (const bool contiguous : {true, false}) {
    Result<FidelityReport> rep = CompareWithFullRecompute(
        engine_->model(), contiguous ? Contiguous(*x) : *x, result.tokens, logits, so);
    if (!rep.ok()) return ojson{{"error", rep.status().message()}};
    out[contiguous ? "contiguous" : "gapped"] = {{"steps", rep->steps},
                                                 {"top1_agreement", rep->top1_agreement},
                                                 {"first_token_kl", rep->first_token_kl},
                                                 {"greedy_equal", rep->greedy_equal}};
  }
  return out;
}

void HttpServer::Impl::StartStream(httplib::Response& res, const ResponseMeta& meta,
                                   bool include_usage, CompletionRequest creq,
                                   const Submitter& submit,
                                   std::shared_ptr<const CacheMapRequest> map) {
  auto s = std::make_shared<Stream>();
  s->meta = meta;
  s->map = std::move(map);
  s->include_usage = include_usage;
  creq.on_piece = [ch = s->channel](const TextPiece& piece) { return ch->Push(piece); };
  s->offsets.assign(creq.n, meta.echo ? meta.prompt_text.size() : 0);
  s->texts.assign(creq.n, "");
  s->sent.assign(creq.n, 0);
  Result<std::shared_ptr<RequestHandle>> handle = submit(std::move(creq));
  if (!handle.ok()) return SendError(res, FromStatus(handle.status()));
  s->handle = *handle;
  s->track_id = Track(s->handle);
  s->waiter = std::thread([h = s->handle, ch = s->channel] { ch->Finish(h->Wait()); });

  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, s](size_t, httplib::DataSink& sink) {
        try {
          return WriteStream(*s, sink);
        } catch (const std::exception& e) {  // nothing may escape into cpp-httplib's writer
          PC_LOG_ERROR("server: stream failed: %s", e.what());
          return false;
        }
      },
      [this, s](bool success) {
        // The client went away (or the server is stopping): free the sequence at once.
        if (!success) {
          s->channel->Cancel();
          s->handle->Cancel();
        }
        Untrack(s->track_id);
      });
}

// One call writes whatever is ready: the role chunk, queued text, a keep-alive comment, or the
// end of the stream. False (a failed write) makes cpp-httplib drop the connection.
bool HttpServer::Impl::WriteStream(Stream& s, httplib::DataSink& sink) {
  std::string out;
  std::vector<TextPiece> pieces;
  CompletionResult result;
  const TextChannel::Event event = s.channel->Next(kStreamPoll, &pieces, &result);
  // Echo: the prompt leads each choice; with log-probabilities it waits for the engine's piece
  // of choice -1 carrying them.
  ResponseMeta plain = s.meta;
  plain.echo = false;
  if (!s.started) {
    s.started = true;
    for (int i = 0; i < static_cast<int>(s.offsets.size()); ++i) {
      if (s.meta.kind == ApiKind::kChat) out += StreamRoleChunk(s.meta, s.include_usage, i);
      if (s.meta.echo && !s.meta.logprobs) {
        out += StreamTextChunk(plain, s.meta.prompt_text, s.include_usage, i);
      }
    }
  }
  switch (event) {
    case TextChannel::Event::kText:
      for (const TextPiece& piece : pieces) {
        if (piece.choice == -1) {
          for (int i = 0; i < static_cast<int>(s.offsets.size()); ++i) {
            ojson j = ojson::parse(StreamTextChunk(plain, s.meta.prompt_text, s.include_usage, i)
                                       .substr(6));  // after "data: "
            j["choices"][0]["logprobs"] = LogprobsJson(s.meta, {}, 0, &piece.logprobs);
            out += SseEvent(Dump(j));
          }
          continue;
        }
        if (piece.choice < 0 || piece.choice >= static_cast<int>(s.offsets.size())) continue;
        std::string text = piece.text;
        if (s.meta.tool_format != ToolCallFormat::kNone) {
          text = ReleaseContent(s, piece.choice, piece.text);
          if (text.empty() && !(s.meta.logprobs && !piece.logprobs.empty())) continue;
        }
        out +=
            StreamTextChunk(s.meta, text, s.include_usage, piece.choice,
                            s.meta.logprobs ? &piece.logprobs : nullptr, s.offsets[piece.choice]);
        for (const TokenLogprob& lp : piece.logprobs) {
          if (s.meta.token_text) s.offsets[piece.choice] += s.meta.token_text(lp.token).size();
        }
      }
      break;
    case TextChannel::Event::kTimeout:
      if (out.empty()) out = ": keep-alive\n\n";
      break;
    case TextChannel::Event::kFinished:
      if (!result.status.ok()) {
        out += StreamErrorEvent(FromStatus(result.status));
      } else {
        Observe(result);
        if (s.meta.tool_format != ToolCallFormat::kNone) out += EndToolCalls(s, result);
        std::string finish = StreamFinishChunk(s.meta, result, s.include_usage);
        if (s.map) {
          finish = AddEventField(finish, "cache_map",
                                 CacheMapJson(*s.map, result, engine_->model().tokenizer()));
        }
        out += finish;
        if (s.include_usage) out += StreamUsageChunk(s.meta, result);
      }
      out += SseDone();
      if (!sink.write(out.data(), out.size())) return false;
      sink.done();
      return true;
  }
  // Text held back (a tool call may be starting) leaves nothing to write: an empty write would
  // end the chunked body.
  if (out.empty()) return true;
  return sink.write(out.data(), out.size());
}

std::string HttpServer::Impl::ReleaseContent(Stream& s, int choice, const std::string& piece) {
  std::string& text = s.texts[choice];
  size_t& sent = s.sent[choice];
  text += piece;
  const size_t start = ToolCallStart(s.meta.tool_format, text);
  sent = std::max(sent, ToolContentBegin(s.meta.tool_format, text));  // a marker, not content
  if (start <= sent) return "";
  std::string out = text.substr(sent, start - sent);
  sent = start;
  return out;
}

std::string HttpServer::Impl::EndToolCalls(Stream& s, const CompletionResult& result) {
  std::string out;
  for (int c = 0; c < static_cast<int>(s.texts.size()); ++c) {
    const std::string& text = result.choices.empty() ? result.text : result.choices[c].text;
    const ParsedOutput parsed = ParseToolCalls(s.meta.tool_format, text);
    // Content not sent yet: what precedes the calls, or all the text when there are none.
    const size_t begin = ToolContentBegin(s.meta.tool_format, text);
    s.sent[c] = std::max(s.sent[c], begin);
    const size_t end = parsed.calls.empty() ? text.size() : begin + parsed.content.size();
    if (end > s.sent[c]) {
      out += StreamTextChunk(s.meta, text.substr(s.sent[c], end - s.sent[c]), s.include_usage, c);
    }
    out += StreamToolCallChunks(s.meta, parsed.calls, s.include_usage, c);
  }
  return out;
}

void HttpServer::Impl::Observe(const CompletionResult& r) {
  if (!r.tokens.empty()) metrics_.ObserveTtft(r.ttft_ms / 1000.0);
}

void HttpServer::Impl::HandleModels(const httplib::Request& req, httplib::Response& res) {
  ojson model;
  model["id"] = model_id_;
  model["object"] = "model";
  model["created"] = created_;
  model["owned_by"] = "promptcache";
  model["meta"] = {{"name", model_name_},
                   {"context_length", context_},
                   {"vocab_size", engine_->model().tokenizer().vocab_size()},
                   {"chat_format", encoder_.chat_template().FormatName()},
                   {"fingerprint", engine_->model().fingerprint()},
                   {"cache_block_tokens", engine_->options().block_size},
                   {"kv_type", KvTypeName(engine_->options().kv_type)},
                   {"kv_bytes_per_token",
                    engine_->model()
                        .MakeKvLayout(engine_->options().kv_type, engine_->options().block_size)
                        .bytes_per_token()}};
  if (req.matches.size() > 1) {  // GET /v1/models/{id}
    if (std::optional<ApiError> err = CheckModel(req.matches[1].str())) return SendError(res, *err);
    const std::string name = req.matches[1].str();
    if (name != model_id_ && name != model_name_) model["id"] = name;  // an --alias
    return SendJson(res, model);
  }
  ojson data = ojson::array({model});
  for (const std::string& alias : options_.aliases) {  // --alias: the same model, another name
    if (alias == model_id_) continue;
    model["id"] = alias;
    data.push_back(model);
  }
  SendJson(res, ojson{{"object", "list"}, {"data", std::move(data)}});
}

void HttpServer::Impl::HandleHealth(const httplib::Request&, httplib::Response& res) {
  const EngineStats s = engine_->Stats();
  SendJson(res, ojson{{"status", "ok"}, {"active", s.active}, {"queued", s.queued}});
}

void HttpServer::Impl::HandleMetrics(const httplib::Request&, httplib::Response& res) {
  res.status = 200;
  const ConnectionStats connections{http_.open_connections(), http_.refused_connections(),
                                    http_.timed_out_requests()};
  res.set_content(FormatMetrics(engine_->Stats(), metrics_.Ttft(), metrics_.Responses(), model_id_,
                                connections),
                  "text/plain; version=0.0.4; charset=utf-8");
}

// Parses a prefix body and turns it into tokens; false after sending the error.
bool HttpServer::Impl::ReadPrefix(const httplib::Request& req, httplib::Response& res,
                                  PrefixRequest* r, BuiltPrompt* prompt) {
  std::optional<ApiError> err = ParsePrefixRequest(req.body, r);
  if (!err && !r->model.empty()) err = CheckModel(r->model);
  if (err) {
    SendError(res, *err);
    return false;
  }
  Result<BuiltPrompt> built = encoder_.Build(*r);
  if (!built.ok()) {
    SendError(res, FromStatus(built.status(), r->messages.empty() ? "prompt" : "messages"));
    return false;
  }
  *prompt = std::move(built).value();
  return true;
}

void HttpServer::Impl::HandleTokenize(const httplib::Request& req, httplib::Response& res) {
  PrefixRequest r;
  BuiltPrompt p;
  if (!ReadPrefix(req, res, &r, &p)) return;
  SendJson(res,
           ojson{{"tokens", p.tokens}, {"count", p.tokens.size()}, {"pin_tokens", p.pin_tokens}});
}

void HttpServer::Impl::HandleDetokenize(const httplib::Request& req, httplib::Response& res) {
  PrefixRequest r;  // {"tokens": [ids]}
  std::optional<ApiError> err = ParsePrefixRequest(req.body, &r);
  if (!err && !r.prompt_is_tokens) {
    err = ApiError::BadRequest("'tokens' must be an array of token ids", "tokens");
  }
  if (err) return SendError(res, *err);
  Result<std::vector<int32_t>> ids = encoder_.FromPrompt("", r.prompt_tokens, true);
  if (!ids.ok()) return SendError(res, FromStatus(ids.status(), "tokens"));
  SendJson(res, ojson{{"content", engine_->model().tokenizer().Decode(*ids)}});
}

void HttpServer::Impl::HandleCacheTree(const httplib::Request&, httplib::Response& res) {
  SendJson(res, CacheTreeJson(engine_->ListCacheBlocks(), engine_->options().block_size,
                              engine_->model().tokenizer()));
}

void HttpServer::Impl::HandleWeb(const httplib::Request& req, httplib::Response& res) {
  // What the page needs before its first API call: whether to ask for the key (so that it never
  // meets a 401 it did not expect).
  if (req.path == "/ui/config.json") {
    return SendJson(
        res, ojson{{"api_key_required", !options_.api_key.empty() || !options_.api_keys.empty()}});
  }
  const WebAsset* asset = FindWebAsset(req.path);
  if (asset == nullptr) {
    return SendError(res, MakeError(404, "unknown URL: GET " + req.path, "invalid_request_error",
                                    "unknown_url"));
  }
  res.status = 200;
  // Everything the page loads comes from this server: no other origin may be reached from it.
  res.set_header("Content-Security-Policy",
                 "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:");
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("Cache-Control", "no-cache");
  res.set_content(std::string(asset->body), std::string(asset->content_type));
}

void HttpServer::Impl::HandleCacheList(const httplib::Request&, httplib::Response& res) {
  ojson data = ojson::array();
  for (const CacheEntryInfo& e : engine_->ListCache()) {
    data.push_back({{"key", e.key},
                    {"tokens", e.tokens},
                    {"in_ram", e.in_ram},
                    {"on_disk", e.on_disk},
                    {"pinned", e.pinned},
                    {"idle_seconds", e.idle_seconds}});
  }
  SendJson(res, ojson{{"object", "list"}, {"data", std::move(data)}});
}

void HttpServer::Impl::HandleCacheDrop(const httplib::Request& req, httplib::Response& res) {
  const std::string key = req.matches.size() > 1 ? req.matches[1].str() : "";
  if (Status st = engine_->DropCache(key); !st.ok()) return SendError(res, FromStatus(st, "key"));
  SendJson(res, ojson{{"deleted", true}, {"key", key.empty() ? ojson() : ojson(key)}});
}

void HttpServer::Impl::HandleCacheSave(const httplib::Request&, httplib::Response& res) {
  if (Status st = engine_->SaveCache(); !st.ok()) return SendError(res, FromStatus(st));
  SendJson(res, ojson{{"saved", true}});
}

void HttpServer::Impl::HandleCacheLoad(const httplib::Request& req, httplib::Response& res) {
  PrefixRequest r;
  BuiltPrompt p;
  if (!ReadPrefix(req, res, &r, &p)) return;
  if (static_cast<int>(p.tokens.size()) >= context_) {
    return SendError(res,
                     ApiError::BadRequest("the prefix has " + std::to_string(p.tokens.size()) +
                                              " tokens, the context is " + std::to_string(context_),
                                          r.messages.empty() ? "prompt" : "messages",
                                          "context_length_exceeded"));
  }
  const std::string ns = Namespace(req, r.cache_salt);
  Result<int> cached = engine_->WarmPrefix(p.tokens, ns);
  if (!cached.ok()) return SendError(res, FromStatus(cached.status()));
  if (r.pin) {
    if (Status st = engine_->PinPrefix(p.tokens, true, ns); !st.ok()) {
      return SendError(res, FromStatus(st));
    }
  }
  SendJson(
      res,
      ojson{{"prompt_tokens", p.tokens.size()}, {"cached_tokens", *cached}, {"pinned", r.pin}});
}

void HttpServer::Impl::HandleCachePin(const httplib::Request& req, httplib::Response& res,
                                      bool pinned) {
  PrefixRequest r;
  BuiltPrompt p;
  if (!ReadPrefix(req, res, &r, &p)) return;
  // A chat prefix with a cache_control breakpoint pins up to it; otherwise the whole prefix.
  std::vector<int32_t> tokens = p.tokens;
  if (p.pin_tokens > 0) tokens.resize(p.pin_tokens);
  if (Status st = engine_->PinPrefix(tokens, pinned, Namespace(req, r.cache_salt)); !st.ok()) {
    return SendError(res, FromStatus(st));
  }
  SendJson(res, ojson{{"tokens", tokens.size()}, {"pinned", pinned}});
}

// A router's view: how many leading tokens of the prompt each tier holds, computing nothing.
void HttpServer::Impl::HandleCacheLookup(const httplib::Request& req, httplib::Response& res) {
  PrefixRequest r;
  if (!ParsePrefixRequest(req.body, &r) && !r.prompt_is_tokens && r.messages.empty() &&
      LooksLikePml(r.prompt_text)) {
    return LookupModular(r, res);
  }
  BuiltPrompt p;
  if (!ReadPrefix(req, res, &r, &p)) return;
  const CacheTierCounts c = engine_->LookupCache(p.tokens, Namespace(req, r.cache_salt));
  const EngineStats s = engine_->Stats();
  SendJson(res, ojson{{"prompt_tokens", p.tokens.size()},
                      {"cached_tokens", c.reusable},
                      {"tiers", ojson{{"ram", c.ram}, {"disk", c.disk}, {"remote", c.remote}}},
                      {"block_tokens", engine_->options().block_size},
                      {"active", s.active},
                      {"queued", s.queued}});
}

void HttpServer::Impl::HandleSavings(const httplib::Request& req, httplib::Response& res) {
  SavingsRequest r;
  if (std::optional<ApiError> err = ParseSavingsBody(req.body, &r)) return SendError(res, *err);
  Result<ojson> out = MeasureSavings(*engine_, r);
  if (!out.ok()) return SendError(res, FromStatus(out.status()));
  SendJson(res, *out);
}

// A PML prompt: which of its cached pieces each tier holds (modules are not namespaced).
void HttpServer::Impl::LookupModular(const PrefixRequest& r, httplib::Response& res) {
  if (!r.model.empty()) {
    if (std::optional<ApiError> err = CheckModel(r.model)) return SendError(res, *err);
  }
  Result<PmlPrompt> prompt = ParsePrompt(r.prompt_text, "prompt");
  if (!prompt.ok()) return SendError(res, FromStatus(prompt.status(), "prompt"));
  Result<CacheTierCounts> c = engine_->LookupPrompt(*prompt);
  if (!c.ok()) return SendError(res, FromStatus(c.status(), "prompt"));
  const EngineStats s = engine_->Stats();
  SendJson(res, ojson{{"prompt_tokens", c->prompt_tokens},
                      {"cached_tokens", c->reusable},
                      {"tiers", ojson{{"ram", c->ram}, {"disk", c->disk}, {"remote", c->remote}}},
                      {"modular", true},
                      {"block_tokens", engine_->options().block_size},
                      {"active", s.active},
                      {"queued", s.queued}});
}

// Schema text from a client may not name files (src attributes): it could read the server's.
void HttpServer::Impl::HandleSchemaLoad(const httplib::Request& req, httplib::Response& res) {
  std::string xml;
  if (std::optional<ApiError> err = ParseSchemaBody(req.body, &xml)) return SendError(res, *err);
  SchemaLoadOptions o;
  o.allow_src = false;
  Result<SchemaInfo> info = engine_->LoadSchemaText(xml, "request", o);
  if (!info.ok()) return SendError(res, FromStatus(info.status(), "schema"));
  SendSchema(res, *info);
}

void HttpServer::Impl::HandleSchemaList(const httplib::Request&, httplib::Response& res) {
  res.status = 200;
  res.set_content(SchemaListBody(engine_->ListSchemas()), "application/json");
}

void HttpServer::Impl::HandleSchemaGet(const httplib::Request& req, httplib::Response& res) {
  Result<SchemaInfo> info = engine_->GetSchema(req.matches[1].str());
  if (!info.ok()) return SendError(res, FromStatus(info.status(), "name"));
  SendSchema(res, *info);
}

void HttpServer::Impl::HandleSchemaDrop(const httplib::Request& req, httplib::Response& res) {
  const std::string name = req.matches[1].str();
  if (Status st = engine_->DropSchema(name); !st.ok()) {
    return SendError(res, FromStatus(st, "name"));
  }
  res.status = 200;
  res.set_content(SchemaDeletedBody(name), "application/json");
}

void HttpServer::Impl::SendSchema(httplib::Response& res, const SchemaInfo& info) {
  // A DELETE between the two engine calls leaves no layout: the schema is gone (404).
  Result<std::shared_ptr<const SchemaLayout>> layout = engine_->GetSchemaLayout(info.name);
  if (!layout.ok()) return SendError(res, FromStatus(layout.status(), "name"));
  res.status = 200;
  res.set_content(SchemaBody(info, **layout), "application/json");
}

uint64_t HttpServer::Impl::Track(std::shared_ptr<RequestHandle> handle) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t id = next_id_++;
  running_[id] = std::move(handle);
  if (stopping_) running_[id]->Cancel();
  return id;
}

void HttpServer::Impl::Untrack(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  running_.erase(id);
}

Status HttpServer::Impl::Bind() {
  if (options_.port == 0) {
    port_ = http_.bind_to_any_port(options_.host);
  } else if (http_.bind_to_port(options_.host, options_.port)) {
    port_ = options_.port;
  }
  if (port_ <= 0) {
    return IoError("cannot listen on " + options_.host + ":" + std::to_string(options_.port) +
                   " (address in use, or not an address of this machine)");
  }
  // The library listens with a backlog of 5, which a burst of new connections overflows
  // (connection resets); listening again on the bound socket raises it (Linux).
  if (listen_fd_ >= 0) ::listen(listen_fd_, SOMAXCONN);
  return Status::Ok();
}

Status HttpServer::Impl::Run() {
  // A client that disconnects makes the next write fail with EPIPE; without this the default
  // SIGPIPE action would end the process instead.
  std::signal(SIGPIPE, SIG_IGN);
  if (port_ <= 0) PC_RETURN_IF_ERROR(Bind());
  phase_ = kStarting;
  const bool ok = stopping_ || http_.listen_after_bind();
  phase_ = kReturned;
  if (!ok && !stopping_) return IoError("the server stopped accepting connections unexpectedly");
  return Status::Ok();
}

void HttpServer::Impl::Stop() {
  stopping_ = true;
  http_.EndReads();  // requests still arriving are dropped, idle connections closed
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, handle] : running_) handle->Cancel();
  }
  // Cancelled requests answer at once, streams with a final chunk (finish_reason "cancelled")
  // and [DONE]; cpp-httplib stops writing streams as soon as it stops, so let them end first
  // (a few milliseconds; bounded for a client that does not read).
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (std::chrono::steady_clock::now() < give_up) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (running_.empty()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  // cpp-httplib's stop() only works once its accept loop runs (and must not be called twice
  // while it winds down): a Stop() that comes while Run() is entering the loop waits for it.
  if (stop_requested_.exchange(true)) return;
  while (phase_ == kStarting && !http_.is_running()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (http_.is_running()) http_.stop();
}

HttpServer::HttpServer(Engine* engine, ServerOptions options)
    : impl_(std::make_unique<Impl>(engine, std::move(options))) {}
HttpServer::~HttpServer() { impl_->Stop(); }
Status HttpServer::Bind() { return impl_->Bind(); }
int HttpServer::port() const { return impl_->port(); }
Status HttpServer::Run() { return impl_->Run(); }
void HttpServer::Stop() { impl_->Stop(); }
const std::string& HttpServer::model_id() const { return impl_->model_id(); }

}  // namespace promptcache
