// The stand-in dense work of tiered_step_bench: a wait or a busy loop of a fixed length.
#include "tests/bench/tiered_dense_work.h"

#include <chrono>
#include <thread>
#include <vector>

namespace shardrec::bench {
namespace {

class StandInDense : public DenseWork {
 public:
  StandInDense(double ms, bool spin, int64_t batch, int32_t dim)
      : ms_(ms), spin_(spin), grad_len_(batch * dim) {}

  void ForwardBackward(const float* /*pooled*/, float* d_pooled) override {
    using Clock = std::chrono::steady_clock;
    if (ms_ > 0) {
      const auto until = Clock::now() + std::chrono::duration<double, std::milli>(ms_);
      if (!spin_) {
        std::this_thread::sleep_until(until);
      } else {
        volatile uint64_t x = 0;
        while (Clock::now() < until)
          for (int i = 0; i < 256; ++i) x = x + 1;
      }
    }
    for (int64_t i = 0; i < grad_len_; ++i) d_pooled[i] = 0.01f;
  }

 private:
  double ms_;
  bool spin_;
  int64_t grad_len_;
};

}  // namespace

std::unique_ptr<DenseWork> MakeStandInDense(double ms, bool spin, int64_t batch, int32_t dim) {
  return std::make_unique<StandInDense>(ms, spin, batch, dim);
}

}  // namespace shardrec::bench
