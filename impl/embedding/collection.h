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
#include <span>
#include <string>
#include <vector>

#include "impl/comm/communicator.h"
#include "impl/comm/work.h"
#include "impl/core/status.h"
#include "impl/embedding/batch.h"
#include "impl/embedding/engine.h"
#include "impl/embedding/input_dist.h"
#include "impl/embedding/layout.h"
#include "impl/embedding/param_views.h"
#include "impl/embedding/row_resolver.h"
#include "impl/embedding/step_agreement.h"
#include "impl/embedding/step_state.h"
#include "impl/embedding/storage/table_storage.h"
#include "impl/embedding/vbe.h"
#include "impl/optim/optimizer.h"
#include "impl/sharding/types.h"

namespace shardrec::embedding {

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
  // A rank that cannot even call Create (no plan, nowhere to put the collection) but has its
  // communicator: it takes part in Create's agreement over a host communicator, so its peers
  // fail naming it instead of waiting out their timeout, and returns `why`. Over a device
  // communicator it returns `why` alone (the peers' agreement then depends on their engine).
  static Status RefuseCreate(const std::shared_ptr<comm::Communicator>& comm, const Status& why);
  ~EmbeddingCollection();
  EmbeddingCollection(const EmbeddingCollection&) = delete;
  EmbeddingCollection& operator=(const EmbeddingCollection&) = delete;

  // Start + wait + ForwardDistributed in one call (where the forward's agreement rides on the
  // input exchange, StepAgreement::Terms, the output buffer is checked before that exchange, so a
  // refused one fails every rank there). `rejected` as in Create: this rank's
  // input was refused before it became a Batch (the batch is then ignored). `device_out` non-null:
  // `out` is device memory of the collection's device (only where WritesDeviceOutput says so); the
  // output is written there device to device, stream-ordered: behind device_out->stream's earlier
  // work, and that stream's later work behind the write; the call returns with it queued (its
  // checks are made at the next synchronising call: Settle). Synchronising: what earlier
  // stream-ordered calls found is returned first (every rank alike; the batch is then dropped).
  Status Forward(const Batch& batch, float* out, size_t out_len,
                 const Status& rejected = Status::Ok(), const DeviceOutput* device_out = nullptr);
  // Forward / StartInputDist of a batch with a batch size per feature (vbe.h,
  // docs/variable-batch.md): `out` has the VBE layout (VbeOutputLength floats), and so has the
  // gradient of the backward that follows (and the output of the ForwardDistributed that consumes
  // a started one). A view this rank refuses rejects the step on every rank like a bad plain
  // batch; a GPU collection refuses every VBE view (kUnsupported, on every rank).
  Status ForwardVbe(const VbeBatch& batch, float* out, size_t out_len,
                    const Status& rejected = Status::Ok());
  Status StartInputDistVbe(const VbeBatch& batch, const Status& rejected = Status::Ok());
  // The floats of the VBE output of `batch` (not collective; reads its sizes).
  Status VbeOutputLength(const VbeBatch& batch, size_t* out) const {
    return VbeOutputLen(s_.layout, batch, out);
  }
  // Whether a forward can write its output straight into device memory on `device` (a pooled GPU
  // collection on that device whose forward combines on the device, with a plugin that divides
  // MEAN outputs there when the plan has any); otherwise device outputs are staged by the caller.
  bool WritesDeviceOutput(const Device& device) const;
  // Routes `batch` and queues its id exchange on the collection's communication worker (a
  // private communicator); `batch` may be reused as soon as this returns.
  Status StartInputDist(const Batch& batch, const Status& rejected = Status::Ok());
  Status WaitInputDist();
  // Lookup and output distribution of the batch whose input distribution has completed. A rank
  // whose output buffer is unusable (`rejected`, or a wrong out_len) fails every rank's call
  // before any state changes (StepAgreement::BeforeRows), and the batch is dropped on every
  // rank; in a GPU collection over NCCL (EngineTraits::agrees_outputs_first) that rank still
  // takes part in the exchange and fails alone, and the next backward fails on every rank.
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

  // Whether forwards train or evaluate (docs/dynamic-tables.md, "Evaluation"): an evaluation
  // forward inserts, touches and counts nothing in dynamic tables (unknown ids read zeros) and its
  // backward is refused. Not collective; every rank must use the same mode for a forward (checked
  // by the forward of a collection with dynamic tables). kUnsupported for evaluation on a device
  // collection.
  Status SetTraining(bool training);
  bool training() const { return s_.training; }
  // The caller's eviction scores of dynamic table `table` (SCORE policy): the ids with a row on
  // this rank take their score, the others are ignored; *num_set counts the former. Every score
  // is checked (finite) before any is set. Not collective.
  Status SetDynamicScores(const std::string& table, std::span<const int64_t> ids,
                          std::span<const double> scores, int64_t* num_set);

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
  const optim::OptimizerConfig& table_optimizer(int32_t table) const {
    return s_.table_optim[table];
  }
  // Parameter views (param_views.h): the arenas for 2D sync, the per-shard tensors for
  // checkpoints. Valid until the collection is destroyed.
  std::vector<ParamBuffer> ParamBuffers() { return s_.params.Buffers(); }
  std::vector<ShardTensor> ShardTensors() { return s_.params.ShardTensors(); }
  int64_t output_dim() const { return s_.layout.output_dim; }
  bool sequence() const { return s_.layout.sequence; }
  int64_t num_steps() const { return s_.params.step(); }
  bool input_dist_pending() const { return pending_ != nullptr; }
  const sharding::Plan& plan() const { return *s_.layout.plan; }
  const Layout& layout() const { return s_.layout; }
  const optim::OptimizerConfig& optimizer() const { return optim_; }
  const CollectionTimings& timings() const { return s_.timings; }
  // Ranks of the data-parallel tables' group (the world on a 2D mesh, by default).
  int data_parallel_size() const { return s_.dp_comm ? s_.dp_comm->Size() : 1; }
  comm::Communicator& comm() { return *s_.comm; }
  // What checkpoints and 2D replicas see of the tables (storage/table_storage.h); valid as long
  // as the collection.
  TableStorage& storage();

 private:
  friend class CollectionStorage;  // storage/collection_storage.cc
  EmbeddingCollection() = default;
  std::unique_ptr<RoutedBatch> TakeSpare();
  // The plain forms of Forward, StartInputDist, ForwardDistributed and Backward, run for plain
  // and (padded, vbe.h) VBE batches alike.
  Status RunForward(const Batch& batch, float* out, size_t out_len, const Status& rejected,
                    const DeviceOutput* device_out);
  Status RunStartInputDist(const Batch& batch, const Status& rejected);
  Status RunForwardDistributed(float* out, size_t out_len, const Status& rejected,
                               const DeviceOutput* device_out);
  Status RunBackward(const float* grad, size_t grad_len, const Status& rejected,
                     const DeviceGradient* device_grad);
  // A VBE call on a GPU collection: kUnsupported, after taking part in the step's agreement.
  Status RefuseVbeOnDevice() const;
  // A VBE backward's checks of the caller's gradient (its VBE layout) and its reduction into the
  // padded batch's gradient (vbe.h), then RunBackward.
  Status BackwardVbe(const float* grad, size_t grad_len);
  // A NaN or infinite element of a host output gradient (GradNotFinite names it).
  Status CheckGradFinite(const float* grad, size_t len) const;
  // This rank's verdict on a forward's output buffer: whether `out` / `out_len` (or
  // `device_out`) fit the output of its own batch of `batch_size` samples and `num_values` ids.
  Status CheckOutput(int64_t batch_size, int64_t num_values, const float* out, size_t out_len,
                     const DeviceOutput* device_out) const;
  // The stages of a batch whose input distribution is complete: the agreement before its rows
  // (with `agree`: InputTerms::agree_before_rows), the row resolution, the lookup and output
  // distribution. `local` is this rank's verdict on its output buffer (the caller's CheckOutput,
  // or its rejection); `output_checked`: that verdict rode on the input exchange.
  Status Distribute(std::unique_ptr<RoutedBatch> rb, float* out, const Status& local,
                    const DeviceOutput* device_out, bool agree, bool output_checked);
  // A forward's end: when its exchanges went through (`s`), `rb` becomes the batch backward will
  // use (also when this rank refused its output, `local`: its backward then rejects the step on
  // every rank), else the spare.
  Status Finish(std::unique_ptr<RoutedBatch> rb, const Status& s, const Status& local);
  Status FindTable(const std::string& table, int32_t* index) const;
  Status FindState(int32_t table, const std::string& state, int32_t* index) const;
  // An accessor's agreement: `local` as StepAgreement::Agree, and every rank naming the same table
  // and state (indices; -1 for none).
  Status AgreeOnTable(const Status& local, const char* what, int32_t table, int32_t state);
  // Local checks shared by the weight and state accessors (before the collective agreement);
  // `state` null means the weights (*s = -1).
  // Notes whether the batch of a Forward / ForwardDistributed failed, for the next backward.
  Status Forwarded(const Status& s);
  Status CheckAccess(const std::string& table, const std::string* state, const float* data,
                     size_t len, const char* what, int32_t* t, int32_t* s) const;
  Status Gather(int32_t table, int32_t state, float* out);
  Status Scatter(int32_t table, int32_t state, const float* in);

  StepState s_;
  optim::OptimizerConfig optim_;  // the default optimizer
  // Every cross-rank verdict of a step (step_agreement.h).
  StepAgreement agreement_{&s_};
  // The stages (engine.h, row_resolver.h), host or device, fixed or dynamic rows: destroyed
  // before the state they work on.
  std::unique_ptr<RowResolver> resolver_;
  std::unique_ptr<Engine> engine_;
  // One batch may be in input distribution (pending_) while the last forwarded one (s_.current)
  // waits for its backward.
  std::unique_ptr<RoutedBatch> pending_;
  std::unique_ptr<RoutedBatch> spare_;
  std::shared_ptr<comm::Work> pending_work_;  // null once waited for
  bool last_forward_failed_ = false;          // the last Forward / ForwardDistributed failed
  bool current_evaluated_ = false;            // s_.current came from an evaluation forward (Finish)
  std::unique_ptr<TableStorage> storage_;     // made by the first storage()
  // VBE shapes (vbe.h): of the forward in progress (vbe_forward_), of the started input
  // distribution (vbe_pending_) and of s_.current (vbe_current_, which Finish takes from the one
  // the forward ran, vbe_source_); the scratch of a pooled batch's rows (VbeStep::places, or a
  // sequence batch's padded output) and gradient.
  VbeStep vbe_forward_;
  VbeStep vbe_pending_;
  VbeStep vbe_current_;
  VbeStep* vbe_source_ = nullptr;
  std::vector<float> vbe_out_;
  std::vector<float> vbe_grad_;
  // The caller's VBE gradient was checked finite (BackwardVbe): its reduction needs no check.
  bool vbe_grad_checked_ = false;
  // What a pooled VBE call passes the plain pipeline as its output or gradient when the caller's
  // is NULL (0 floats): the pipeline asks for a non-NULL buffer, and writes only to the places.
  float vbe_stub_ = 0.0f;
};

}  // namespace shardrec::embedding
