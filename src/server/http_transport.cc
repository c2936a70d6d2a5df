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

namespace promptcache {
namespace {

using Clock = std::chrono::steady_clock;

thread_local MissedDeadline missed_deadline = MissedDeadline::kNone;
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

// A connection's socket as cpp-httplib reads and writes it, with total deadlines: the request's
// headers must arrive by one, its body by another (set when the blank line ending the headers
// has been handed out).
class DeadlineStream : public httplib::Stream {
 public:
  DeadlineStream(socket_t sock, const TransportLimits& limits, const std::atomic<bool>& ended)
      : sock_(sock), limits_(limits), ended_(ended) {}

  // A new request: its headers are due `header_timeout_s` from now.
  void StartRequest() {
    in_headers_ = true;
    matched_ = 0;
    deadline_ = After(limits_.header_timeout_s);
    timed_out_ = false;
    missed_deadline = MissedDeadline::kNone;
  }
  bool timed_out() const { return timed_out_; }
  bool has_buffered() const { return pos_ < len_; }

  bool is_readable() const override {
    return has_buffered() || WaitFor(sock_, POLLIN, deadline_, ended_);
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
    if (!has_buffered()) {
      if (!WaitFor(sock_, POLLIN, deadline_, ended_)) {
        timed_out_ = !ended_;
        if (timed_out_) {
          missed_deadline = in_headers_ ? MissedDeadline::kHeaders : MissedDeadline::kBody;
        }
        return -1;
      }
      const ssize_t n = ::recv(sock_, buf_, sizeof(buf_), 0);
      if (n <= 0) return n;
      pos_ = 0;
      len_ = size_t(n);
    }
    const size_t n = std::min(size, len_ - pos_);
    std::memcpy(ptr, buf_ + pos_, n);
    pos_ += n;
    if (in_headers_) SeeHeaderBytes(ptr, n);
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
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    port = 0;
    if (::getpeername(sock_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      Address(addr, &ip, &port);
    }
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    port = 0;
    if (::getsockname(sock_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      Address(addr, &ip, &port);
    }
  }
  socket_t socket() const override { return sock_; }

 private:
  // Finds the blank line that ends the headers ("\r\n\r\n") in the bytes handed out, and from
  // there gives the body its own deadline.
  void SeeHeaderBytes(const char* p, size_t n) {
    static constexpr char kEnd[] = "\r\n\r\n";
    for (size_t i = 0; i < n && in_headers_; ++i) {
      matched_ = p[i] == kEnd[matched_] ? matched_ + 1 : (p[i] == '\r' ? 1 : 0);
      if (matched_ == 4) {
        in_headers_ = false;
        deadline_ = After(limits_.body_timeout_s);
      }
    }
  }

  socket_t sock_;
  const TransportLimits& limits_;
  const std::atomic<bool>& ended_;
  const std::atomic<bool> ended_no_{false};  // writes go on while the server stops
  Clock::time_point deadline_ = Clock::now();
  bool in_headers_ = true;
  int matched_ = 0;
  mutable bool timed_out_ = false;
  char buf_[4096];
  size_t pos_ = 0, len_ = 0;
};

// Closes without a reset: closing a socket with unread input makes the kernel answer with a
// reset, which can reach the client before the response it was sent. So the input is drained
// first; `wait_for_peer` (a refusal, sent before the request arrived) also waits, briefly, for
// the client to finish sending and close.
void CloseGently(socket_t sock, bool wait_for_peer) {
  ::shutdown(sock, SHUT_WR);
  const auto until = After(wait_for_peer ? 0.5 : 0);
  char drain[4096];
  size_t total = 0;
  while (total < (size_t(1) << 16)) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    pollfd p{sock, POLLIN, 0};
    if (::poll(&p, 1, int(std::max<int64_t>(0, left.count()))) <= 0) break;
    const ssize_t n = ::recv(sock, drain, sizeof(drain), MSG_DONTWAIT);
    if (n <= 0) break;
    total += size_t(n);
  }
  ::close(sock);
}

}  // namespace

MissedDeadline RequestMissedDeadline() { return missed_deadline; }

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
}

void GuardedHttpServer::Refuse(socket_t sock) {
  ++refused_;
  static constexpr char kBody[] =
      R"({"error":{"message":"too many connections; retry shortly","type":"server_error",)"
      R"("param":null,"code":"too_many_connections"}})";
  const std::string response =
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: "
      "application/json\r\nRetry-After: 1\r\nConnection: close\r\n"
      "Content-Length: " +
      std::to_string(sizeof(kBody) - 1) + "\r\n\r\n" + kBody;
  ::send(sock, response.data(), response.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  CloseGently(sock, true);
}

bool GuardedHttpServer::process_and_close_socket(socket_t sock) {
  if (open_.fetch_add(1) >= limits_.max_connections) {
    --open_;
    Refuse(sock);
    return false;
  }
  DeadlineStream stream(sock, limits_, reads_ended_);
  current_socket = sock;
  bool ok = false;
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
    const bool close_connection =
        served + 1 == keep_alive_max_count_ || open_.load() >= crowded || reads_ended_;
    bool connection_closed = false;
    ok = process_request(stream, close_connection, connection_closed, nullptr);
    if (stream.timed_out()) ++timed_out_;
    // After a missed deadline the rest of the request is still on its way: nothing more can be
    // read from this connection.
    if (!ok || connection_closed || close_connection || stream.timed_out()) break;
  }
  current_socket = INVALID_SOCKET;
  CloseGently(sock, false);
  --open_;
  return ok;
}

}  // namespace promptcache
