// Stopping a worker thread that sleeps on a condition variable until it is told to stop (the
// engine's loop, the fidelity sampler's): the flag is set under the worker's mutex, so that the
// worker cannot test it, miss the change and then sleep through the notification; every waiter
// is woken, and the thread is joined.
#pragma once

#include <condition_variable>
#include <mutex>
#include <thread>

namespace promptcache {

// `Flag` is bool or std::atomic<bool>: whatever the worker tests under `mu`.
template <typename Flag>
void StopAndJoin(std::mutex& mu, Flag& stop, std::condition_variable& cv, std::thread& thread) {
  {
    std::lock_guard<std::mutex> lock(mu);
    stop = true;
  }
  cv.notify_all();
  thread.join();
}

}  // namespace promptcache
