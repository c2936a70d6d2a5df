// One request to one route: what every route handler receives (`void Handle(Call& call)`,
// server/routes.h). It holds the HTTP request and response, the server (ServerContext), the
// caller's tenant, and the route's API flavour, and it is the one way a handler answers: Send /
// SendJson for a body, Fail for an error (in the flavour's shape, with its status and, for 503,
// Retry-After), Await for a request answered in one body.
#pragma once

#include <httplib.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "server/api_error.h"
#include "server/server_context.h"
#include "server/text_channel.h"

namespace promptcache {

// How long a stream waits for text before writing a keep-alive (an SSE comment, Anthropic's
// ping): the write is how a client that went away during a long prefill is noticed.
constexpr std::chrono::milliseconds kStreamPoll(250);

// `n` random hex digits: the unique part of a response's id ("chatcmpl-...", "resp_...").
std::string RandomHex(int n);

// Writes `out`, what one `write` callback of Call::StreamEvents made ready, ending the body after
// it when `last`. Nothing is written for "" (text held back, a tool call may be starting): an empty
// write would end the chunked body. False (a failed write) makes cpp-httplib drop the connection.
bool WriteStreamPart(httplib::DataSink& sink, const std::string& out, bool last);

// The rest of such a callback, once `out` holds what it sends first: polls `channel` for up to
// kStreamPoll, then `on_text(pieces)` or, at the end, `on_end(result)` add to `out`; a poll that
// timed out with nothing to send sends `keep_alive` (an SSE comment, Anthropic's ping; "" for
// NDJSON, which has no comment line: the next write notices a client gone). Then WriteStreamPart.
// `Piece` is what the channel carries: TextPiece, or std::string for text alone.
template <typename Piece, typename OnText, typename OnEnd>
bool PollAndWrite(TextChannel& channel, std::string& out, std::string_view keep_alive,
                  httplib::DataSink& sink, OnText on_text, OnEnd on_end) {
  std::vector<Piece> pieces;
  CompletionResult result;
  switch (channel.Next(kStreamPoll, &pieces, &result)) {
    case TextChannel::Event::kText:
      on_text(pieces);
      break;
    case TextChannel::Event::kTimeout:
      if (out.empty()) out = keep_alive;
      break;
    case TextChannel::Event::kFinished:
      on_end(result);
      return WriteStreamPart(sink, out, /*last=*/true);
  }
  return WriteStreamPart(sink, out, /*last=*/false);
}

class Call {
 public:
  Call(ServerContext& server, const httplib::Request& req, httplib::Response& res,
       ApiFlavour flavour, std::string tenant)
      : server(server), req(req), res(res), flavour(flavour), tenant_(std::move(tenant)) {}

  ServerContext& server;
  const httplib::Request& req;
  httplib::Response& res;
  const ApiFlavour flavour;

  Engine& engine() const { return server.engine(); }
  // "" for the --api-key holder (and everyone when the server has no keys), else the --api-keys
  // file's name for the caller's key.
  const std::string& tenant() const { return tenant_; }
  // The cache namespace of the caller's prefixes with this cache_salt (server/tenants.h).
  std::string Namespace(const std::string& salt) const;
  // The route pattern's capture `i` ("/v1/cache/([^/]+)": 1 is the key); "" when absent.
  std::string PathParam(size_t i = 1) const;

  void Send(std::string body, const std::string& content_type = "application/json",
            int status = 200);
  void SendJson(const nlohmann::ordered_json& body, int status = 200);
  // The error, in this route's flavour.
  void Fail(const ApiError& error);
  void Fail(const Status& status, const std::string& param = "") {
    Fail(FromStatus(status, param));
  }

  // Waits for a request answered in one body (not streamed): tracked so that the server's Stop()
  // cancels it, and cancelled as soon as its client closes the connection (checked every 100 ms,
  // so an abandoned request frees its sequence within about that).
  CompletionResult Await(const std::shared_ptr<RequestHandle>& handle);
  // Answers with Server-Sent Events for the submitted request `handle`, whose text arrives on
  // `channel` (its on_text / on_piece pushes there). `write` is called whenever the client can
  // take more and writes what is ready; false (a failed write) drops the connection. The request
  // is tracked (Stop() cancels it) and cancelled as soon as its client goes away.
  // `content_type`: Ollama's routes stream NDJSON ("application/x-ndjson") the same way.
  void StreamEvents(std::shared_ptr<RequestHandle> handle, std::shared_ptr<TextChannel> channel,
                    std::function<bool(httplib::DataSink&)> write,
                    const char* content_type = "text/event-stream");
  // The same for several requests streamed as one (a batch of completion prompts), all pushing to
  // `channel`: the channel ends with `merge` of their results, in order, once every one is over
  // (the first that fails cancels the rest), and a client that goes away cancels them all.
  using MergeResults = std::function<CompletionResult(std::vector<CompletionResult>)>;
  void StreamEvents(std::vector<std::shared_ptr<RequestHandle>> handles,
                    std::shared_ptr<TextChannel> channel,
                    std::function<bool(httplib::DataSink&)> write, MergeResults merge);
  // The same for a request that may be followed by a second (Anthropic's thinking budget): once
  // `handle` is over (and succeeded, its client still there), `next` may submit another, whose
  // text goes to `channel` too (null: none), and the channel ends with `join` of both results.
  // The second stops when its client goes away through its text callback (the channel's Push).
  using NextRequest = std::function<std::shared_ptr<RequestHandle>(const CompletionResult&)>;
  using JoinResults = std::function<CompletionResult(CompletionResult, CompletionResult)>;
  void StreamEvents(std::shared_ptr<RequestHandle> handle, std::shared_ptr<TextChannel> channel,
                    std::function<bool(httplib::DataSink&)> write, NextRequest next,
                    JoinResults join);
  // A text callback for such a request: none is needed but this one, which lets the server's
  // Stop() end it early.
  std::function<bool(const std::string&)> StopsWithServer() const;

 private:
  std::string tenant_;
};

}  // namespace promptcache
