// The communication worker: a FIFO of closures drained by one thread.
#include "impl/comm/work.h"

#include <exception>
#include <utility>

namespace shardrec::comm {

Status Work::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_; });
  return status_;
}

bool Work::Done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

void Work::Finish(Status status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    status_ = std::move(status);
    done_ = true;
  }
  cv_.notify_all();
}

CommWorker::CommWorker() : thread_([this] { Loop(); }) {}

CommWorker::~CommWorker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::shared_ptr<Work> CommWorker::Submit(std::function<Status()> op) {
  auto work = std::make_shared<Work>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.emplace_back(std::move(op), work);
  }
  cv_.notify_one();
  return work;
}

void CommWorker::Loop() {
  for (;;) {
    std::pair<std::function<Status()>, std::shared_ptr<Work>> item;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      // Drain the queue before stopping: a submitted operation is a collective its peers wait on.
      if (queue_.empty()) return;
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    Status status;
    try {
      status = item.first();
    } catch (const StatusError& e) {
      status = e.status();
    } catch (const std::exception& e) {
      status = Status::Internal("communication worker: ", e.what());
    } catch (...) {
      status = Status::Internal("communication worker: unknown exception");
    }
    item.second->Finish(std::move(status));
  }
}

}  // namespace shardrec::comm
