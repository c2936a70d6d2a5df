// ThreadPool: a fixed set of worker threads that run one data-parallel job at a time.
//
// A decode step issues a few hundred short parallel jobs (one per matrix multiply), so waking
// workers through a condition variable each time would cost more than the work. Workers spin for a
// short while after each job and only then go to sleep; the calling thread always takes part as
// worker 0, so a pool of N threads starts N-1 OS threads.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace promptcache {

class ThreadPool {
 public:
  // n_threads <= 0 means one per hardware core.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Runs fn(thread_index, n_threads) once on every thread of the pool and returns when all have
  // finished. Not reentrant: fn must not call Run on the same pool.
  void Run(const std::function<void(int, int)>& fn);

  // Splits [0, n) into contiguous chunks, one per thread, and calls fn(begin, end) for each
  // non-empty chunk. `align` rounds chunk boundaries to multiples of it (e.g. SIMD row tiles).
  void ParallelFor(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t align = 1);

  // Splits [0, n) into chunks of `chunk` (the last may be shorter) that the threads take in
  // turn as they finish their previous one: a thread slowed down (a busy neighbour on a shared
  // core) takes fewer chunks instead of holding the others up at the join.
  void ParallelForDynamic(int64_t n, int64_t chunk,
                          const std::function<void(int64_t, int64_t)>& fn);

  static int DefaultThreads();

 private:
  void WorkerLoop(int index);

  int n_threads_;
  std::vector<std::thread> workers_;
  const std::function<void(int, int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
};

}  // namespace promptcache
