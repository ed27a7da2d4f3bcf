// RankThreads: W persistent threads, one per rank, that run one job per Run() call, so thread
// start-up is not part of what a multi-rank benchmark times.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace shardrec::bench {

class RankThreads {
 public:
  explicit RankThreads(int world) : world_(world) {
    for (int r = 0; r < world; ++r) threads_.emplace_back([this, r] { Loop(r); });
  }
  ~RankThreads() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
      ++generation_;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  void Run(std::function<void(int)> job) {
    std::unique_lock<std::mutex> l(mu_);
    job_ = std::move(job);
    done_ = 0;
    ++generation_;
    cv_.notify_all();
    done_cv_.wait(l, [&] { return done_ == world_; });
  }

 private:
  void Loop(int r) {
    uint64_t seen = 0;
    for (;;) {
      std::function<void(int)> job;
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return generation_ != seen; });
        seen = generation_;
        if (stop_) return;
        job = job_;
      }
      job(r);
      {
        std::lock_guard<std::mutex> l(mu_);
        if (++done_ == world_) done_cv_.notify_all();
      }
    }
  }
  int world_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::function<void(int)> job_;
  uint64_t generation_ = 0;
  int done_ = 0;
  bool stop_ = false;
};

}  // namespace shardrec::bench
