// Progress lines on stderr for work that takes more than a few seconds (thread-safe).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>

namespace statecheck {

class Progress {
 public:
  Progress(std::string label, long total)
      : label_(std::move(label)), total_(total), start_(clock::now()), last_(start_) {}

  // Adds n finished items; prints "label: done/total (elapsed s)" at most every 2 s.
  void tick(long n = 1) {
    const long done = done_ += n;
    const auto now = clock::now();
    std::lock_guard<std::mutex> lock(mutex_);
    if (now - last_ >= std::chrono::seconds(2) && done < total_) {
      last_ = now;
      std::fprintf(stderr, "  %s: %ld/%ld (%.0f s)\n", label_.c_str(), done, total_, seconds(now));
    }
  }

  double elapsed() const { return seconds(clock::now()); }

 private:
  using clock = std::chrono::steady_clock;
  double seconds(clock::time_point now) const {
    return std::chrono::duration<double>(now - start_).count();
  }
  std::string label_;
  long total_;
  std::atomic<long> done_{0};
  clock::time_point start_, last_;
  std::mutex mutex_;
};

}  // namespace statecheck
