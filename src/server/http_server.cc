#include "server/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <map>
#include <thread>

#include "core/log.h"
#include "server/call.h"
#include "server/cors.h"
#include "server/http_transport.h"
#include "server/routes.h"
#include "server/server_context.h"
#include "server/web_ui.h"

namespace promptcache {
namespace {

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

// The server: its transport, its hooks (CORS, authentication, error bodies, counting) and the
// route table registered on it. The routes themselves are server/routes.h's.
class HttpServer::Impl {
 public:
  Impl(Engine* engine, ServerOptions options);

  Status Bind();
  int port() const { return port_; }
  Status Run();
  void Stop();
  const std::string& model_id() const { return ctx_.model_id(); }

 private:
  using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;

  // Every row of the route table; the methods a pattern does not answer get 405 with Allow.
  void RegisterRoutes();
  void InstallHooks();
  // The tenant of an authorized request: "" for the --api-key holder (and everyone without
  // keys), the --api-keys file's name otherwise; nullopt: no valid key.
  std::optional<std::string> Tenant(const httplib::Request& req) const;
  httplib::Server::HandlerResponse FillError(const httplib::Request& req, httplib::Response& res);
  // An error before (or without) a route: in the shape of the API the path belongs to.
  void SendErrorFor(const httplib::Request& req, httplib::Response& res, const ApiError& error);
  // --cors: the headers of a request from an allowed origin; a preflight answered (true).
  bool HandleCors(const httplib::Request& req, httplib::Response& res) const;

  GuardedHttpServer http_;
  ServerContext ctx_;
  int port_ = -1;
  int listen_fd_ = -1;  // the listening socket, once bound
  std::atomic<bool> stop_requested_{false};
  enum Phase { kIdle, kStarting, kReturned };
  std::atomic<Phase> phase_{kIdle};
};

HttpServer::Impl::Impl(Engine* engine, ServerOptions options)
    : http_(options.transport), ctx_(engine, std::move(options), &http_) {
  const ServerOptions& o = ctx_.options();
  http_.set_payload_max_length(o.max_body_bytes);
  // Streamed chunks are small writes right after the headers: without TCP_NODELAY, Nagle's
  // algorithm holds them until the client's (delayed) ACK, adding up to 40 ms to the time a
  // client sees its first token.
  http_.set_tcp_nodelay(true);
  // What the Keep-Alive response header announces; the transport applies it.
  http_.set_keep_alive_timeout(std::max<time_t>(1, time_t(o.transport.idle_timeout_s)));
  // cpp-httplib's default options add SO_REUSEPORT, which lets a second server bind the same
  // port and the kernel split connections between the two: a busy port must be an error.
  // SO_REUSEADDR alone still lets a restarted server bind past TIME_WAIT.
  http_.set_socket_options([this](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    listen_fd_ = sock;
  });
  RegisterRoutes();
  InstallHooks();
}

void HttpServer::Impl::RegisterRoutes() {
  // The patterns in table order, each with its routes.
  std::vector<std::pair<std::string, std::vector<const Route*>>> patterns;
  for (const Route& route : Routes()) {
    auto it = std::find_if(patterns.begin(), patterns.end(),
                           [&](const auto& p) { return p.first == route.pattern; });
    if (it == patterns.end()) it = patterns.insert(patterns.end(), {route.pattern, {}});
    it->second.push_back(&route);
  }
  const size_t max_body = ctx_.options().max_body_bytes;
  for (const auto& [pattern, routes] : patterns) {
    std::string allow;
    for (const Route* r : routes) allow += (allow.empty() ? "" : ", ") + std::string(r->method);
    for (const char* method : {"GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}) {
      auto it = std::find_if(routes.begin(), routes.end(),
                             [&](const Route* r) { return std::string(r->method) == method; });
      Handler h;
      if (it != routes.end()) {
        const Route* route = *it;
        h = [this, route](const httplib::Request& req, httplib::Response& res) {
          Call call(ctx_, req, res, route->flavour, Tenant(req).value_or(""));
          route->handle(call);
        };
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
      if (m == "GET") http_.Get(pattern, h);
      if (m == "POST") http_.Post(pattern, ReadingBody(h, max_body));
      if (m == "PUT") http_.Put(pattern, ReadingBody(h, max_body));
      if (m == "PATCH") http_.Patch(pattern, ReadingBody(h, max_body));
      if (m == "DELETE") http_.Delete(pattern, h);
      if (m == "OPTIONS") http_.Options(pattern, h);
    }
  }
}

// Authentication before routing, error bodies in the route's shape for every refusal, and
// response counting.
void HttpServer::Impl::InstallHooks() {
  http_.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (HandleCors(req, res)) return httplib::Server::HandlerResponse::Handled;
    const std::optional<std::string> tenant = Tenant(req);
    if (tenant && !tenant->empty() && AdminOnly(req.method, req.path)) {
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
    ctx_.metrics().CountResponse(res.status);
  });
  http_.set_error_handler(httplib::Server::HandlerWithResponse(
      [this](const httplib::Request& req, httplib::Response& res) { return FillError(req, res); }));
  http_.set_exception_handler(
      [this](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown exception";
        try {
          if (ep) std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        PC_LOG_ERROR("server: handler failed: %s", what.c_str());
        SendErrorFor(req, res, MakeError(500, "internal error: " + what, "server_error"));
      });
  http_.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    ctx_.metrics().CountResponse(res.status);
    PC_LOG_DEBUG("%s %s -> %d", req.method.c_str(), req.path.c_str(), res.status);
  });
}

std::optional<std::string> HttpServer::Impl::Tenant(const httplib::Request& req) const {
  const bool keys = !ctx_.options().api_key.empty() || !ctx_.options().api_keys.empty();
  if (!keys || req.path == "/health" || IsWebPath(req.path)) return "";
  if (req.path == "/metrics" && ctx_.options().metrics_public) return "";
  std::string got = req.get_header_value("Authorization");
  // Anthropic's clients send the key as x-api-key.
  if (got.empty() && req.has_header("x-api-key"))
    got = "Bearer " + req.get_header_value("x-api-key");
  if (!ctx_.options().api_key.empty() &&
      ConstantTimeEquals(got, "Bearer " + ctx_.options().api_key)) {
    return "";
  }
  // Every key is compared (in constant time each): how long this takes says nothing of which
  // key matched.
  std::optional<std::string> tenant;
  for (const auto& [key, name] : ctx_.options().api_keys) {
    if (ConstantTimeEquals(got, "Bearer " + key)) tenant = name;
  }
  return tenant;
}

// Statuses that cpp-httplib answers by itself (no route, body too large, unreadable request)
// get an error body too, in the shape of the API the path belongs to.
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
                      FormatSeconds(headers ? ctx_.options().transport.header_timeout_s
                                            : ctx_.options().transport.body_timeout_s) +
                      (headers ? " s (--header-timeout)" : " s (--body-timeout)"),
                  "invalid_request_error", "request_timeout");
    res.set_content(ErrorBody(FlavourOf(req.path), e), "application/json");
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
                        std::to_string(ctx_.options().max_body_bytes) + " bytes (--max-body-bytes)",
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
  res.set_content(ErrorBody(FlavourOf(req.path), e), "application/json");
  return httplib::Server::HandlerResponse::Handled;
}

void HttpServer::Impl::SendErrorFor(const httplib::Request& req, httplib::Response& res,
                                    const ApiError& error) {
  Call(ctx_, req, res, FlavourOf(req.path), "").Fail(error);
}

bool HttpServer::Impl::HandleCors(const httplib::Request& req, httplib::Response& res) const {
  if (ctx_.options().cors_origins.empty()) return false;
  const std::string allow =
      CorsAllowOrigin(ctx_.options().cors_origins, req.get_header_value("Origin"));
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

Status HttpServer::Impl::Bind() {
  if (ctx_.options().port == 0) {
    port_ = http_.bind_to_any_port(ctx_.options().host);
  } else if (http_.bind_to_port(ctx_.options().host, ctx_.options().port)) {
    port_ = ctx_.options().port;
  }
  if (port_ <= 0) {
    return IoError("cannot listen on " + ctx_.options().host + ":" +
                   std::to_string(ctx_.options().port) +
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
  const bool ok = ctx_.stopping() || http_.listen_after_bind();
  phase_ = kReturned;
  if (!ok && !ctx_.stopping())
    return IoError("the server stopped accepting connections unexpectedly");
  return Status::Ok();
}

void HttpServer::Impl::Stop() {
  ctx_.CancelAll();
  http_.EndReads();  // requests still arriving are dropped, idle connections closed
  // Cancelled requests answer at once, streams with a final chunk (finish_reason "cancelled")
  // and [DONE]; cpp-httplib stops writing streams as soon as it stops, so let them end first
  // (a few milliseconds; bounded for a client that does not read).
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (std::chrono::steady_clock::now() < give_up && ctx_.AnyRunning()) {
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
