// What an embedding collection and its engine (engine.h) share: the options and timings, the
// plan's layout, the communicators, the parameters and the backward's updater, the batch the
// next backward trains, and the reusable buffers of a step. The collection owns it; its engine
// reads and advances it, so neither holds a copy of the other's state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "impl/comm/communicator.h"
#include "impl/comm/encoded.h"
#include "impl/comm/work.h"
#include "impl/core/device.h"
#include "impl/core/exec.h"
#include "impl/core/thread_pool.h"
#include "impl/embedding/backward.h"
#include "impl/embedding/dynamic/tables.h"
#include "impl/embedding/input_dist.h"
#include "impl/embedding/kernels/kernels.h"
#include "impl/embedding/layout.h"
#include "impl/embedding/pair_rows.h"
#include "impl/embedding/param_store.h"
#include "impl/embedding/tiered/tables.h"
#include "impl/embedding/tiered/tier_config.h"
#include "impl/optim/optimizer.h"

namespace shardrec::embedding {

// Capacity hints of a collection: samples and ids (over all features) one rank passes to one
// forward; 0 = unknown (buffers grow on demand). A GPU collection sizes its per-step buffers from
// them at creation (sizing.h); a host collection ignores them.
struct StepCapacity {
  int64_t max_batch_size = 0;
  int64_t max_ids_per_batch = 0;
  bool known() const { return max_batch_size > 0 && max_ids_per_batch > 0; }
};

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
  // Tables whose rows live in a store on this rank's disk under a DRAM cache
  // (docs/disk-tier.md); host collections only.
  std::vector<tiered::TierConfig> tiers;
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

// A forward output in device memory (EmbeddingCollection::Forward): the caller's stream, on
// which the output is copied after the caller's earlier work there.
struct DeviceOutput {
  Stream stream = nullptr;
};

// An output gradient in device memory (EmbeddingCollection::Backward): the caller's stream, whose
// earlier work (which wrote the gradient) the collection's reads are ordered after.
struct DeviceGradient {
  Stream stream = nullptr;
};

struct StepState {
  Layout layout;
  CollectionOptions options;  // dp_comm cleared once the collection is made (see dp_comm)
  // The communicator of the host-buffer collectives (the agreement included), the group of the
  // data-parallel tables, and the private one the input exchange runs on (the worker's).
  std::shared_ptr<comm::Communicator> comm;
  std::shared_ptr<comm::Communicator> dp_comm;
  std::unique_ptr<comm::Communicator> input_comm;
  InputCaps input_caps;  // the input exchange's sizes from batch to batch (input_dist.h)
  std::vector<optim::OptimizerConfig> table_optim;  // per table: its own, or the default
  std::unique_ptr<ThreadPool> pool;
  ExecContext exec;
  ParamStore params;
  // The rows of the dynamic tables (docs/dynamic-tables.md); empty without one.
  dynamic::DynamicTables dynamic;
  // The tiered tables' stores, caches and threads (docs/disk-tier.md); null without one.
  std::unique_ptr<tiered::TieredTables> tiered;
  SparseUpdater updater;
  std::unique_ptr<comm::CommWorker> worker;
  // The last forwarded batch, which the next backward trains (consumed once it has).
  std::unique_ptr<RoutedBatch> current;
  bool current_consumed = true;
  // Whether forwards train (else they evaluate: nothing inserted or touched, backward refused).
  bool training = true;
  // Reusable per-step buffers of the output distribution (and, reversed, of the gradients).
  std::vector<float> ret_send;
  std::vector<float> ret_recv;
  std::vector<kernels::LookupJob> jobs;
  comm::EncodedScratch wire;  // 16-bit staging of the encoded all-to-alls
  SelfGradRows self_grads;    // the own gradient rows the host backward reads where they lie
  CollectionTimings timings;
  // Set for the duration of a VBE batch's forward or backward call (vbe.h): where its pooled
  // output or gradient rows lie (null: the plain layout).
  const PairRows* pair_rows = nullptr;

  // The rows this rank looked up for its own samples (forward) and their gradients (backward):
  // the end of ret_send, never copied through an exchange with itself.
  float* SelfRows(const RoutedBatch& rb) { return ret_send.data() + rb.ret_self_offset; }
};

}  // namespace shardrec::embedding
