// Internal: the pooled lookup, one kernel family over the row formats (impl/core/row_format.h:
// fp32, fp16, bf16, int8 and int4 row-wise), compiled once per x86-64 instruction-set level
// (pooled_baseline.cc: SSE2; pooled_avx2.cc: AVX2 + F16C; pooled_avx512.cc: AVX-512 F/BW/VL) and
// chosen at run time. The training and evaluation forwards (embedding/kernels/isa/bag_sum.h) and
// the serving lookups (serving/lookup.cc) both call it; it lives in core so that serving, which
// may not include embedding, shares it.
//
// A bag's sum is kept in vector registers and stored once per bag straight into the output; a
// stored row is decoded inside the accumulation (no per-row temporary). Unless
// PooledArgs::fold_dequant asks for serving's folded int8/int4 sums, every level computes the
// same numbers: each output element starts at 0 and adds, in id order, weight x value (or the
// value unweighted), one IEEE single-precision multiply and add at a time, where a quantized
// value is code x scale + bias (one multiply, one add; row_format.h has the layout) and an FP8
// value is its exact decoded value x scale (one multiply; a NaN code gives some NaN, its payload
// unspecified). Vector lanes
// are independent and nothing is contracted into FMA, so the result does not depend on the level
// (pooled_test runs every level the host has against a scalar reference, bit for bit).
//
// Plain data only: the level files are compiled with different target flags and must not share
// inline C++ library code with the rest of the library (the linker could keep a copy built for a
// wider instruction set than the host has; tests/tools/check_isa_symbols.cmake checks).
#pragma once

#include <cstddef>
#include <cstdint>

#include "impl/core/row_format_enum.h"

namespace shardrec::core::kernels {

// Bags [bag_begin, bag_end) of one run.
struct PooledArgs {
  const void* weights = nullptr;  // row r at weights + r * (row stride)
  RowFormat type = RowFormat::kFp32;
  int64_t stride = 0;     // the row stride in elements (float formats, row_bytes 0)
  int64_t row_bytes = 0;  // the row stride in bytes, header included; 0: `stride` elements.
                          // Quantized formats need it.
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
  // Rows are prefetched into the second-level cache only (prefetcht2) instead of the first
  // (prefetcht0): for tables that outgrow the last-level cache, whose rows come from memory. A
  // request into the first-level cache holds one of its few line-fill buffers until the line
  // arrives, which caps the rows in flight; cold lookups ran 11-22 % faster this way, cached ones
  // 6-16 % slower (RESULTS.md, issue 63). Speed only: the sums do not depend on it.
  bool prefetch_to_l2 = false;
  // Optional (bags only): each bag's ids are checked to lie in [0, check_rows) just before the
  // bag is summed (where they are first read; serving's fixed tables, whose ids are their rows),
  // and the run stops before the first bag holding one that does not: *stopped_at is set to that
  // bag, or to bag_end when every bag was summed. The bags before it are written, the rest are not
  // touched. A row prefetched for an id not checked yet is clamped into the table (a prefetch does
  // not fault, but the address must not overflow). Null: ids are not checked.
  int64_t* stopped_at = nullptr;
  int64_t check_rows = 0;
  // Optional: each row is summed into `row` (cols floats) and passed through encode into out16
  // (at out's element offsets) instead of being stored in out.
  uint16_t* out16 = nullptr;
  void (*encode)(const float* src, size_t n, uint16_t* dst) = nullptr;
  float* row = nullptr;
  // int8 and int4 bags only (other formats and sequence runs ignore it): sum each value as code x
  // (weight x scale) straight into the bag's accumulator (one fused multiply-add at the AVX-512
  // level, a multiply and an add below it) and the row's weight x bias once per row into a scalar
  // added to every element at the end, instead of decoding each value exactly first: int8 takes
  // three vector operations per register of values instead of five on AVX-512 (four at the other
  // levels); a different rounding
  // (docs/serving.md, "Storage types and their error bounds", has the bound) that also differs
  // between levels. Serving sets it; the training and evaluation forwards do not (their rows are
  // never int8 or int4, and their exactness must not depend on it).
  bool fold_dequant = false;
};

using PooledFn = void (*)(const PooledArgs& args);

void PooledBaseline(const PooledArgs& args);  // SSE2: every x86-64 (other CPUs: scalar loops)
#if SHARDREC_HAVE_X86_KERNEL_LEVELS
void PooledAvx2(const PooledArgs& args);    // AVX2 + F16C
void PooledAvx512(const PooledArgs& args);  // AVX-512 F/BW/VL
#endif

// The widest level this host runs, capped by SHARDREC_CPU_LEVEL=baseline|avx2|avx512 as the
// training kernels are (tests, benchmarks); chosen once.
PooledFn HostPooled();

// Ids ahead a gather of `row_bytes`-byte rows prefetches: 16 (FBGEMM's default) up to 1 KiB rows,
// where 8 left cold fp32 and fp16 lookups of 256-512-byte rows short of FBGEMM's; the count of
// prefetch instructions does not depend on it.
constexpr int64_t PrefetchDistanceFor(uint64_t row_bytes) { return row_bytes <= 1024 ? 16 : 8; }

}  // namespace shardrec::core::kernels
