#include "kv/redis_tier.h"

#include <hiredis/hiredis.h>
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "core/log.h"

namespace promptcache {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kFirstBackoffMs = 100, kMaxBackoffMs = 2000;
constexpr size_t kWriteBatchItems = 64;
constexpr size_t kWriteBatchBytes = size_t(2) << 20;

timeval ToTimeval(int ms) { return {ms / 1000, (ms % 1000) * 1000}; }

struct ReplyDeleter {
  void operator()(redisReply* r) const {
    if (r != nullptr) freeReplyObject(r);
  }
  void operator()(const void* r) const {
    if (r != nullptr) freeReplyObject(const_cast<void*>(r));
  }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

// One connection with its reconnect backoff. Not thread-safe: its owner serializes use.
class Connection {
 public:
  Connection(const RedisAddress& addr, int timeout_ms, const char* role,
             std::atomic<uint64_t>* errors)
      : addr_(addr), timeout_ms_(timeout_ms), role_(role), errors_(errors) {}
  ~Connection() { Close(); }

  // Connected, or connects unless a backoff is running. False: use the store later.
  bool Ready() {
    if (c_ != nullptr) return true;
    if (Clock::now() < retry_at_) return false;
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
    if (!addr_.password.empty() && !Ok(Run({"AUTH", addr_.password}).get())) return false;
    if (addr_.db != 0 && !Ok(Run({"SELECT", std::to_string(addr_.db)}).get())) return false;
    if (down_)
      PC_LOG_INFO("redis %s:%d: %s connection back", addr_.host.c_str(), addr_.port, role_);
    down_ = false;
    backoff_ms_ = kFirstBackoffMs;
    return true;
  }

  // Sends one command and reads its reply; null (and the connection closed) on failure.
  Reply Run(const std::vector<std::string>& args) {
    Append(args);
    return Read();
  }
  void Append(const std::vector<std::string>& args) {
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    for (const std::string& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    redisAppendCommandArgv(c_, static_cast<int>(args.size()), argv.data(), lens.data());
  }
  // The next pipelined reply; null when the connection failed (it is closed).
  Reply Read() {
    if (c_ == nullptr) return nullptr;
    void* r = nullptr;
    if (redisGetReply(c_, &r) != REDIS_OK || r == nullptr) {
      Fail(c_->errstr[0] ? c_->errstr : "no reply");
      return nullptr;
    }
    return Reply(static_cast<redisReply*>(r));
  }
  // A reply that is not an error; an error reply fails the connection (AUTH, SELECT).
  bool Ok(const redisReply* r) {
    if (r == nullptr) return false;
    if (r->type == REDIS_REPLY_ERROR) {
      Fail(std::string(r->str, r->len).c_str());
      return false;
    }
    return true;
  }

  void Fail(const char* why) {
    ++*errors_;
    if (!down_) {
      PC_LOG_WARN("redis %s:%d: %s (%s connection; retrying with backoff, lookups miss meanwhile)",
                  addr_.host.c_str(), addr_.port, why, role_);
    }
    down_ = true;
    Close();
    retry_at_ = Clock::now() + std::chrono::milliseconds(backoff_ms_);
    backoff_ms_ = std::min(kMaxBackoffMs, backoff_ms_ * 2);
  }
  bool connected() const { return c_ != nullptr; }

 private:
  void Close() {
    if (c_ != nullptr) redisFree(c_);
    c_ = nullptr;
  }

  RedisAddress addr_;
  int timeout_ms_;
  const char* role_;
  std::atomic<uint64_t>* errors_;
  redisContext* c_ = nullptr;
  Clock::time_point retry_at_{};
  int backoff_ms_ = kFirstBackoffMs;
  bool down_ = false;
};

class RedisTier : public RemoteTier {
 public:
  RedisTier(const RedisAddress& addr, const RedisOptions& options)
      : options_(options),
        reader_(addr, options.timeout_ms, "read", &errors_),
        // Writes are on no request's path: a batch of large values may take longer than a lookup
        // may wait, and timing it out would only drop it.
        writer_conn_(addr, std::max(1000, 10 * options.timeout_ms), "write", &errors_) {
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
    std::lock_guard<std::mutex> lock(read_mu_);
    // Pipelined GETs, one round trip: each reply is one value (hiredis is slow to read an
    // array of large values, as MGET's reply would be).
    if (!reader_.Ready()) {
      misses_ += keys.size();
      return out;
    }
    for (const std::string& k : keys) reader_.Append({"GET", k});
    for (size_t i = 0; i < keys.size(); ++i) {
      Reply r = reader_.Read();
      if (r == nullptr) {  // failed (and closed): the rest are misses
        misses_ += keys.size() - i;
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
    return out;
  }

  // A sliding window of pipelined GETs: one more is asked for as each reply is read, so the
  // store's sending overlaps the caller's checking instead of waiting for it round trip by round
  // trip.
  void Stream(const std::vector<std::string>& keys, int window,
              const std::function<bool(std::optional<RemoteValue>)>& use) override {
    if (keys.empty()) return;
    std::lock_guard<std::mutex> lock(read_mu_);
    if (!reader_.Ready()) {
      misses_ += keys.size();
      return;
    }
    const size_t ahead = static_cast<size_t>(std::max(1, window));
    size_t asked = 0;
    for (; asked < keys.size() && asked < ahead; ++asked) reader_.Append({"GET", keys[asked]});
    bool wanted = true;
    for (size_t i = 0; i < asked; ++i) {
      Reply r = reader_.Read();
      if (r == nullptr) {  // failed (and closed): the rest are misses
        misses_ += keys.size() - i;
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
      if (wanted && asked < keys.size()) reader_.Append({"GET", keys[asked++]});
    }
  }

  int CountLeading(const std::vector<std::string>& keys) override {
    std::lock_guard<std::mutex> lock(read_mu_);
    if (keys.empty() || !reader_.Ready()) return 0;
    for (const std::string& k : keys) reader_.Append({"EXISTS", k});
    int n = 0;
    bool leading = true;
    for (size_t i = 0; i < keys.size(); ++i) {
      Reply r = reader_.Read();
      if (r == nullptr) return 0;
      leading = leading && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
      n += leading;
    }
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

  bool Enqueue(Item item) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      // While the store is down a write is dropped at once, and the cache keeps the block marked
      // unwritten (it is written when evicted, if the store is back by then).
      if (down_) {
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
        // While down, wake up now and then to try the store again (writes are refused meanwhile).
        cv_.wait_for(lock, std::chrono::milliseconds(kFirstBackoffMs),
                     [&] { return stop_ || !queue_.empty(); });
        if (stop_) break;  // what is still queued is a cache's: dropping it is harmless
        if (queue_.empty()) {
          if (!down_) continue;
          lock.unlock();
          const bool up = writer_conn_.Ready();
          lock.lock();
          down_ = !up;
          connected_ = up;
          continue;
        }
        size_t bytes = 0;  // a batch is sent within one timeout: a few MiB at most
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

  // Pipelined: every command of the batch, then every reply.
  void Send(const std::vector<Item>& batch) {
    if (!writer_conn_.Ready()) {
      SetDown(true);
      dropped_ += batch.size();
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
      Reply r = writer_conn_.Read();
      if (r == nullptr) {  // the connection failed: the rest are lost with it
        dropped_ += batch.size() - i;
        SetDown(true);
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
  }

  void SetDown(bool down) {
    std::lock_guard<std::mutex> lock(mu_);
    down_ = down;
    connected_ = !down;
  }

  RedisOptions options_;
  std::atomic<uint64_t> hits_{0}, misses_{0}, errors_{0}, writes_{0}, dropped_{0}, invalid_{0};
  std::atomic<bool> connected_{false};
  std::mutex read_mu_;
  Connection reader_;       // guarded by read_mu_
  Connection writer_conn_;  // the writer thread's
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

Result<std::unique_ptr<RemoteTier>> OpenRedisTier(const RedisOptions& options) {
  PC_ASSIGN_OR_RETURN(RedisAddress addr, ParseRedisUrl(options.url));
  if (options.timeout_ms < 1) return InvalidArgument("the Redis timeout must be >= 1 ms");
  return std::unique_ptr<RemoteTier>(new RedisTier(addr, options));
}

}  // namespace promptcache
