#include "core/thread_pool.h"

#include <algorithm>

#include "core/check.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define PC_CPU_RELAX() _mm_pause()
#else
#define PC_CPU_RELAX() std::this_thread::yield()
#endif

namespace promptcache {
namespace {
// About 100 microseconds of spinning before a worker sleeps: long enough to bridge the gap
// between two matrix multiplies of one decode step, short enough not to burn a core when idle.
constexpr int kSpinIterations = 20000;
constexpr int kSpinBeforeYield = 2000;
}  // namespace

int ThreadPool::DefaultThreads() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads <= 0 ? DefaultThreads() : n_threads) {
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    generation_.fetch_add(1);
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::Run(const std::function<void(int, int)>& fn) {
  if (n_threads_ == 1) {
    fn(0, 1);
    return;
  }
  job_ = &fn;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  {
    // Publishing under the lock pairs with a worker's check-then-sleep, so no wakeup is lost.
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  if (sleepers_.load(std::memory_order_acquire) > 0) cv_.notify_all();
  fn(0, n_threads_);
  // When the machine is oversubscribed a worker may be descheduled: after a short spin, yield
  // the core so it can finish instead of burning our time slice waiting for it.
  for (int spin = 0; pending_.load(std::memory_order_acquire) != 0; ++spin) {
    if (spin < kSpinBeforeYield) {
      PC_CPU_RELAX();
    } else {
      std::this_thread::yield();
    }
  }
  job_ = nullptr;
}

void ThreadPool::ParallelFor(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                             int64_t align) {
  if (n <= 0) return;
  PC_CHECK(align >= 1);
  const int64_t units = (n + align - 1) / align;
  Run([&](int t, int nt) {
    const int64_t per = units / nt, extra = units % nt;
    const int64_t ub = t * per + std::min<int64_t>(t, extra);
    const int64_t ue = ub + per + (t < extra ? 1 : 0);
    const int64_t b = std::min(n, ub * align), e = std::min(n, ue * align);
    if (b < e) fn(b, e);
  });
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int spin = 0; gen == seen && spin < kSpinIterations; ++spin) {
      if (spin < kSpinBeforeYield) {
        PC_CPU_RELAX();
      } else {
        std::this_thread::yield();
      }
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      sleepers_.fetch_add(1, std::memory_order_acq_rel);
      cv_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      sleepers_.fetch_sub(1, std::memory_order_acq_rel);
      gen = generation_.load(std::memory_order_acquire);
    }
    seen = gen;
    if (stop_.load()) return;
    (*job_)(index, n_threads_);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::ParallelForDynamic(int64_t n, int64_t chunk,
                                    const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  PC_CHECK(chunk >= 1);
  std::atomic<int64_t> next{0};
  Run([&](int, int) {
    for (int64_t b; (b = next.fetch_add(chunk, std::memory_order_relaxed)) < n;) {
      fn(b, std::min(n, b + chunk));
    }
  });
}

}  // namespace promptcache
