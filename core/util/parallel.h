// A minimal parallel-for over independent work items (layers, heads) with std::thread.
#pragma once

#include <atomic>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace statecheck {

// Calls body(i) for i in [0, n) on up to `threads` threads (<= 1: inline, in order).
// Items are handed out dynamically. The first exception thrown by any body is rethrown here after
// all threads have stopped; remaining items are skipped once one has failed.
inline void parallel_for(int n, int threads, const std::function<void(int)>& body) {
  if (threads <= 1 || n <= 1) {
    for (int i = 0; i < n; ++i) body(i);
    return;
  }
  std::atomic<int> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto worker = [&] {
    for (int i = next++; i < n && !failed; i = next++) {
      try {
        body(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
        failed = true;
      }
    }
  };
  std::vector<std::thread> pool;
  const int count = threads < n ? threads : n;
  for (int t = 0; t < count; ++t) pool.emplace_back(worker);
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

// Default thread count: the hardware's, at least 1.
inline int default_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

}  // namespace statecheck
