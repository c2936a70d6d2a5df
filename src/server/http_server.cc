#include "server/http_server.h"

#include "server/http_server_impl.h"

namespace promptcache {
namespace server_internal {

std::string Dump(const ojson& j) { return j.dump(-1, ' ', false, ojson::error_handler_t::replace); }

ApiError MakeError(int http_status, std::string message, std::string type, std::string code,
                   std::string param) {
  ApiError e;
  e.http_status = http_status;
  e.message = std::move(message);
  e.type = std::move(type);
  e.code = std::move(code);
  e.param = std::move(param);
  return e;
}

ApiError FromStatus(const Status& st, const std::string& param) {
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

}  // namespace server_internal

namespace {

using server_internal::Dump;
using server_internal::FromStatus;
using server_internal::MakeError;
using server_internal::ojson;

bool ConstantTimeEquals(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

// 10 -> "10", 0.5 -> "0.5".
std::string FormatSeconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", s);
  return buf;
}

// The handler, given the whole body as read here rather than by cpp-httplib: the library parses
// form-encoded bodies itself (curl -d's default Content-Type) and refuses those over 8192 bytes,
// whatever --max-body-bytes says. Every body is JSON to this server.
// The transport refuses a declared Content-Length over the limit before reading (a 413, and
// server/http_framing.h has checked the framing), not a chunked body's size: this
// reader keeps at most `max_bytes` however the body is framed (413, filled in by FillError). The
// rest is read and dropped, so the client gets its answer rather than a reset connection, up to
// a bound past which the connection is closed.
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
  m.tenant = [this](const httplib::Request& req) { return Tenant(req).value_or(""); };
  m.client_gone = [] { return RequestClientGone(); };
  m.track = [this](std::shared_ptr<RequestHandle> h) { return Track(std::move(h)); };
  m.untrack = [this](uint64_t id) { Untrack(id); };
  m.stopping = [this] { return stopping_.load(); };
  m.observe = [this](const std::string& tenant, const CompletionResult& r) { Observe(tenant, r); };
  EmbeddingContext& e = embeddings_;
  e.engine = engine_;
  e.model_id = model_id_;
  e.context = context_;
  e.check_model = m.check_model;
  e.client_gone = m.client_gone;
  e.stopping = m.stopping;
  e.send_error = [this](httplib::Response& res, const ApiError& error) { SendError(res, error); };
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
      {"/v1/embeddings",
       {{"POST", [this](const httplib::Request& q,
                        httplib::Response& s) { HandleEmbeddings(embeddings_, q, s); }}}},
      {"/api/embed",
       {{"POST", [this](const httplib::Request& q,
                        httplib::Response& s) { HandleOllamaEmbed(embeddings_, q, s); }}}},
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
      {"/v1/cache/pins",
       {{"GET", bind(&Impl::HandlePinList)}, {"DELETE", bind(&Impl::HandlePinDrop)}}},
      {"/v1/cache/pins/([^/]+)", {{"DELETE", bind(&Impl::HandlePinDrop)}}},
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
  // Requests the transport refuses before routing (malformed framing, a declared body over
  // --max-body-bytes, headers past their deadline) get the same error bodies, and are counted.
  http_.set_rejection_handler([this](const httplib::Request& req, httplib::Response& res) {
    FillError(req, res);
    metrics_.CountResponse(res.status);
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
  // The transport's own refusals (framing, head size): their reason, and a code naming them.
  if (const std::string& why = RequestFramingError(); !why.empty() && res.status != 413) {
    e = MakeError(res.status, why, "invalid_request_error", "malformed_request");
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

// The engine thread's heartbeat: a piece of work running past --stall-timeout means requests
// are not moving, whatever the process otherwise looks like.
void HttpServer::Impl::HandleHealth(const httplib::Request&, httplib::Response& res) {
  const EngineStats s = engine_->Stats();
  const bool stalled = s.step_seconds > options_.stall_seconds;
  if (stalled) res.set_header("Retry-After", "1");
  SendJson(res,
           ojson{{"status", stalled ? "stalled" : "ok"},
                 {"active", s.active},
                 {"queued", s.queued},
                 {"step_seconds", s.step_seconds},
                 {"stall_timeout_seconds", options_.stall_seconds}},
           stalled ? 503 : 200);
}

// With --api-keys a tenant's key reads its own counters only; the whole page (every tenant's
// traffic and the cache's state) is the --api-key holder's, or public with --metrics-public.
void HttpServer::Impl::HandleMetrics(const httplib::Request& req, httplib::Response& res) {
  res.status = 200;
  const std::string tenant = options_.metrics_public ? "" : Tenant(req).value_or("");
  if (!tenant.empty()) {
    res.set_content(FormatTenantMetrics(metrics_.CountsOf(tenant), model_id_),
                    "text/plain; version=0.0.4; charset=utf-8");
    return;
  }
  ConnectionStats connections;
  connections.open = http_.open_connections();
  connections.refused = http_.refused_connections();
  connections.refused_per_client = http_.refused_per_client();
  connections.timed_out = http_.timed_out_requests();
  res.set_content(FormatMetrics(engine_->Stats(), metrics_.Ttft(), metrics_.Responses(), model_id_,
                                connections),
                  "text/plain; version=0.0.4; charset=utf-8");
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
