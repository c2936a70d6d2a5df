#include "kv/remote_tier.h"

#include <algorithm>

namespace promptcache {

void RemoteTier::Stream(const std::vector<std::string>& keys, int window,
                        const std::function<bool(std::optional<RemoteValue>)>& use) {
  const size_t step = static_cast<size_t>(std::max(1, window));
  for (size_t first = 0; first < keys.size(); first += step) {
    const size_t end = std::min(keys.size(), first + step);
    std::vector<std::optional<RemoteValue>> values =
        Get(std::vector<std::string>(keys.begin() + first, keys.begin() + end));
    for (std::optional<RemoteValue>& v : values) {
      if (!use(std::move(v))) return;
    }
  }
}

CircuitBreaker::Pass CircuitBreaker::AllowRead(TimePoint now) {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ == State::kClosed) return {true, false};
  if (state_ == State::kOpen && now >= reopen_at_) state_ = State::kHalfOpen;
  if (state_ == State::kHalfOpen && !probing_) {
    probing_ = true;
    return {true, true};
  }
  ++skipped_;
  return {};
}

bool CircuitBreaker::AllowWrite() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_ == State::kClosed;
}

CircuitBreaker::Change CircuitBreaker::Succeeded(Path path) {
  std::lock_guard<std::mutex> lock(mu_);
  if (path == Path::kWrite) {
    if (state_ == State::kClosed) write_failures_ = 0;
    return Change::kNone;
  }
  read_failures_ = 0;
  if (state_ == State::kClosed) return Change::kNone;
  state_ = State::kClosed;
  probing_ = false;
  write_failures_ = 0;
  cooldown_s_ = options_.cooldown_s;
  return Change::kClosed;
}

CircuitBreaker::Change CircuitBreaker::Failed(Path path, TimePoint now, bool probe) {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ == State::kHalfOpen && path == Path::kRead && probe && probing_) {
    probing_ = false;
    cooldown_s_ = std::min(options_.max_cooldown_s, cooldown_s_ * 2);
    return Open(now);
  }
  if (state_ != State::kClosed) return Change::kNone;  // a call from before it opened
  int& failures = path == Path::kRead ? read_failures_ : write_failures_;
  if (++failures < options_.failures_to_open) return Change::kNone;
  cooldown_s_ = options_.cooldown_s;
  return Open(now);
}

void CircuitBreaker::Abandoned(bool probe) {
  std::lock_guard<std::mutex> lock(mu_);
  if (probe && state_ == State::kHalfOpen) probing_ = false;
}

CircuitBreaker::Change CircuitBreaker::Open(TimePoint now) {
  const bool was_closed = state_ == State::kClosed;
  state_ = State::kOpen;
  read_failures_ = write_failures_ = 0;
  reopen_at_ = now + std::chrono::microseconds(int64_t(cooldown_s_ * 1e6));
  ++opens_;
  return was_closed ? Change::kOpened : Change::kNone;
}

CircuitBreaker::State CircuitBreaker::state() const {
  std::lock_guard<std::mutex> lock(mu_);
  return state_;
}
uint64_t CircuitBreaker::opens() const {
  std::lock_guard<std::mutex> lock(mu_);
  return opens_;
}
uint64_t CircuitBreaker::skipped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return skipped_;
}
double CircuitBreaker::cooldown_s() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cooldown_s_;
}

namespace {
thread_local std::optional<std::chrono::steady_clock::time_point> budget_deadline;
}  // namespace

RemoteBudget::RemoteBudget(int ms) : saved_(budget_deadline) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  budget_deadline = saved_ && *saved_ < deadline ? *saved_ : deadline;
}

RemoteBudget::~RemoteBudget() { budget_deadline = saved_; }

std::optional<std::chrono::steady_clock::time_point> RemoteBudget::Deadline() {
  return budget_deadline;
}

std::string RemoteKeyPrefix(const std::string& fingerprint, KvType type, int block_size) {
  return "pc:3:" + fingerprint + ":" + KvTypeName(type) + ":b" + std::to_string(block_size) + ":";
}

std::string RemoteKey(const std::string& prefix, const BlockKey& ns, const BlockKey& key) {
  return prefix + ns.Hex() + ":" + key.Hex();
}

}  // namespace promptcache
