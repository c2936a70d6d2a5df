// The Redis client (kv/redis_tier.h): the URL parser, a store that cannot be reached, the circuit
// breaker's states, and the deadlines against a store that answers a byte at a time. (The real
// Redis is tested end to end by tests/node/redis.test.mjs, a slow one by redis_slow.test.mjs.)
#include "kv/redis_tier.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

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
  EXPECT_EQ(b.Failed(Path::kRead, At(8)), Change::kNone);
  EXPECT_EQ(b.state(), State::kOpen);
  EXPECT_EQ(b.opens(), 2u);
  EXPECT_DOUBLE_EQ(b.cooldown_s(), 10);
  EXPECT_FALSE(b.AllowRead(At(17.9)));
  EXPECT_TRUE(b.AllowRead(At(18)));
  // A probe given back (never sent) lets the next read probe.
  b.Abandoned();
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
    b.Failed(Path::kRead, At(t));
  }
  EXPECT_DOUBLE_EQ(b.cooldown_s(), 8);
  EXPECT_FALSE(b.AllowRead(At(30.9)));
  EXPECT_TRUE(b.AllowRead(At(31)));
}

// A store on loopback that answers every connection that sends anything with an endless bulk
// string, one byte every 50 ms: each socket read gets a byte well within any timeout, but no
// reply ever ends.
class TricklingStore {
 public:
  TricklingStore() {
    listen_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    EXPECT_EQ(::bind(listen_, reinterpret_cast<sockaddr*>(&a), len), 0);
    EXPECT_EQ(::listen(listen_, 16), 0);
    ::getsockname(listen_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { Run(); });
  }
  ~TricklingStore() {
    stop_ = true;
    thread_.join();
    for (const Client& c : clients_) ::close(c.fd);
    ::close(listen_);
  }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }

 private:
  struct Client {
    int fd;
    bool asked = false;
    size_t sent = 0;
  };
  void Run() {
    static const std::string kReply = "$1000000\r\n" + std::string(1000000, 'x');
    while (!stop_) {
      std::vector<pollfd> fds{{listen_, POLLIN, 0}};
      for (const Client& c : clients_) fds.push_back({c.fd, POLLIN, 0});
      ::poll(fds.data(), fds.size(), 50);
      if (fds[0].revents & POLLIN) clients_.push_back({::accept(listen_, nullptr, nullptr)});
      for (size_t i = 1; i < fds.size(); ++i) {
        char buf[4096];
        if ((fds[i].revents & POLLIN) && ::recv(fds[i].fd, buf, sizeof(buf), MSG_DONTWAIT) > 0) {
          clients_[i - 1].asked = true;
        }
      }
      for (Client& c : clients_) {
        if (c.asked && c.sent < kReply.size()) {
          c.sent += std::max<ssize_t>(0, ::send(c.fd, &kReply[c.sent], 1, MSG_NOSIGNAL));
        }
      }
    }
  }
  int listen_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::vector<Client> clients_;
  std::thread thread_;
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

}  // namespace
}  // namespace promptcache
