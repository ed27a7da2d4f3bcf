// The sharded embedding collection: owns the local shards and optimizer state of one rank and
// runs input distribution, lookup, output distribution, backward and the fused optimizer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "impl/comm/communicator.h"
#include "impl/core/check.h"
#include "impl/core/status.h"
#include "impl/core/thread_pool.h"
#include "impl/embedding/batch.h"
#include "impl/embedding/input_dist.h"
#include "impl/embedding/kernels/kernels.h"
#include "impl/embedding/layout.h"
#include "impl/optim/optimizer.h"
#include "impl/sharding/types.h"

namespace shardrec::embedding {

struct CollectionOptions {
  uint64_t seed = 0;
  BoundsPolicy bounds = BoundsPolicy::kError;
  // Host threads for lookups and updates: <= 1 runs on the calling thread.
  int32_t num_threads = 0;
  // Group over which data-parallel tables average their gradients; null means the
  // collection's communicator (2D training passes the global group).
  std::shared_ptr<comm::Communicator> dp_comm;
};

// A local parameter buffer, for replica synchronisation (2D) and checkpoints.
struct ParamBuffer {
  // "weights" (fp32), "optimizer_states" (fp32, directly after "weights" in memory),
  // "weights_fp16", "weights_bf16" (only when such tables have local shards), "step".
  // Every weight buffer's name starts with "weights".
  std::string name;
  void* data = nullptr;
  size_t count = 0;  // elements
  DType dtype = DType::kFloat32;
};

struct StateInfo {
  std::string name;
  bool row_wise = false;  // one value per row, else one per element
};

// Seconds spent inside collectives vs. everything, accumulated since creation.
struct CollectionTimings {
  double comm_seconds = 0;
  double total_seconds = 0;
  int64_t forwards = 0;
  int64_t backwards = 0;
};

class EmbeddingCollection {
 public:
  // Collective over `comm`: checks that every rank has the same plan and a valid config, then
  // allocates and initialises the local shards and optimizer states.
  static Status Create(std::shared_ptr<const sharding::Plan> plan,
                       std::shared_ptr<comm::Communicator> comm,
                       const optim::OptimizerConfig& optimizer, const CollectionOptions& options,
                       std::unique_ptr<EmbeddingCollection>* out);
  ~EmbeddingCollection();
  EmbeddingCollection(const EmbeddingCollection&) = delete;
  EmbeddingCollection& operator=(const EmbeddingCollection&) = delete;

  // Start + wait + ForwardDistributed in one call.
  Status Forward(const Batch& batch, float* out, size_t out_len);
  // Routes `batch` and starts exchanging its ids on a background thread over a dedicated
  // communicator; `batch` may be reused as soon as this returns.
  Status StartInputDist(const Batch& batch);
  Status WaitInputDist();
  // Lookup and output distribution of the batch whose input distribution has completed.
  Status ForwardDistributed(float* out, size_t out_len);
  // Gradient of the last forward's output; applies the fused optimizer.
  Status Backward(const float* grad, size_t grad_len);

  Status SetLearningRate(float lr);
  // Collective: full [rows, dim] weights of a table, gathered on every rank / scattered from
  // every rank's copy.
  Status GetWeights(const std::string& table, float* out, size_t len);
  Status SetWeights(const std::string& table, const float* in, size_t len);
  // Collective: a full optimizer state ([rows] row-wise, else [rows, dim]).
  Status GetState(const std::string& table, const std::string& state, float* out, size_t len);
  Status SetState(const std::string& table, const std::string& state, const float* in, size_t len);
  Status SetNumSteps(int64_t steps);

  std::vector<StateInfo> States() const;
  // The fp32 weights arena, the optimizer state arena (which follows it in memory), the
  // 16-bit weight arenas that are not empty, and the step counter.
  std::vector<ParamBuffer> LocalParameterBuffers();
  int64_t output_dim() const { return layout_.output_dim; }
  bool sequence() const { return layout_.sequence; }
  int64_t num_steps() const { return step_; }
  bool input_dist_pending() const { return pending_ != nullptr; }
  const sharding::Plan& plan() const { return *layout_.plan; }
  const Layout& layout() const { return layout_; }
  const optim::OptimizerConfig& optimizer() const { return optim_; }
  const CollectionTimings& timings() const { return timings_; }

 private:
  EmbeddingCollection() = default;
  void Initialise();
  ThreadPool* pool() { return pool_.get(); }
  optim::ShardParams Params(int32_t local);
  std::unique_ptr<RoutedBatch> TakeSpare();
  // Collective agreement: returns `local` on this rank, or an error naming a rank that failed.
  Status Agree(const Status& local, const char* what);
  Status LookupAndReturn(RoutedBatch& rb);
  void Combine(const RoutedBatch& rb, float* out);
  Status SendGradients(const RoutedBatch& rb, const float* grad);
  void AggregateShardGradients(const RoutedBatch& rb);
  bool FusedEligible(size_t local) const;
  Status ApplySharded();
  Status BackwardDataParallel(const RoutedBatch& rb, const float* grad);
  Status FindTable(const std::string& table, int32_t* index) const;
  Status FindState(const std::string& state, int32_t* index) const;
  // Local checks shared by the weight and state accessors (before the collective agreement);
  // `state` null means the weights (*s = -1).
  Status CheckAccess(const std::string& table, const std::string* state, const float* data,
                     size_t len, const char* what, int32_t* t, int32_t* s) const;
  Status Gather(int32_t table, int32_t state, float* out);
  void Scatter(int32_t table, int32_t state, const float* in);

  Layout layout_;
  std::shared_ptr<comm::Communicator> comm_;
  std::shared_ptr<comm::Communicator> dp_comm_;
  std::unique_ptr<comm::Communicator> input_comm_;
  optim::OptimizerConfig optim_;
  CollectionOptions options_;
  std::unique_ptr<ThreadPool> pool_;
  // fp32 weights then optimizer states in one arena, so a full replica sync is a single
  // collective; fp16 and bf16 tables keep their weights in one 16-bit arena per dtype.
  std::vector<float> params_;
  std::vector<uint16_t> weights_fp16_;
  std::vector<uint16_t> weights_bf16_;
  float* weights_data() { return params_.data(); }
  float* states_data() { return params_.data() + layout_.weights_size; }
  // Storage of a local shard's weights (impl/embedding/storage.cc): the first element in the
  // arena of its dtype, a kernel view, and row access in fp32 (reads widen exactly, writes
  // round to nearest even).
  void* ShardWeights(const LocalShard& ls);
  kernels::WeightsView View(const LocalShard& ls);
  void ReadRow(const LocalShard& ls, int64_t row, float* out);
  void WriteRow(const LocalShard& ls, int64_t row, const float* in);
  int64_t step_ = 0;

  // One batch may be in input distribution (pending_) while the last forwarded one
  // (current_) waits for its backward.
  std::unique_ptr<RoutedBatch> pending_;
  std::unique_ptr<RoutedBatch> current_;
  std::unique_ptr<RoutedBatch> spare_;
  bool pending_ready_ = false;
  bool current_consumed_ = true;
  std::thread worker_;
  Status worker_status_;

  // Reusable per-step buffers.
  std::vector<float> staging_;
  std::vector<float> ret_send_;
  std::vector<float> ret_recv_;
  std::vector<std::vector<int64_t>> uniq_rows_;
  std::vector<std::vector<float>> uniq_grads_;
  std::vector<std::vector<float>> partial_stats_;
  std::vector<kernels::Workspace> workspaces_;  // per local shard, reused every backward
  std::vector<float> stat_send_;
  std::vector<float> stat_recv_;
  std::vector<float> full_stats_;
  std::vector<float> dp_grad_;
  std::vector<size_t> dp_grad_offset_;   // per table (DP only): grads [rows, dim]
  std::vector<size_t> dp_touch_offset_;  // per table (DP only): touched flags [rows]
  CollectionTimings timings_;
};

}  // namespace shardrec::embedding
