// Asynchronous collectives: a communication worker runs submitted operations one after another
// on its own thread and hands back a Work handle to wait on. The collection's pipelined input
// distribution and the DDP bucketer use it to overlap communication with the host's compute.
//
// Operations run in submission order, so ranks that submit the same collectives in the same
// order issue them in the same order (what every backend requires). An operation is a closure
// returning a Status; it is bounded by the timeouts of the collectives it calls, so waiting on
// it is bounded too.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "impl/core/status.h"

namespace shardrec::comm {

// The result of one submitted operation. Thread-safe.
class Work {
 public:
  // Blocks until the operation has run; returns its status (an exception it threw becomes
  // kInternal, a StatusError its status). Calling it again returns the same status.
  Status Wait();
  // True once the operation has run (Wait would not block).
  bool Done() const;

 private:
  friend class CommWorker;
  void Finish(Status status);

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  Status status_;
};

// One thread that runs operations in FIFO order. Submit is thread-safe. Destruction waits for
// every submitted operation to finish (each is bounded by its collectives' timeouts).
class CommWorker {
 public:
  CommWorker();
  ~CommWorker();
  CommWorker(const CommWorker&) = delete;
  CommWorker& operator=(const CommWorker&) = delete;

  // Queues `op`; the returned handle completes when it has run.
  std::shared_ptr<Work> Submit(std::function<Status()> op);

 private:
  void Loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::function<Status()>, std::shared_ptr<Work>>> queue_;
  bool stop_ = false;
  std::thread thread_;  // last: started after every other member exists
};

}  // namespace shardrec::comm
