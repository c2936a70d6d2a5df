#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <climits>

#include "core/check.h"
#include "core/cpu_topology.h"
#include "core/profile.h"

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define PC_CPU_RELAX() _mm_pause()
#else
#define PC_CPU_RELAX() std::this_thread::yield()
#endif

namespace promptcache {
namespace {

// A waiting thread first spins on `pause` (the gaps between the jobs of a decode step, and the
// spread of a balanced job's finishes, are microseconds), then spins on sched_yield, which lets
// whatever else is ready on its core run (another process, or the pool's own thread that the job
// waits for) while still seeing the job's end within a microsecond or so on an idle machine, and
// only then sleeps on a futex, which frees the core until woken.
// A worker waiting for the next job: a prefill chunk's jobs follow each other within the spread
// of one job's finishes (up to a few hundred microseconds).
constexpr int64_t kIdlePauseNs = 50'000;
constexpr int64_t kIdleYieldNs = 1'000'000;
// The calling thread waiting for a job's last tasks.
constexpr int64_t kJoinPauseNs = 30'000;
constexpr int64_t kJoinYieldNs = 600'000;
// (Chosen on a 2-core machine running other builds: against pausing for 100 / 30 us then sleeping,
// the yield phase raised smollm2-135m's 2-thread generation from 30-32 to 36-45 tokens/s,
// medians of alternating runs; the many-core cost of the choice is for bench_scaling.sh to show.)

uint64_t Pack(int64_t n_tasks, int64_t next) { return uint64_t(n_tasks) << 32 | uint64_t(next); }
int64_t Tasks(uint64_t w) { return int64_t(w >> 32); }
int64_t Next(uint64_t w) { return int64_t(w & 0xffffffffu); }

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Sleeps while *word == expected (returns at once if it is not, or on any wakeup).
void FutexWait(std::atomic<uint32_t>* word, uint32_t expected) {
#if defined(__linux__)
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected, nullptr,
          nullptr, 0);
#else
  word->wait(expected);
#endif
}

void FutexWake(std::atomic<uint32_t>* word, int n) {
#if defined(__linux__)
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE, n, nullptr, nullptr, 0);
#else
  if (n == 1) {
    word->notify_one();
  } else {
    word->notify_all();
  }
#endif
}

// Spins on pause until pred() holds or `pause_ns` have passed, then on sched_yield until
// `yield_ns` have; returns whether pred() holds.
template <typename Pred>
bool SpinFor(int64_t pause_ns, int64_t yield_ns, Pred&& pred) {
  int64_t deadline = 0;
  for (int i = 0;; ++i) {
    if (pred()) return true;
    PC_CPU_RELAX();
    if ((i & 63) == 63) {  // the clock only now and then: it costs more than a pause
      const int64_t now = NowNs();
      if (deadline == 0) {
        deadline = now + pause_ns;
      } else if (now >= deadline) {
        break;
      }
    }
  }
  for (const int64_t end = NowNs() + yield_ns; NowNs() < end;) {
    if (pred()) return true;
    std::this_thread::yield();
  }
  return pred();
}

}  // namespace

int ThreadPool::DefaultThreads() { return DefaultThreadCount(); }

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads <= 0 ? DefaultThreads() : n_threads) {
  prof_begin_.assign(n_threads_, 0);
  prof_finish_.assign(n_threads_, 0);
  prof_tasks_.assign(n_threads_, 0);
  prof_bytes_.assign(n_threads_, 0);
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_seq_cst);
  epoch_.fetch_add(1, std::memory_order_seq_cst);
  FutexWake(&epoch_, INT_MAX);
  for (auto& t : workers_) t.join();
}

void ThreadPool::set_profiler(Profiler* p) {
  PC_CHECK(p == nullptr || p->n_threads() == n_threads_);
  profiler_ = p;
}

void ThreadPool::RunTasks(int64_t n_tasks, const Task& fn) {
  if (n_tasks <= 0) return;
  if (n_threads_ == 1 || n_tasks == 1) {
    for (int64_t t = 0; t < n_tasks; ++t) fn(t, 0);
    return;
  }
  PC_CHECK(n_tasks < (int64_t(1) << 31));
  int64_t start = 0;
  if (profiler_ != nullptr) {
    start = ProfileNowNs();
    std::fill(prof_tasks_.begin(), prof_tasks_.end(), 0);
    std::fill(prof_bytes_.begin(), prof_bytes_.end(), 0);
  }
  profiling_.store(profiler_ != nullptr, std::memory_order_relaxed);
  job_.store(&fn, std::memory_order_relaxed);
  done_.store(0, std::memory_order_relaxed);
  // Publishing the word releases the stores above to every thread that claims a task from it.
  word_.store(Pack(n_tasks, 0), std::memory_order_release);
  epoch_.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) {
    FutexWake(&epoch_, static_cast<int>(std::min<int64_t>(n_tasks - 1, n_threads_ - 1)));
  }
  Work(0);
  const uint32_t all = static_cast<uint32_t>(n_tasks);
  if (!SpinFor(kJoinPauseNs, kJoinYieldNs,
               [&] { return done_.load(std::memory_order_acquire) == all; })) {
    // Dekker with the worker that finishes last: it adds to done_ and then reads
    // caller_sleeping_; we set caller_sleeping_ and then read done_ (all sequentially
    // consistent), so one of us sees the other.
    caller_sleeping_.store(1, std::memory_order_seq_cst);
    for (uint32_t d; (d = done_.load(std::memory_order_seq_cst)) != all;) FutexWait(&done_, d);
    caller_sleeping_.store(0, std::memory_order_relaxed);
  }
  job_.store(nullptr, std::memory_order_relaxed);
  if (profiler_ != nullptr) {
    profiler_->Job({start, ProfileNowNs(), prof_begin_, prof_finish_, prof_tasks_, prof_bytes_});
  }
}

void ThreadPool::CountProfiledBytes(int thread, int64_t bytes) {
  // A task sees the job it belongs to until it is counted done; set_profiler never runs during
  // a job, so profiler_ is stable while any task runs.
  if (job_.load(std::memory_order_relaxed) != nullptr) {
    prof_bytes_[thread] += bytes;
  } else {
    profiler_->Bytes(bytes);  // the calling thread, alone
  }
}

void ThreadPool::Work(int thread) {
  const Task* fn = nullptr;
  int64_t ran = 0, n_tasks = 0;
  bool profiling = false;
  for (;;) {
    // Look before claiming: once the tasks are gone, a read costs the others less than an RMW.
    const uint64_t seen = word_.load(std::memory_order_relaxed);
    if (Next(seen) >= Tasks(seen)) break;
    // A claim: task Next(w) of the job current at this instant. Until this thread counts it
    // done the job cannot finish, so the job's fn (read after the claim) stays valid, and
    // every later claim of this loop is of the same job.
    const uint64_t w = word_.fetch_add(1, std::memory_order_acq_rel);
    if (Next(w) >= Tasks(w)) break;
    if (fn == nullptr) {
      fn = job_.load(std::memory_order_relaxed);
      n_tasks = Tasks(w);
      profiling = profiling_.load(std::memory_order_relaxed);
      if (profiling) prof_begin_[thread] = ProfileNowNs();
    }
    (*fn)(Next(w), thread);
    ++ran;
  }
  if (ran == 0) return;
  if (profiling) {
    prof_finish_[thread] = ProfileNowNs();
    prof_tasks_[thread] = static_cast<int>(ran);
  }
  const uint32_t before = done_.fetch_add(static_cast<uint32_t>(ran), std::memory_order_seq_cst);
  if (before + ran == n_tasks && thread != 0 &&
      caller_sleeping_.load(std::memory_order_seq_cst) != 0) {
    FutexWake(&done_, 1);
  }
}

void ThreadPool::WorkerLoop(int index) {
  uint32_t seen = 0;
  for (;;) {
    uint32_t now = seen;
    auto changed = [&] { return (now = epoch_.load(std::memory_order_acquire)) != seen; };
    if (!SpinFor(kIdlePauseNs, kIdleYieldNs, changed)) {
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      // Dekker with RunTasks: it bumps epoch_ and then reads sleepers_.
      while ((now = epoch_.load(std::memory_order_seq_cst)) == seen) FutexWait(&epoch_, seen);
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
    }
    seen = now;
    if (stop_.load(std::memory_order_acquire)) return;
    Work(index);
  }
}

void ThreadPool::Run(const std::function<void(int, int)>& fn) {
  const int nt = n_threads_;
  RunTasks(nt, [&](int64_t task, int) { fn(static_cast<int>(task), nt); });
}

void ThreadPool::ParallelFor(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                             int64_t align) {
  if (n <= 0) return;
  PC_CHECK(align >= 1);
  const int64_t units = (n + align - 1) / align;
  const int64_t parts = std::min<int64_t>(n_threads_, units);
  RunTasks(parts, [&](int64_t t, int) {
    const int64_t per = units / parts, extra = units % parts;
    const int64_t ub = t * per + std::min<int64_t>(t, extra);
    const int64_t ue = ub + per + (t < extra ? 1 : 0);
    const int64_t b = std::min(n, ub * align), e = std::min(n, ue * align);
    if (b < e) fn(b, e);
  });
}

void ThreadPool::ParallelForDynamic(int64_t n, int64_t chunk,
                                    const std::function<void(int64_t, int64_t, int)>& fn) {
  if (n <= 0) return;
  PC_CHECK(chunk >= 1);
  RunTasks((n + chunk - 1) / chunk, [&](int64_t task, int thread) {
    const int64_t b = task * chunk;
    fn(b, std::min(n, b + chunk), thread);
  });
}

}  // namespace promptcache
