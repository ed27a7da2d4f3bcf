// Row decoders of the serving lookups: one stored row (fp16, bf16, int8 or int4) to fp32, chosen
// once per table and instruction set, so the lookup's accumulate loop is plain fp32 either way.
#pragma once

#include <cstdint>

#include "impl/serving/model.h"

namespace shardrec::serving {

// Writes the `dim` values of `row` as fp32 into `out`; `scratch` holds at least dim + 1 bytes
// (int4 unpacks its codes there). Quantized values are code * scale + bias in fp32, unfused.
using DecodeFn = void (*)(const uint8_t* row, int32_t dim, float* out, uint8_t* scratch);

// The decoder of storage `s` for this host (fp16 through F16C when the host has it); null for
// fp32, whose rows are read in place.
DecodeFn DecoderFor(Storage s);

// The F16C build of the fp16 decoder (decode_f16c.cc); only called when the host has F16C.
void DecodeFp16F16c(const uint8_t* row, int32_t dim, float* out, uint8_t* scratch);

}  // namespace shardrec::serving
