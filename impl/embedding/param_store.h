// The parameter memory of one rank's part of a collection: fp32 weights and every optimizer
// state in one arena (so a full replica sync is a single collective), one arena per 16-bit
// weight dtype, and the optimizer step counter. Math is always fp32: 16-bit rows are widened on
// read and rounded to nearest even on write.
#pragma once

#include <cstdint>
#include <vector>

#include "impl/core/exec.h"
#include "impl/core/host_arena.h"
#include "impl/core/host_memory.h"
#include "impl/embedding/kernels/kernels.h"
#include "impl/embedding/layout.h"
#include "impl/embedding/param_views.h"
#include "impl/optim/optimizer.h"

namespace shardrec::embedding {

class ParamStore {
 public:
  // Allocates the arenas `layout` describes (the layout must outlive the store), zero-filled;
  // huge_pages backs them with transparent huge pages (HostArena). kOutOfMemory when the host
  // has not got the memory.
  Status Allocate(const Layout* layout, bool huge_pages);
  // Fills the weights from the counter RNG keyed by (seed, table, global row, column), so they
  // do not depend on the plan: a 16-bit table starts as its fp32 values rounded to nearest even.
  void Initialise(uint64_t seed, const ExecContext& ctx);

  // Storage of a local shard's weights, a kernel view of them, and row access in fp32.
  void* ShardWeights(const LocalShard& ls);
  kernels::WeightsView View(const LocalShard& ls);
  void ReadRow(const LocalShard& ls, int64_t row, float* out);
  void WriteRow(const LocalShard& ls, int64_t row, const float* in);
  float* State(const LocalShard& ls, size_t state) { return states() + ls.state_offsets[state]; }
  // The optimizer's view of local shard `local`.
  optim::ShardParams Params(int32_t local);

  int64_t step() const { return step_; }
  void set_step(int64_t step) { step_ = step; }

  // The arenas, for 2D sync: fp32 weights, optimizer states (directly after the weights in
  // memory), the 16-bit weight arenas that are not empty, and the step counter.
  std::vector<ParamBuffer> Buffers();
  // Every local shard's weights and optimizer states with their place in the full tables.
  std::vector<ShardTensor> ShardTensors();

 private:
  float* weights() { return params_.as<float>(); }
  float* states() { return params_.as<float>() + layout_->weights_size; }

  const Layout* layout_ = nullptr;
  // This store's share of the host's available memory, from Allocate until Initialise has
  // written the weights (HostMemoryClaim: ranks created as threads at once).
  HostMemoryClaim claim_;
  HostArena params_;  // fp32 weights, then optimizer states
  HostArena weights_fp16_;
  HostArena weights_bf16_;
  int64_t step_ = 0;
};

}  // namespace shardrec::embedding
