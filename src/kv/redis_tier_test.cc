// The Redis client (kv/redis_tier.h): the URL parser, a store that cannot be reached, the circuit
// breaker's states, the deadlines against a store that answers a byte at a time, and reads from
// two threads at once on the pool's connections against a store that holds one key's reads.
// (The real Redis is tested end to end by tests/node/redis.test.mjs, a slow one by
// redis_slow.test.mjs.)
#include "kv/redis_tier.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace promptcache {
namespace {

TEST(RedisUrl, ParsesAndRejects) {
  auto a = ParseRedisUrl("redis://127.0.0.1:6380/2");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 6380);
  EXPECT_EQ(a->db, 2);
  auto b = ParseRedisUrl("redis://:secret@cache");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->password, "secret");
  EXPECT_EQ(b->port, 6379);
  for (const char* bad : {"http://x", "redis://", "redis://h:0", "redis://h:99999", "redis://h/x",
                          "redis://user:pw@h"}) {
    EXPECT_FALSE(ParseRedisUrl(bad).ok()) << bad;
  }
}

TEST(RedisTier, UnreachableStoreMissesFastAndDropsWrites) {
  // Port 1 on loopback: refused at once.
  RedisOptions o;
  o.url = "redis://127.0.0.1:1";
  o.timeout_ms = 50;
  o.queue_bytes = 1 << 20;
  auto tier = OpenRedisTier(o);
  ASSERT_TRUE(tier.ok());
  auto v = (*tier)->Get({"a", "b"});
  EXPECT_FALSE(v[0] || v[1]);
  EXPECT_EQ((*tier)->CountLeading({"a"}), 0);
  EXPECT_TRUE((*tier)->Put("k", std::string(10, 'x'), 60));
  EXPECT_FALSE((*tier)->Put("k", std::string(2 << 20, 'x'), 60));  // beyond the queue
  (*tier)->Flush();
  const RemoteStats s = (*tier)->Stats();
  EXPECT_GE(s.errors, 1u);
  EXPECT_EQ(s.dropped, 2u);
  EXPECT_EQ(s.misses, 2u);
}

using TimePoint = CircuitBreaker::TimePoint;
using State = CircuitBreaker::State;
using Path = CircuitBreaker::Path;
using Change = CircuitBreaker::Change;

TimePoint At(double s) { return TimePoint() + std::chrono::milliseconds(int64_t(s * 1000)); }

TEST(CircuitBreaker, OpensAfterConsecutiveFailuresAndProbesAfterTheCooldown) {
  CircuitBreaker b({3, 5, 60});
  EXPECT_TRUE(b.AllowRead(At(0)));
  EXPECT_EQ(b.Failed(Path::kRead, At(0)), Change::kNone);
  EXPECT_EQ(b.Failed(Path::kRead, At(1)), Change::kNone);
  // A success in between starts the count again.
  EXPECT_EQ(b.Succeeded(Path::kRead), Change::kNone);
  EXPECT_EQ(b.Failed(Path::kRead, At(2)), Change::kNone);
  EXPECT_EQ(b.Failed(Path::kRead, At(2)), Change::kNone);
  EXPECT_EQ(b.state(), State::kClosed);
  EXPECT_EQ(b.Failed(Path::kRead, At(2)), Change::kOpened);
  EXPECT_EQ(b.state(), State::kOpen);
  EXPECT_EQ(b.opens(), 1u);
  // Open: nothing goes, reads are counted as skipped.
  EXPECT_FALSE(b.AllowRead(At(3)));
  EXPECT_FALSE(b.AllowRead(At(6.9)));
  EXPECT_FALSE(b.AllowWrite());
  EXPECT_EQ(b.skipped(), 2u);
  // After 5 s one read is the probe; the others wait for it.
  EXPECT_TRUE(b.AllowRead(At(7)));
  EXPECT_EQ(b.state(), State::kHalfOpen);
  EXPECT_FALSE(b.AllowRead(At(7)));
  EXPECT_FALSE(b.AllowWrite());
  // The probe fails: open again, twice as long.
  EXPECT_EQ(b.Failed(Path::kRead, At(8), /*probe=*/true), Change::kNone);
  EXPECT_EQ(b.state(), State::kOpen);
  EXPECT_EQ(b.opens(), 2u);
  EXPECT_DOUBLE_EQ(b.cooldown_s(), 10);
  EXPECT_FALSE(b.AllowRead(At(17.9)));
  EXPECT_TRUE(b.AllowRead(At(18)).probe);
  // A probe given back (never sent) lets the next read probe.
  b.Abandoned(/*probe=*/true);
  EXPECT_TRUE(b.AllowRead(At(18)));
  EXPECT_EQ(b.Succeeded(Path::kRead), Change::kClosed);
  EXPECT_EQ(b.state(), State::kClosed);
  EXPECT_TRUE(b.AllowWrite());
  EXPECT_DOUBLE_EQ(b.cooldown_s(), 5);
}

TEST(CircuitBreaker, WritesOpenItButOnlyAReadClosesIt) {
  CircuitBreaker b({2, 5, 8});
  EXPECT_EQ(b.Failed(Path::kWrite, At(0)), Change::kNone);
  // A read's success does not clear the writes' count, nor a write's the reads'.
  EXPECT_EQ(b.Succeeded(Path::kRead), Change::kNone);
  EXPECT_EQ(b.Failed(Path::kWrite, At(0)), Change::kOpened);
  EXPECT_FALSE(b.AllowWrite());
  EXPECT_EQ(b.Succeeded(Path::kWrite), Change::kNone);  // a batch from before it opened
  EXPECT_EQ(b.state(), State::kOpen);
  // Failed probes double the cool-down up to its limit.
  for (double t : {5.0, 15.0, 23.0}) {
    EXPECT_TRUE(b.AllowRead(At(t))) << t;
    b.Failed(Path::kRead, At(t), /*probe=*/true);
  }
  EXPECT_DOUBLE_EQ(b.cooldown_s(), 8);
  EXPECT_FALSE(b.AllowRead(At(30.9)));
  EXPECT_TRUE(b.AllowRead(At(31)));
}

// Reads let through before the breaker opened may report while it is half-open: their failures
// and give-backs are not the probe's. The probe stays the only read let through until it
// reports itself; a late failure neither opens the breaker again nor frees another probe.
// (Mutations: Failed or Abandoned ignoring `probe` fail this.)
TEST(CircuitBreaker, OnlyTheProbeReportsForTheProbe) {
  CircuitBreaker b({1, 5, 60});
  const CircuitBreaker::Pass early = b.AllowRead(At(0));  // sent while closed
  const CircuitBreaker::Pass waiting = b.AllowRead(At(0));
  ASSERT_TRUE(early && waiting);
  EXPECT_FALSE(early.probe);
  EXPECT_EQ(b.Failed(Path::kRead, At(0), early.probe), Change::kOpened);
  const CircuitBreaker::Pass probe = b.AllowRead(At(5));
  ASSERT_TRUE(probe);
  EXPECT_TRUE(probe.probe);
  EXPECT_EQ(b.state(), State::kHalfOpen);
  // The read from before, failing now; another from before, never sent.
  EXPECT_EQ(b.Failed(Path::kRead, At(6), waiting.probe), Change::kNone);
  b.Abandoned(/*probe=*/false);
  EXPECT_EQ(b.state(), State::kHalfOpen);
  EXPECT_EQ(b.opens(), 1u);
  EXPECT_FALSE(b.AllowRead(At(6))) << "the probe is still out";
  EXPECT_EQ(b.Succeeded(Path::kRead), Change::kClosed);
}

// A fake Redis on a loopback port: accepts connections and hands each client's bytes to the
// store's logic (Received, then Tick to send what is due), on a thread of its own that polls
// every `tick_ms`. A subclass calls Start() last in its constructor and Stop() first in its
// destructor, so that the thread never runs the logic of a half-built or half-destroyed store.
class LoopbackStore {
 public:
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }
  // The connections accepted so far.
  int connections() const { return accepted_; }

 protected:
  explicit LoopbackStore(int tick_ms) : tick_ms_(tick_ms) {
    listen_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    EXPECT_EQ(::bind(listen_, reinterpret_cast<sockaddr*>(&a), len), 0);
    EXPECT_EQ(::listen(listen_, 16), 0);
    ::getsockname(listen_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
  }
  virtual ~LoopbackStore() {
    for (int fd : fds_) ::close(fd);
    ::close(listen_);
  }
  void Start() {
    thread_ = std::thread([this] { Run(); });
  }
  void Stop() {
    stop_ = true;
    thread_.join();
  }
  // On the store's thread: client `i` (fds_[i]) sent `bytes`; a client was accepted (fds_ grew).
  virtual void Received(size_t i, std::string_view bytes) = 0;
  virtual void Accepted() {}
  // On the store's thread, after every poll.
  virtual void Tick() = 0;

  std::vector<int> fds_;  // the clients' sockets, in the order they were accepted

 private:
  void Run() {
    while (!stop_) {
      std::vector<pollfd> fds{{listen_, POLLIN, 0}};
      for (int fd : fds_) fds.push_back({fd, POLLIN, 0});
      ::poll(fds.data(), fds.size(), tick_ms_);
      for (size_t i = 1; i < fds.size(); ++i) {
        char buf[4096];
        ssize_t got = 0;
        if ((fds[i].revents & POLLIN) &&
            (got = ::recv(fds[i].fd, buf, sizeof(buf), MSG_DONTWAIT)) > 0) {
          Received(i - 1, std::string_view(buf, size_t(got)));
        }
      }
      Tick();
      if (fds[0].revents & POLLIN) {
        fds_.push_back(::accept(listen_, nullptr, nullptr));
        ++accepted_;
        Accepted();
      }
    }
  }

  const int tick_ms_;
  int listen_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::thread thread_;
};

// A store that answers every connection that sends anything with an endless bulk string, one
// byte every 50 ms: each socket read gets a byte well within any timeout, but no reply ever ends.
class TricklingStore : public LoopbackStore {
 public:
  TricklingStore() : LoopbackStore(50) { Start(); }
  ~TricklingStore() override { Stop(); }

 private:
  struct Client {
    bool asked = false;
    size_t sent = 0;
  };
  void Received(size_t i, std::string_view) override { clients_[i].asked = true; }
  void Accepted() override { clients_.emplace_back(); }
  void Tick() override {
    static const std::string kReply = "$1000000\r\n" + std::string(1000000, 'x');
    for (size_t i = 0; i < clients_.size(); ++i) {
      Client& c = clients_[i];
      if (c.asked && c.sent < kReply.size()) {
        c.sent += std::max<ssize_t>(0, ::send(fds_[i], &kReply[c.sent], 1, MSG_NOSIGNAL));
      }
    }
  }
  std::vector<Client> clients_;
};

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(RedisTier, ASlowStoreCostsALookupItsDeadlineThenNothingOnceTheBreakerOpens) {
  TricklingStore store;
  RedisOptions o{store.url(), /*timeout_ms=*/100, size_t(1) << 20, /*deadline_ms=*/300,
                 /*breaker=*/{3, 60, 60}};  // no probe within the test
  auto tier = OpenRedisTier(o);
  ASSERT_TRUE(tier.ok());
  for (int i = 1; i <= 3; ++i) {
    // Past the reconnect backoff (100 ms after a failure), within which a lookup misses unsent.
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    const auto t0 = std::chrono::steady_clock::now();
    auto v = (*tier)->Get({"k1", "k2"});
    // A liveness bound: the whole value would take 14 hours at this pace.
    EXPECT_LT(SecondsSince(t0), 2.0) << i;
    EXPECT_FALSE(v[0] || v[1]);
    EXPECT_EQ((*tier)->Stats().deadline_misses, uint64_t(i));
    EXPECT_EQ((*tier)->Stats().breaker_open, i == 3);
  }
  // Open: no call at all, every key a miss at once, and writes dropped.
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ((*tier)->CountLeading({"k1"}), 0);
  int streamed = 0;
  (*tier)->Stream({"k1", "k2", "k3"}, 2,
                  [&](std::optional<RemoteValue>) { return ++streamed > 0; });
  EXPECT_LT(SecondsSince(t0), 0.2);
  EXPECT_EQ(streamed, 0);
  EXPECT_FALSE((*tier)->Put("k", "v", 60));
  const RemoteStats s = (*tier)->Stats();
  EXPECT_EQ(s.breaker_opens, 1u);
  EXPECT_EQ(s.skipped, 2u);
  EXPECT_EQ(s.misses, 2u * 3 + 3);
  EXPECT_GE(s.dropped, 1u);
}

TEST(RedisTier, ARequestsBudgetBoundsAllItsCalls) {
  TricklingStore store;
  RedisOptions o{store.url(), 100, size_t(1) << 20, /*deadline_ms=*/60000, {100, 60, 60}};
  auto tier = OpenRedisTier(o);
  ASSERT_TRUE(tier.ok());
  const auto t0 = std::chrono::steady_clock::now();
  {
    RemoteBudget budget(400);
    for (int i = 0; i < 5; ++i) (*tier)->Get({"k" + std::to_string(i)});
  }
  // Five calls, each allowed a minute on its own, end within the one budget of 0.4 s.
  EXPECT_LT(SecondsSince(t0), 2.0);
  EXPECT_GE((*tier)->Stats().deadline_misses, 1u);
  EXPECT_FALSE(RemoteBudget::Deadline().has_value());
}

// A store that speaks enough RESP for GET and EXISTS: every key's value is "v:" and the key,
// except that a GET of "held" is answered only once Open() is called (the connection's later
// commands wait behind it, as pipelined commands do).
class LatchStore : public LoopbackStore {
 public:
  LatchStore() : LoopbackStore(10) { Start(); }
  ~LatchStore() override { Stop(); }
  void Open() { open_ = true; }
  // Waits until a GET of "held" has arrived (a liveness bound of 30 s).
  bool WaitHeld() {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(30), [&] { return held_asked_; });
  }

 private:
  struct Client {
    std::string in;
    std::deque<std::vector<std::string>> commands;
  };
  // The commands complete in `in` (arrays of bulk strings), moved to `commands`.
  static void Parse(Client* c) {
    for (;;) {
      size_t pos = 0;
      std::vector<std::string> args;
      auto line = [&](std::string* out) {
        const size_t end = c->in.find("\r\n", pos);
        if (end == std::string::npos) return false;
        *out = c->in.substr(pos + 1, end - pos - 1);  // past the type byte
        pos = end + 2;
        return true;
      };
      std::string n;
      if (!line(&n)) return;
      bool whole = true;
      for (int i = 0; whole && i < std::stoi(n); ++i) {
        std::string len;
        whole = line(&len) && c->in.size() >= pos + std::stoul(len) + 2;
        if (whole) {
          args.push_back(c->in.substr(pos, std::stoul(len)));
          pos += std::stoul(len) + 2;
        }
      }
      if (!whole) return;
      c->in.erase(0, pos);
      c->commands.push_back(std::move(args));
    }
  }
  // Answers the client's commands in order, up to a held GET.
  void Answer(Client* c, int fd) {
    while (!c->commands.empty()) {
      const std::vector<std::string>& cmd = c->commands.front();
      if (cmd.size() == 2 && cmd[0] == "GET" && cmd[1] == "held" && !open_) {
        std::lock_guard<std::mutex> lock(mu_);
        held_asked_ = true;
        cv_.notify_all();
        return;
      }
      const std::string v = "v:" + cmd.back();
      const std::string reply =
          cmd[0] == "EXISTS" ? ":1\r\n" : "$" + std::to_string(v.size()) + "\r\n" + v + "\r\n";
      ::send(fd, reply.data(), reply.size(), MSG_NOSIGNAL);
      c->commands.pop_front();
    }
  }
  void Received(size_t i, std::string_view bytes) override {
    clients_[i].in.append(bytes);
    Parse(&clients_[i]);
  }
  void Accepted() override { clients_.emplace_back(); }
  void Tick() override {
    for (size_t i = 0; i < clients_.size(); ++i) Answer(&clients_[i], fds_[i]);
  }

  std::atomic<bool> open_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  bool held_asked_ = false;  // guarded by mu_
  std::vector<Client> clients_;
};

// Long enough that only the store's latch holds a read up.
RedisOptions LatchOptions(const LatchStore& store) {
  RedisOptions o;
  o.url = store.url();
  o.timeout_ms = 5000;
  o.deadline_ms = 30000;
  return o;
}

// Reads on one thread, one after another, open one connection however many the pool may have.
TEST(RedisTier, ReadsOneAfterAnotherHoldOneConnection) {
  LatchStore store;
  RedisOptions o = LatchOptions(store);
  ASSERT_EQ(o.read_connections, 4);
  auto tier = OpenRedisTier(o);
  ASSERT_TRUE(tier.ok());
  for (int i = 0; i < 3; ++i) {
    auto v = (*tier)->Get({"a", "b"});
    ASSERT_TRUE(v[0] && v[1]);
    EXPECT_EQ(v[1]->data, "v:b");
    EXPECT_EQ((*tier)->CountLeading({"a", "b"}), 2);
  }
  EXPECT_EQ(store.connections(), 1);
}

// While one thread's read is held by the store, another thread's reads (GET, Stream, EXISTS) are
// answered on a second connection; then the held one is answered too. Mutation: Acquire never
// opening a second connection (the pool of one) fails this at the second thread's values.
TEST(RedisTier, ReadsFromTwoThreadsTravelAtOnce) {
  LatchStore store;
  RedisOptions o = LatchOptions(store);
  o.read_connections = 2;
  auto tier = OpenRedisTier(o);
  ASSERT_TRUE(tier.ok());
  auto held = std::async(std::launch::async, [&] { return (*tier)->Get({"held"}); });
  ASSERT_TRUE(store.WaitHeld());
  auto v = (*tier)->Get({"a"});
  ASSERT_TRUE(v[0]) << "a second read waited for the first";
  EXPECT_EQ(v[0]->data, "v:a");
  std::vector<std::string> streamed;
  (*tier)->Stream({"b", "c", "d"}, 2, [&](std::optional<RemoteValue> value) {
    streamed.push_back(value ? std::string(value->data) : "-");
    return true;
  });
  EXPECT_EQ(streamed, (std::vector<std::string>{"v:b", "v:c", "v:d"}));
  EXPECT_EQ((*tier)->CountLeading({"a", "b"}), 2);
  // All of that while the first read was still held.
  EXPECT_EQ(held.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  store.Open();
  ASSERT_EQ(held.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  const auto h = held.get();
  ASSERT_TRUE(h[0]);
  EXPECT_EQ(h[0]->data, "v:held");
  EXPECT_EQ(store.connections(), 2);
  const RemoteStats s = (*tier)->Stats();
  EXPECT_EQ(s.hits, 5u);
  EXPECT_EQ(s.deadline_misses, 0u);
  EXPECT_FALSE(s.breaker_open);
}

// With one read connection the second thread's read waits for it, and gives up at its deadline
// (its request's budget): a miss, counted as a deadline miss, nothing sent.
TEST(RedisTier, WithOneReadConnectionASecondReadWaitsForIt) {
  LatchStore store;
  RedisOptions o = LatchOptions(store);
  o.read_connections = 1;
  auto tier = OpenRedisTier(o);
  ASSERT_TRUE(tier.ok());
  auto held = std::async(std::launch::async, [&] { return (*tier)->Get({"held"}); });
  ASSERT_TRUE(store.WaitHeld());
  {
    RemoteBudget budget(200);
    auto v = (*tier)->Get({"a"});
    EXPECT_FALSE(v[0]);
  }
  RemoteStats s = (*tier)->Stats();
  EXPECT_EQ(s.deadline_misses, 1u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.errors, 0u);  // not sent: the connection is the held read's still
  store.Open();
  ASSERT_EQ(held.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  ASSERT_TRUE(held.get()[0]);
  EXPECT_EQ(store.connections(), 1);
  // The connection is free again: the next read is answered on it.
  ASSERT_TRUE((*tier)->Get({"a"})[0]);
  EXPECT_EQ(store.connections(), 1);
}

TEST(RedisTier, ReadConnectionsOutOfRangeAreRefused) {
  for (int n : {0, -1, kMaxReadConnections + 1}) {
    RedisOptions o;
    o.url = "redis://127.0.0.1:1";
    o.read_connections = n;
    auto tier = OpenRedisTier(o);
    ASSERT_FALSE(tier.ok()) << n;
    EXPECT_NE(tier.status().message().find("read connections"), std::string::npos);
  }
}

}  // namespace
}  // namespace promptcache
