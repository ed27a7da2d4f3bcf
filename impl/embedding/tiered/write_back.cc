// The write-back queue's writer (write_back.h).
#include "impl/embedding/tiered/write_back.h"

#include <algorithm>
#include <cstring>

#include "impl/core/check.h"

namespace shardrec::embedding::tiered {

namespace {
// Records the writer puts in one batched Put per store.
constexpr size_t kBatch = 256;
// Written records' nodes kept for reuse: enough for the evictions of a few large batches, so the
// queue's memory beyond what it holds stays bounded (docs/disk-tier.md, Memory).
constexpr size_t kSpareNodes = 16384;
}  // namespace

WriteBackQueue::WriteBackQueue(size_t capacity)
    : capacity_(std::max<size_t>(capacity, 1)), writer_([this] { Run(); }) {}

WriteBackQueue::~WriteBackQueue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  changed_.notify_all();
  writer_.join();
}

Status WriteBackQueue::Push(store::RowStore* store, int64_t key, const uint8_t* record) {
  size_t queued = 0;
  return PushMany(store, &key, record, 1, &queued);
}

void WriteBackQueue::Enqueue(const Key& k, const uint8_t* record, size_t bytes) {
  auto it = pending_.find(k);
  if (it == pending_.end()) {
    if (!spare_.empty()) {
      Pendings::node_type node = std::move(spare_.back());
      spare_.pop_back();
      node.key() = k;
      it = pending_.insert(std::move(node)).position;
    } else {
      it = pending_.try_emplace(k).first;
    }
  }
  Pending& p = it->second;
  p.record.assign(record, record + bytes);
  p.seq = next_seq_++;
  order_.emplace_back(k, p.seq);
}

Status WriteBackQueue::PushMany(store::RowStore* store, const int64_t* keys, const uint8_t* records,
                                size_t n, size_t* queued) {
  *queued = 0;
  const size_t vb = store->value_bytes();
  std::unique_lock<std::mutex> lock(mu_);
  SR_RETURN_IF_ERROR(RetryLocked(lock));
  size_t fresh = 0;  // queued since the writer was last woken
  for (size_t i = 0; i < n; ++i) {
    const Key k{store, keys[i]};
    if (pending_.size() >= capacity_ && pending_.count(k) == 0) {
      // Full: the writer must know of what is queued before this waits for it.
      max_depth_ = std::max(max_depth_, pending_.size());
      if (fresh > 0) changed_.notify_all();
      fresh = 0;
      changed_.wait(lock, [&] {
        return pending_.size() < capacity_ || pending_.count(k) > 0 || !error_.ok();
      });
      if (!error_.ok()) return error_;
    }
    Enqueue(k, records + i * vb, vb);
    ++fresh;
    *queued = i + 1;
    if (fresh == kBatch && i + 1 < n) {
      // A writer's batch is queued: the writer gets it and the lock now, not only after a whole
      // batch of evictions (a large one would otherwise hold the lock, and the writer, for long).
      max_depth_ = std::max(max_depth_, pending_.size());
      lock.unlock();
      changed_.notify_all();
      fresh = 0;
      lock.lock();
      if (!error_.ok()) return error_;
    }
  }
  max_depth_ = std::max(max_depth_, pending_.size());
  lock.unlock();
  if (fresh > 0) changed_.notify_all();
  return Status::Ok();
}

bool WriteBackQueue::Find(store::RowStore* store, int64_t key, uint8_t* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pending_.find(Key{store, key});
  if (it == pending_.end()) return false;
  std::memcpy(out, it->second.record.data(), it->second.record.size());
  return true;
}

size_t WriteBackQueue::FindMany(store::RowStore* store, const int64_t* keys, size_t n, uint8_t* out,
                                uint8_t* found) const {
  const size_t vb = store->value_bytes();
  std::lock_guard<std::mutex> lock(mu_);
  if (pending_.empty()) {
    std::fill(found, found + n, uint8_t{0});
    return 0;
  }
  size_t hits = 0;
  for (size_t i = 0; i < n; ++i) {
    auto it = pending_.find(Key{store, keys[i]});
    found[i] = it != pending_.end() ? 1 : 0;
    if (it == pending_.end()) continue;
    std::memcpy(out + i * vb, it->second.record.data(), vb);
    ++hits;
  }
  return hits;
}

Status WriteBackQueue::RetryLocked(std::unique_lock<std::mutex>& lock) {
  if (error_.ok()) return Status::Ok();
  error_ = Status::Ok();
  // Nothing left to write (cannot happen while the failed records are queued; kept for safety):
  // the failure is over.
  if (order_.empty()) return Status::Ok();
  const uint64_t asked = ++retries_asked_;
  changed_.notify_all();
  changed_.wait(lock, [&] { return retries_done_ >= asked || stop_; });
  return error_;
}

Status WriteBackQueue::Drain() {
  std::unique_lock<std::mutex> lock(mu_);
  SR_RETURN_IF_ERROR(RetryLocked(lock));
  changed_.wait(lock, [&] { return (order_.empty() && in_flight_ == 0) || !error_.ok(); });
  return error_;
}

size_t WriteBackQueue::depth() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_.size();
}

int64_t WriteBackQueue::written() const {
  std::lock_guard<std::mutex> lock(mu_);
  return written_;
}

size_t WriteBackQueue::max_depth() const {
  std::lock_guard<std::mutex> lock(mu_);
  return max_depth_;
}

void WriteBackQueue::Run() {
  std::vector<int64_t> keys;
  std::vector<uint8_t> values;
  std::vector<std::pair<Key, uint64_t>> taken;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    changed_.wait(lock, [&] { return stop_ || (!order_.empty() && error_.ok()); });
    if (stop_) return;
    // One store's next records, oldest first; an entry a newer push of its row replaced is
    // skipped (the newer one is later in the order and is written then).
    store::RowStore* store = order_.front().first.first;
    taken.clear();
    keys.clear();
    values.clear();
    while (!order_.empty() && taken.size() < kBatch && order_.front().first.first == store) {
      auto entry = order_.front();
      order_.pop_front();
      auto it = pending_.find(entry.first);
      if (it == pending_.end() || it->second.seq != entry.second) continue;
      taken.push_back(entry);
      keys.push_back(entry.first.second);
      values.insert(values.end(), it->second.record.begin(), it->second.record.end());
    }
    if (taken.empty()) {
      retries_done_ = retries_asked_;
      changed_.notify_all();
      continue;
    }
    // A retry asked for before this batch was taken is answered by this batch's Put.
    const uint64_t answers = retries_asked_;
    in_flight_ = taken.size();
    lock.unlock();
    // The records stay findable in pending_ while the store takes them: a miss between here and
    // the erase below reads them from the queue, after it from the store.
    const Status s = store->Put(keys.data(), values.data(), keys.size());
    lock.lock();
    in_flight_ = 0;
    if (!s.ok()) {
      // Kept queued (and findable), first in the order: the next Push or Drain retries them.
      error_ = s;
      for (auto it = taken.rbegin(); it != taken.rend(); ++it) order_.push_front(*it);
    } else {
      for (const auto& [k, seq] : taken) {
        auto it = pending_.find(k);
        if (it == pending_.end() || it->second.seq != seq) continue;
        if (spare_.size() < kSpareNodes) {
          spare_.push_back(pending_.extract(it));
        } else {
          pending_.erase(it);
        }
      }
      written_ += static_cast<int64_t>(taken.size());
    }
    retries_done_ = answers;
    changed_.notify_all();
  }
}

}  // namespace shardrec::embedding::tiered
