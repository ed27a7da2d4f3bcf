// Internal: the per-bag summation at the heart of the lookups, compiled once per instruction set
// (bag_sum_baseline.cc, bag_sum_avx2.cc, bag_sum_avx512.cc) and chosen at run time. The bag's
// sum is kept in vector registers and stored once per bag straight into the output.
//
// Every level computes the same numbers: each output element starts at 0 and adds, in id order,
// weight * row element (or the row element unweighted), one IEEE single-precision multiply and
// add at a time; vector lanes are independent and nothing is contracted into FMA, so the result
// does not depend on the level (tests run every level the host has and compare bit for bit).
//
// Plain data only: these files are compiled with different target flags, and must not share
// inline C++ library code with the rest of the library (the linker could keep a copy built for a
// wider instruction set than the host has).
#pragma once

#include <cstddef>
#include <cstdint>

#include "impl/core/row_format_enum.h"

namespace shardrec::embedding::kernels::isa {

// A table's weight storage: one of the float row formats (fp32, fp16, bf16).
using WeightType = RowFormat;

// Bags [bag_begin, bag_end) of one run.
struct BagSumArgs {
  const void* weights = nullptr;  // rows x cols of `type`, row stride `stride` elements
  WeightType type = WeightType::kFp32;
  int64_t stride = 0;
  int32_t cols = 0;
  const int64_t* offsets = nullptr;  // CSR; null: every id is its own output row (sequence)
  const int64_t* rows = nullptr;
  const float* id_weights = nullptr;  // null: unweighted
  float* out = nullptr;               // bag b's row at out + io_offset + b * out_stride
  int64_t io_offset = 0;
  int64_t out_stride = 0;
  int64_t bag_begin = 0;
  int64_t bag_end = 0;
  int64_t prefetch_distance = 0;  // ids ahead whose rows are prefetched; 0 = off
  // Optional: each row is summed into `row` (cols floats) and passed through encode into out16
  // (at out's element offsets) instead of being stored in out.
  uint16_t* out16 = nullptr;
  void (*encode)(const float* src, size_t n, uint16_t* dst) = nullptr;
  float* row = nullptr;
};

using BagSumFn = void (*)(const BagSumArgs& args);

void BagSumBaseline(const BagSumArgs& args);  // SSE2: every x86-64
void BagSumAvx2(const BagSumArgs& args);      // AVX2 + F16C
void BagSumAvx512(const BagSumArgs& args);    // AVX-512 F/BW/VL

}  // namespace shardrec::embedding::kernels::isa
