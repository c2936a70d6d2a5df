#include "kv/redis_tier.h"

#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "core/log.h"
#include "kv/redis_connection.h"

namespace promptcache {
namespace {

using redis::Backoff;
using redis::Clock;
using redis::Connection;
using redis::kFirstBackoffMs;
using redis::Reply;
using redis::ReplyDeleter;

constexpr size_t kWriteBatchItems = 64;
constexpr size_t kWriteBatchBytes = size_t(2) << 20;

class RedisTier : public RemoteTier {
 public:
  RedisTier(const RedisAddress& addr, const RedisOptions& options)
      : options_(options),
        addr_(addr),
        // Writes are on no request's path: a batch of large values may take longer than a lookup
        // may wait, and timing it out would only drop it.
        write_deadline_ms_(std::max({1000, 10 * options.timeout_ms, options.deadline_ms})),
        breaker_(options.breaker),
        writer_conn_(addr, write_deadline_ms_, "write", &write_backoff_, &errors_) {
    // Every value read is a block-sized reply (hundreds of KiB) allocated and freed by hiredis:
    // with glibc's defaults the heap top is given back and faulted in again for each, which
    // measured 5-10x slower than the transfer itself (a 3,300-token smollm2-135m prefix: 350-700
    // ms against 45-80 ms). Such sizes come from the heap, and 64 MiB of its top stays in the
    // process (the KV pool's chunks, larger still, are mapped apart as before).
    mallopt(M_MMAP_THRESHOLD, 16 << 20);
    mallopt(M_TRIM_THRESHOLD, 128 << 20);
    mallopt(M_TOP_PAD, 64 << 20);
    writer_ = std::thread([this] { WriteLoop(); });
  }
  ~RedisTier() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    writer_.join();
  }

  std::vector<std::optional<RemoteValue>> Get(const std::vector<std::string>& keys) override {
    std::vector<std::optional<RemoteValue>> out(keys.size());
    if (keys.empty()) return out;
    const Clock::time_point deadline = CallDeadline();
    Lease conn = BeginRead(deadline);
    if (!conn) {
      misses_ += keys.size();
      return out;
    }
    // Pipelined GETs, one round trip: each reply is one value (hiredis is slow to read an
    // array of large values, as MGET's reply would be).
    for (const std::string& k : keys) conn->Append({"GET", k});
    for (size_t i = 0; i < keys.size(); ++i) {
      Reply r = conn->Read(deadline);
      if (r == nullptr) {  // failed (and closed): the rest are misses
        misses_ += keys.size() - i;
        EndRead(conn, false);
        return out;
      }
      if (r->type == REDIS_REPLY_STRING) {
        const std::string_view data(r->str, r->len);
        out[i] = RemoteValue{std::shared_ptr<const void>(r.release(), ReplyDeleter()), data};
        ++hits_;
      } else {
        ++misses_;  // nil; or an error reply (a key of another type): not a value either
      }
    }
    EndRead(conn, true);
    return out;
  }

  // A sliding window of pipelined GETs: one more is asked for as each reply is read, so the
  // store's sending overlaps the caller's checking instead of waiting for it round trip by round
  // trip.
  void Stream(const std::vector<std::string>& keys, int window,
              const std::function<bool(std::optional<RemoteValue>)>& use) override {
    if (keys.empty()) return;
    const Clock::time_point deadline = CallDeadline();
    Lease conn = BeginRead(deadline);
    if (!conn) {
      misses_ += keys.size();
      return;
    }
    const size_t ahead = static_cast<size_t>(std::max(1, window));
    size_t asked = 0;
    for (; asked < keys.size() && asked < ahead; ++asked) conn->Append({"GET", keys[asked]});
    bool wanted = true;
    for (size_t i = 0; i < asked; ++i) {
      Reply r = conn->Read(deadline);
      if (r == nullptr) {  // failed (and closed): the rest are misses
        misses_ += keys.size() - i;
        EndRead(conn, false);
        return;
      }
      std::optional<RemoteValue> value;
      if (r->type == REDIS_REPLY_STRING) {
        const std::string_view data(r->str, r->len);
        value = RemoteValue{std::shared_ptr<const void>(r.release(), ReplyDeleter()), data};
        ++hits_;
      } else {
        ++misses_;
      }
      if (!wanted) continue;  // draining what was asked for before `use` said stop
      wanted = use(std::move(value));
      if (wanted && asked < keys.size()) conn->Append({"GET", keys[asked++]});
    }
    EndRead(conn, true);
  }

  int CountLeading(const std::vector<std::string>& keys) override {
    if (keys.empty()) return 0;
    const Clock::time_point deadline = CallDeadline();
    Lease conn = BeginRead(deadline);
    if (!conn) return 0;
    for (const std::string& k : keys) conn->Append({"EXISTS", k});
    int n = 0;
    bool leading = true;
    for (size_t i = 0; i < keys.size(); ++i) {
      Reply r = conn->Read(deadline);
      if (r == nullptr) {
        EndRead(conn, false);
        return 0;
      }
      leading = leading && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
      n += leading;
    }
    EndRead(conn, true);
    return n;
  }

  bool Put(std::string key, std::string value, int ttl_seconds) override {
    return Enqueue({std::move(key), std::move(value), ttl_seconds, false});
  }
  void Persist(std::string key) override { Enqueue({std::move(key), {}, 0, true}); }
  void CountInvalid() override { ++invalid_; }

  RemoteStats Stats() const override {
    RemoteStats s;
    s.hits = hits_;
    s.misses = misses_;
    s.errors = errors_;
    s.writes = writes_;
    s.dropped = dropped_;
    s.invalid = invalid_;
    s.deadline_misses = deadline_misses_;
    s.breaker_opens = breaker_.opens();
    s.skipped = breaker_.skipped();
    s.breaker_open = breaker_.state() != CircuitBreaker::State::kClosed;
    s.connected = connected_;
    return s;
  }

  void Flush() override {
    std::unique_lock<std::mutex> lock(mu_);
    idle_cv_.wait(lock, [&] { return queue_.empty() && !sending_; });
  }

 private:
  struct Item {
    std::string key, value;
    int ttl;
    bool persist;
  };

  // When this thread's call must be done: its own deadline, or its request's budget if sooner.
  Clock::time_point CallDeadline() const {
    Clock::time_point d = Clock::now() + std::chrono::milliseconds(options_.deadline_ms);
    if (const auto budget = RemoteBudget::Deadline(); budget && *budget < d) d = *budget;
    return d;
  }

  // A read connection taken from the pool, given back when the lease ends; `probe`: the read is
  // the breaker's half-open probe.
  struct Returner {
    RedisTier* tier;
    bool probe = false;
    void operator()(Connection* c) const { tier->Release(c); }
  };
  using Lease = std::unique_ptr<Connection, Returner>;

  // Before a read: the breaker lets it through, a read connection is free by the deadline (each
  // read holds one at most until its own deadline), and connected. Null: a miss, and nothing is
  // sent. After a connection, EndRead reports how it went. Reads on several connections report to
  // the breaker at once (it has a lock of its own): while it is half-open only the probe is let
  // through and the other reads miss. A read begun before it opened may report after: its
  // success closes it (the store did answer in time); its failure counts for nothing, while it
  // is open as while half-open, where only the probe's failure opens it again.
  Lease BeginRead(Clock::time_point deadline) {
    const CircuitBreaker::Pass pass = breaker_.AllowRead(Clock::now());
    if (!pass) return Lease(nullptr, Returner{this});
    Lease conn(Acquire(deadline), Returner{this, pass.probe});
    if (!conn) {
      ++deadline_misses_;
      breaker_.Abandoned(pass.probe);
      return conn;
    }
    bool tried = false;
    if (conn->Ready(deadline, &tried)) return conn;
    if (tried) {
      EndRead(conn, false);
    } else {
      breaker_.Abandoned(pass.probe);
    }
    return Lease(nullptr, Returner{this});
  }
  void EndRead(const Lease& conn, bool ok) {
    if (!ok && conn->timed_out()) ++deadline_misses_;
    Report(CircuitBreaker::Path::kRead, ok, conn.get_deleter().probe);
  }

  // A free read connection, by `deadline`; null if none was. Opened lazily: one more only when
  // every one so far is in use, so a replica whose reads never overlap holds one. A connected one
  // is preferred to one that failed (it would wait for the backoff).
  Connection* Acquire(Clock::time_point deadline) {
    std::unique_lock<std::mutex> lock(pool_mu_);
    const size_t most = static_cast<size_t>(options_.read_connections);
    if (!pool_cv_.wait_until(lock, deadline,
                             [&] { return !free_.empty() || readers_.size() < most; })) {
      return nullptr;
    }
    if (free_.empty()) {
      readers_.push_back(std::make_unique<Connection>(addr_, options_.timeout_ms, "read",
                                                      &read_backoff_, &errors_));
      return readers_.back().get();
    }
    auto it = std::find_if(free_.rbegin(), free_.rend(),
                           [](const Connection* c) { return c->connected(); });
    Connection* c = it != free_.rend() ? *it : free_.back();
    free_.erase(std::find(free_.begin(), free_.end(), c));
    return c;
  }
  void Release(Connection* c) {
    if (c == nullptr) return;
    {
      std::lock_guard<std::mutex> lock(pool_mu_);
      free_.push_back(c);
    }
    pool_cv_.notify_one();
  }

  void Report(CircuitBreaker::Path path, bool ok, bool probe = false) {
    const CircuitBreaker::Change change =
        ok ? breaker_.Succeeded(path) : breaker_.Failed(path, Clock::now(), probe);
    if (change == CircuitBreaker::Change::kOpened) {
      PC_LOG_WARN(
          "redis %s:%d: %d failed or late %s in a row: not asked for %g s (lookups miss, writes "
          "are dropped), then probed with one lookup",
          addr_.host.c_str(), addr_.port, options_.breaker.failures_to_open,
          path == CircuitBreaker::Path::kRead ? "lookups" : "writes", breaker_.cooldown_s());
    } else if (change == CircuitBreaker::Change::kClosed) {
      PC_LOG_INFO("redis %s:%d: a probe lookup was answered in time: the store is asked again",
                  addr_.host.c_str(), addr_.port);
    }
  }

  bool Enqueue(Item item) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      // While the store is down (or the breaker open) a write is dropped at once, and the cache
      // keeps the block marked unwritten (it is written when evicted, if the store is back by
      // then).
      if (down_ || !breaker_.AllowWrite()) {
        ++dropped_;
        return false;
      }
      const size_t bytes = item.key.size() + item.value.size();
      if (queued_bytes_ + bytes > options_.queue_bytes) {
        ++dropped_;
        return false;
      }
      queued_bytes_ += bytes;
      queue_.push_back(std::move(item));
    }
    cv_.notify_one();
    return true;
  }

  void WriteLoop() {
    for (;;) {
      std::vector<Item> batch;
      {
        std::unique_lock<std::mutex> lock(mu_);
        // While down, wake up now and then to try the store again (writes are refused meanwhile;
        // not while the breaker is open: a lookup probes the store then).
        cv_.wait_for(lock, std::chrono::milliseconds(kFirstBackoffMs),
                     [&] { return stop_ || !queue_.empty(); });
        if (stop_) break;  // what is still queued is a cache's: dropping it is harmless
        if (queue_.empty()) {
          if (!down_ || !breaker_.AllowWrite()) continue;
          lock.unlock();
          bool tried = false;
          const bool up = writer_conn_.Ready(
              Clock::now() + std::chrono::milliseconds(write_deadline_ms_), &tried);
          lock.lock();
          down_ = !up;
          connected_ = up;
          continue;
        }
        size_t bytes = 0;  // a batch is sent within one deadline: a few MiB at most
        while (!queue_.empty() && batch.size() < kWriteBatchItems && bytes < kWriteBatchBytes) {
          bytes += queue_.front().key.size() + queue_.front().value.size();
          queued_bytes_ -= queue_.front().key.size() + queue_.front().value.size();
          batch.push_back(std::move(queue_.front()));
          queue_.pop_front();
        }
        sending_ = true;
      }
      Send(batch);
      {
        std::lock_guard<std::mutex> lock(mu_);
        sending_ = false;
      }
      idle_cv_.notify_all();
    }
    std::lock_guard<std::mutex> lock(mu_);
    dropped_ += queue_.size();
    queue_.clear();
    sending_ = false;
    idle_cv_.notify_all();
  }

  // Pipelined: every command of the batch, then every reply, all within the write deadline.
  void Send(const std::vector<Item>& batch) {
    if (!breaker_.AllowWrite()) {
      dropped_ += batch.size();
      return;
    }
    const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(write_deadline_ms_);
    bool tried = false;
    if (!writer_conn_.Ready(deadline, &tried)) {
      SetDown(true);
      dropped_ += batch.size();
      if (tried) Report(CircuitBreaker::Path::kWrite, false);
      return;
    }
    for (const Item& it : batch) {
      if (it.persist) {
        writer_conn_.Append({"PERSIST", it.key});
      } else if (it.ttl > 0) {
        writer_conn_.Append({"SET", it.key, it.value, "EX", std::to_string(it.ttl)});
      } else {
        writer_conn_.Append({"SET", it.key, it.value});
      }
    }
    for (size_t i = 0; i < batch.size(); ++i) {
      Reply r = writer_conn_.Read(deadline);
      if (r == nullptr) {  // the connection failed: the rest are lost with it
        dropped_ += batch.size() - i;
        if (writer_conn_.timed_out()) ++deadline_misses_;
        SetDown(true);
        Report(CircuitBreaker::Path::kWrite, false);
        return;
      }
      if (r->type == REDIS_REPLY_ERROR) {  // full (maxmemory with noeviction), read-only, ...
        ++errors_;
        ++dropped_;
      } else if (!batch[i].persist) {
        ++writes_;
      }
    }
    SetDown(false);
    Report(CircuitBreaker::Path::kWrite, true);
  }

  void SetDown(bool down) {
    std::lock_guard<std::mutex> lock(mu_);
    down_ = down;
    connected_ = !down;
  }

  RedisOptions options_;
  RedisAddress addr_;
  const int write_deadline_ms_;
  CircuitBreaker breaker_;
  std::atomic<uint64_t> hits_{0}, misses_{0}, errors_{0}, writes_{0}, dropped_{0}, invalid_{0};
  std::atomic<uint64_t> deadline_misses_{0};
  std::atomic<bool> connected_{false};
  Backoff read_backoff_, write_backoff_;
  std::mutex pool_mu_;
  std::condition_variable pool_cv_;
  std::vector<std::unique_ptr<Connection>> readers_;  // guarded by pool_mu_ (opened so far)
  std::vector<Connection*> free_;                     // guarded by pool_mu_ (not in use)
  Connection writer_conn_;                            // the writer thread's
  std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::deque<Item> queue_;  // guarded by mu_
  size_t queued_bytes_ = 0;
  bool sending_ = false;
  bool down_ = false;  // the writer's connection failed and is not back yet
  bool stop_ = false;
  std::thread writer_;
};

}  // namespace

Result<std::unique_ptr<RemoteTier>> OpenRedisTier(const RedisOptions& options) {
  PC_ASSIGN_OR_RETURN(RedisAddress addr, ParseRedisUrl(options.url));
  if (options.timeout_ms < 1) return InvalidArgument("the Redis timeout must be >= 1 ms");
  if (options.deadline_ms < 1) return InvalidArgument("the Redis deadline must be >= 1 ms");
  if (options.read_connections < 1 || options.read_connections > kMaxReadConnections) {
    return InvalidArgument("the Redis read connections must be between 1 and " +
                           std::to_string(kMaxReadConnections));
  }
  return std::unique_ptr<RemoteTier>(new RedisTier(addr, options));
}

}  // namespace promptcache
