// ThreadPool: a fixed set of worker threads that run one data-parallel job at a time.
//
// A decode step issues a few hundred short parallel jobs (one per matrix multiply), so a job
// must start and finish in microseconds, and on a busy machine (other processes, a container's
// CPU quota) a thread that has lost its core must not hold the others up. So:
//  - A job is a list of tasks that threads claim one at a time from a shared counter; it is done
//    when every task has run, not when every thread has checked in. A worker that is not running
//    when a job starts simply takes no task, and the running threads do its share.
//  - Threads waiting (a worker for the next job, the calling thread for the last task of this
//    one) spin briefly, then yield their core in a loop, then sleep on a futex. Spinning bridges
//    the microsecond gaps of a decode step; yielding and then sleeping hand the core back, so
//    that the thread the job waits for (descheduled by another process) can run, instead of
//    spinning in its way.
// The calling thread always takes part as thread 0, so a pool of N threads starts N-1 OS threads.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace promptcache {

class Profiler;

class ThreadPool {
 public:
  // n_threads <= 0 means DefaultThreads().
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Runs fn(task, thread) for every task in [0, n_tasks) and returns when all have finished.
  // Tasks are taken in order by whichever threads are running; `thread` (in [0, size()); 0 is
  // the calling thread) is unique among the tasks running at one time, so it can index
  // per-thread scratch. One task, or a pool of one thread, runs on the calling thread without
  // synchronizing. Not reentrant: fn must not start a job on the same pool.
  void RunTasks(int64_t n_tasks, const std::function<void(int64_t, int)>& fn);

  // Runs fn(t, size()) for every t in [0, size()): RunTasks with one task per thread, where t is
  // the task (taken by any thread; each t runs once, so it may also index per-thread scratch).
  void Run(const std::function<void(int, int)>& fn);

  // Splits [0, n) into size() contiguous chunks (as even as `align` allows) and calls
  // fn(begin, end) for each non-empty one. `align` rounds chunk boundaries to multiples of it
  // (e.g. SIMD row tiles).
  void ParallelFor(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t align = 1);

  // Splits [0, n) into chunks of `chunk` (the last may be shorter) and calls
  // fn(begin, end, thread) for each, `thread` as in RunTasks: many small chunks spread uneven
  // work, and a slowed thread takes fewer of them.
  void ParallelForDynamic(int64_t n, int64_t chunk,
                          const std::function<void(int64_t, int64_t, int)>& fn);

  // One thread per physical core this process may run on, within its cgroup's CPU quota
  // (core/cpu_topology.h).
  static int DefaultThreads();

  // Reports every job's timing to `p` (core/profile.h) until set back to null; p must have
  // size() threads. Not while a job runs.
  void set_profiler(Profiler* p);
  Profiler* profiler() const { return profiler_; }

  // While a profiler is attached: `thread` (the index RunTasks gives a task; 0, the calling
  // thread, outside a job) read `bytes` of weights or K/V. A task's count goes into its job's
  // report, one outside a job to the profiler's current operation; nothing when not profiling.
  void CountBytes(int thread, int64_t bytes) {
    if (profiler_ != nullptr) CountProfiledBytes(thread, bytes);
  }

 private:
  using Task = std::function<void(int64_t, int)>;

  void WorkerLoop(int index);
  // Claims and runs tasks of the current job until none is left; returns how many it ran.
  // Counts them into done_ (and wakes the calling thread when they were the last).
  void Work(int thread);
  void CountProfiledBytes(int thread, int64_t bytes);

  int n_threads_;
  std::vector<std::thread> workers_;
  // The job: its task count (high 32 bits) and the next task to claim (low 32 bits), so one
  // fetch_add claims a task of whichever job is current. Separate cache lines: every thread
  // writes word_ and done_, and spins reading epoch_.
  alignas(128) std::atomic<uint64_t> word_{0};
  alignas(128) std::atomic<uint32_t> done_{0};  // tasks finished (a futex word)
  std::atomic<uint32_t> caller_sleeping_{0};
  alignas(128) std::atomic<uint32_t> epoch_{0};  // bumped per job (a futex word)
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
  std::atomic<const Task*> job_{nullptr};
  std::atomic<bool> profiling_{false};
  Profiler* profiler_ = nullptr;
  std::vector<int64_t> prof_begin_, prof_finish_, prof_bytes_;
  std::vector<int> prof_tasks_;
};

}  // namespace promptcache
