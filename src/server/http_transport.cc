#include "server/http_transport.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>

#include "server/http_framing.h"

namespace promptcache {
namespace {

using Clock = std::chrono::steady_clock;

thread_local MissedDeadline missed_deadline = MissedDeadline::kNone;
thread_local std::string framing_error;
thread_local socket_t current_socket = INVALID_SOCKET;  // the connection this thread serves

Clock::time_point After(double seconds) {
  return Clock::now() + std::chrono::microseconds(int64_t(seconds * 1e6));
}

// Waits for `events` on sock until `deadline`, in slices so that `ended` is seen within 100 ms.
// True when ready (or hung up: the read or write that follows tells).
bool WaitFor(socket_t sock, short events, Clock::time_point deadline,
             const std::atomic<bool>& ended) {
  for (;;) {
    if (ended) return false;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    pollfd p{sock, events, 0};
    const int r = ::poll(&p, 1, int(std::min<int64_t>(left.count(), 100)));
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return false;
  }
}

void Address(const sockaddr_storage& addr, std::string* ip, int* port) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &a->sin_addr, buf, sizeof(buf));
    *port = ntohs(a->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&addr);
    inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof(buf));
    *port = ntohs(a->sin6_port);
  }
  *ip = buf;
}

// The address and port of `sock` that `get` (getpeername or getsockname) reads: port 0, and `ip`
// left as it was, where it cannot be read.
void SocketAddress(socket_t sock, int (*get)(int, sockaddr*, socklen_t*), std::string* ip,
                   int* port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  *port = 0;
  if (get(sock, reinterpret_cast<sockaddr*>(&addr), &len) == 0) Address(addr, ip, port);
}

// The client's IP address (no port), or "" when it cannot be read.
std::string PeerAddress(socket_t sock) {
  std::string ip;
  int port = 0;
  SocketAddress(sock, ::getpeername, &ip, &port);
  return ip;
}

// A connection's socket as cpp-httplib reads and writes it, with total deadlines, handing out one
// request at a time: ReadHead buffers a request's head (due by the header deadline) for the
// transport to check, Serve then lets the library read that head and exactly the body its framing
// declares (due by the body deadline), and reports the end of input after it.
class DeadlineStream : public httplib::Stream {
 public:
  enum class Head { kOk, kNone, kTimedOut, kTooLarge };

  DeadlineStream(socket_t sock, const TransportLimits& limits, const std::atomic<bool>& ended)
      : sock_(sock), limits_(limits), ended_(ended) {}

  // A new request: its headers are due `header_timeout_s` from now.
  void StartRequest() {
    phase_ = Phase::kHead;
    deadline_ = After(limits_.header_timeout_s);
    timed_out_ = false;
    must_close_ = false;
    missed_deadline = MissedDeadline::kNone;
    framing_error.clear();
  }
  bool timed_out() const { return timed_out_; }
  bool has_buffered() const { return pos_ < in_.size(); }

  // Reads until the buffer holds a whole request head (empty lines before it are dropped).
  // kNone: the connection closed, the server stopped, or nothing came before the deadline.
  Head ReadHead(std::string_view* head) {
    size_t searched = 0, skipped = 0;
    for (;;) {
      while (in_.size() - pos_ >= 2 && in_[pos_] == '\r' && in_[pos_ + 1] == '\n') {
        pos_ += 2;
        skipped += 2;
        searched = 0;
      }
      const std::string_view data(in_.data() + pos_, in_.size() - pos_);
      if (const size_t end = FindHeadEnd(data, searched); end != std::string_view::npos) {
        *head = data.substr(0, end);
        return Head::kOk;
      }
      if (data.size() + skipped > kMaxHeadBytes) {
        *head = data;
        return Head::kTooLarge;
      }
      searched = data.size();
      const bool started = !data.empty() || skipped > 0;
      if (!Fill()) {
        *head = std::string_view(in_.data() + pos_, in_.size() - pos_);  // so far
        if (!timed_out_ || !started) return Head::kNone;
        missed_deadline = MissedDeadline::kHeaders;
        return Head::kTimedOut;
      }
    }
  }

  // Hands the library the head ReadHead found, then the body `head` declares; the body is due
  // `body_timeout_s` from now.
  void Serve(size_t head_bytes, const RequestHead& head) {
    phase_ = Phase::kServing;
    head_left_ = head_bytes;
    framing_ = head.framing;
    body_left_ = head.length;
    chunks_ = ChunkedBodyCheck();
    deadline_ = After(limits_.body_timeout_s);
  }
  // The body was read to its end (or there was none): the next bytes are the next request's.
  bool body_complete() const {
    return framing_ == BodyFraming::kNone ||
           (framing_ == BodyFraming::kLength ? body_left_ == 0 : chunks_.done());
  }
  // The response being written closes the connection.
  void set_must_close() { must_close_ = true; }
  bool must_close() const { return must_close_; }

  bool is_readable() const override {
    return has_buffered() || Ended() || WaitFor(sock_, POLLIN, deadline_, ended_);
  }

  // Alive and accepting data within the write timeout: what a streaming handler asks before
  // each chunk. A peer that closed shows as readable with nothing to read.
  bool is_writable() const override {
    if (!WaitFor(sock_, POLLOUT, After(limits_.write_timeout_s), ended_no_)) return false;
    pollfd p{sock_, POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) return true;
    char c;
    return ::recv(sock_, &c, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
  }

  ssize_t read(char* ptr, size_t size) override {
    if (phase_ != Phase::kServing || Ended()) return 0;
    if (head_left_ > 0) {
      size = std::min(size, head_left_);  // buffered by ReadHead
    } else if (framing_ == BodyFraming::kLength) {
      size = size_t(std::min<uint64_t>(size, body_left_));
    } else if (chunks_.failed()) {
      return -1;
    }
    if (!has_buffered() && !Fill()) {
      if (timed_out_) missed_deadline = MissedDeadline::kBody;
      return -1;
    }
    size_t n = std::min(size, in_.size() - pos_);
    if (head_left_ > 0) {
      head_left_ -= n;
    } else if (framing_ == BodyFraming::kLength) {
      body_left_ -= n;
    } else {
      n = chunks_.Feed(in_.data() + pos_, n);
      if (chunks_.failed()) {
        framing_error = chunks_.error();
        return -1;
      }
    }
    std::memcpy(ptr, in_.data() + pos_, n);
    pos_ += n;
    return ssize_t(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    size_t done = 0;
    while (done < size) {
      if (!WaitFor(sock_, POLLOUT, After(limits_.write_timeout_s), ended_no_)) return -1;
      const ssize_t n = ::send(sock_, ptr + done, size - done, MSG_NOSIGNAL);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) return -1;
      done += size_t(n);
    }
    return ssize_t(done);
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    SocketAddress(sock_, ::getpeername, &ip, &port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    SocketAddress(sock_, ::getsockname, &ip, &port);
  }
  socket_t socket() const override { return sock_; }

 private:
  enum class Phase { kHead, kServing };

  // Past the request: its head handed out and its body read (or none declared).
  bool Ended() const { return head_left_ == 0 && body_complete(); }

  // Appends what the socket has to the buffer, waiting until the deadline. False on a missed
  // deadline (timed_out_), a closed connection or the server stopping.
  bool Fill() {
    if (!WaitFor(sock_, POLLIN, deadline_, ended_)) {
      timed_out_ = !ended_;
      return false;
    }
    if (pos_ == in_.size()) {
      in_.clear();
      pos_ = 0;
    } else if (pos_ > in_.size() / 2) {
      in_.erase(0, pos_);
      pos_ = 0;
    }
    const size_t old = in_.size();
    in_.resize(old + kReadBytes);
    const ssize_t n = ::recv(sock_, in_.data() + old, kReadBytes, 0);
    in_.resize(old + size_t(std::max<ssize_t>(n, 0)));
    return n > 0;
  }

  static constexpr size_t kReadBytes = 16384;

  socket_t sock_;
  const TransportLimits& limits_;
  const std::atomic<bool>& ended_;
  const std::atomic<bool> ended_no_{false};  // writes go on while the server stops
  Clock::time_point deadline_ = Clock::now();
  Phase phase_ = Phase::kHead;
  size_t head_left_ = 0;  // of the head, still to hand out
  BodyFraming framing_ = BodyFraming::kNone;
  uint64_t body_left_ = 0;  // kLength: bytes still to hand out
  ChunkedBodyCheck chunks_;
  bool must_close_ = false;
  mutable bool timed_out_ = false;
  std::string in_;  // read from the socket; in_[pos_...] not handed out yet
  size_t pos_ = 0;
};

thread_local DeadlineStream* serving_stream = nullptr;

// Closes without a reset: closing a socket with unread input makes the kernel answer with a
// reset, which can reach the client before the response it was sent. So the input is drained
// first, for up to `linger_s` while the client goes on sending (a body the server will not read,
// a refusal sent before the request arrived) or until it closes, and at most `max_drain` bytes.
void CloseGently(socket_t sock, double linger_s, size_t max_drain = size_t(1) << 16) {
  ::shutdown(sock, SHUT_WR);
  const auto until = After(linger_s);
  char drain[4096];
  size_t total = 0;
  while (total < max_drain) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    pollfd p{sock, POLLIN, 0};
    if (::poll(&p, 1, int(std::max<int64_t>(0, left.count()))) <= 0) break;
    const ssize_t n = ::recv(sock, drain, sizeof(drain), MSG_DONTWAIT);
    if (n <= 0) break;
    total += size_t(n);
  }
  ::close(sock);
}

// How long a refused or cut-short request's connection is drained before it is closed.
constexpr double kLingerSeconds = 1;

const char* StatusText(int status) {
  static constexpr std::pair<int, const char*> kTexts[] = {{400, "Bad Request"},
                                                           {408, "Request Timeout"},
                                                           {413, "Payload Too Large"},
                                                           {414, "URI Too Long"},
                                                           {431, "Request Header Fields Too Large"},
                                                           {501, "Not Implemented"},
                                                           {505, "HTTP Version Not Supported"}};
  for (const auto& [code, text] : kTexts) {
    if (code == status) return text;
  }
  return "Error";
}

}  // namespace

MissedDeadline RequestMissedDeadline() { return missed_deadline; }
const std::string& RequestFramingError() { return framing_error; }

bool RequestClientGone() {
  if (current_socket == INVALID_SOCKET) return false;
  pollfd p{current_socket, POLLIN, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLERR | POLLHUP | POLLNVAL)) return true;
  char c;
  const ssize_t n = ::recv(current_socket, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

void ConnectionThreads::enqueue(std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(mu_);
  jobs_.push_back(std::move(fn));
  if (idle_ < jobs_.size() && threads_.size() < max_threads_) {
    threads_.emplace_back([this] { Work(); });
  }
  cv_.notify_one();
}

void ConnectionThreads::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutdown_) return;
    shutdown_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void ConnectionThreads::Work() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      ++idle_;
      cv_.wait(lock, [this] { return shutdown_ || !jobs_.empty(); });
      --idle_;
      if (jobs_.empty()) return;  // shut down with nothing left to serve
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();
  }
}

GuardedHttpServer::GuardedHttpServer(TransportLimits limits) : limits_(limits) {
  // The refusals run on threads of their own (a few past the limit), so they never wait behind
  // the connections being served.
  const size_t threads = size_t(limits_.max_connections) + 4;
  new_task_queue = [threads] { return new ConnectionThreads(threads); };
  // Runs as each response's headers are made: a response after which the connection cannot go
  // on says so.
  set_post_routing_handler([](const httplib::Request&, httplib::Response& res) {
    DeadlineStream* stream = serving_stream;
    if (stream == nullptr) return;
    if (stream->body_complete() && res.get_header_value("Connection") != "close") return;
    stream->set_must_close();
    res.headers.erase("Keep-Alive");
    res.headers.erase("Connection");
    res.set_header("Connection", "close");
  });
}

void GuardedHttpServer::Refuse(socket_t sock, bool per_client) {
  ++refused_;
  if (per_client) ++refused_per_client_;
  const std::string body =
      std::string(R"({"error":{"message":")") +
      (per_client ? "too many connections from this client address (--max-connections-per-client)"
                  : "too many connections") +
      R"(; retry shortly","type":"server_error","param":null,"code":"too_many_connections"}})";
  const std::string response =
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: "
      "application/json\r\nRetry-After: 1\r\nConnection: close\r\n"
      "Content-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  ::send(sock, response.data(), response.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  CloseGently(sock, 0.5);
}

void GuardedHttpServer::Reject(httplib::Stream& stream, int status, const std::string& method,
                               const std::string& target) {
  httplib::Request req;
  req.method = method;
  req.target = target;
  req.path = target.substr(0, target.find('?'));
  httplib::Response res;
  res.status = status;
  if (rejection_handler_) rejection_handler_(req, res);
  std::string out =
      "HTTP/1.1 " + std::to_string(res.status) + " " + StatusText(res.status) + "\r\n";
  for (const auto& [name, value] : res.headers) {
    if (name == "Connection" || name == "Content-Length" || name == "Keep-Alive") continue;
    out += name + ": " + value + "\r\n";
  }
  out += "Content-Length: " + std::to_string(res.body.size()) + "\r\nConnection: close\r\n\r\n";
  out += res.body;
  stream.write(out.data(), out.size());
}

bool GuardedHttpServer::process_and_close_socket(socket_t sock) {
  if (open_.fetch_add(1) >= limits_.max_connections) {
    --open_;
    Refuse(sock, false);
    return false;
  }
  const std::string client = PeerAddress(sock);
  if (!Claim(client)) {
    --open_;
    Refuse(sock, true);
    return false;
  }
  DeadlineStream stream(sock, limits_, reads_ended_);
  current_socket = sock;
  bool ok = false;
  bool linger = false;  // the client may still be sending what will not be read
  const int crowded = std::max(1, limits_.max_connections * 3 / 4);
  // The first request's headers are due from the accept; a kept-alive connection waits at most
  // the idle timeout for its next request, whose headers are due from its first byte.
  stream.StartRequest();
  for (size_t served = 0; served < keep_alive_max_count_ && !reads_ended_; ++served) {
    if (served > 0) {
      if (!stream.has_buffered() &&
          !WaitFor(sock, POLLIN, After(limits_.idle_timeout_s), reads_ended_)) {
        break;
      }
      stream.StartRequest();
    }
    std::string_view raw;
    const DeadlineStream::Head got = stream.ReadHead(&raw);
    if (stream.timed_out()) ++timed_out_;
    if (got != DeadlineStream::Head::kOk) {
      // A head that is not complete by its deadline gets a 408, one over the size limit a 431;
      // the rest of either can only be dropped with the connection.
      std::string method, target;
      RequestLineParts(raw, &method, &target);
      if (got == DeadlineStream::Head::kTimedOut) Reject(stream, 408, method, target);
      if (got == DeadlineStream::Head::kTooLarge) {
        framing_error = "the request head is over " + std::to_string(kMaxHeadBytes) + " bytes";
        Reject(stream, 431, method, target);
      }
      linger = got == DeadlineStream::Head::kTooLarge;
      break;
    }
    const RequestHead head = ParseRequestHead(raw, payload_max_length_);
    if (head.status != 0) {
      framing_error = head.reason;
      Reject(stream, head.status, head.method, head.target);
      linger = true;
      break;
    }
    stream.Serve(raw.size(), head);
    const bool close_connection =
        served + 1 == keep_alive_max_count_ || open_.load() >= crowded || reads_ended_;
    bool connection_closed = false;
    serving_stream = &stream;
    ok = process_request(stream, close_connection, connection_closed, nullptr);
    serving_stream = nullptr;
    if (stream.timed_out()) ++timed_out_;
    // After a missed deadline or a response that closes the connection (a body not read whole,
    // a malformed one) nothing more can be read from this connection as a request.
    linger = !stream.body_complete();
    if (!ok || connection_closed || close_connection || stream.timed_out() || stream.must_close() ||
        linger) {
      break;
    }
  }
  current_socket = INVALID_SOCKET;
  CloseGently(sock, linger ? kLingerSeconds : 0);
  Release(client);
  --open_;
  return ok;
}

bool GuardedHttpServer::Claim(const std::string& client) {
  const int limit = limits_.max_connections_per_client > 0
                        ? limits_.max_connections_per_client
                        : std::max(1, limits_.max_connections / 2);
  std::lock_guard<std::mutex> lock(clients_mu_);
  int& n = clients_[client];
  if (n >= limit) {
    if (n == 0) clients_.erase(client);
    return false;
  }
  ++n;
  return true;
}

void GuardedHttpServer::Release(const std::string& client) {
  std::lock_guard<std::mutex> lock(clients_mu_);
  auto it = clients_.find(client);
  if (it != clients_.end() && --it->second <= 0) clients_.erase(it);
}

}  // namespace promptcache
