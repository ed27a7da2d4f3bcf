// RoundingRowBits per instruction-set level, compiled for AVX-512, AVX2 and baseline x86-64
// through function target attributes (the library itself stays built for baseline), and chosen
// once from the host's CPUID. The baseline runs the per-value definition's loop (it has no 32-bit
// vector multiply worth using); the two vector levels run it only up to a column that is a
// multiple of their width, then whole registers that start at such a column, which spend one
// vector multiply less a register (rounding_row_x86.h says why the bits are the same).
#include "impl/optim/rounding_row.h"

#include "impl/core/cpu_features.h"
#include "impl/core/half.h"
#include "impl/optim/rounding.h"
#include "impl/optim/rounding_row_x86.h"

namespace shardrec::optim {
namespace {

using RowBitsFn = void (*)(uint64_t, int64_t, int32_t, uint32_t*);

void RowBitsBaseline(uint64_t row_key, int64_t first_col, int32_t n, uint32_t* bits) {
  for (int32_t i = 0; i < n; ++i) bits[i] = RoundingColumnBits(row_key, first_col + i);
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) void RowBitsAvx2(uint64_t row_key, int64_t first_col, int32_t n,
                                                 uint32_t* bits) {
  x86::AlignedRowBitsAvx2(row_key, first_col, n, bits);
}

__attribute__((target("avx512f,avx512bw,avx512vl"))) void RowBitsAvx512(uint64_t row_key,
                                                                        int64_t first_col,
                                                                        int32_t n, uint32_t* bits) {
  x86::AlignedRowBitsAvx512(row_key, first_col, n, bits);
}
#endif

// The bf16 row per level through the same target attributes: the compiler vectorizes the
// per-value definition's bits, and the rounding's adds and selects along with them.
using Bf16RowFn = void (*)(uint64_t, int64_t, int32_t, const float*, uint16_t*);

#define SHARDREC_BF16_ROW_LOOP    \
  for (int32_t i = 0; i < n; ++i) \
  out[i] = FloatToBFloat16Stochastic(in[i], RoundingColumnBits(row_key, first_col + i))

void Bf16RowBaseline(uint64_t row_key, int64_t first_col, int32_t n, const float* in,
                     uint16_t* out) {
  SHARDREC_BF16_ROW_LOOP;
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) void Bf16RowAvx2(uint64_t row_key, int64_t first_col, int32_t n,
                                                 const float* in, uint16_t* out) {
  SHARDREC_BF16_ROW_LOOP;
}

__attribute__((target("avx512f,avx512bw,avx512vl"))) void Bf16RowAvx512(uint64_t row_key,
                                                                        int64_t first_col,
                                                                        int32_t n, const float* in,
                                                                        uint16_t* out) {
  SHARDREC_BF16_ROW_LOOP;
}
#endif

#undef SHARDREC_BF16_ROW_LOOP

// Whether the host runs `level`'s loops (both functions' loops need the same instructions).
bool HostRuns(RoundingBitsLevel level) {
  switch (level) {
    case RoundingBitsLevel::kBaseline:
      return true;
#if defined(__x86_64__)
    case RoundingBitsLevel::kAvx2:
      return HostCpu().avx2;
    case RoundingBitsLevel::kAvx512: {
      const CpuFeatures& f = HostCpu();
      return f.avx512f && f.avx512bw && f.avx512vl;
    }
#endif
    default:
      return false;
  }
}

// The widest level the host runs, decided once: both entry points take it, so a bf16 row and
// the bits drawn alone come from the same level's loop.
RoundingBitsLevel HostLevel() {
  static const RoundingBitsLevel level = [] {
    for (const RoundingBitsLevel l : {RoundingBitsLevel::kAvx512, RoundingBitsLevel::kAvx2}) {
      if (HostRuns(l)) return l;
    }
    return RoundingBitsLevel::kBaseline;
  }();
  return level;
}

// A level's two loops; both null when `level` names none (the caller checked HostRuns).
struct Loops {
  RowBitsFn bits = nullptr;
  Bf16RowFn bf16 = nullptr;
};

Loops LoopsOf(RoundingBitsLevel level) {
  switch (level) {
    case RoundingBitsLevel::kBaseline:
      return {&RowBitsBaseline, &Bf16RowBaseline};
#if defined(__x86_64__)
    case RoundingBitsLevel::kAvx2:
      return {&RowBitsAvx2, &Bf16RowAvx2};
    case RoundingBitsLevel::kAvx512:
      return {&RowBitsAvx512, &Bf16RowAvx512};
#endif
    default:
      return {};
  }
}

}  // namespace

void RoundingRowBits(uint64_t row_key, int64_t first_col, int32_t n, uint32_t* bits) {
  static const RowBitsFn fn = LoopsOf(HostLevel()).bits;
  fn(row_key, first_col, n, bits);
}

void RoundBf16RowStochastic(uint64_t row_key, int64_t first_col, int32_t n, const float* in,
                            uint16_t* out) {
  static const Bf16RowFn fn = LoopsOf(HostLevel()).bf16;
  fn(row_key, first_col, n, in, out);
}

bool RoundingRowBitsAt(RoundingBitsLevel level, uint64_t row_key, int64_t first_col, int32_t n,
                       uint32_t* bits) {
  const RowBitsFn fn = HostRuns(level) ? LoopsOf(level).bits : nullptr;
  if (fn == nullptr) return false;
  fn(row_key, first_col, n, bits);
  return true;
}

bool RoundBf16RowStochasticAt(RoundingBitsLevel level, uint64_t row_key, int64_t first_col,
                              int32_t n, const float* in, uint16_t* out) {
  const Bf16RowFn fn = HostRuns(level) ? LoopsOf(level).bf16 : nullptr;
  if (fn == nullptr) return false;
  fn(row_key, first_col, n, in, out);
  return true;
}

}  // namespace shardrec::optim
