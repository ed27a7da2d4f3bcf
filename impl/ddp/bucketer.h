// DDP-style gradient bucketing (Li et al., "PyTorch Distributed", VLDB 2020): dense gradients
// are grouped into buckets, each bucket is averaged over the group as soon as its last gradient
// is marked ready, on a communication worker, so communication overlaps the rest of the host's
// backward; Finish waits for the last bucket.
//
// Storage: by default the library owns every gradient, in one arena laid out in reverse
// registration order (the order a backward pass produces them); Grad(i) is a view into it and a
// bucket whose members are contiguous there is averaged in place, without copies. A host may
// instead point a tensor at its own buffer (SetExternal); its bucket is then packed and unpacked.
// After the first synced step the buckets are rebuilt once in the ready order rank 0 observed
// (broadcast, so all ranks agree); views never move.
//
// Thread-safety: one thread at a time (the host's training thread); the worker is internal.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "impl/comm/communicator.h"
#include "impl/comm/work.h"
#include "impl/core/status.h"

namespace shardrec::ddp {

enum class Compression : int32_t { kNone = 0, kBFloat16 = 1 };

struct DdpOptions {
  int64_t first_bucket_bytes = int64_t{1} << 20;  // PyTorch's defaults: 1 MiB, then 25 MiB
  int64_t bucket_cap_bytes = int64_t{25} << 20;
  Compression compression = Compression::kNone;
};

struct DdpStats {
  int64_t steps = 0;           // synced steps finished
  int64_t buckets = 0;         // current bucket count
  double comm_seconds = 0;     // worker time spent averaging, all steps
  double exposed_seconds = 0;  // time Finish waited for communication, all steps
  int64_t bytes_reduced = 0;   // gradient bytes averaged per synced step (after compression)
};

class Bucketer {
 public:
  // Collective over `comm`: every rank registers the same tensor counts in the same order
  // (checked here with one all-gather; a mismatch is an error naming the first rank that
  // differs). The bucketer communicates on a private split of `comm`, so the caller may keep
  // using `comm` (from one thread) while buckets are in flight. `local`: the caller's verdict on
  // arguments it checked itself; a rank refusing its arguments (those or these) still meets its
  // peers' agreement (comm/agree.h), so over a host communicator every rank fails at once.
  static Status Create(std::shared_ptr<comm::Communicator> comm, std::vector<int64_t> counts,
                       const DdpOptions& options, std::unique_ptr<Bucketer>* out,
                       const Status& local = Status::Ok());
  ~Bucketer();

  size_t num_tensors() const { return counts_.size(); }
  // The library-owned gradient of tensor i (stable for the bucketer's life), or the external
  // buffer set for it. Backward passes accumulate into it; ZeroGrad clears every gradient.
  float* Grad(size_t i) const { return grads_[i]; }
  Status SetExternal(size_t i, float* grad);
  // Refused between the first MarkReady of a step and Finish (a bucket may be in flight).
  Status ZeroGrad();

  // Tensor i's gradient is final for this step. Starts every bucket that is now complete, in
  // bucket order (all ranks start the same collectives in the same order). With sync off, only
  // records. Marking a tensor twice in one step is an error. A marked gradient belongs to the
  // bucketer until Finish: the caller must not write it.
  Status MarkReady(size_t i);
  // Completes the step: waits for every bucket; the gradients then hold the group average. A
  // tensor never marked ready is an error naming it (its bucket is still averaged, so the
  // ranks stay in step), and with sync on every other rank fails too, naming that rank: that
  // step's gradients must not be applied anywhere.
  Status Finish();

  // no_sync: with sync off, steps only accumulate locally; the next synced step averages the
  // accumulated sums.
  void set_sync(bool sync) { sync_ = sync; }
  bool sync() const { return sync_; }
  const DdpStats& stats() const { return stats_; }
  // Tensor indices per bucket, in launch order.
  const std::vector<std::vector<size_t>>& buckets() const { return buckets_; }
  comm::Communicator& comm() { return *comm_; }

 private:
  Bucketer() = default;
  void Rebucket(const std::vector<size_t>& order);
  void Launch(size_t b);
  Status ReduceBucket(size_t b);

  std::shared_ptr<comm::Communicator> comm_;
  DdpOptions options_;
  std::vector<int64_t> counts_;
  std::vector<float> arena_;
  std::vector<size_t> offset_;  // of each tensor in the arena
  std::vector<float*> grads_;
  std::vector<bool> external_;
  std::vector<std::vector<size_t>> buckets_;
  std::vector<int> bucket_of_;
  // Per step.
  std::vector<bool> ready_;
  std::vector<size_t> ready_count_;
  std::vector<size_t> ready_order_;
  size_t next_launch_ = 0;
  std::vector<std::shared_ptr<comm::Work>> works_;
  bool rebuilt_ = false;
  bool sync_ = true;
  DdpStats stats_;
  std::atomic<int64_t> comm_nanos_{0};  // worker time in ReduceBucket
  // Staging per bucket for packed or compressed buckets, and reduce-scatter scratch.
  std::vector<std::vector<float>> pack_;
  std::vector<std::vector<uint16_t>> half_;
  std::vector<std::vector<float>> scratch_;
  std::unique_ptr<comm::CommWorker> worker_;  // last: joined first on destruction
};

}  // namespace shardrec::ddp
