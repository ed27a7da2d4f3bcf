// Internal: exact scalar widening of fp16 and bf16 elements for the per-instruction-set kernels
// (the columns past the last full vector, and the baseline level's fp16 loads): the pooled
// kernel family's (impl/core/kernels/scalar.h), with internal linkage there, so each per-level
// translation unit keeps its own copy.
#pragma once

#include "impl/core/kernels/scalar.h"

namespace shardrec::embedding::kernels::isa {

using core::kernels::ScalarBf16;
using core::kernels::ScalarF16;

}  // namespace shardrec::embedding::kernels::isa
