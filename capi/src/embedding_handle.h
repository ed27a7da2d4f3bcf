// Body of the opaque shardrec_embedding handle, shared by embedding.cc and the C API units that
// operate on a collection's buffers (replica sync, checkpoints).
#pragma once

#include <atomic>
#include <memory>

#include "capi/src/device_view_staging.h"
#include "impl/embedding/collection.h"

struct shardrec_embedding {
  // Never null in a handle given to a caller.
  std::unique_ptr<shardrec::embedding::EmbeddingCollection> impl;
  // State names, kept here so the const char* handed out stays valid for the handle's life.
  std::vector<shardrec::embedding::StateInfo> states;
  // Pinned staging of CUDA output and gradient views (host collections compute in host memory).
  shardrec::capi::DeviceViewStaging staging;
  // Set while a call uses the collection (capi/src/guard.h, ExclusiveUse).
  mutable std::atomic<bool> busy{false};
};
