// The parameter memory of one rank's part of a collection: fp32 weights and every optimizer
// state in one arena (so a full replica sync is a single collective), one arena per 16-bit
// weight dtype, one byte arena for FP8 rows, and the optimizer step counter. Math is always
// fp32: 16-bit rows are widened on read and rounded to nearest even on write; FP8 rows are
// decoded exactly on read and encoded whole on write (core/fp8.h: the row's power-of-two scale
// from its largest magnitude, each value to nearest even, saturating).
//
// The arenas live on the host or, for a GPU collection, on one CUDA device (device_params.cc):
// then every pointer the store hands out (ShardWeights, State, Params, View) is device memory for
// the device kernels, and the host reaches the values only through ReadShard / WriteShard.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <utility>
#include <vector>

#include "impl/core/device.h"
#include "impl/core/device_buffer.h"
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
  // has not got the memory. On a CUDA `device` the arenas are device memory (kOutOfMemory naming
  // the bytes when the device has not got them; the errors of core::GetCudaRuntime without a
  // plugin or GPU), zero-filled there.
  Status Allocate(const Layout* layout, bool huge_pages, const Device& device = Device::Host());
  // Fills the weights from the counter RNG keyed by (seed, table, global row, column), so they
  // do not depend on the plan: a 16-bit table starts as its fp32 values rounded to nearest even.
  // Device arenas get the same values, generated on the host in chunks and copied, so a GPU
  // collection starts bit-identical to a host one (errors: a failed copy or wait). On the host,
  // `interrupted` (when given) is asked between blocks of rows and its error ends the fill: a
  // table of gigabytes takes seconds to fill, and an abort must end creation within a second.
  Status Initialise(uint64_t seed, const ExecContext& ctx,
                    const std::function<Status()>& interrupted = {});

  const Device& device() const { return device_; }
  bool on_device() const { return device_.is_cuda(); }

  // A local shard's weights (state < 0) or optimizer state `state` as dense fp32, rows x cols
  // (rows for a row-wise state), in the shard's row-major order: 16-bit weights widen exactly on
  // read and round to nearest even on write. Device arenas are copied through the host with a
  // bounded wait (kTimeout after core::kDeviceWaitMs).
  Status ReadShard(const LocalShard& ls, int32_t state, float* out);
  Status WriteShard(const LocalShard& ls, int32_t state, const float* in);

  // Storage of a local shard's weights, a kernel view of them, and row access in fp32 (host
  // arenas only).
  void* ShardWeights(const LocalShard& ls);
  kernels::WeightsView View(const LocalShard& ls);
  void ReadRow(const LocalShard& ls, int64_t row, float* out);
  void WriteRow(const LocalShard& ls, int64_t row, const float* in);
  float* State(const LocalShard& ls, size_t state) { return states() + ls.state_offsets[state]; }
  // The optimizer's view of local shard `local`.
  optim::ShardParams Params(int32_t local);

  // Dynamic tables (host arenas only): each slots[i] given to id ids[i] takes the initial values
  // a fixed table's row ids[i] would (the counter RNG keyed by (seed, table, id, column)) and
  // zero optimizer state; the spans have the same length. ClearRow zeroes a row's weights and
  // optimizer state (the zero row).
  void InitRowsForIds(const LocalShard& ls, std::span<const int32_t> slots,
                      std::span<const int64_t> ids, uint64_t seed);
  void ClearRow(const LocalShard& ls, int64_t row);

  // Tiered tables (host arenas only): the values row `key_row` (a global row) of a fixed table
  // starts with, as its weights hold them (16-bit tables rounded to nearest even, then widened),
  // cols floats; and the rows the stochastic-rounding bits of local shard `local`'s rows are
  // keyed by (ShardParams::row_ids: keys[r] for row r < n; `keys` is the caller's and must
  // outlive the store's use of it).
  void InitialValues(const LocalShard& ls, uint64_t key_row, uint64_t seed, float* out) const;
  void SetRowKeys(int32_t local, const int64_t* keys, int64_t n);

  // The step counter stays in [0, kMaxStep]: a backward at kMaxStep is refused, and so are
  // larger values from a caller or a checkpoint. At INT64_MAX the next step's counter would wrap
  // negative (and a checkpoint of it would not load); 2^53 is also the largest count Adam's
  // bias correction, computed in double, holds exactly.
  static constexpr int64_t kMaxStep = int64_t{1} << 53;
  int64_t step() const { return step_; }
  void set_step(int64_t step) { step_ = step; }

  // The arenas, for 2D sync: fp32 weights, optimizer states (directly after the weights in
  // memory), the 16-bit weight arenas that are not empty, and the step counter.
  std::vector<ParamBuffer> Buffers();
  // Every local shard's weights and optimizer states with their place in the full tables.
  std::vector<ShardTensor> ShardTensors();

 private:
  float* weights() { return on_device() ? dev_params_.as<float>() : params_.as<float>(); }
  float* states() { return weights() + layout_->weights_size; }
  uint16_t* fp16() { return on_device() ? dev_fp16_.as<uint16_t>() : weights_fp16_.as<uint16_t>(); }
  uint16_t* bf16() { return on_device() ? dev_bf16_.as<uint16_t>() : weights_bf16_.as<uint16_t>(); }
  // Initialisation of one row as fp32 (shared by the host and the device path).
  struct InitRange {
    float low = 0;
    float high = 0;
    bool constant = false;
    uint64_t key = 0;
  };
  InitRange InitOf(const LocalShard& ls) const;
  void ClearState(const LocalShard& ls, int64_t row);
  // `key_row`: the global row (fixed tables) or the id (dynamic tables) the values are keyed by.
  static void InitRow(const InitRange& init, uint64_t seed, const LocalShard& ls, uint64_t key_row,
                      float* out);
  // device_params.cc: the device side of Allocate / Initialise / ReadShard / WriteShard.
  Status AllocateDevice();
  Status InitialiseDevice(uint64_t seed);
  // Raw storage bytes of [row0, row0 + rows) of a shard's weights or state between the device
  // arena and `host`, waited for.
  Status CopyRows(const LocalShard& ls, int32_t state, int64_t row0, int64_t rows, void* host,
                  bool to_device);

  const Layout* layout_ = nullptr;
  // This store's share of the host's available memory, from Allocate until Initialise has
  // written the weights (HostMemoryClaim: ranks created as threads at once).
  HostMemoryClaim claim_;
  HostArena params_;  // fp32 weights, then optimizer states
  HostArena weights_fp16_;
  HostArena weights_bf16_;
  HostArena weights_fp8_;  // FP8 rows (bytes), host only: GPU collections refuse FP8 tables
  Device device_;
  core::DeviceBuffer dev_params_;  // the same three arenas on a CUDA device
  core::DeviceBuffer dev_fp16_;
  core::DeviceBuffer dev_bf16_;
  int64_t step_ = 0;
  // Per local shard: SetRowKeys's keys, or null.
  std::vector<std::pair<const int64_t*, int64_t>> row_keys_;
};

}  // namespace shardrec::embedding
