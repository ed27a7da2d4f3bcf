// Body of the opaque shardrec_mesh handle, shared by replica.cc and the C API units that act on
// a mesh's collections (checkpoints).
#pragma once

#include <atomic>
#include <memory>

#include "impl/replica/mesh.h"

struct shardrec_mesh {
  std::unique_ptr<shardrec::replica::Mesh> impl;
  mutable std::atomic<bool> busy{false};  // capi/src/guard.h, ExclusiveUse
};
