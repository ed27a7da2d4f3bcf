// The entry points libshardrec_cuda.so exports, shared by the plugin and its CUDA-free callers
// (the loader in impl/core and the NCCL bridge in impl/comm/nccl). No CUDA types appear here.
#pragma once

#include <cstddef>
#include <cstdint>

#include "impl/core/status.h"

namespace shardrec::core {
class CudaRuntime;
}
namespace shardrec::comm {
class Communicator;
}

namespace shardrec::cuda_plugin {

// Bumped whenever an entry point below, or a C++ type crossing it (Status, CudaRuntime,
// Communicator), changes. Both sides are built from one tree, so a mismatch means a stale
// plugin file from another build was picked up.
inline constexpr int32_t kAbiVersion = 1;

// Plain C, callable before anything else: the plugin's kAbiVersion.
inline constexpr const char* kAbiVersionSymbol = "shardrec_cuda_abi_version";
using AbiVersionFn = int32_t (*)();

// The runtime singleton. Sets *status to kNoDevice when the CUDA runtime finds no usable device
// (the message carries the CUDA error text), kInvalidUsage on an ABI mismatch; *out stays null
// then. Never throws.
inline constexpr const char* kRuntimeSymbol = "shardrec_cuda_runtime_v1";
using RuntimeFn = void (*)(int32_t abi_version, core::CudaRuntime** out, Status* status);

// Absolute path of the loaded plugin file (a static string), for diagnostics.
inline constexpr const char* kPluginPathSymbol = "shardrec_cuda_plugin_path_v1";
using PluginPathFn = const char* (*)();

// Bytes of an NCCL unique id (NCCL_UNIQUE_ID_BYTES; the plugin static_asserts it).
inline constexpr size_t kNcclIdBytes = 128;

// Writes a fresh NCCL unique id into id[0..len) (len must be kNcclIdBytes).
inline constexpr const char* kNcclUniqueIdSymbol = "shardrec_cuda_nccl_unique_id_v1";
using NcclUniqueIdFn = void (*)(uint8_t* id, size_t len, Status* status);

// Builds this rank's NCCL communicator (non-blocking init, aborted with kTimeout when it is not
// ready within timeout_ms). On success *out is a new object the caller deletes.
inline constexpr const char* kNcclCreateSymbol = "shardrec_cuda_nccl_comm_create_v1";
using NcclCreateFn = void (*)(const uint8_t* id, size_t len, int32_t world, int32_t rank,
                              int32_t device, int64_t timeout_ms, comm::Communicator** out,
                              Status* status);

}  // namespace shardrec::cuda_plugin
