// Internal: the per-bag summation at the heart of the training and evaluation lookups: the one
// pooled kernel family of impl/core/kernels/pooled.h (shared with the serving lookups), compiled
// once per instruction set and chosen at run time. The bag's sum is kept in vector registers and
// stored once per bag straight into the output.
//
// Every level computes the same numbers: each output element starts at 0 and adds, in id order,
// weight * row element (or the row element unweighted), one IEEE single-precision multiply and
// add at a time; vector lanes are independent and nothing is contracted into FMA, so the result
// does not depend on the level (tests run every level the host has and compare bit for bit).
#pragma once

#include "impl/core/kernels/pooled.h"
#include "impl/core/row_format_enum.h"

namespace shardrec::embedding::kernels::isa {

// A table's weight storage: fp32, fp16, bf16 or an FP8 format.
using WeightType = RowFormat;

// Bags [bag_begin, bag_end) of one run (core::kernels::PooledArgs; `stride` in elements).
using BagSumArgs = core::kernels::PooledArgs;
using BagSumFn = core::kernels::PooledFn;

inline void BagSumBaseline(const BagSumArgs& args) { core::kernels::PooledBaseline(args); }
#if SHARDREC_HAVE_X86_KERNEL_LEVELS
inline void BagSumAvx2(const BagSumArgs& args) { core::kernels::PooledAvx2(args); }
inline void BagSumAvx512(const BagSumArgs& args) { core::kernels::PooledAvx512(args); }
#endif

}  // namespace shardrec::embedding::kernels::isa
