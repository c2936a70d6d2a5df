// Profiler: where a forward pass's time goes, per operation, per layer and per pool thread, for
// `promptcache bench --profile`. It answers the questions that decide how a pass scales with
// threads: how many synchronization points (parallel jobs) a decode step or a prefill chunk has
// per layer, how long the calling thread runs alone between them, how long each thread waits in
// them (to be woken, and at the join for the slowest), and how uneven the work of one job is.
//
// Off unless a Profiler is attached to the pool (ThreadPool::set_profiler): the forward pass then
// pays one null test per operation and the pool one per job, nothing else. It is not
// thread-safe: every call comes from the thread that runs the forward pass (the pool reports its
// jobs from the calling thread after the join).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace promptcache {

enum class OpKind { kMatMul, kAttention, kNorm, kRope, kActivation, kOther };
const char* OpKindName(OpKind kind);

// Monotonic nanoseconds (steady_clock).
int64_t ProfileNowNs();

// What the pool measured of one parallel job: when it was published, when the caller saw its
// last task finish, and per thread when its first task started and its last one finished, with
// the number of tasks it ran (0: it took none, and its times mean nothing) and the bytes its tasks
// reported reading (ThreadPool::CountBytes).
struct JobTiming {
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  std::span<const int64_t> begin_ns;
  std::span<const int64_t> finish_ns;
  std::span<const int> tasks;
  std::span<const int64_t> bytes;
};

class Profiler {
 public:
  explicit Profiler(int n_threads);

  // One forward pass of `tokens` tokens begins; EndPass closes its last operation.
  void BeginPass(int tokens);
  void EndPass();
  // From now until the next Op or EndPass the time belongs to operation `name` (compared by
  // text) of `kind`, in `layer` (-1: before or after the layers).
  void Op(const char* name, OpKind kind, int layer);
  // A parallel job of the pool ran (inside the current operation).
  void Job(const JobTiming& t);
  // The calling thread, outside any job, read `bytes` for the current operation.
  void Bytes(int64_t bytes);

  struct OpStats {
    std::string name;
    OpKind kind = OpKind::kOther;
    bool in_layers = false;  // marked inside the layers at least once
    int64_t calls = 0;
    int64_t wall_ns = 0;      // on the calling thread, from its mark to the next
    int64_t jobs = 0;         // parallel jobs: synchronization points
    int64_t job_ns = 0;       // wall time inside those jobs
    int64_t busy_ns = 0;      // summed over threads: first task start to last task end
    int64_t max_busy_ns = 0;  // summed over jobs: the busiest thread's
    int64_t wake_ns = 0;      // summed over taking-part threads: publish to first task
    int64_t join_ns = 0;      // summed over taking-part threads: last task end to the join
    int64_t absent_ns = 0;    // summed over threads that took no task: the whole job
    int64_t bytes = 0;        // weights and K/V read, summed over threads (and outside jobs)
  };
  struct ThreadStats {
    int64_t jobs = 0;  // jobs it took part in
    int64_t busy_ns = 0, wake_ns = 0, join_ns = 0, absent_ns = 0;
    int64_t bytes = 0;  // read by its tasks (thread 0: also alone, outside jobs)
  };

  int n_threads() const { return n_threads_; }
  int64_t passes() const { return passes_; }
  int64_t tokens() const { return tokens_; }
  int64_t wall_ns() const { return wall_ns_; }
  int64_t jobs() const;
  int64_t bytes() const;
  const std::vector<OpStats>& ops() const { return ops_; }
  const std::vector<ThreadStats>& threads() const { return threads_; }
  // Wall time of each layer, summed over passes (index = layer).
  const std::vector<int64_t>& layer_ns() const { return layer_ns_; }
  // Jobs of each layer, summed over passes.
  const std::vector<int64_t>& layer_jobs() const { return layer_jobs_; }

 private:
  void Close(int64_t now);

  int n_threads_;
  int64_t passes_ = 0, tokens_ = 0, wall_ns_ = 0;
  int64_t pass_start_ = 0;
  int current_ = -1;  // index into ops_ of the open operation
  int current_layer_ = -1;
  int64_t op_start_ = 0;
  std::vector<OpStats> ops_;
  std::vector<ThreadStats> threads_;
  std::vector<int64_t> layer_ns_, layer_jobs_;
};

// The forward pass's hook: nothing when p is null.
inline void ProfileOp(Profiler* p, const char* name, OpKind kind, int layer = -1) {
  if (p != nullptr) p->Op(name, kind, layer);
}

}  // namespace promptcache
