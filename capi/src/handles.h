// Bodies of every opaque C handle, in one place: each holds its C++ object (LevelDB's `rep`
// pattern). Handles share ownership where one outlives its creator's handle (a collection keeps
// its communicator and plan alive even if the caller destroys their handles first). `busy` is
// the flag of the handle's exclusive use (capi/src/entry.h); handles that are only read after
// creation (plan, communicator, inference) have none.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "impl/comm/communicator.h"
#include "impl/core/device_view_staging.h"
#include "impl/ddp/bucketer.h"
#include "impl/ddp/sharded.h"
#include "impl/dense/layer.h"
#include "impl/dense/optimizer.h"
#include "impl/embedding/collection.h"
#include "impl/replica/mesh.h"
#include "impl/serving/inference.h"
#include "impl/sharding/types.h"

struct shardrec_comm {
  std::shared_ptr<shardrec::comm::Communicator> impl;
  // Position on this host (shardrec_comm_local_rank/_size); -1 when unknown (a device
  // communicator not created from a launcher's environment).
  int32_t local_rank = -1;
  int32_t local_size = -1;
};

// Immutable once created.
struct shardrec_plan {
  // Never null in a handle given to a caller; shared so a collection can keep the plan alive
  // after the caller destroys the handle.
  std::shared_ptr<const shardrec::sharding::Plan> impl;
  // Planner statistics text, formatted when the handle was created.
  std::string stats;
  // impl->Hash(), cached.
  uint64_t hash = 0;
};

struct shardrec_embedding {
  // Never null in a handle given to a caller.
  std::unique_ptr<shardrec::embedding::EmbeddingCollection> impl;
  // State names, kept here so the const char* handed out stays valid for the handle's life.
  std::vector<shardrec::embedding::StateInfo> states;
  // Pinned staging of CUDA output and gradient views (host collections compute in host memory).
  shardrec::core::DeviceViewStaging staging;
  mutable std::atomic<bool> busy{false};
};

struct shardrec_mesh {
  std::unique_ptr<shardrec::replica::Mesh> impl;
  mutable std::atomic<bool> busy{false};
};

struct shardrec_ddp {
  std::unique_ptr<shardrec::ddp::Bucketer> impl;
  mutable std::atomic<bool> busy{false};
};

struct shardrec_fsdp {
  std::unique_ptr<shardrec::ddp::ShardedParams> impl;
  mutable std::atomic<bool> busy{false};
};

// Host or device was chosen at creation (impl/dense/layer_factory.h); no entry point tests
// which.
struct shardrec_mlp {
  std::unique_ptr<shardrec::dense::DenseLayer> impl;
  mutable std::atomic<bool> busy{false};
};

struct shardrec_dcn {
  std::unique_ptr<shardrec::dense::DenseLayer> impl;
  mutable std::atomic<bool> busy{false};
};

struct shardrec_dense_optimizer {
  std::unique_ptr<shardrec::dense::DenseOptimizer> impl;
  mutable std::atomic<bool> busy{false};
};

// Reads run inside the current version's slot (lock-free); no exclusive use.
struct shardrec_inference {
  std::unique_ptr<shardrec::serving::Inference> impl;
};

// One pinned version (shardrec_inference_version_t): keeps its model alive.
struct shardrec_inference_snapshot {
  std::shared_ptr<const shardrec::serving::Model> model;
};
