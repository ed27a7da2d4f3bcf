// The one place that picks a dense layer's implementation (host over OpenBLAS, or device over
// the CUDA plugin's cuBLASLt entries) from where the caller wants it to run.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "impl/core/device.h"
#include "impl/core/status.h"
#include "impl/dense/layer.h"
#include "impl/dense/linear.h"
#include "impl/dense/lt_plan.h"

namespace shardrec::dense {

// Shapes and initial values of an MLP, as Mlp::Create takes them.
struct MlpSpec {
  int64_t in = 0;
  std::vector<int64_t> outs;
  std::vector<Activation> acts;
  uint64_t seed = 0;
  std::string name;
};

// A host Mlp for a host device, a DeviceMlp (with `math` and `stream`) for a CUDA one. Errors
// are those of Mlp::Create and DeviceMlp::Create; nothing is left allocated on error.
Status CreateMlpLayer(const MlpSpec& spec, const Device& device, lt::Math math, Stream stream,
                      std::unique_ptr<DenseLayer>* out);

// A host DCN-v2 cross network (DcnCross::Create); there is no device implementation.
Status CreateDcnLayer(int64_t width, int num_layers, int64_t rank, uint64_t seed,
                      const std::string& name, std::unique_ptr<DenseLayer>* out);

}  // namespace shardrec::dense
