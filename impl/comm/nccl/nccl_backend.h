// Bridge to the NCCL communicator that lives in the CUDA plugin. CUDA-free: the NCCL objects
// stay inside libshardrec_cuda.so; this side only asks the plugin to build one.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "impl/comm/communicator.h"
#include "impl/comm/rendezvous/store.h"

namespace shardrec::comm::nccl {

// Collective over `world` ranks: rank 0 creates the NCCL unique id and publishes it in `store`
// under `key_prefix + "/nccl_id"`; the others read it; all initialise non-blocking and abort
// when `timeout` expires (it bounds the whole call). `device` is the CUDA device index this rank
// uses; NCCL allows one rank of a communicator per GPU. When rank 0 fails before it has an id,
// it publishes an empty value so the others fail at once (kRemote) instead of timing out. A
// key prefix must not be reused for a second communicator on the same store.
// The communicator's collectives are asynchronous on CallOptions::stream; Barrier, Split and
// destruction block, bounded by the timeout (see impl/cuda_plugin/nccl_communicator.h).
// Errors: kInvalidArgument, kNoDevice (no plugin, no GPU), kUnsupported (build without CUDA),
// kTimeout, kRemote, kCorrupt (a malformed id in the store), kCuda.
Status CreateNcclCommunicator(Store* store, const std::string& key_prefix, int world, int rank,
                              int device, std::chrono::milliseconds timeout,
                              std::unique_ptr<Communicator>* out);

}  // namespace shardrec::comm::nccl
