// The sharded embedding collection: one rank's part of a sharded model. It strings the pipeline
// together (input distribution -> lookup -> output distribution; backward in reverse) and owns
// the pieces: the static layout, the parameter store, the backward's updater and the batches in
// flight. Every step that needs agreement between ranks goes through one mechanism here: a rank
// that rejects its input still takes part in the step's first exchange, so its peers learn which
// rank rejected and nothing changes anywhere.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "impl/comm/communicator.h"
#include "impl/comm/encoded.h"
#include "impl/comm/work.h"
#include "impl/core/check.h"
#include "impl/core/exec.h"
#include "impl/core/status.h"
#include "impl/core/thread_pool.h"
#include "impl/embedding/backward.h"
#include "impl/embedding/batch.h"
#include "impl/embedding/device_route.h"
#include "impl/embedding/device_route_backend.h"
#include "impl/embedding/device_sizing.h"
#include "impl/embedding/device_step.h"
#include "impl/embedding/input_dist.h"
#include "impl/embedding/kernels/kernels.h"
#include "impl/embedding/layout.h"
#include "impl/embedding/param_store.h"
#include "impl/embedding/param_views.h"
#include "impl/optim/optimizer.h"
#include "impl/sharding/types.h"

namespace shardrec::embedding {

struct CollectionOptions {
  // Where the parameters live and the lookup / optimizer kernels run. CUDA (GPU collection v1):
  // weights and optimizer states on that device, the kernels there through the CUDA plugin;
  // routing, the combine and every exchange stay on the host over the (host) communicator, with
  // the data staged across PCIe, and every call returns after its device work is complete.
  // Data-parallel tables look up on the device and all-reduce their dense gradient on the host.
  // v1 refuses (kUnsupported) a device communicator (NCCL) and a batch declared on a device.
  Device device;
  uint64_t seed = 0;
  BoundsPolicy bounds = BoundsPolicy::kError;
  // Host threads for lookups and updates: <= 1 runs on the calling thread.
  int32_t num_threads = 0;
  // Group over which data-parallel tables average their gradients; null means the
  // collection's communicator (2D training passes the global group).
  std::shared_ptr<comm::Communicator> dp_comm;
  // Reject NaN/infinite per-id weights (forward) and output-gradient elements (backward) like
  // any bad input; off lets them through for speed.
  bool check_non_finite = true;
  // Back the weight and optimizer-state arenas with transparent huge pages (fewer TLB misses
  // on random rows); off uses plain pages.
  bool huge_pages = true;
  // Wire encoding of the pooled rows' return all-to-all (forward), and of the gradient
  // all-to-all and the data-parallel gradient all-reduce (backward). kFp32 is exact.
  comm::Encoding forward_encoding = comm::Encoding::kFp32;
  comm::Encoding backward_encoding = comm::Encoding::kFp32;
  // Capacity hints (GPU collections size their per-step buffers from them at creation; host
  // collections ignore them).
  StepCapacity capacity;
};

struct StateInfo {
  std::string name;
  bool row_wise = false;  // one value per row, else one per element
};

// Where a rank's time goes, accumulated since creation (wall-clock seconds). The phases of a
// forward are input distribution (routing, the id exchange and unpacking; the part that ran on
// the communication worker included), lookup, and output distribution (the return exchange and
// the combine); backward is one phase. collective_seconds is the time spent inside (or waiting
// for) collectives across all phases; total the time inside the collection's calls.
struct CollectionTimings {
  double comm_seconds = 0;
  double total_seconds = 0;
  double input_dist_seconds = 0;
  double lookup_seconds = 0;
  double output_dist_seconds = 0;
  double backward_seconds = 0;
  // Part of comm_seconds in the collectives that carry embeddings or their gradients (return
  // all-to-all, gradient all-to-all, data-parallel all-reduce), encoding included.
  double embedding_comm_seconds = 0;
  int64_t forwards = 0;
  int64_t backwards = 0;
  int64_t samples = 0;  // local samples forwarded
};

class EmbeddingCollection {
 public:
  // Collective over `comm`: checks that every rank has the same plan and a valid config, then
  // allocates and initialises the local shards and optimizer states. `optimizer` is the default
  // of the tables without their own (TableConfig::optimizer); null means the optimizer the plan
  // was made for (its planned type with default hyperparameters), so the optimizer is given once.
  // A rank whose caller already rejected its arguments passes that error as
  // `rejected`: it takes part in the agreement and returns it, and its peers fail naming it.
  static Status Create(std::shared_ptr<const sharding::Plan> plan,
                       std::shared_ptr<comm::Communicator> comm,
                       const optim::OptimizerConfig* optimizer, const CollectionOptions& options,
                       std::unique_ptr<EmbeddingCollection>* out,
                       const Status& rejected = Status::Ok());
  ~EmbeddingCollection();
  EmbeddingCollection(const EmbeddingCollection&) = delete;
  EmbeddingCollection& operator=(const EmbeddingCollection&) = delete;

  // Start + wait + ForwardDistributed in one call. `rejected` as in Create: this rank's input
  // was refused before it became a Batch (the batch is then ignored). `device_out` non-null: `out`
  // is device memory of the collection's device (only where WritesDeviceOutput says so); the
  // output is written there device to device, stream-ordered: behind device_out->stream's earlier
  // work, and that stream's later work behind the write; the call returns with it queued (its
  // checks are made at the next synchronising call: Settle). Synchronising: what earlier
  // stream-ordered calls found is returned first (every rank alike; the batch is then dropped).
  Status Forward(const Batch& batch, float* out, size_t out_len,
                 const Status& rejected = Status::Ok(), const DeviceOutput* device_out = nullptr);
  // Whether a forward can write its output straight into device memory on `device` (a pooled GPU
  // collection on that device whose forward combines on the device, with a plugin that divides
  // MEAN outputs there when the plan has any); otherwise device outputs are staged by the caller.
  bool WritesDeviceOutput(const Device& device) const;
  // Routes `batch` and queues its id exchange on the collection's communication worker (a
  // private communicator); `batch` may be reused as soon as this returns.
  Status StartInputDist(const Batch& batch, const Status& rejected = Status::Ok());
  Status WaitInputDist();
  // Lookup and output distribution of the batch whose input distribution has completed. A rank
  // whose output buffer is unusable (`rejected`, or a wrong out_len) still takes part in the
  // exchange and then fails alone; the batch is dropped on that rank.
  Status ForwardDistributed(float* out, size_t out_len, const Status& rejected = Status::Ok(),
                            const DeviceOutput* device_out = nullptr);
  // Gradient of the last forward's output; applies the fused optimizer. A rejection on any rank
  // (`rejected`, a wrong grad_len, no forward) fails the call on every rank, changing nothing.
  // `device_grad` non-null: `grad` is device memory of the collection's device (only where
  // TakesDeviceGradient says so), read on the device after the caller's work on
  // device_grad->stream (checked, packed and exchanged there). With the gated backward (gated_)
  // that call is stream-ordered: it returns OK once the step is queued, device_grad->stream's later
  // work ordered behind its reads of `grad`, and the step's verdict (a rejection on any rank, this
  // rank's own included) is returned by the next synchronising call on every rank, which takes
  // the step back (Settle). A backward first learns an earlier stream-ordered backward still
  // unlearnt.
  Status Backward(const float* grad, size_t grad_len, const Status& rejected = Status::Ok(),
                  const DeviceGradient* device_grad = nullptr);
  // Whether a backward can read its gradient straight from device memory on `device` (a GPU
  // collection on that device without data-parallel tables, whose gradient message is exchanged
  // between device buffers or does not travel, with a plugin serving device gradients);
  // otherwise device gradients are staged by the caller.
  bool TakesDeviceGradient(const Device& device) const;

  // Waits (bounded) for the device work stream-ordered calls left queued (a GPU collection given
  // CUDA views) and returns what they found: a backward rejected on any rank (this rank's error,
  // or which rank rejected; the step it had counted is taken back and its batch may be trained
  // again), a device failure, an internal error found on the device. Every call that
  // synchronises does this first (Settle); OK at once when nothing is queued. Not collective.
  Status Synchronize();

  // Every table's learning rate / one table's (schedules). Not collective; every rank should
  // set the same values.
  Status SetLearningRate(float lr);
  Status SetTableLearningRate(const std::string& table, float lr);
  // Collective: full [rows, dim] weights of a table, gathered on every rank / scattered from
  // every rank's copy.
  Status GetWeights(const std::string& table, float* out, size_t len);
  Status SetWeights(const std::string& table, const float* in, size_t len);
  // Collective: a full optimizer state ([rows] row-wise, else [rows, dim]).
  Status GetState(const std::string& table, const std::string& state, float* out, size_t len);
  Status SetState(const std::string& table, const std::string& state, const float* in, size_t len);
  Status SetNumSteps(int64_t steps);

  // The states of the default optimizer, and those of one table's optimizer.
  std::vector<StateInfo> States() const;
  Status TableStates(const std::string& table, std::vector<StateInfo>* out) const;
  const optim::OptimizerConfig& table_optimizer(int32_t table) const { return table_optim_[table]; }
  // Parameter views (param_views.h): the arenas for 2D sync, the per-shard tensors for
  // checkpoints. Valid until the collection is destroyed.
  std::vector<ParamBuffer> ParamBuffers() { return params_.Buffers(); }
  std::vector<ShardTensor> ShardTensors() { return params_.ShardTensors(); }
  int64_t output_dim() const { return layout_.output_dim; }
  bool sequence() const { return layout_.sequence; }
  int64_t num_steps() const { return params_.step(); }
  bool input_dist_pending() const { return pending_ != nullptr; }
  const sharding::Plan& plan() const { return *layout_.plan; }
  const Layout& layout() const { return layout_; }
  const optim::OptimizerConfig& optimizer() const { return optim_; }
  const CollectionTimings& timings() const { return timings_; }
  comm::Communicator& comm() { return *comm_; }

 private:
  EmbeddingCollection() = default;
  std::unique_ptr<RoutedBatch> TakeSpare();
  // This rank's verdict on its batch: `rejected` if set, else RouteBatch's; anything thrown
  // while routing becomes the rejection too, so it still reaches the agreement.
  Status Route(const Batch& batch, const Status& rejected, RoutedBatch* rb);
  // A NaN or infinite element of the output gradient, named by sample and feature/table.
  Status CheckGradFinite(const float* grad, size_t len) const;
  Status GradNotFinite(size_t i, float value) const;
  // The backward's agreement with a device gradient (DeviceStep::Verdict): this rank's verdict
  // `local` and the device's non-finite check, all-reduced in one phase.
  Status AgreeOnDeviceGradient(const Status& local, const float* grad, size_t n,
                               const DeviceGradient& device_grad);
  // Collective agreement: returns `local` on this rank, or an error naming a rank that failed.
  Status Agree(const Status& local, const char* what);
  // The input distribution's collective part and the owner side's description of what arrived
  // (ExchangeInput + UnpackInput, or with device_input_ the counts exchange + UnpackCounts of
  // device_input.h); `local` is this rank's verdict, and a rejecting rank takes part too.
  Status ExchangeAndUnpack(const Status& local, RoutedBatch* rb);
  // Route + exchange + unpack of a batch (`rejected`: the caller's verdict), every rank taking
  // part. With device_input_: the route summaries' all-gather over the device communicator
  // (device_input.h), a KJT on the device routed there with its messages written straight into
  // the batch's slot block (RouteAndGatherOnDevice); else Route + ExchangeAndUnpack.
  Status DistributeInput(const Batch& batch, const Status& rejected, RoutedBatch* rb);
  Status RouteAndGatherOnDevice(const Batch& batch, RoutedBatch* rb);
  Status LookupAndReturn(RoutedBatch& rb);
  // Whether a forward's returned rows are combined on the device (DeviceStep::LookupCombine):
  // a pooled GPU collection at world 1, or over NCCL with fp32 messages.
  bool CombinesOnDevice() const;
  Status LookupCombineOnDevice(RoutedBatch& rb, const CombineOut& out);
  // The lookup and output distribution of a batch whose input distribution is complete.
  Status Distribute(std::unique_ptr<RoutedBatch> rb, float* out, size_t out_len,
                    const Status& rejected, const DeviceOutput* device_out);
  // The end of a backward: the data-parallel tables' all-reduce and update on the host (unless
  // they trained on the device, in the sharded tables' phase), then the count.
  Status ApplyDataParallelTables(const RoutedBatch& rb, const float* grad, int64_t step);
  // A forward's end: when its exchanges went through (`s`), `rb` becomes the batch backward will
  // use (also when this rank refused its output, `local`: its backward then rejects the step on
  // every rank), else the spare.
  Status Finish(std::unique_ptr<RoutedBatch> rb, const Status& s, const Status& local);
  // What a stream-ordered call left to learn (device views: CombineOut::async,
  // ShardedInputs::async), learnt at the next call that synchronises: with `wait` after waiting
  // for the stream, else from what the last wait delivered. Returns the first error (see
  // Synchronize) and, for a rejected backward, takes its step back.
  Status Settle(bool wait);
  struct PendingVerdict {
    bool pending = false;  // its verdict comes with a later wait (DeviceStep::VerdictArrived)
    int64_t step = 0;      // the step it counted
    int64_t forwards = 0;  // timings_.forwards then: its batch is still current_ while equal
    Status local;          // this rank's own rejection of the call
  };
  PendingVerdict pending_verdict_;
  // A backward whose verdict is agreed on the device and gates the updates there (gated_), all in
  // the update phase: DeviceStep::ApplySharded with ShardedInputs::verdict. `local` is this rank's
  // verdict on its call; the agreed one is read after the phase's wait.
  Status BackwardGated(const float* grad, const Status& local, const DeviceGradient* device_grad);
  // The data-parallel tables' part of a device backward (device_dp_): their group, and the host
  // output gradient they accumulate from (null, 0 for a gradient on the device).
  DeviceDpWork DataParallelWork(const float* host_grad, size_t floats) const;
  Status FindTable(const std::string& table, int32_t* index) const;
  Status FindState(int32_t table, const std::string& state, int32_t* index) const;
  // Local checks shared by the weight and state accessors (before the collective agreement);
  // `state` null means the weights (*s = -1).
  Status CheckAccess(const std::string& table, const std::string* state, const float* data,
                     size_t len, const char* what, int32_t* t, int32_t* s) const;
  Status Gather(int32_t table, int32_t state, float* out);
  Status Scatter(int32_t table, int32_t state, const float* in);

  Layout layout_;
  std::shared_ptr<comm::Communicator> comm_;
  std::shared_ptr<comm::Communicator> dp_comm_;
  // A GPU collection given a device (NCCL) communicator: that communicator, for the payloads
  // exchanged between device buffers; comm_ is then its host-buffer wrapper (staged_comm.h).
  std::shared_ptr<comm::Communicator> device_comm_;
  std::unique_ptr<comm::Communicator> input_comm_;
  // Over that device communicator at world > 1 with fp32 messages and a plugin with emb_unpack on
  // every rank: the ids travel between device buffers (device_input.h).
  bool device_input_ = false;
  // Data-parallel tables trained on the device (device_dp.h; every rank's plugin serves it): their
  // all-reduce goes over dp_device_comm_ between device buffers (null: a group of one).
  bool device_dp_ = false;
  std::shared_ptr<comm::Communicator> dp_device_comm_;
  // A backward whose verdict is agreed on the device gates its updates there (every rank's plugin
  // serves emb_group_rows_gated): no host wait before the updates are queued.
  bool gated_ = false;
  std::vector<float> junk_grad_;  // what a rank that rejected a gated backward packs
  optim::OptimizerConfig optim_;  // the default optimizer
  std::vector<optim::OptimizerConfig> table_optim_;  // per table: its own, or the default
  CollectionOptions options_;
  std::unique_ptr<ThreadPool> pool_;
  ExecContext exec_;
  ParamStore params_;
  SparseUpdater updater_;
  std::unique_ptr<DeviceStep> device_;  // GPU collections only
  // GPU collections: the routing of a KJT given in device memory (made at its first such batch).
  std::unique_ptr<DeviceRouteBackend> route_device_;
  RouteTables route_tables_;
  // The device input distribution's route summaries: this rank's (host routing) and every
  // rank's, reused between batches.
  std::vector<uint8_t> summary_;
  std::vector<uint8_t> gathered_;

  // One batch may be in input distribution (pending_) while the last forwarded one (current_)
  // waits for its backward.
  std::unique_ptr<RoutedBatch> pending_;
  std::unique_ptr<RoutedBatch> current_;
  std::unique_ptr<RoutedBatch> spare_;
  std::shared_ptr<comm::Work> pending_work_;  // null once waited for
  bool current_consumed_ = true;
  bool current_rejected_ = false;  // this rank refused current_'s output (Finish)
  std::unique_ptr<comm::CommWorker> worker_;

  // Reusable per-step buffers of the output distribution (and, reversed, of the gradients).
  std::vector<float> ret_send_;
  std::vector<float> ret_recv_;
  // The rows this rank looked up for its own samples (forward) and their gradients (backward):
  // the end of ret_send_, never copied through an exchange with itself.
  float* SelfRows(const RoutedBatch& rb) { return ret_send_.data() + rb.ret_self_offset; }
  std::vector<kernels::LookupJob> jobs_;
  comm::EncodedScratch wire_;  // 16-bit staging of the encoded all-to-alls
  // Whether a host collection's return (forward) or gradient (backward) exchange travels
  // encoded with the rows encoded by the kernels that produce them (output_dist.h WireRows, in
  // wire_.send / wire_.recv): world > 1, that direction's encoding not fp32. The forward's combine
  // decodes as it adds; the backward decodes once before its kernels. A GPU collection's encoded
  // messages take comm::EncodedAllToAllV's staged passes.
  bool WireInKernels(comm::Encoding e) const {
    return device_ == nullptr && layout_.world > 1 && e != comm::Encoding::kFp32;
  }
  CollectionTimings timings_;
};

}  // namespace shardrec::embedding
