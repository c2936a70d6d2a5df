// Microbenchmark of the remote tier's reads (not run by ctest): how fast a replica reads a long
// prefix's blocks from a real Redis, by how many values it keeps in flight.
//
//   PC_REDIS_URL=redis://127.0.0.1:6379 ./build/src/kv/remote_bench
//
//   BM_RemoteStream/<window>/<value KiB>: RemoteTier::Stream over 206 values (a 3,300-token
//     prefix in blocks of 16) with `window` GETs in flight; each value is checksummed and copied
//     out as a lookup does. Window 0: Get in round trips of 2 (the lookup before streaming).
//   BM_RemoteStreamAtOnce/<value KiB>/threads:N: N threads stream those values at once, as N
//     requests' lookups do (each thread its own copy of the keys), through the tier's pool of
//     read connections (PC_REDIS_READERS, default 4: --cache-redis-readers); bytes/s in all.
// The values are written under bench:* keys with a 10-minute expiry.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/hash.h"
#include "kv/redis_tier.h"

namespace promptcache {
namespace {

constexpr int kValues = 206;

RemoteTier* Tier() {
  static RemoteTier* tier = [] {
    const char* url = std::getenv("PC_REDIS_URL");
    RedisOptions o;
    o.url = url != nullptr ? url : "redis://127.0.0.1:6379";
    o.timeout_ms = 5000;
    if (const char* readers = std::getenv("PC_REDIS_READERS")) {
      o.read_connections = std::atoi(readers);
    }
    Result<std::unique_ptr<RemoteTier>> t = OpenRedisTier(o);
    return t.ok() ? std::move(t).value().release() : nullptr;
  }();
  return tier;
}

std::vector<std::string> Fill(size_t bytes, int copy = 0) {
  std::vector<std::string> keys;
  for (int i = 0; i < kValues; ++i) {
    keys.push_back("bench:" + std::to_string(bytes) + ":" + std::to_string(copy) + ":" +
                   std::to_string(i));
    Tier()->Put(keys.back(), std::string(bytes, static_cast<char>(i)), 600);
  }
  Tier()->Flush();
  return keys;
}

// Takes each value as a lookup does (checksummed and copied out) and counts them.
class Taker {
 public:
  explicit Taker(size_t bytes) : block_(bytes) {}
  bool operator()(const std::optional<RemoteValue>& v) {
    if (!v || v->data.size() != block_.size()) return false;
    benchmark::DoNotOptimize(Hash64(v->data.data(), v->data.size()));
    std::memcpy(block_.data(), v->data.data(), block_.size());
    ++taken;
    return true;
  }
  int taken = 0;

 private:
  std::vector<char> block_;
};

void BM_RemoteStream(benchmark::State& state) {
  if (Tier() == nullptr) return state.SkipWithError("no Redis tier (PC_REDIS_URL)");
  const int window = static_cast<int>(state.range(0));
  const size_t bytes = size_t(state.range(1)) << 10;
  const std::vector<std::string> keys = Fill(bytes);
  Taker use(bytes);
  for (auto _ : state) {
    use.taken = 0;
    if (window == 0) {
      for (int i = 0; i < kValues; i += 2) {
        for (const auto& v : Tier()->Get({keys.begin() + i, keys.begin() + i + 2})) use(v);
      }
    } else {
      Tier()->Stream(keys, window, std::ref(use));
    }
    if (use.taken != kValues) return state.SkipWithError("values missing: is Redis up?");
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * kValues * int64_t(bytes));
}
BENCHMARK(BM_RemoteStream)
    ->ArgsProduct({{0, 1, 2, 3, 4, 8}, {360, 190}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

void BM_RemoteStreamAtOnce(benchmark::State& state) {
  if (Tier() == nullptr) return state.SkipWithError("no Redis tier (PC_REDIS_URL)");
  const size_t bytes = size_t(state.range(0)) << 10;
  // Filled by each thread before the timing starts (the threads start it together).
  const std::vector<std::string> keys = Fill(bytes, state.thread_index() + 1);
  Taker use(bytes);
  for (auto _ : state) {
    use.taken = 0;
    Tier()->Stream(keys, 3, std::ref(use));
    if (use.taken != kValues) return state.SkipWithError("values missing or late: is Redis up?");
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * kValues * int64_t(bytes));
}
BENCHMARK(BM_RemoteStreamAtOnce)
    ->Arg(360)
    ->ThreadRange(1, 4)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace promptcache

BENCHMARK_MAIN();
