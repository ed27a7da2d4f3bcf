// Argument packing for the plugin's dense entries; the plan and the cuBLASLt calls live in the
// plugin (impl/cuda_plugin/lt_linear.cc).
#include "impl/dense/device_linear.h"

#include "impl/core/check.h"
#include "impl/core/cuda_plugin.h"

namespace shardrec::dense {

Status DenseCudaTable(const shardrec_cuda_plugin_table_t** out) {
  const core::CudaRuntime* rt = nullptr;
  SR_RETURN_IF_ERROR(core::GetCudaRuntime(&rt));
  const shardrec_cuda_plugin_table_t* t = nullptr;
  SR_RETURN_IF_ERROR(core::GetCudaPlugin(&t));
  std::string path;
  (void)core::GetCudaPluginPath(&path);
  SR_RETURN_IF_ERROR(core::HasDenseEntries(*t, path));
  *out = t;
  return Status::Ok();
}

namespace {

shardrec_plugin_linear_t Args(const LinearShape& s, lt::Math math, int64_t batch) {
  shardrec_plugin_linear_t a{};
  a.in = s.in;
  a.out = s.out;
  a.batch = batch;
  a.activation = static_cast<int32_t>(s.act);
  a.input_activation = static_cast<int32_t>(Activation::kNone);
  a.math = static_cast<int32_t>(math);
  return a;
}

Status CheckCuda(const Device& device) {
  if (!device.is_cuda()) {
    return Status::InvalidArgument("a device linear layer needs a CUDA device, not ",
                                   device.ToString());
  }
  return Status::Ok();
}

}  // namespace

Status DeviceLinearForward(const Device& device, Stream stream, const LinearShape& s, lt::Math math,
                           const float* w, const float* b, const float* x, int64_t batch, float* y,
                           void* aux, bool* aux_written) {
  SR_RETURN_IF_ERROR(CheckCuda(device));
  const shardrec_cuda_plugin_table_t* t = nullptr;
  SR_RETURN_IF_ERROR(DenseCudaTable(&t));
  const shardrec_plugin_linear_t a = Args(s, math, batch);
  int32_t written = 0;
  shardrec_plugin_status_t st{};
  const int32_t rc = t->linear_forward(device.index, &a, w, b, x, y, aux, &written, stream, &st);
  SR_RETURN_IF_ERROR(core::FromPlugin(rc, st));
  if (aux_written != nullptr) *aux_written = written != 0;
  return Status::Ok();
}

Status DeviceLinearBackward(const Device& device, Stream stream, const LinearShape& s,
                            lt::Math math, Activation input_act, bool dy_is_dz, const float* w,
                            const float* x, const float* y, const float* dy, const void* input_aux,
                            int64_t batch, float* dw, float* db, float* dx) {
  SR_RETURN_IF_ERROR(CheckCuda(device));
  const shardrec_cuda_plugin_table_t* t = nullptr;
  SR_RETURN_IF_ERROR(DenseCudaTable(&t));
  shardrec_plugin_linear_t a = Args(s, math, batch);
  a.input_activation = static_cast<int32_t>(input_act);
  if (dy_is_dz) a.flags |= SHARDREC_PLUGIN_LINEAR_DY_IS_DZ;
  if (input_aux != nullptr) a.flags |= SHARDREC_PLUGIN_LINEAR_INPUT_AUX_VALID;
  shardrec_plugin_status_t st{};
  const int32_t rc =
      t->linear_backward(device.index, &a, w, x, y, dy, input_aux, dw, db, dx, stream, &st);
  return core::FromPlugin(rc, st);
}

}  // namespace shardrec::dense
