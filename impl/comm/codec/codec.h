// The encode / decode passes of the 16-bit wire encodings, once per x86-64 instruction-set level
// (baseline, AVX2 + F16C), picked at run time by impl/comm/encoded.cc. Every level gives the bits
// of the scalar conversions of impl/core/half.h: vectorised by the compiler, or for fp16 at the
// AVX2 level by the F16C instructions with the lanes half.h treats differently patched
// (codec_avx2.cc). One exception: an add pass that adds a NaN to a NaN returns a NaN whose payload
// is either operand's, as the compiler orders them.
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
const Passes& Avx2();  // needs AVX2 and F16C
#endif

}  // namespace shardrec::comm::codec
