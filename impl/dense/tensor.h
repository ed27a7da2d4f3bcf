// A dense parameter as the rest of the library sees it: a flat fp32 buffer and its gradient.
// The DDP bucketer, the fully sharded variant and checkpoints work on lists of these, so a host
// that brings its own dense framework can hand its buffers over without using our layers.
#pragma once

#include <cstdint>
#include <string>

namespace shardrec::dense {

// Borrowed views: whoever owns the storage keeps it alive while the view is in use.
struct DenseTensor {
  std::string name;  // "<module>.<layer>.weight" style, stable across runs
  float* param = nullptr;
  float* grad = nullptr;  // accumulated by backward passes (+=); zeroed by ZeroGrad
  int64_t count = 0;      // elements
};

}  // namespace shardrec::dense
