// Helpers of the remote tier's engine tests (engine_remote_test.cc, schema_remote_test.cc):
// engines on stories260K sharing an in-memory store (LatchTier) whose reads of chosen keys wait
// on a latch the test opens, so that a remote read can be held for as long as the test likes,
// and greedy requests (engine_test_util.h's Greedy). Nothing here is timed: waits are liveness
// bounds.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/check.h"
#include "engine/create_engine.h"
#include "engine/engine_impl.h"
#include "engine/engine_test_util.h"
#include "engine/in_flight_test_util.h"
#include "engine/modular_test_util.h"

namespace promptcache {
namespace remote_test {

inline constexpr double kLiveness = 30;  // seconds: a request that takes longer is stuck

// A store shared by the engines of a test; writes are immediate. A read that asks for a key in
// `held` waits until the latch is opened (or its deadline passes: then every key misses).
struct Store {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::string, std::string> values;
  std::set<std::string> held;
  bool open = false;
  int entered = 0;                                // reads that reached the latch
  std::map<std::string, int> asked;               // reads of each key
  bool no_deadline = false;                       // a held read came without a RemoteBudget
  std::vector<std::weak_ptr<const void>> handed;  // values read

  // Reads of these keys wait for the latch from now on; the reads counted so far are forgotten.
  void Hold(const std::vector<std::string>& names) {
    std::lock_guard<std::mutex> lock(mu);
    held.insert(names.begin(), names.end());
    asked.clear();
  }
  void Open() {
    {
      std::lock_guard<std::mutex> lock(mu);
      open = true;
    }
    cv.notify_all();
  }
  bool WaitEntered(int n) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::duration<double>(kLiveness),
                       [&] { return entered >= n; });
  }
  // Values read and still held by someone.
  int Live() {
    std::lock_guard<std::mutex> lock(mu);
    return static_cast<int>(
        std::count_if(handed.begin(), handed.end(), [](const auto& w) { return !w.expired(); }));
  }
};

class LatchTier : public RemoteTier {
 public:
  explicit LatchTier(Store* store) : store_(store) {}
  std::vector<std::optional<RemoteValue>> Get(const std::vector<std::string>& keys) override {
    std::unique_lock<std::mutex> lock(store_->mu);
    for (const auto& k : keys) store_->asked[k]++;
    const bool held = std::any_of(keys.begin(), keys.end(),
                                  [&](const auto& k) { return store_->held.count(k) != 0; });
    std::vector<std::optional<RemoteValue>> out(keys.size());
    if (held && !store_->open) {
      store_->entered++;
      store_->cv.notify_all();
      auto deadline = RemoteBudget::Deadline();
      if (!deadline) {
        store_->no_deadline = true;
        deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      }
      if (!store_->cv.wait_until(lock, *deadline, [&] { return store_->open; })) {
        stats_.deadline_misses++;
        stats_.misses += keys.size();
        return out;
      }
    }
    for (size_t i = 0; i < keys.size(); ++i) {
      auto it = store_->values.find(keys[i]);
      if (it == store_->values.end()) {
        stats_.misses++;
        continue;
      }
      auto copy = std::make_shared<const std::string>(it->second);
      store_->handed.push_back(copy);
      out[i] = RemoteValue{copy, *copy};
      stats_.hits++;
    }
    return out;
  }
  int CountLeading(const std::vector<std::string>& keys) override {
    std::lock_guard<std::mutex> lock(store_->mu);
    int n = 0;
    while (n < int(keys.size()) && store_->values.count(keys[n])) ++n;
    return n;
  }
  bool Put(std::string key, std::string value, int) override {
    std::lock_guard<std::mutex> lock(store_->mu);
    store_->values[key] = std::move(value);
    stats_.writes++;
    return true;
  }
  void Persist(std::string) override {}
  void CountInvalid() override {
    std::lock_guard<std::mutex> lock(store_->mu);
    stats_.invalid++;
  }
  RemoteStats Stats() const override {
    std::lock_guard<std::mutex> lock(store_->mu);
    return stats_;
  }
  void Flush() override {}

 private:
  Store* store_;
  RemoteStats stats_;  // guarded by store_->mu
};

inline EngineOptions Options(int deadline_ms = 60000) {
  EngineOptions o;
  o.model_path = kStories;
  o.threads = 2;
  o.batch_size = 32;  // parallel: the default 4
  o.cache_redis_deadline_ms = deadline_ms;
  return o;
}

inline std::unique_ptr<Engine> MakeEngine(Store* store, EngineOptions o = Options()) {
  auto model = Model::Load(o.model_path);
  PC_CHECK(model.ok());
  auto e = CreateEngine(o, std::move(model).value(), false, std::make_unique<LatchTier>(store));
  PC_CHECK(e.ok());
  return std::move(e).value();
}

inline std::shared_ptr<RequestHandle> Submit(Engine& e, std::vector<int32_t> prompt, int n = 8) {
  auto h = e.Submit(Greedy(std::move(prompt), n));
  PC_CHECK(h.ok());
  return *h;
}

}  // namespace remote_test
}  // namespace promptcache
