// The OpenAI-compatible HTTP server in front of an Engine (`promptcache serve`).
//
// Routes: the table in server/routes.cc is the single list of what the server answers (path
// pattern, method, handler, API flavour, admin-only); each handler is `void Handle(Call&)`
// (server/call.h) in the file of its API: openai_routes.cc (POST /v1/completions and
// /v1/chat/completions, JSON or Server-Sent Events; also modular prompts: a PML `<prompt>` or
// "schema" and "modules" fields), anthropic_routes.cc (POST /v1/messages and
// /v1/messages/count_tokens), cache_routes.cc (/v1/cache: list, drop, save, tree, load, pin,
// unpin, lookup, pins), schema_routes.cc (/v1/schemas), tokenizer_routes.cc (POST /tokenize and
// /detokenize), page_routes.cc (the web page under / and /ui/, POST /v1/bench/savings) and
// system_routes.cc (GET /v1/models, /health, /metrics). Every failure is an error object in its
// route's API flavour (OpenAI's or Anthropic's; server/api_error.h) with a 4xx/5xx status; no
// exception from the JSON or HTTP libraries escapes a handler.
//
// Threads: each connection is served on a thread of its own (server/http_transport.h bounds how
// many, and how long a request may take to arrive); a completion's thread blocks until its
// request is done. A streaming request's text travels from
// the engine thread through a TextChannel; a waiter thread per stream collects the final result
// (RequestHandle::Wait) so the handler thread only ever waits on the channel. A client that goes
// away is noticed at the next write (text, or a keep-alive comment each second while the engine
// is still busy with the prompt) and its request is cancelled; a non-streamed request's handler
// watches its connection while it waits (server/http_transport.h RequestClientGone) and cancels
// it the same way.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "promptcache/engine.h"
#include "server/transport_limits.h"

namespace promptcache {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;      // 0: any free port (see port() after Bind)
  std::string api_key;  // non-empty: every route but /health (and /metrics if public) needs it
  // Tenants' keys (--api-keys): key -> tenant name. Either these or api_key then let a request
  // in; a tenant's prefixes live in a cache namespace of its own (server/tenants.h), and the
  // routes that act on every tenant's cache or on schemas need api_key.
  std::map<std::string, std::string> api_keys;
  std::string cache_secret;     // keys the namespaces (server/tenants.h LoadCacheSecret)
  bool metrics_public = false;  // /metrics without the API key (for a scraper on a private net)
  size_t max_body_bytes = size_t(8) << 20;
  int max_prompt_tokens = 0;  // 0: bounded by the context only
  int max_tokens_limit = 0;   // largest max_tokens accepted; 0: bounded by the context only
  TransportLimits transport;  // connections, deadlines (server/http_transport.h)
  // More names a request's "model" may use (--alias), listed by /v1/models.
  std::vector<std::string> aliases;
  // Origins whose browser pages may call the API (--cors; "*": any): their requests get
  // Access-Control-Allow-Origin and their preflights an answer. Empty: no CORS headers at all.
  std::vector<std::string> cors_origins;
  // Multiplies the TTLs of /v1/messages cache_control breakpoints (tests shorten them).
  double cache_control_ttl_scale = 1;
  // /health answers 503 while the engine thread has spent longer than this on one piece of
  // work (a step, or a task between steps): requests are then not moving.
  double stall_seconds = 30;
  // Segments (docs/server.md "Segments"; the engine's segment cache is on): whether a request
  // that does not say ("cache_segments") has its prompt cut into segments (--segment-cache),
  // and the separator that also cuts a text (--segment-separator; empty: none).
  bool segment_cache = false;
  std::string segment_separator;
};

class HttpServer {
 public:
  // `engine` must outlive the server.
  HttpServer(Engine* engine, ServerOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds the listening socket. IoError when the address is taken or invalid.
  Status Bind();
  // The bound port (the chosen one when options.port was 0).
  int port() const;
  // Accepts connections until Stop(); returns after the last handler finished.
  Status Run();
  // Thread-safe and idempotent: stops accepting, cancels running requests.
  void Stop();

  // The names a request's "model" may use: the file's stem and the model's general.name.
  const std::string& model_id() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace promptcache
