#include "core/thread_pool.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "core/profile.h"

namespace promptcache {
namespace {

// Runs fn on a thread of its own and fails (ending the process: a stuck pool cannot be cleaned
// up) unless it returns within `seconds`: a liveness bound, not a timing.
void WithinSeconds(int seconds, const std::function<void()>& fn, const char* what) {
  std::future<void> done = std::async(std::launch::async, fn);
  if (done.wait_for(std::chrono::seconds(seconds)) != std::future_status::ready) {
    ADD_FAILURE() << what;
    std::_Exit(1);
  }
  done.get();
}

TEST(ThreadPool, ParallelForCoversEveryIndexOnce) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 7, 64, 1000}) {
      for (int64_t align : {1, 4, 16}) {
        std::vector<std::atomic<int>> hits(n);
        pool.ParallelFor(
            n,
            [&](int64_t b, int64_t e) {
              EXPECT_EQ(b % align, 0);
              for (int64_t i = b; i < e; ++i) hits[i]++;
            },
            align);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << i;
      }
    }
  }
}

TEST(ThreadPool, ParallelForDynamicCoversEveryIndexOnceInChunks) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 7, 64, 1000}) {
      for (int64_t chunk : {1, 2, 16, 5000}) {
        std::vector<std::atomic<int>> hits(n);
        pool.ParallelForDynamic(n, chunk, [&](int64_t b, int64_t e, int) {
          EXPECT_EQ(b % chunk, 0);
          EXPECT_TRUE(e - b == chunk || e == n) << b << " " << e;
          for (int64_t i = b; i < e; ++i) hits[i]++;
        });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << i;
      }
    }
  }
}

TEST(ThreadPool, ManyShortJobs) {
  ThreadPool pool(2);
  std::atomic<int64_t> sum{0};
  for (int j = 0; j < 20000; ++j) pool.Run([&](int t, int) { sum += t + 1; });
  EXPECT_EQ(sum.load(), 20000 * 3);
}

// The thread index ParallelForDynamic and RunTasks pass is what per-thread scratch is indexed
// by: in range, 0 on the calling thread, one OS thread per index, and never held by two chunks
// running at once. (Mutation tried: passing the chunk's index instead of the thread's fails the
// OS-thread check; passing 0 always fails the in-use check.)
TEST(ThreadPool, ParallelForDynamicPassesAThreadIndexForScratch) {
  for (int threads : {2, 3, 4}) {
    ThreadPool pool(threads);
    std::vector<std::atomic<int>> in_use(threads);
    std::mutex mu;
    std::map<int, std::thread::id> os_thread;
    const std::thread::id caller = std::this_thread::get_id();
    for (int round = 0; round < 50; ++round) {
      pool.ParallelForDynamic(64, 1, [&](int64_t b, int64_t, int thread) {
        ASSERT_GE(thread, 0);
        ASSERT_LT(thread, threads);
        EXPECT_EQ(in_use[thread].exchange(1), 0) << "two chunks at once on thread " << thread;
        {
          std::lock_guard<std::mutex> lock(mu);
          const auto it = os_thread.emplace(thread, std::this_thread::get_id()).first;
          EXPECT_EQ(it->second, std::this_thread::get_id()) << "index " << thread << " moved";
          if (thread == 0) {
            EXPECT_EQ(std::this_thread::get_id(), caller);
          }
        }
        if (b % 7 == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
        in_use[thread].store(0);
      });
    }
    std::set<std::thread::id> distinct;
    for (const auto& [index, id] : os_thread) distinct.insert(id);
    EXPECT_EQ(distinct.size(), os_thread.size());
  }
}

// Jobs of uneven tasks, some of which sleep (a thread losing its core mid-job), with idle gaps
// long enough for the workers to go to sleep on the futex between some of them: every job
// completes and computes exactly what a serial loop does. (Mutation tried: the last worker not
// waking the sleeping calling thread hangs here.)
TEST(ThreadPool, JobsWithSleepingThreadsCompleteWithSerialResults) {
  WithinSeconds(
      120,
      [] {
        for (int threads : {2, 3, 8}) {
          ThreadPool pool(threads);
          std::vector<uint64_t> out(97), expect(97);
          for (int job = 0; job < 300; ++job) {
            const int64_t n = 1 + job % 97;
            auto value = [&](int64_t i) { return uint64_t(i) * 2654435761u + uint64_t(job); };
            pool.RunTasks(n, [&](int64_t i, int) {
              // Some for longer than the calling thread spins and yields before it sleeps.
              if ((i + job) % 13 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
              if ((i + job) % 31 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(3));
              out[i] = value(i);
            });
            for (int64_t i = 0; i < n; ++i) expect[i] = value(i);
            ASSERT_TRUE(std::equal(out.begin(), out.begin() + n, expect.begin())) << job;
            // Every 50th job after a pause longer than the workers' spin: they sleep, and are
            // woken.
            if (job % 50 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
          }
        }
      },
      "a job did not complete");
}

// A worker that is not running (here: held in a signal handler, as a descheduled thread would
// be) takes no task, and the jobs complete without it; released, it works again. (Mutation
// tried: a join that waits for every worker to check in, as the pool's first design did, hangs
// here and fails the liveness bound.)
std::atomic<bool> g_hold{false};
std::atomic<bool> g_held{false};
void HoldHandler(int) {
  g_held = true;
  while (g_hold.load()) {
    timespec ts{0, 1000000};
    nanosleep(&ts, nullptr);
  }
  g_held = false;
}

TEST(ThreadPool, JobsCompleteWhileAWorkerCannotRun) {
  ThreadPool pool(2);
  // The worker's OS thread, from a task it runs.
  std::atomic<bool> found{false};
  pthread_t worker{};
  while (!found) {
    pool.RunTasks(64, [&](int64_t, int thread) {
      if (thread == 1 && !found.exchange(true)) worker = pthread_self();
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    });
  }
  struct sigaction sa = {}, old = {};
  sa.sa_handler = HoldHandler;
  sigemptyset(&sa.sa_mask);
  ASSERT_EQ(sigaction(SIGUSR1, &sa, &old), 0);
  g_hold = true;
  ASSERT_EQ(pthread_kill(worker, SIGUSR1), 0);
  while (!g_held) std::this_thread::sleep_for(std::chrono::milliseconds(1));

  auto run_jobs = [&pool](int jobs) {
    int64_t total = 0;
    std::vector<int64_t> part(16);
    for (int j = 0; j < jobs; ++j) {
      pool.ParallelFor(16, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) part[i] = i + j;
      });
      for (int64_t v : part) total += v;
    }
    return total;
  };
  auto expected = [](int jobs) {
    int64_t total = 0;
    for (int j = 0; j < jobs; ++j) total += 120 + 16 * j;
    return total;
  };
  int64_t total = 0;
  WithinSeconds(
      30, [&] { total = run_jobs(2000); }, "jobs waited for a worker that could not run");
  EXPECT_EQ(total, expected(2000));
  EXPECT_TRUE(g_held.load());  // it really was held throughout

  g_hold = false;
  while (g_held) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(run_jobs(500), expected(500));
  sigaction(SIGUSR1, &old, nullptr);
}

// A pool of three threads with a profiler attached, in one pass's operation "work" of layer 0.
class ProfiledPool : public testing::Test {
 protected:
  ProfiledPool() {
    pool.set_profiler(&prof);
    prof.BeginPass(1);
    prof.Op("work", OpKind::kOther, 0);
  }
  ThreadPool pool{3};
  Profiler prof{3};
};

// The profiler hook: one job reported per parallel job (none for what runs inline), with each
// thread's task count.
TEST_F(ProfiledPool, ReportsJobs) {
  pool.RunTasks(30, [](int64_t, int) {});
  pool.RunTasks(1, [](int64_t, int) {});  // one task: inline, no synchronization
  pool.ParallelFor(10, [](int64_t, int64_t) {});
  prof.EndPass();
  pool.set_profiler(nullptr);
  pool.RunTasks(30, [](int64_t, int) {});  // detached: not counted
  ASSERT_EQ(prof.ops().size(), 1u);
  EXPECT_EQ(prof.ops()[0].jobs, 2);
  EXPECT_EQ(prof.layer_jobs().at(0), 2);
  int64_t taking_part = 0;
  for (const Profiler::ThreadStats& th : prof.threads()) taking_part += th.jobs;
  EXPECT_GE(taking_part, 2);  // some thread ran each job's tasks
  EXPECT_LE(taking_part, 6);
}

// Each task's bytes are its thread's, in the job it ran in; the calling thread's outside a job
// (and a one-task job, which runs inline) are thread 0's; nothing is counted once detached.
TEST_F(ProfiledPool, ReportsEachThreadsBytes) {
  std::vector<int64_t> want(3, 0);
  for (int job = 0; job < 2; ++job) {
    std::vector<int> ran_on(40, -1);
    pool.RunTasks(40, [&](int64_t task, int thread) {
      // Long enough that the workers take some of the tasks.
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(20);
      while (std::chrono::steady_clock::now() < until) {
      }
      ran_on[task] = thread;
      pool.CountBytes(thread, task + 1);
    });
    for (int t = 0; t < 40; ++t) want[ran_on[t]] += t + 1;
  }
  pool.CountBytes(0, 1000);
  pool.RunTasks(1, [&](int64_t, int thread) { pool.CountBytes(thread, 10000); });
  want[0] += 11000;
  prof.EndPass();
  pool.set_profiler(nullptr);
  pool.CountBytes(0, 5);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(prof.threads()[i].bytes, want[i]) << "thread " << i;
  EXPECT_EQ(prof.ops()[0].bytes, 2 * 820 + 11000);
}

}  // namespace
}  // namespace promptcache
