#include "core/profile.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/check.h"
#include "core/enum_names.h"

namespace promptcache {

constexpr EnumName<OpKind> kOpKindNames[] = {
    {OpKind::kMatMul, "matmul"}, {OpKind::kAttention, "attention"},   {OpKind::kNorm, "norm"},
    {OpKind::kRope, "rope"},     {OpKind::kActivation, "activation"}, {OpKind::kOther, "other"}};
static_assert(NamesEach(kOpKindNames, OpKind::kMatMul, OpKind::kOther));

const char* OpKindName(OpKind kind) { return NameOf(kOpKindNames, kind, "other"); }

int64_t ProfileNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

Profiler::Profiler(int n_threads) : n_threads_(std::max(1, n_threads)), threads_(n_threads_) {}

int64_t Profiler::jobs() const {
  int64_t n = 0;
  for (const OpStats& op : ops_) n += op.jobs;
  return n;
}

int64_t Profiler::bytes() const {
  int64_t n = 0;
  for (const OpStats& op : ops_) n += op.bytes;
  return n;
}

void Profiler::BeginPass(int tokens) {
  ++passes_;
  tokens_ += tokens;
  pass_start_ = ProfileNowNs();
  current_ = -1;
}

void Profiler::EndPass() {
  const int64_t now = ProfileNowNs();
  Close(now);
  current_ = -1;
  wall_ns_ += now - pass_start_;
}

void Profiler::Close(int64_t now) {
  if (current_ < 0) return;
  const int64_t dt = now - op_start_;
  ops_[current_].wall_ns += dt;
  if (current_layer_ >= 0) layer_ns_[current_layer_] += dt;
}

void Profiler::Op(const char* name, OpKind kind, int layer) {
  const int64_t now = ProfileNowNs();
  Close(now);
  int i = 0;
  while (i < static_cast<int>(ops_.size()) && std::strcmp(ops_[i].name.c_str(), name) != 0) ++i;
  if (i == static_cast<int>(ops_.size())) {
    ops_.emplace_back();
    ops_.back().name = name;
    ops_.back().kind = kind;
  }
  OpStats& op = ops_[i];
  ++op.calls;
  if (layer >= 0) {
    op.in_layers = true;
    if (static_cast<int>(layer_ns_.size()) <= layer) {
      layer_ns_.resize(layer + 1);
      layer_jobs_.resize(layer + 1);
    }
  }
  current_ = i;
  current_layer_ = layer;
  op_start_ = now;
}

void Profiler::Job(const JobTiming& t) {
  if (current_ < 0) {  // a job outside any marked operation (e.g. a pass's bookkeeping)
    Op("(unmarked)", OpKind::kOther, -1);
  }
  PC_CHECK(static_cast<int>(t.tasks.size()) == n_threads_);
  PC_CHECK(t.bytes.empty() || static_cast<int>(t.bytes.size()) == n_threads_);
  OpStats& op = ops_[current_];
  const int64_t span = t.end_ns - t.start_ns;
  ++op.jobs;
  op.job_ns += span;
  if (current_layer_ >= 0) ++layer_jobs_[current_layer_];
  int64_t max_busy = 0;
  for (int i = 0; i < n_threads_; ++i) {
    ThreadStats& th = threads_[i];
    if (!t.bytes.empty()) {
      op.bytes += t.bytes[i];
      th.bytes += t.bytes[i];
    }
    if (t.tasks[i] == 0) {
      op.absent_ns += span;
      th.absent_ns += span;
      continue;
    }
    // Clamped: a worker's first claim can come a hair before the caller's clock read.
    const int64_t busy = std::max<int64_t>(0, t.finish_ns[i] - t.begin_ns[i]);
    const int64_t wake = std::max<int64_t>(0, t.begin_ns[i] - t.start_ns);
    const int64_t join = std::max<int64_t>(0, t.end_ns - t.finish_ns[i]);
    max_busy = std::max(max_busy, busy);
    op.busy_ns += busy;
    op.wake_ns += wake;
    op.join_ns += join;
    ++th.jobs;
    th.busy_ns += busy;
    th.wake_ns += wake;
    th.join_ns += join;
  }
  op.max_busy_ns += max_busy;
}

void Profiler::Bytes(int64_t bytes) {
  if (current_ < 0) Op("(unmarked)", OpKind::kOther, -1);
  ops_[current_].bytes += bytes;
  threads_[0].bytes += bytes;
}

}  // namespace promptcache
