// The device step's backward phase as an object that owns its state: the gradient blocks on the
// device, the gradient pack's tables, every local shard's unique rows, aggregated gradients and
// row statistics, the unique-row counts (read on the host, or kept on the device for a "counted"
// shard), the statistics' exchange blocks and the backward's workspace. DeviceStep composes it
// and queues the backward's phases (ApplySharded, ApplyRows..FinishRows) on the step's stream and
// staging; the forward never reads it. One thread at a time, as the step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "impl/core/device_buffer.h"
#include "impl/core/pinned_buffer.h"
#include "impl/core/status.h"
#include "impl/embedding/input_dist.h"
#include "impl/embedding/kernels/simt/grad_body.h"
#include "impl/embedding/layout.h"

namespace shardrec::embedding {

class DeviceBackward {
 public:
  // Per-shard state for `num_local` local shards, and the pinned block GroupRows writes their
  // unique-row counts into (the backward queues every shard's grouping before its one wait, and
  // each writes its own word). Errors: kOutOfMemory from the pinned allocation.
  Status Init(size_t num_local);

  // The gradient pack's jobs and their first rows for `rb` over `l` (PackGradients' order: per
  // destination rank, its units with returned rows), pointing at the return targets `d_targets`
  // and MEAN divisors `d_div` (device) and writing into `send` (the message to the other ranks)
  // and `self` (this rank's own rows).
  void BuildPackJobs(const Layout& l, const RoutedBatch& rb, const int64_t* d_targets,
                     const float* d_div, float* send, float* self);
  std::span<const kernels::simt_body::PackJob> PackJobs() const { return pack_jobs_; }
  std::span<const int64_t> PackFirst() const { return pack_first_; }

  // Whether local shard `local` keeps its unique-row count on the device (DeviceStep's
  // CountsOnDevice).
  bool Counted(size_t local) const { return local < counted.size() && counted[local]; }

  // The backward's buffers, queued on by the step's phases.
  bool rows_phase = false;        // ApplyRows queued work that FinishRows has not waited for
  core::PinnedBuffer count;       // GroupRows' unique-row counts (one per local shard)
  core::DeviceBuffer a2a_send;    // over a device communicator: the gradient message sent
  core::DeviceBuffer stat_send;   // over a device communicator: the row statistics sent
  core::DeviceBuffer stat_recv;   // and received
  core::DeviceBuffer workspace;   // backward workspace, shared by the shards in turn
  core::DeviceBuffer full_stats;  // every shard's full row statistics, one after the other
  // Per local shard: the unique rows, their aggregated gradients and partial row statistics
  // while the statistics are exchanged (data-parallel shards: uniq_rows holds the touched rows
  // followed by their gradients).
  std::vector<int64_t> num_unique;
  std::vector<uint8_t> counted;   // per local shard: its count stays on the device
  core::DeviceBuffer dev_counts;  // those counts, one word per local shard
  std::vector<size_t> full_at;    // per local shard: its full statistics in full_stats (floats)
  std::vector<std::unique_ptr<core::DeviceBuffer>> uniq_rows;
  std::vector<std::unique_ptr<core::DeviceBuffer>> uniq_grads;
  std::vector<std::unique_ptr<core::DeviceBuffer>> stats;
  // A gradient in device memory: a rejected call's gradient block, the block the kernels read
  // (the message lands in it, this rank's own rows are packed into it), and the pack's tables.
  core::DeviceBuffer junk_grad;
  core::DeviceBuffer dgrad_block;
  core::DeviceBuffer pack_buf;

 private:
  std::vector<kernels::simt_body::PackJob> pack_jobs_;
  std::vector<int64_t> pack_first_;
};

}  // namespace shardrec::embedding
