// A small parallel_for for the CPU reference: std::thread workers pulling job indices from a shared
// counter (jobs differ in cost, e.g. causal rows, so dynamic hand-out balances better than fixed slices).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace flashgate::cpu {

// Worker threads: FLASHGATE_CPU_THREADS when set to a positive number, else hardware_concurrency.
inline int cpu_thread_count() {
  if (const char* env = std::getenv("FLASHGATE_CPU_THREADS")) {
    const long n = std::strtol(env, nullptr, 10);
    if (n > 0) return static_cast<int>(std::min<long>(n, 1024));
  }
  const unsigned hw = std::thread::hardware_concurrency();
  return hw ? static_cast<int>(hw) : 1;
}

// Calls job(i) for every i in [0, count), spread over the worker threads. The first exception thrown by
// a job is rethrown here after all workers stopped. Jobs must write disjoint memory.
template <class Job>
void parallel_for(int64_t count, Job&& job) {
  if (count <= 0) return;
  const int threads = static_cast<int>(std::min<int64_t>(cpu_thread_count(), count));
  if (threads <= 1) {
    for (int64_t i = 0; i < count; ++i) job(i);
    return;
  }
  std::atomic<int64_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto work = [&] {
    for (int64_t i = next++; i < count && !failed; i = next++) {
      try {
        job(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
        failed = true;
      }
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(threads - 1);
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();  // the calling thread works too
  for (std::thread& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace flashgate::cpu
