// Placeholder loader until the CUDA plugin lands: every GPU request reports "no device".
#include "impl/core/cuda_plugin.h"

namespace shardrec::core {

Status GetCudaRuntime(CudaRuntime** out) {
  *out = nullptr;
  return Status::NoDevice("the CUDA plugin is not available");
}

Status GetCudaPluginSymbol(const char* name, void** out) {
  *out = nullptr;
  return Status::NoDevice("the CUDA plugin is not available (looking up ", name, ")");
}

Status CheckDevice(const Device& device) {
  if (device.is_host()) return Status::Ok();
  return Status::NoDevice("device ", device.ToString(), " requested but the CUDA plugin is not available");
}

}  // namespace shardrec::core
