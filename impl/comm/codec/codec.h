// The encode / decode passes of the 16-bit wire encodings, once per x86-64 instruction-set level
// (baseline, AVX2), picked at run time by impl/comm/encoded.cc. Every level runs the same scalar
// conversions of impl/core/half.h, only vectorised by the compiler, so all levels give the same
// bits.
#pragma once

#include <cstddef>
#include <cstdint>

namespace shardrec::comm::codec {

struct Passes {
  void (*to_half)(const float* src, size_t n, uint16_t* dst);  // saturating fp16
  void (*to_bf16)(const float* src, size_t n, uint16_t* dst);
  void (*from_half)(const uint16_t* src, size_t n, float* dst);
  void (*from_bf16)(const uint16_t* src, size_t n, float* dst);
  void (*add_half)(const uint16_t* src, size_t n, float* dst);  // dst += decoded
  void (*add_bf16)(const uint16_t* src, size_t n, float* dst);
};

const Passes& Baseline();
#if SHARDREC_HAVE_X86_CODEC_LEVELS
const Passes& Avx2();
#endif

}  // namespace shardrec::comm::codec
