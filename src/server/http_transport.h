// The connection layer under the HTTP routes: how a connection is read and how many are held.
//
// cpp-httplib parses requests, routes them and writes responses; left alone it gives each
// connection a thread from a fixed pool and waits up to 30 s on every read, so a client that
// trickles one byte at a time holds a thread for as long as it likes, and a few dozen such
// clients leave no thread for /health. GuardedHttpServer keeps the library's parsing but serves
// each connection itself (cpp-httplib's own hook for this, as its TLS server does):
//   - a total deadline for a request's headers (from its first byte, or from the accept for a
//     connection's first request) and another for its body (from the end of the headers),
//     however slowly the bytes come;
//   - strict framing (server/http_framing.h): each request's head is read and checked here
//     before the library sees it; one whose length is uncertain or malformed is refused (400,
//     413 for a declared body over the limit, before any of it is read, 414, 431, 501, 505) and
//     its connection closed. The library is then handed exactly that request: the head, then as
//     many body bytes as Content-Length or the chunks say (end of input after them), so no part
//     of a body is ever read as a request. A response after which the body was not read whole
//     (a route that ignores it, a 401) or that the handler marked `Connection: close` closes the
//     connection (the transport's post-routing handler says so in the response: it is taken);
//   - at most `max_connections` connections served at once, each on its own thread (created on
//     demand, kept for reuse), and at most `max_connections_per_client` from one client address;
//     one beyond either gets a 503 with `Retry-After` and is closed, without waiting for its
//     request. When three quarters are in use, responses close their connection
//     rather than keep it idle;
//   - reads end at once when the server stops, so a shutdown never waits for slow clients.
#pragma once

#include <httplib.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/transport_limits.h"

namespace promptcache {

// Threads created as connections need them, up to a limit, and kept for the next ones: the
// task queue cpp-httplib's accept loop hands connections to.
class ConnectionThreads : public httplib::TaskQueue {
 public:
  explicit ConnectionThreads(size_t max_threads) : max_threads_(max_threads) {}
  ~ConnectionThreads() override { shutdown(); }

  void enqueue(std::function<void()> fn) override;
  void shutdown() override;

 private:
  void Work();

  const size_t max_threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  size_t idle_ = 0;
  bool shutdown_ = false;
};

// Which deadline the request being served on this thread missed, if any: its error response
// can then say so (408) rather than call the request malformed.
enum class MissedDeadline { kNone, kHeaders, kBody };
MissedDeadline RequestMissedDeadline();
// Why the transport refused the request being answered on this thread (its framing), or empty.
const std::string& RequestFramingError();

// Whether the client of the request being served on this thread has closed its connection (or
// reset it): what a handler that waits for long checks, to cancel work nobody will read. Data
// the client sent since (a pipelined request) counts as open.
bool RequestClientGone();

class GuardedHttpServer : public httplib::Server {
 public:
  explicit GuardedHttpServer(TransportLimits limits);

  // Makes every read fail at once (and idle connections close): called as the server stops.
  void EndReads() { reads_ended_ = true; }

  // Fills in a response the transport sends by itself (a request refused before the library
  // read it): `res.status` is set, RequestFramingError or RequestMissedDeadline say why. The
  // transport adds Content-Length and `Connection: close`.
  void set_rejection_handler(std::function<void(const httplib::Request&, httplib::Response&)> fn) {
    rejection_handler_ = std::move(fn);
  }

  int open_connections() const { return open_.load(); }
  uint64_t refused_connections() const { return refused_.load(); }
  // Of them, refused for their client address's share (max_connections_per_client).
  uint64_t refused_per_client() const { return refused_per_client_.load(); }
  uint64_t timed_out_requests() const { return timed_out_.load(); }

 private:
  bool process_and_close_socket(socket_t sock) override;
  void Refuse(socket_t sock, bool per_client);
  // Counts a connection against its client address; false (nothing counted) when the address
  // holds its share already. Release undoes a successful Claim.
  bool Claim(const std::string& client);
  void Release(const std::string& client);
  // Answers a request refused before the library saw it (status > 0; otherwise a 408).
  void Reject(httplib::Stream& stream, int status, const std::string& method,
              const std::string& target);

  const TransportLimits limits_;
  std::function<void(const httplib::Request&, httplib::Response&)> rejection_handler_;
  std::atomic<bool> reads_ended_{false};
  std::atomic<int> open_{0};
  std::atomic<uint64_t> refused_{0};
  std::atomic<uint64_t> refused_per_client_{0};
  std::mutex clients_mu_;
  std::map<std::string, int> clients_;  // open connections by client address
  std::atomic<uint64_t> timed_out_{0};
};

}  // namespace promptcache
