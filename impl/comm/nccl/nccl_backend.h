// Bridge to the NCCL communicator that lives in the CUDA plugin. CUDA-free: the NCCL objects
// stay inside libshardrec_cuda.so; this side only asks the plugin to build one.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "impl/comm/communicator.h"
#include "impl/comm/store.h"

namespace shardrec::comm::nccl {

// Collective over `world` ranks: rank 0 creates the NCCL unique id and publishes it in `store`
// under `key_prefix + "/nccl_id"`; the others read it; all initialise non-blocking and abort
// when `timeout` expires. `device` is the CUDA device index this rank uses.
// Errors: kNoDevice (no plugin, no GPU), kUnsupported (build without CUDA), kTimeout, kRemote.
Status CreateNcclCommunicator(Store* store, const std::string& key_prefix, int world, int rank,
                              int device, std::chrono::milliseconds timeout,
                              std::unique_ptr<Communicator>* out);

}  // namespace shardrec::comm::nccl
