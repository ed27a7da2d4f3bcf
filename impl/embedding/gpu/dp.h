// The backward of a GPU collection's data-parallel tables on its device (step.h), with the
// host collection's bits: the dense gradient of every data-parallel table accumulated from the
// output gradient (kernels/simt/dp_body.h, the order of SparseUpdater::ApplyDataParallel's loop),
// all-reduced between device buffers over the data-parallel communicator, the touched rows and
// their scaled gradients compacted on the device, and the optimizer applied to them with the row
// counts read from device memory (kernels::CountedRows). Nothing of it needs the host: no wait,
// no download. A gate word (device memory, the step's agreed verdict) shuts every table's update
// when it is not 0 (its count becomes 0), so a rejected step changes nothing.
//
// Not thread-safe: one collection step uses it at a time, on the step's stream.
#pragma once

#include <cstdint>
#include <vector>

#include "impl/comm/communicator.h"
#include "impl/core/device_buffer.h"
#include "impl/core/exec.h"
#include "impl/core/status.h"
#include "impl/embedding/dp_accumulate.h"
#include "impl/embedding/gpu/staging.h"
#include "impl/embedding/input_dist.h"
#include "impl/embedding/kernels/simt/dp_body.h"
#include "impl/embedding/layout.h"
#include "impl/embedding/param_store.h"
#include "impl/optim/optimizer.h"

namespace shardrec::embedding {

// The device steps' tables for `l`: per data-parallel table its record (where its gradient and
// flags are in the dense block, its width) and its first key (rows of the tables before it, in
// Layout::dp_tables order; key_first has one entry more: every table's rows).
struct DpStaticTables {
  std::vector<kernels::simt_body::DpTable> tables;
  std::vector<int64_t> key_first;
  std::vector<int32_t> index_of;  // per plan table: its index among the data-parallel ones, or -1
};
DpStaticTables MakeDpStaticTables(const Layout& l, const DpBlockLayout& at);

// The pair records and first id positions of batch `rb`, with offsets and MEAN divisors read from
// `offsets` (a copy of rb.dp_offsets) and `mean_div` (a copy of rb.mean_div, or null when no
// data-parallel pair is MEAN): the parameters the accumulation step takes, as the device gets
// them, so the tests can run the body on the host copies.
void MakeDpPairs(const Layout& l, const DpStaticTables& st, const RoutedBatch& rb,
                 const int64_t* offsets, const float* mean_div,
                 std::vector<kernels::simt_body::DpPair>* pairs, std::vector<int64_t>* pair_first);

class DeviceDataParallel {
 public:
  // `l` and `params` must outlive this. Allocates the dense block, the compaction's outputs and
  // the row statistics (the plan's sizes), uploads the static tables (one copy and one wait, at
  // creation), and, with max_ids > 0, the workspace for that many data-parallel ids per batch
  // and the batch block for upload_bytes (StepSizes::dp_upload_bytes; else both grow on demand).
  // Errors: kOutOfMemory naming the bytes, the plugin's.
  Status Init(const Layout* l, ParamStore* params, int device, Stream stream, int64_t max_ids,
              size_t upload_bytes);

  // Whether Init ran for a collection with data-parallel tables (nothing to do otherwise).
  bool active() const { return layout_ != nullptr && !layout_->dp_tables.empty(); }

  // Room for batch `rb` (before the phase queues anything: a buffer that grows waits). With
  // `host_grad_floats` > 0 the output gradient comes from the host and goes up with the ids.
  Status Reserve(const RoutedBatch& rb, size_t host_grad_floats);
  // The pinned bytes Queue's upload takes (for the phase's staging reservation).
  size_t UploadBytes(const RoutedBatch& rb, size_t host_grad_floats) const;

  // Within a phase on the step's stream, in two parts so that every copy of the phase can be
  // queued before any update (a failed copy then changes nothing). Upload: the batch's ids and
  // tables (and `host_grad`, when not null: host_grad_floats floats) go up through `staging` in
  // one copy. Queue: the dense block accumulated from the uploaded host gradient or else from
  // `grad_dev` (device memory ordered before this on the stream), all-reduced (sum) over `comm` (a
  // communicator of the device; null for a rank alone), the touched rows compacted with their
  // gradients times 1 / comm_size, behind `gate` (device memory or null), and every table's update
  // queued (its optimizer configs[t], `step`).
  Status Upload(DeviceStaging& staging, const RoutedBatch& rb, const float* host_grad,
                size_t host_grad_floats);
  Status Queue(const float* grad_dev, comm::Communicator* comm, int32_t comm_size,
               const int64_t* gate, const std::vector<optim::OptimizerConfig>& configs,
               int64_t step);

 private:
  // The upload's pieces: pair records, first positions, offsets, rows, weights, positions, MEAN
  // divisors, host gradient (the records left to fill).
  static constexpr size_t kPieces = 8;
  void Pieces(const RoutedBatch& rb, const float* host_grad, size_t host_grad_floats,
              DeviceStaging::Piece* p) const;

  const Layout* layout_ = nullptr;
  ParamStore* params_ = nullptr;
  int device_ = 0;
  Stream stream_ = nullptr;
  ExecContext ctx_;
  DpBlockLayout at_;
  DpStaticTables st_;
  bool any_mean_ = false;          // some data-parallel pair is MEAN (its divisors go up)
  int64_t stats_floats_ = 0;       // row statistics of every table, back to back
  std::vector<int64_t> stats_at_;  // per data-parallel table
  core::DeviceBuffer static_;      // table records and first keys
  core::DeviceBuffer dense_;       // the all-reduce's block (dp_grad_size floats)
  core::DeviceBuffer rows_out_;    // compacted rows [num_keys]
  core::DeviceBuffer grads_out_;   // compacted gradients, each table's at its grad_at
  core::DeviceBuffer counts_;      // touched rows per table
  core::DeviceBuffer stats_;       // row statistics
  core::DeviceBuffer batch_;       // this batch's upload
  core::DeviceBuffer workspace_;
  std::vector<kernels::simt_body::DpPair> pairs_;
  std::vector<int64_t> pair_first_;
  kernels::simt_body::DpParams params_dev_;  // Upload's parameters, the gradient still to pick
  bool host_grad_ = false;                   // Upload took a host gradient
};

}  // namespace shardrec::embedding
