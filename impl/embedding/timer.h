// A scoped wall-clock timer that adds its lifetime to a counter (communication vs. total).
#pragma once

#include <chrono>

namespace shardrec::embedding {

class ScopedTimer {
 public:
  explicit ScopedTimer(double* sink) : sink_(sink), start_(std::chrono::steady_clock::now()) {}
  ~ScopedTimer() {
    *sink_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;

 private:
  double* sink_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace shardrec::embedding
