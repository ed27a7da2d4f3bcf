// C API for GPU discovery (shardrec/device.h): device count, device check, plugin path.
#include "impl/core/device.h"

#include <cstring>
#include <string>

#include "capi/src/entry.h"
#include "impl/core/check.h"
#include "impl/core/cuda_plugin.h"
#include "shardrec/device.h"

namespace shardrec::capi {
namespace {

Status DeviceCount(int32_t* out) {
  SR_RETURN_IF_ERROR(CheckNotNull(out, "out"));
  *out = 0;
  const core::CudaRuntime* rt = nullptr;
  Status s = core::GetCudaRuntime(&rt);
  // No GPU is an answer (0), not a failure; anything else is a real error.
  if (s.code() == Code::kNoDevice || s.code() == Code::kUnsupported) return Status::Ok();
  if (!s.ok()) return s;
  *out = rt->DeviceCount();
  return Status::Ok();
}

Status DeviceCheck(int32_t device_type, int32_t device_index) {
  if (device_type != SHARDREC_DEVICE_HOST && device_type != SHARDREC_DEVICE_CUDA) {
    return Status::InvalidArgument("device_type ", device_type,
                                   " is not SHARDREC_DEVICE_HOST (0) or SHARDREC_DEVICE_CUDA (1)");
  }
  if (device_type == SHARDREC_DEVICE_HOST) return Status::Ok();
  if (device_index < 0) {
    return Status::InvalidArgument("device_index must be >= 0, got ", device_index);
  }
  return core::CheckDevice(Device::Cuda(device_index));
}

Status PluginPath(size_t* path_len_out, char* buf, size_t buf_len) {
  if (path_len_out != nullptr) *path_len_out = 0;
  if (buf == nullptr && buf_len != 0) {
    return Status::InvalidArgument("buf must not be NULL when buf_len is ", buf_len);
  }
  // Documented as "loaded and a device usable": a plugin without a device is an error here.
  const core::CudaRuntime* rt = nullptr;
  SR_RETURN_IF_ERROR(core::GetCudaRuntime(&rt));
  std::string path;
  SR_RETURN_IF_ERROR(core::GetCudaPluginPath(&path));
  const size_t len = path.size();
  if (buf_len > 0) {
    const size_t n = len < buf_len - 1 ? len : buf_len - 1;
    if (n > 0) std::memcpy(buf, path.data(), n);
    buf[n] = '\0';
  }
  if (path_len_out != nullptr) *path_len_out = len;
  return Status::Ok();
}

}  // namespace
}  // namespace shardrec::capi

extern "C" {

SHARDREC_API shardrec_status_t shardrec_device_count(int32_t* out) {
  return shardrec::capi::Enter({}, [&] { return shardrec::capi::DeviceCount(out); });
}

SHARDREC_API shardrec_status_t shardrec_device_check(int32_t device_type, int32_t device_index) {
  return shardrec::capi::Enter(
      {}, [&] { return shardrec::capi::DeviceCheck(device_type, device_index); });
}

SHARDREC_API shardrec_status_t shardrec_device_plugin_path(size_t* path_len_out, char* buf,
                                                           size_t buf_len) {
  return shardrec::capi::Enter(
      {}, [&] { return shardrec::capi::PluginPath(path_len_out, buf, buf_len); });
}

}  // extern "C"
