// The device half of a GPU collection's step: the parameters live on one CUDA device and the
// heavy kernels run there (lookups; the combine when the returned rows are on the device, pooled
// or sequence; grouping, aggregation and the fused optimizer in backward; over NCCL also the
// unpacking of the received ids and, for a gradient in device memory, its check and packing),
// while the routing of a host KJT, the combine's bags and the exchanges' bookkeeping stay on the
// host (data-parallel gradients too, with a data-parallel group that is neither alone nor a
// device communicator with fp32 messages: dp.h). Each call is
// one or more phases; a phase stages what it needs across PCIe through one pinned block
// (staging.h: the batch's runs, i.e. ids, per-id weights and bag offsets, and the return
// message or its gradient), queues its copies and kernels back to back on the step's stream (one
// the collection owns, which synchronises with the device's legacy default stream where the
// accessors copy) and ends with
// ONE bounded host synchronisation (core::kDeviceWaitMs, then kTimeout), after which the downloads
// are handed to the host; or, for a stream-ordered call (CUDA views: CombineOut::async,
// ShardedInputs::async), without one: the phase stays queued, the caller's stream is ordered
// behind it (stream_wait_stream), the next phases pack their traffic behind its in the pinned
// block (DeviceStaging never rewrites a byte before a wait that came after its copy), and its
// downloads and checks (the lookup status block, the unpack's word, the verdict, the
// communicator's error) arrive with the next wait of any phase or Synchronize (CheckDeferred,
// TakeDeferredError, VerdictArrived). The collection learns them at its next synchronising call.
//
// Host synchronisations per call (stream waits, or emb_read_status, which waits for the stream
// before it reads the lookup status block), each at most once:
//   LookupCombine       1: a forward at world 1 (and over NCCL, below): lookups, the combine
//                       of the returned rows and the data-parallel lookups straight into the
//                       device output, downloaded once (pooled and sequence); 0 with a device
//                       output (stream-ordered).
//   LookupToSend        1 when this rank holds runs to look up, else 0 (the staged exchange at
//                       world > 1).
//   LookupDataParallel  1 when the collection has data-parallel tables and this rank's output
//                       is not empty, else 0 (the same forwards).
//     => a forward takes 1 at world 1, at most 2 otherwise.
//   ApplySharded        0 without ids for this rank's sharded tables (and no verdict or
//                       data-parallel table in its phase); 1 when every shard with ids takes the
//                       fused backward or aggregates with its unique-row count kept on the
//                       device (0 stream-ordered: a device gradient with the gated backward);
//                       with column shards' statistics exchanged over a host communicator
//                       +1 when some shard aggregates (the
//                       unique-row counts are read on the host: sequence collections, column
//                       shards with row statistics), +1 more when some of those has row
//                       statistics to exchange (downloaded between the two).
//   ApplyRows..FinishRows  1 for all data-parallel tables together when any row was touched
//                       (data-parallel gradients accumulated on the host); 0 when they train on
//                       the device (DeviceDpWork: queued in ApplySharded's first phase).
//     => a backward takes at most 4 (at most 2 in a pooled collection without row statistics
//        shared between column shards).
// Host <-> device copies: LookupCombine 1 up (runs, the combine's bags, data-parallel ids) + 1
// down (the output; a device output instead: MEAN divided on the device and 1 device-to-device
// copy into the view, queued on the step's stream behind the caller's stream within the phase
// (stream_wait_stream), so no download but the status block's, and no wait (stream-ordered));
// LookupToSend 1 up + 1
// down; LookupDataParallel 1 up + 1 down; ApplySharded 1 up (runs and gradients) when it has ids, 1
// down per shard with exchanged statistics and 1 up per shard that receives full statistics;
// ApplyRows 1 up per data-parallel table with touched rows; data-parallel tables on the device 1
// up in ApplySharded's first phase (their ids, pair records and a host output gradient), nothing
// down. (Counted through the fake plugin by
// embedding_gpu_staging_test.cc.) Beyond these only a buffer that must grow waits
// (core::DeviceBuffer, DeviceStaging).
//
// Over an NCCL communicator (the collection's own device; world > 1, fp32 encodings: a 16-bit
// encoding keeps the staged host path below for its message). Host-buffer collectives go through
// comm::StagedComm (impl/comm/staged_comm.h: 1 up, 1 down, 1 wait each, on the step's stream; the
// input exchange's on the worker's own stream); the payloads marked "device" never touch host
// memory.
//   Forward:  the input exchange (input.h, with a plugin that has emb_unpack; else the
//             staged two-round exchange of before: +1 wait): ONE all-gather of every rank's route
//             summary on the step's stream (GatherSummaries: 1 up, 1 down, 1 wait: THE sync that
//             learns the received sizes), carrying every rank's verdict and, per unit, the ids
//             and non-empty bags it sends there, from which the host sizes and places everything
//             without reading a message. A KJT in device memory is counted on the device first
//             and its route's read-back goes device to device into the same all-gather (so the
//             route's sizing shares that wait); its fill then writes the messages straight into
//             the batch's slot block and brings back the return targets (and MEAN divisors and
//             data-parallel ids when the plan has them) that the host's combine and backward
//             read: 1 up, 1+ down, +1 wait (the host builds the combine's bags from them before
//             the lookup phase queues it). Then the lookup phase:
//             the routed messages 1 up into the batch's slot block (the ids leave from there),
//             their all-to-all into the slot's receive part (device), the unpack of the bag
//             lengths into CSR offsets (simt/unpack_body.h), lookups into fwd_.io, the return
//             message's all-to-all from fwd_.io into fwd_.io's tail (device); pooled
//             (LookupCombine): the combine's bags, the data-parallel ids and the unpack's tables 1
//             up, the combine and data-parallel lookups into the device output, the output and the
//             unpack's status word 1 down each; 1 wait (a device output: no output download, the
//             status block's instead, and no wait: stream-ordered, checked at the next wait).
//             Sequence collections take the same phase (LookupCombine: each output row a bag of the
//             one returned row aimed at it, added to zero as the host combine does; a data-parallel
//             pair's rows written by sequence lookups over its runs of consecutive positions;
//             nothing to unpack).
//             => 2 waits with a host KJT, 3 with a device KJT (data-parallel tables included),
//             against 1 device wait plus the host collectives over Gloo; with a device output 1
//             and 2 (the counts' wait is then also where earlier stream-ordered calls are learnt).
//   Backward: gated on the device (ShardedInputs::verdict):
//             the update phase begins with the verdict, this rank's flag (its own rejection, or
//             the non-finite check of a gradient in device memory, behind the caller's stream:
//             stream_wait_stream, no host wait) all-reduced (max) between device buffers over the
//             communicator itself into a gate word, so every rank issues the same collective
//             whatever its gradient's side; every update of the phase reads the gate (a shut one
//             empties every shard's grouping and every data-parallel count), and the agreed word
//             comes down with the phase's end (no wait, no upload of its own: an accepting rank's
//             flag is a memset). A rank that rejected its call takes part with its batch and a
//             gradient whose values do not matter. With a 16-bit gradient wire the verdict
//             takes a phase of its own first (Verdict: 1 up, 1 down, 1 wait). A gradient in
//             device memory (a CUDA view on the collection's device, with data-parallel tables
//             trained on the device) is checked
//             for non-finite elements on the device in the verdict's phase, behind the caller's
//             stream (stream_wait_stream: no host wait). ApplySharded: a host gradient is packed on
//             the host and goes up (runs and own rows 1 up as above, with the device input only the
//             own rows; the packed message 1 up); a device gradient is packed on the device
//             (simt/grad_body.h: the return targets, MEAN divisors and the pack's jobs 1 up, the
//             message straight into the all-to-all's send block, the own rows into the block the
//             kernels read). The gradient all-to-all goes from there straight into the block the
//             kernels read (device), queued before them; then the waits above. The row statistics
//             are packed on the device from the blocks the kernels wrote (device-to-device copies),
//             all-to-all'd between device blocks and the received ones downloaded with the own
//             partial ones, inside the statistics phase: no wait of their own (the staged path
//             takes one more). Data-parallel tables ride in the first phase (dp.h: their
//             ids, pair records and a host gradient 1 up; the dense gradients accumulated from the
//             output gradient with the host's bits, all-reduced between device blocks, the touched
//             rows compacted and updated with counts read on the device): no wait, no download.
//             Ends with the phase's wait, where the agreed verdict is read; with a device gradient
//             stream-ordered instead (no wait: the verdict comes down with the next wait, and the
//             next synchronising call returns a rejection on every rank, taking the step back).
//             AsyncError is checked after each phase's wait (NCCL reports a dead peer there).
// (Counted through the fake plugin's NCCL double by embedding_gpu_nccl_test.cc.)
//
// Where the waits of a step over NCCL are, and why each is still there (a host KJT, CUDA output
// and gradient views, fused shards, data-parallel tables or not: ONE per step):
//   1. The counts all-gather (forward): THE one that learns the received sizes, which NCCL's
//      counts need on the host; it carries every rank's verdict on its batch, and it is where
//      the previous step's stream-ordered calls are learnt (their verdict, their checks).
// Gone: the lookup phase's end and the update phase's end (stream-ordered with device views; a
// host output or a host gradient keeps its phase's wait, as the call hands host memory back),
// and the verdict's own wait (the gate). A backward whose previous stream-ordered backward is
// still unlearnt (TorchRec's pipelined order with its last step, or two backwards around a
// pipelined forward_distributed) learns it first: one wait, the step's one.
// More where the host still computes: a KJT in device memory +1 (its fill's return targets come
// down for the host's combine bags and backward); over a host communicator, aggregated shards
// (sequence collections, column shards with row statistics) +1 for the unique-row counts read on
// the host (+1 more when row statistics travel; the last phase stays stream-ordered): otherwise
// their counts stay on the device (dev_counts_),
// the statistics are sized for the most rows a shard can have (siblings get the same ids, so both
// ends of every message agree), exchanged and summed in column order on the device within the
// first phase (QueueCountedExchange, simt/stats_body.h), and updated with the counted row
// phases; with a 16-bit wire (world > 1) the gate is off: +2 in backward (the verdict's own
// phase, and the update phase's end); with a data-parallel group that cannot all-reduce between
// device buffers of this device, data-parallel tables +2 in backward (the all-reduce staged, its
// gradients accumulated on the host, then the updates) and a CUDA gradient view staged through
// the host.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "impl/comm/communicator.h"
#include "impl/core/device_buffer.h"
#include "impl/core/exec.h"
#include "impl/core/pinned_buffer.h"
#include "impl/core/status.h"
#include "impl/embedding/backward.h"
#include "impl/embedding/gpu/backward.h"
#include "impl/embedding/gpu/dp.h"
#include "impl/embedding/gpu/forward.h"
#include "impl/embedding/gpu/sizing.h"
#include "impl/embedding/gpu/staging.h"
#include "impl/embedding/gpu/verdict.h"
#include "impl/embedding/input_dist.h"
#include "impl/embedding/kernels/device_runs.h"
#include "impl/embedding/kernels/kernels.h"
#include "impl/embedding/kernels/simt/grad_body.h"
#include "impl/embedding/kernels/simt/unpack_body.h"
#include "impl/embedding/layout.h"
#include "impl/embedding/output_dist.h"
#include "impl/embedding/param_store.h"
#include "impl/embedding/step_state.h"
#include "impl/optim/optimizer.h"

namespace shardrec::embedding {

// An exchange of a phase's message between device buffers over a device (NCCL) communicator, on
// the step's stream (step.h's phase tables say what it saves).
struct DeviceExchange {
  comm::Communicator* comm = nullptr;   // a communicator of the step's device
  std::span<const size_t> send_counts;  // floats per destination rank
  std::span<const size_t> recv_counts;  // floats per source rank
};

// Where a combined forward's output goes (DeviceStep::LookupCombine).
struct CombineOut {
  float* data = nullptr;    // host memory, or (on_device) memory of the step's device
  bool on_device = false;   // divided there for MEAN and copied device to device on `stream`
  Stream stream = nullptr;  // the caller's stream, for a device output
  bool discard = false;     // no output wanted (a rank that refused its buffer takes part)
  // A device output, stream-ordered (needs stream_wait_stream): the phase ends without a wait,
  // `stream` is ordered behind the copy into the view, and the phase's checks are made at the
  // next wait (DeviceStep::TakeDeferredError).
  bool async = false;
};

// A backward's verdict queued at the start of its update phase (a backward gated on the device,
// DeviceStep::ApplySharded): this rank's flag (`local_flag`: 0, or rank + 1 when it rejected its
// call; else, with `check`, rank + 1 when the device gradient `grad` (n floats, written by work on
// `caller`) holds a non-finite element) all-reduced (max) over `comm` (a device communicator;
// null: this rank alone) into the gate every update of the phase reads.
struct DeviceVerdictWork {
  comm::Communicator* comm = nullptr;
  int64_t local_flag = 0;
  const float* grad = nullptr;
  size_t n = 0;
  bool check = false;
  int32_t rank = 0;
  Stream caller = nullptr;
};

// The data-parallel tables' part of a backward on the device (dp.h), queued in the
// backward's first phase: their gradients are all-reduced over `comm` (a communicator of the
// step's device; null for a group of one) of `comm_size` ranks; a host output gradient
// (`host_grad`, host_grad_floats floats) goes up with the phase's copies, else the device one is
// read.
struct DeviceDpWork {
  comm::Communicator* comm = nullptr;
  int32_t comm_size = 1;
  const float* host_grad = nullptr;
  size_t host_grad_floats = 0;
};

class DeviceStep final : public DataParallelLookup, public RowApplier {
 public:
  DeviceStep() = default;
  ~DeviceStep();
  DeviceStep(const DeviceStep&) = delete;
  DeviceStep& operator=(const DeviceStep&) = delete;

  // `layout` and `params` (whose arenas are on CUDA device `device`) must outlive the step.
  // With a known `capacity` every per-step device buffer and the pinned staging block are
  // allocated here for the worst case within it (sizing.h), so a step within it
  // allocates nothing and waits only at its phase ends; beyond it (or without it) buffers grow
  // on demand, each growth a wait and an allocation in that step. Errors: those of the plugin
  // (missing, without the embedding entries), kOutOfMemory naming the bytes when the device or
  // the host cannot hold the buffers, kInvalidArgument when the sizes overflow.
  // `device_input`: the collection's ids will travel between device buffers (input.h), so
  // the batch slots' blocks are sized too.
  Status Init(const Layout* layout, ParamStore* params, int device,
              const StepCapacity& capacity = {}, bool device_input = false);

  // The step's stream (every phase's work is queued there).
  Stream stream() const { return stream_; }

  // Forward, owner side: the lookups of every local shard's runs into a device copy of the
  // return message, copied back into `send` (rb.ret_floats_total floats) and waited for.
  Status LookupToSend(const RoutedBatch& rb, float* send);

  // Forward over a device communicator: the lookups into the device return message, whose
  // travelling part (before rb.ret_self_offset) goes from there over `x` into a device receive
  // block on the stream; the received rows are downloaded into `recv` and this rank's own rows
  // into `send` + rb.ret_self_offset, then ONE wait (and the communicator's async error). Every
  // rank calls it, with or without runs (the exchange is collective).
  Status LookupExchange(const RoutedBatch& rb, const DeviceExchange& x, float* recv, float* send);

  // Forward of a pooled collection whose returned rows reach the device (world 1, or `x` over a
  // device communicator, else null): the lookups into fwd_.io, the return exchange from there into
  // fwd_.io's tail, the combine of every returned row and the data-parallel lookups straight into a
  // device output block, all queued in ONE phase; the output ([batch_size, output_dim] floats)
  // is downloaded into `out` with the phase's one wait. The combine runs through the lookup
  // kernel: the rows in fwd_.io are a table of stride 1 whose row ids are float offsets, and output
  // row b of a (pair, column slice) is a bag of the returned rows aimed at it, in (rank, unit)
  // order, so sums come out as CombineOutput's. A host output's MEAN divide is left to the
  // caller (DivideMeans); a device output (out.on_device) is divided on the device
  // (simt/mean_body.h, the same division) and copied device to device into out.data within the
  // phase, behind out.stream's work (no PCIe traffic for the output); with out.async the phase then
  // ends without a wait (stream-ordered: out.stream is ordered behind the copy, the phase's checks
  // come with the next wait). With `x` every rank calls it, with or without runs.
  Status LookupCombine(const RoutedBatch& rb, const DeviceExchange* x, const CombineOut& out);

  // The device input distribution's counts exchange (input.h) over `comm` (a device
  // communicator), as ONE phase on the step's stream: this rank's route summary, `header`
  // (header_bytes, host) followed by body_bytes from device memory `body_dev` (a device KJT's
  // route read-back, copied device to device) or from host `body_host`, is all-gathered, and
  // every rank's summary (comm.Size() * (header_bytes + body_bytes) bytes) reaches `out` (host)
  // after the phase's one wait; then the communicator's asynchronous error.
  Status GatherSummaries(comm::Communicator& comm, const void* header, size_t header_bytes,
                         const void* body_dev, const void* body_host, size_t body_bytes,
                         uint8_t* out);
  // Room for batch `rb`'s slot block (its messages, the received ones, the CSR offsets), and the
  // address of its messages' part, where a device route writes them (rb.send_on_device).
  Status ReserveDeviceInput(const RoutedBatch& rb);
  uint8_t* SlotSend(const RoutedBatch& rb) const {
    return slots_[rb.device_slot & 1].as<uint8_t>();
  }

  // Forward, sample side: the data-parallel tables' lookups of this rank's own samples (their
  // ids, weights and offsets staged to the device), written into their columns of `out`
  // ([rows, output_dim], host) as CombineOutput does on the host; the other columns are left
  // alone.
  Status LookupDataParallel(const RoutedBatch& rb, float* out) override;

  // Backward of one data-parallel table once its dense gradient was all-reduced on the host:
  // the touched `rows` and their gradients (host; copied into the staging block before this
  // returns, so the caller may reuse them) are uploaded and the optimizer applied to local shard
  // `local` on the device (partial = full row statistics: the shard holds whole rows). Queued
  // only: FinishRows, after the last table, waits for all of them.
  Status ApplyRows(int32_t local, const optim::OptimizerConfig& config, int64_t step,
                   std::span<const int64_t> rows, const float* grads) override;
  // The data-parallel updates' one wait (nothing when no ApplyRows queued work).
  Status FinishRows() override;

  // Backward of the sharded tables, the device mirror of SparseUpdater::ApplySharded: in.grads
  // (the gradient message this rank received, on the host) is uploaded; rows are grouped and
  // either updated by the fused backward or aggregated, their partial row statistics copied to
  // the host, exchanged over `comm` by `updater` as the host collection does, and applied.
  // With in.x (a device communicator), in.grads holds only this rank's own rows (from
  // rb.ret_self_offset on) and in.packed the gradient message this rank sends (x->send_counts):
  // both go up in the first phase's copies and the message travels over x->comm on the stream
  // straight into the device block the kernels read, before them; every rank calls it then.
  // With in.grad_on_device, in.grad_dev is the output gradient in device memory ([rows,
  // output_dim] floats, null when empty; ordered after the caller's work by Verdict or by
  // in.verdict): the message and this rank's own rows are packed on the device
  // (simt/grad_body.h: PackGradients' rows and bits) and in.grads and in.packed are not read.
  // With in.dp the data-parallel tables train in the first phase too (dp.h). With
  // in.verdict the backward is gated on the device: the verdict is queued first in the first
  // phase (no wait of its own) and every update reads the agreed word (a rejection empties every
  // shard's grouping and every data-parallel count, so nothing changes); ReadVerdict gives the
  // agreed words once this returns.
  struct ShardedInputs {
    const float* grads = nullptr;
    const DeviceExchange* x = nullptr;
    const float* packed = nullptr;
    const float* grad_dev = nullptr;
    bool grad_on_device = false;
    const DeviceDpWork* dp = nullptr;
    const DeviceVerdictWork* verdict = nullptr;
    // With a verdict: stream-ordered, the last phase ends without a wait (its verdict and checks
    // come with the next one: VerdictArrived), and the verdict's `caller` stream is ordered behind
    // the reads of its gradient.
    bool async = false;
  };
  Status ApplySharded(comm::Communicator& comm, SparseUpdater& updater, const RoutedBatch& rb,
                      const std::vector<optim::OptimizerConfig>& configs, int64_t step,
                      double* comm_seconds, const ShardedInputs& in);
  // The verdict of the last backward queued with ShardedInputs::verdict, valid after the call
  // returned OK (with ShardedInputs::async, once VerdictArrived()):
  // Verdict's *agreed, *first_bad and *bad_value.
  void ReadVerdict(int64_t* agreed, int64_t* first_bad, float* bad_value) const;

  // Stream-ordered calls (CombineOut::async, ShardedInputs::async) end their last phase without a
  // wait; their downloads arrive, and their checks are made, at the next wait of any phase (or
  // Synchronize). VerdictArrived says whether the last verdict queued (ShardedInputs::verdict)
  // has; Synchronize waits (bounded) for everything queued when anything is; TakeDeferredError
  // returns the first error the checks found since the last call
  // (an internal error: a row outside its shard, a message whose lengths disagree with its
  // counts; a communicator's asynchronous error) and clears it.
  bool VerdictArrived() const { return verdict_.Arrived(staging_); }
  Status Synchronize();
  Status TakeDeferredError();
  // A device gradient block of at least `floats` floats whose contents do not matter: what a
  // rank that rejected its own call packs and accumulates while it takes part in a gated
  // backward's collectives (its updates are gated off).
  Status JunkGradient(size_t floats, const float** out);
  // Whether ApplySharded keeps an aggregated shard's unique-row count on the device ("counted":
  // no sibling statistics, or siblings whose statistics travel between
  // device blocks or stay on this rank; grouping writes the count to a device word, statistics,
  // their sibling sum and the update read it), so that shard needs no host wait.
  bool CountsOnDevice(size_t local) const { return bwd_.Counted(local); }

  // Data-parallel tables trained on the device (dp.h): its buffers allocated for the plan
  // (and, with a known capacity, the workspace), once at creation by a collection that will pass
  // DeviceDpWork to ApplySharded.
  Status InitDataParallel(const StepCapacity& capacity);

  // A backward's verdict outside the gated backward (a 16-bit gradient wire over a device
  // communicator), in ONE phase: this rank's `local_flag` is all-reduced (max) with the other
  // ranks' over `comm` (a device communicator; null: this rank alone) and the agreed word comes
  // down with the one wait, so every rank issues the same collective. *agreed: 0 when every rank
  // accepts, else 1 + a rejecting rank.
  Status Verdict(comm::Communicator* comm, int64_t local_flag, int64_t* agreed);

 private:
  // Room in runs_buf_ for the batch's runs and `extra_bytes` more (before a phase queues work).
  Status ReserveRuns(const RoutedBatch& rb, size_t extra_bytes, const char* what);
  // Stages the batch's runs (the received ids, this rank's own message, the bag offsets) and
  // up to kMaxExtra `extra` pieces (the backward's gradient message; the combine's bags and the
  // data-parallel ids) into runs_buf_ with one copy, and keeps per local shard the runs with
  // their pointers translated; extra_dev[k] receives extra piece k's device address.
  static constexpr size_t kMaxExtra = 8;
  Status ReserveRuns(const RoutedBatch& rb, const DeviceStaging::Piece* extra, size_t num_extra,
                     const char* what);
  Status UploadRuns(const RoutedBatch& rb, const DeviceStaging::Piece* extra, size_t num_extra,
                    uint8_t** extra_dev);
  Status UploadRuns(const RoutedBatch& rb, const void* extra, size_t extra_bytes, void** extra_dev);
  // The three host ranges every run points into: the ids received from the other ranks, this
  // rank's message to itself (the end of its send buffer) and the CSR bag offsets (into p[0..2]).
  static void RunPieces(const RoutedBatch& rb, DeviceStaging::Piece* p);
  kernels::DeviceRuns Runs(size_t local) const;
  // Stages the batch's runs and queues every local shard's lookups into fwd_.io (which must hold
  // the return message), within a phase the caller began.
  Status QueueLookups(const RoutedBatch& rb, const DeviceStaging::Piece* extra, size_t num_extra,
                      uint8_t** extra_dev);
  // Allocates every per-step buffer for the worst case within `capacity`.
  Status Presize(const StepCapacity& capacity, bool device_input);
  // The device input distribution (rb.device_input): where the parts of a batch's slot block
  // start (its routed messages at 0, then the received ones, then the runs' CSR offsets), room
  // in the block and in the unpack's scratch (before a phase queues anything), the unpack's
  // run and cell tables (into unpack_runs_ / unpack_cells_, with device pointers into the
  // block), and the runs with device pointers made from the batch's places (into runs_).
  struct SlotLayout {
    size_t recv_at = 0;
    size_t csr_at = 0;
    size_t bytes = 0;
    size_t cells = 0;
  };
  static SlotLayout LayoutOfSlot(const RoutedBatch& rb);
  void BuildUnpackTables(const RoutedBatch& rb);
  void PlaceRuns(const RoutedBatch& rb);
  // Within a phase: the batch's messages up into its slot block, their exchange over `x` into
  // the block's receive part, and (pooled) the unpack from the tables at `runs_dev` and
  // `cells_dev` (uploaded by the caller), whose bad-run word comes down with the phase; then the
  // runs are placed. CheckUnpack reads that word after the phase's wait.
  Status QueueDeviceInput(const RoutedBatch& rb, const DeviceExchange& x, const uint8_t* runs_dev,
                          const uint8_t* cells_dev);
  Status CheckUnpack(const RoutedBatch& rb);
  Status UnpackError(const std::vector<int32_t>& sources) const;
  // Uploads `extra` pieces alone into runs_buf_ (the device input's phases: the runs are on the
  // device already); extra_dev[k] receives piece k's device address.
  Status UploadExtras(const DeviceStaging::Piece* extra, size_t num_extra, uint8_t** extra_dev);
  // Within a phase: the verdict's words (DeviceVerdictWork) queued, their agreed part coming down
  // into the verdict object (verdict_) with the phase; *gate receives the agreed word's device
  // address.
  Status QueueVerdict(const DeviceVerdictWork& v, const int64_t** gate);
  // What a phase object queues on (the step's device, stream, context and staging).
  VerdictPhase Phase() { return VerdictPhase{device_, stream_, &ctx_, &staging_}; }
  // ApplySharded by phase. SizeSharded decides which shards run and how (fused, aggregated,
  // counted) and sizes every device buffer before anything is queued (a buffer that grows waits
  // for the stream); QueueGroupPhase queues the first phase (the verdict, the runs and gradients
  // up or packed on the device, the gradient exchange, every shard's grouping and fused backward
  // or aggregation, the data-parallel tables, the counted shards' statistics exchange) and ends
  // it with a wait when some shard reads its unique-row count on the host; StatsPhase computes,
  // downloads and exchanges those shards' partial row statistics; UpdatePhase uploads the full
  // statistics, queues the updates and ends the step (with its wait, or stream-ordered).
  struct ShardedPlan {
    bool any = false;               // some sharded table has ids on this rank
    bool any_aggregated = false;    // some aggregated shard reads its count on the host
    bool counted_exchange = false;  // counted column shards exchange statistics in phase 1
    std::vector<size_t> cx_send_counts, cx_recv_counts, cx_send_shards;
    size_t cx_send_total = 0;
    size_t x_send = 0;  // floats of the gradient message sent over ShardedInputs::x
  };
  Status SizeSharded(SparseUpdater& updater, const RoutedBatch& rb, const ShardedInputs& in,
                     ShardedPlan* plan);
  Status QueueGroupPhase(SparseUpdater& updater, const RoutedBatch& rb,
                         const std::vector<optim::OptimizerConfig>& configs, int64_t step,
                         const ShardedInputs& in, const ShardedPlan& plan);
  Status StatsPhase(comm::Communicator& comm, SparseUpdater& updater, const RoutedBatch& rb,
                    const std::vector<optim::OptimizerConfig>& configs, int64_t step,
                    double* comm_seconds, const ShardedInputs& in, const ShardedPlan& plan);
  Status UpdatePhase(SparseUpdater& updater, const std::vector<optim::OptimizerConfig>& configs,
                     int64_t step, const ShardedInputs& in, const ShardedPlan& plan);
  // A counted shard's statistics (when its optimizer has them) and update over its aggregated rows,
  // `count` (device memory) of them, queued behind its aggregation.
  // Without `apply` only the statistics (a column shard whose siblings' come with the exchange).
  Status QueueCountedUpdate(const RoutedBatch& rb, size_t local,
                            const optim::OptimizerConfig& config, int64_t step,
                            const int64_t* count, bool apply);
  // Within the first phase, on every rank when column shards exchange row statistics and counts
  // stay on the device: the partial statistics packed (device to device), exchanged over x->comm
  // (x null: this rank alone, one copy), each column shard's full statistics summed in column order
  // (emb_sum_sources) over its device count, and its update queued. The plan (counts, the send
  // order) is updater.PlanRowStats' over the worst-case sizes set in partial_stats.
  Status QueueCountedExchange(SparseUpdater& updater, const RoutedBatch& rb,
                              const DeviceExchange* x, const std::vector<size_t>& send_counts,
                              const std::vector<size_t>& recv_counts,
                              const std::vector<size_t>& send_shards, size_t send_total,
                              const std::vector<optim::OptimizerConfig>& configs, int64_t step);
  // Queues device-to-device copies of `shards`' partial statistics, back to back in that order,
  // into stat_send_ (each sized as updater.partial_stats).
  Status QueueStatsIntoSendBlock(const core::CudaRuntime& rt, SparseUpdater& updater,
                                 const std::vector<size_t>& shards);
  // The most unique rows a counted shard can have in `rb` (its row lists' and statistics' size).
  int64_t CountedRowsMax(const RoutedBatch& rb, size_t local) const;
  // Queues every local shard's lookups of runs_ into fwd_.io, within a phase the caller began.
  Status QueueLookupJobs();
  // Within a phase: the pack's tables up into pack_buf_ and the pack of `grad_dev` into `send`
  // (the message to the other ranks, in PackGradients' order) and `self` (this rank's own rows).
  Status QueuePack(const RoutedBatch& rb, const float* grad_dev, float* send, float* self);
  void PackPieces(const RoutedBatch& rb, DeviceStaging::Piece* pieces, size_t* jobs) const;
  Status ReservePack(const RoutedBatch& rb);  // before the phase: pack_buf_ never grows in it
  // Bounded wait for everything queued on the step's stream (kTimeout after core::kDeviceWaitMs).
  Status Wait();
  // A phase's one host synchronisation: ReadStatus naming `status_what` (it waits for the stream
  // first) when the phase looked up, else a wait when it queued anything; then the staged
  // downloads reach their host destinations. On an error they do not (the next Begin waits).
  Status EndPhase(const char* status_what);
  // A phase's end without a wait (a stream-ordered call): the status block's copy (when the phase
  // looked up) queued for the next wait and the block cleared on the stream; `comm`'s error
  // checked then too.
  Status EndPhaseDeferred(const char* status_what, comm::Communicator* comm);
  // As their downloads arrive (DeviceStaging's delivery hook): the checks of the phases that
  // ended without a wait.
  void CheckDeferred();

  const Layout* layout_ = nullptr;
  ParamStore* params_ = nullptr;
  int device_ = 0;
  // The step's stream: the collection's own (a plugin's stream_create), or the device's legacy
  // default stream with a plugin built before the stream entries.
  Stream stream_ = nullptr;
  ExecContext ctx_;
  DeviceStaging staging_;        // every host <-> device copy of a phase goes through it
  bool launched_ = false;        // work queued on the stream since the last phase's wait
  core::DeviceBuffer status_;    // the lookup kernels' status block
  core::DeviceBuffer runs_buf_;  // ids, weights and bag offsets of the batch (+ backward gradients)
  // Over a device communicator: the received return message (forward), and the gradients a
  // rank without ids for its shards receives (backward).
  core::DeviceBuffer a2a_recv_;
  DeviceDataParallel dp_;  // data-parallel tables trained on the device (InitDataParallel)
  // Per local shard: the runs (device pointers) and ids per run, read by both phases.
  std::vector<std::vector<kernels::BagRun>> runs_;
  std::vector<std::vector<int64_t>> num_ids_;
  // The device input distribution: per batch slot (RoutedBatch::device_slot: a batch in input
  // distribution and the last forwarded one, whose backward still reads its ids, never share
  // one) a block with the batch's routed messages, the received ones and the runs' CSR offsets;
  // the unpack's scans, scratch and bad-run word (downloaded into unpack_bad_host_ with the
  // phase), and its tables before upload.
  DeviceForward fwd_;      // the forward phase's buffers and combine (forward.h)
  DeviceBackward bwd_;     // the backward phase's buffers and per-shard state (backward.h)
  DeviceVerdict verdict_;  // the verdict's words and their download (verdict.h)
  // Phases that ended without a wait (EndPhaseDeferred): what to check after the next one.
  struct Deferred {
    const char* status_what = nullptr;  // the status block's copy is in deferred_status_
    bool unpack = false;                // the unpack's word is in unpack_bad_host_
    std::vector<int32_t> unpack_sources;
    comm::Communicator* comm = nullptr;
  } deferred_;
  std::vector<uint8_t> deferred_status_;
  std::vector<int32_t> unpack_sources_;
  Status deferred_error_;
  core::DeviceBuffer slots_[2];
  core::DeviceBuffer gather_send_;  // this rank's route summary, and every rank's
  core::DeviceBuffer gather_recv_;
  core::DeviceBuffer unpack_scan_;
  core::DeviceBuffer unpack_temp_;
  core::DeviceBuffer unpack_bad_;
  unsigned long long unpack_bad_host_ = 0;
  std::vector<kernels::simt_body::UnpackRun> unpack_runs_;
  std::vector<int64_t> unpack_cells_;
};

}  // namespace shardrec::embedding
