// The Redis client's connection (redis_tier.cc's part that speaks to hiredis): one connection to
// the store, reconnected after a backoff shared by the connections of its role, whose every
// reply is read against a deadline however slowly the store answers (a socket timeout bounds
// each read, not a reply). RedisTier holds a pool of them for reads and one for its writer.
// Internal to pc_kv_redis: it includes hiredis.
#pragma once

#include <hiredis/hiredis.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kv/redis_tier.h"

namespace promptcache::redis {

using Clock = std::chrono::steady_clock;

inline constexpr int kFirstBackoffMs = 100, kMaxBackoffMs = 2000;

struct ReplyDeleter {
  void operator()(redisReply* r) const {
    if (r != nullptr) freeReplyObject(r);
  }
  void operator()(const void* r) const {
    if (r != nullptr) freeReplyObject(const_cast<void*>(r));
  }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

// When the connections of one role (the reads' pool, or the writer's) may connect again after a
// failure: 100 ms, doubling up to 2 s. Shared by the pool's connections, so that a store that
// refused one is not asked for a connection by the next either until the backoff has passed.
// Thread-safe.
class Backoff {
 public:
  bool Running(Clock::time_point now) const;
  // True when the role was up until now (the failure is logged once, not every retry).
  bool Failed();
  // True when it was down (logged as back).
  bool Connected();

 private:
  mutable std::mutex mu_;
  Clock::time_point retry_at_{};
  int backoff_ms_ = kFirstBackoffMs;
  bool down_ = false;
};

// One connection, reconnected (after its role's backoff) when it failed. Not thread-safe: its
// user holds it alone (the writer thread; a read that took it from the pool).
class Connection {
 public:
  Connection(const RedisAddress& addr, int timeout_ms, const char* role, Backoff* backoff,
             std::atomic<uint64_t>* errors)
      : addr_(addr), timeout_ms_(timeout_ms), role_(role), backoff_(backoff), errors_(errors) {}
  ~Connection() { Close(); }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Connected, or connects unless a backoff is running (`tried`: a connect was attempted). False:
  // use the store later.
  bool Ready(Clock::time_point deadline, bool* tried);
  // Sends one command and reads its reply; null (and the connection closed) on failure.
  Reply Run(const std::vector<std::string>& args, Clock::time_point deadline) {
    Append(args);
    return Read(deadline);
  }
  void Append(const std::vector<std::string>& args);
  // Sends what is buffered and reads the next pipelined reply, all by `deadline` however slowly
  // the store answers: the socket timeout bounds each read, not a reply, and a store that sends a
  // byte now and then never trips it. Null when the connection failed or the deadline passed (it
  // is closed: the replies still due on it could not be told apart from the next ones).
  Reply Read(Clock::time_point deadline);
  // A reply that is not an error; an error reply fails the connection (AUTH, SELECT).
  bool Ok(const redisReply* r);
  void Fail(const char* why);
  bool connected() const { return c_ != nullptr; }
  // The last Read failed by missing its deadline.
  bool timed_out() const { return timed_out_; }

 private:
  // Waits until the socket is ready for `events`, or the deadline passes (false).
  bool Wait(short events, Clock::time_point deadline);
  Reply Failed();
  Reply MissedDeadline();
  void Close();

  RedisAddress addr_;
  int timeout_ms_;
  const char* role_;
  Backoff* backoff_;
  std::atomic<uint64_t>* errors_;
  redisContext* c_ = nullptr;
  bool timed_out_ = false;
};

}  // namespace promptcache::redis
