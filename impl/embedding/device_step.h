// The device half of a GPU collection's step (v1): the parameters live on one CUDA device and
// the heavy kernels run there (lookups; grouping, aggregation and the fused optimizer in
// backward), while routing, unpacking, the combine / pack maps and every exchange stay on the
// host. Each call stages what it needs across PCIe — the batch's runs (ids, per-id weights, bag
// offsets) and the return message or its gradient — into grow-only device buffers, queues the
// kernels on the device's default stream and returns after a bounded wait for them (the step's
// sync point), so no device work is left in flight between calls.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "impl/comm/communicator.h"
#include "impl/core/exec.h"
#include "impl/core/pinned_buffer.h"
#include "impl/core/status.h"
#include "impl/embedding/backward.h"
#include "impl/embedding/device_buffer.h"
#include "impl/embedding/input_dist.h"
#include "impl/embedding/kernels/device_runs.h"
#include "impl/embedding/kernels/kernels.h"
#include "impl/embedding/layout.h"
#include "impl/embedding/param_store.h"
#include "impl/optim/optimizer.h"

namespace shardrec::embedding {

class DeviceStep {
 public:
  // `layout` and `params` (whose arenas are on CUDA device `device`) must outlive the step.
  // Errors: those of the plugin (missing, without the embedding entries) and of the allocation
  // of the lookup status block.
  Status Init(const Layout* layout, ParamStore* params, int device);

  // Forward, owner side: the lookups of every local shard's runs into a device copy of the
  // return message, copied back into `send` (rb.ret_floats_total floats) and waited for.
  Status LookupToSend(const RoutedBatch& rb, float* send);

  // Forward, sample side: the data-parallel tables' lookups of this rank's own samples (their
  // ids, weights and offsets staged to the device), written into their columns of `out`
  // ([rows, output_dim], host) as CombineOutput does on the host; the other columns are left
  // alone.
  Status LookupDataParallel(const RoutedBatch& rb, float* out);

  // Backward of one data-parallel table once its dense gradient was all-reduced on the host:
  // the touched `rows` and their gradients (host) are uploaded and the optimizer applied to
  // local shard `local` on the device (partial = full row statistics: the shard holds whole rows).
  Status ApplyRows(int32_t local, const optim::OptimizerConfig& config, int64_t step,
                   std::span<const int64_t> rows, const float* grads);

  // Backward of the sharded tables, the device mirror of SparseUpdater::ApplySharded: `grads`
  // (the gradient message this rank received, on the host) is uploaded; rows are grouped and
  // either updated by the fused backward or aggregated, their partial row statistics copied to
  // the host, exchanged over `comm` by `updater` as the host collection does, and applied.
  Status ApplySharded(comm::Communicator& comm, SparseUpdater& updater, const RoutedBatch& rb,
                      const float* grads, const std::vector<optim::OptimizerConfig>& configs,
                      int64_t step, double* comm_seconds);

 private:
  // Copies the batch's runs to the device (the received ids, this rank's own message, the bag
  // offsets: one copy each) and keeps per local shard the runs with their pointers translated.
  Status UploadRuns(const RoutedBatch& rb);
  kernels::DeviceRuns Runs(size_t local) const;
  // Host <-> device copy on the step's stream, waited for (the host side is pageable).
  Status Copy(void* dst, const void* src, size_t bytes, bool to_device);
  // Bounded wait for everything queued on the step's stream (kTimeout after kDeviceWaitMs).
  Status Wait();

  const Layout* layout_ = nullptr;
  ParamStore* params_ = nullptr;
  int device_ = 0;
  ExecContext ctx_;
  DeviceBuffer status_;       // the lookup kernels' status block
  core::PinnedBuffer count_;  // GroupRows' unique-row count, written by the stream
  DeviceBuffer runs_buf_;     // ids, weights and bag offsets of the batch
  DeviceBuffer io_;           // return message (forward) / received gradients (backward)
  DeviceBuffer workspace_;    // backward workspace, shared by the shards in turn
  DeviceBuffer full_stats_;
  DeviceBuffer dp_ids_;  // data-parallel offsets, rows and weights of the batch
  DeviceBuffer dp_out_;  // their lookups
  std::vector<float> dp_host_;
  // Per local shard: the runs (device pointers), ids per run, and the backward's unique rows,
  // their aggregated gradients and partial row statistics while the statistics are exchanged.
  std::vector<std::vector<kernels::BagRun>> runs_;
  std::vector<std::vector<int64_t>> num_ids_;
  std::vector<int64_t> num_unique_;
  std::vector<std::unique_ptr<DeviceBuffer>> uniq_rows_;
  std::vector<std::unique_ptr<DeviceBuffer>> uniq_grads_;
  std::vector<std::unique_ptr<DeviceBuffer>> stats_;
  std::vector<kernels::LookupJob> jobs_;
};

}  // namespace shardrec::embedding
