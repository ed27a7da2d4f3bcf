// NCCL vocabulary for the plugin: element types, reduction ops and result codes as libshardrec
// Status values.
#pragma once

#include <nccl.h>

#include <string>

#include "impl/comm/communicator.h"
#include "impl/core/dtype.h"
#include "impl/core/status.h"
#include "impl/cuda_plugin/device_api.h"

namespace shardrec::cuda_plugin {

inline bool ToNccl(DType dtype, ncclDataType_t* out) {
  switch (dtype) {
    case DType::kFloat32:
      *out = ncclFloat32;
      return true;
    case DType::kFloat16:
      *out = ncclFloat16;
      return true;
    case DType::kBFloat16:
      *out = ncclBfloat16;
      return true;
    case DType::kFloat64:
      *out = ncclFloat64;
      return true;
    case DType::kInt32:
      *out = ncclInt32;
      return true;
    case DType::kInt64:
      *out = ncclInt64;
      return true;
    case DType::kUInt8:
      *out = ncclUint8;
      return true;
    case DType::kFp8E4M3:  // weight storage only, never a collective's element type
    case DType::kFp8E5M2:
      return false;
  }
  return false;
}

inline bool ToNccl(comm::ReduceOp op, ncclRedOp_t* out) {
  switch (op) {
    case comm::ReduceOp::kSum:
      *out = ncclSum;
      return true;
    case comm::ReduceOp::kAvg:
      *out = ncclAvg;
      return true;
    case comm::ReduceOp::kMax:
      *out = ncclMax;
      return true;
    case comm::ReduceOp::kMin:
      *out = ncclMin;
      return true;
  }
  return false;
}

// A failed NCCL call as a Status naming the call; `comm` (may be null) adds NCCL's last error
// text. A dead or failing peer (system or remote error) is kRemote, as the comm contract asks.
inline Status NcclStatus(const DeviceApi& api, ncclResult_t result, const std::string& what,
                         ncclComm_t comm) {
  const char* last = api.NcclGetLastError(comm);
  std::string text = StrCat(what, ": ", api.NcclGetErrorString(result));
  if (last != nullptr && *last != '\0') text += StrCat(" (", last, ")");
  switch (result) {
    case ncclSuccess:
    case ncclInProgress:
      return Status::Ok();
    case ncclUnhandledCudaError:
      return Status::Cuda(text);
    case ncclSystemError:
      return Status::Remote(text);
    case ncclRemoteError:
      return Status::Remote(text);
    case ncclInvalidArgument:
      return Status::InvalidArgument(text);
    case ncclInvalidUsage:
      return Status::InvalidUsage(text);
    case ncclInternalError:
      return Status::Internal(text);
    default:
      return Status::Error(text);
  }
}

}  // namespace shardrec::cuda_plugin
