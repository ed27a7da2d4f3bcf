// The conversion passes of the 16-bit row formats (impl/core/row_format.h: fp16, bf16), once per
// x86-64 instruction-set level (baseline, AVX2 + F16C), one dispatch picked at run time (Best)
// for every module that converts rows in bulk: the wire encodings of the quantized collectives
// (impl/comm/encoded.cc) and the serving lookups' row decoders (impl/serving/decode.cc). The
// training kernels convert inside their fused loops (kernels/isa) with the same bits. Every level
// gives the bits
// of the scalar conversions of impl/core/half.h: vectorised by the compiler, or for fp16 at the
// AVX2 level by the F16C instructions with the lanes half.h treats differently patched
// (codec_avx2.cc). One exception: an add pass that adds a NaN to a NaN returns a NaN whose payload
// is either operand's, as the compiler orders them.
#pragma once

#include <cstddef>
#include <cstdint>

#include "impl/core/row_format_enum.h"

namespace shardrec::codec {

// Writes the `dim` values of one stored row of a format as fp32 into `out`; `scratch` holds at
// least dim + 1 bytes (int4 unpacks its codes there). Quantized values are code x scale + bias in
// fp32, unfused (row_format.h has the layout).
using DecodeRowFn = void (*)(const uint8_t* row, int32_t dim, float* out, uint8_t* scratch);

struct Passes {
  void (*to_half)(const float* src, size_t n, uint16_t* dst);  // saturating fp16
  void (*to_bf16)(const float* src, size_t n, uint16_t* dst);
  void (*from_half)(const uint16_t* src, size_t n, float* dst);
  void (*from_bf16)(const uint16_t* src, size_t n, float* dst);
  void (*add_half)(const uint16_t* src, size_t n, float* dst);  // dst += decoded
  void (*add_bf16)(const uint16_t* src, size_t n, float* dst);
  // Row decoders indexed by RowFormat; null for fp32, whose rows are read in place.
  DecodeRowFn decode_row[kNumRowFormats];
};

const Passes& Baseline();
#if SHARDREC_HAVE_X86_CODEC_LEVELS
const Passes& Avx2();  // needs AVX2 and F16C
#endif
// The passes of the widest level this CPU runs (same bits at every level), chosen once.
const Passes& Best();

}  // namespace shardrec::codec
