#include "kv/redis_connection.h"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "core/log.h"

namespace promptcache {
namespace redis {
namespace {

timeval ToTimeval(int ms) { return {ms / 1000, (ms % 1000) * 1000}; }

}  // namespace

bool Backoff::Running(Clock::time_point now) const {
  std::lock_guard<std::mutex> lock(mu_);
  return now < retry_at_;
}

bool Backoff::Failed() {
  std::lock_guard<std::mutex> lock(mu_);
  retry_at_ = Clock::now() + std::chrono::milliseconds(backoff_ms_);
  backoff_ms_ = std::min(kMaxBackoffMs, backoff_ms_ * 2);
  return !std::exchange(down_, true);
}

bool Backoff::Connected() {
  std::lock_guard<std::mutex> lock(mu_);
  backoff_ms_ = kFirstBackoffMs;
  return std::exchange(down_, false);
}

bool Connection::Ready(Clock::time_point deadline, bool* tried) {
  *tried = false;
  if (c_ != nullptr) return true;
  if (backoff_->Running(Clock::now())) return false;
  *tried = true;
  timed_out_ = false;
  const timeval tv = ToTimeval(timeout_ms_);
  c_ = redisConnectWithTimeout(addr_.host.c_str(), addr_.port, tv);
  if (c_ == nullptr || c_->err != 0) {
    Fail(c_ != nullptr ? c_->errstr : "cannot allocate a connection");
    return false;
  }
  redisSetTimeout(c_, tv);
  // Keep the reply buffer between replies: by default hiredis frees it once empty and grows it
  // again (by reallocations that move it) for every large value, several times slower.
  c_->reader->maxbuf = 0;
  if (!addr_.password.empty() && !Ok(Run({"AUTH", addr_.password}, deadline).get())) {
    return false;
  }
  if (addr_.db != 0 && !Ok(Run({"SELECT", std::to_string(addr_.db)}, deadline).get())) {
    return false;
  }
  if (backoff_->Connected()) {
    PC_LOG_INFO("redis %s:%d: %s connection back", addr_.host.c_str(), addr_.port, role_);
  }
  return true;
}

void Connection::Append(const std::vector<std::string>& args) {
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const std::string& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  redisAppendCommandArgv(c_, static_cast<int>(args.size()), argv.data(), lens.data());
}

Reply Connection::Read(Clock::time_point deadline) {
  timed_out_ = false;
  if (c_ == nullptr) return nullptr;
  for (int done = 0; !done;) {
    if (!Wait(POLLOUT, deadline)) return MissedDeadline();
    if (redisBufferWrite(c_, &done) != REDIS_OK) return Failed();
  }
  for (;;) {
    void* r = nullptr;
    if (redisGetReplyFromReader(c_, &r) != REDIS_OK) return Failed();
    if (r != nullptr) return Reply(static_cast<redisReply*>(r));
    if (!Wait(POLLIN, deadline)) return MissedDeadline();
    if (redisBufferRead(c_) != REDIS_OK) return Failed();
  }
}

bool Connection::Ok(const redisReply* r) {
  if (r == nullptr) return false;
  if (r->type == REDIS_REPLY_ERROR) {
    Fail(std::string(r->str, r->len).c_str());
    return false;
  }
  return true;
}

void Connection::Fail(const char* why) {
  ++*errors_;
  if (backoff_->Failed()) {
    PC_LOG_WARN("redis %s:%d: %s (%s connection; retrying with backoff, lookups miss meanwhile)",
                addr_.host.c_str(), addr_.port, why, role_);
  }
  Close();
}

bool Connection::Wait(short events, Clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    pollfd p{c_->fd, events, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1 << 30)));
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return false;
  }
}

Reply Connection::Failed() {
  Fail(c_->errstr[0] ? c_->errstr : "no reply");
  return nullptr;
}

Reply Connection::MissedDeadline() {
  Fail("no whole reply within the deadline (--cache-redis-deadline)");
  timed_out_ = true;
  return nullptr;
}

void Connection::Close() {
  if (c_ != nullptr) redisFree(c_);
  c_ = nullptr;
}

}  // namespace redis

Result<RedisAddress> ParseRedisUrl(const std::string& url) {
  const std::string scheme = "redis://";
  auto bad = [&](const std::string& why) {
    return InvalidArgument("bad Redis URL '" + url + "': " + why +
                           " (expected redis://[:PASSWORD@]HOST[:PORT][/DB])");
  };
  if (url.rfind(scheme, 0) != 0) return bad("it must start with redis://");
  std::string rest = url.substr(scheme.size());
  RedisAddress a;
  if (const size_t at = rest.rfind('@'); at != std::string::npos) {
    std::string auth = rest.substr(0, at);
    if (auth.empty() || auth[0] != ':') return bad("only a password (':PASSWORD@') is supported");
    a.password = auth.substr(1);
    rest = rest.substr(at + 1);
  }
  auto number = [](const std::string& s, int lo, int hi, int* out) {
    if (s.empty() || s.size() > 6 || s.find_first_not_of("0123456789") != std::string::npos) {
      return false;
    }
    *out = std::stoi(s);
    return *out >= lo && *out <= hi;
  };
  if (const size_t slash = rest.find('/'); slash != std::string::npos) {
    if (!number(rest.substr(slash + 1), 0, 1 << 20, &a.db)) return bad("the DB is not a number");
    rest = rest.substr(0, slash);
  }
  if (const size_t colon = rest.rfind(':'); colon != std::string::npos && rest[0] != '[') {
    if (!number(rest.substr(colon + 1), 1, 65535, &a.port)) return bad("bad port");
    rest = rest.substr(0, colon);
  }
  if (rest.empty()) return bad("no host");
  a.host = rest;
  return a;
}

}  // namespace promptcache
