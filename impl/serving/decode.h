// Row decoders of the serving lookups: one stored row (fp16, bf16, int8 or int4) to fp32, chosen
// once per table from the one per-instruction-set row codec (impl/core/codec/codec.h), so the
// lookup's accumulate loop is plain fp32 either way.
#pragma once

#include <cstdint>

#include "impl/core/codec/codec.h"
#include "impl/serving/model.h"

namespace shardrec::serving {

// Writes the `dim` values of `row` as fp32 into `out`; `scratch` holds at least dim + 1 bytes
// (int4 unpacks its codes there). Quantized values are code * scale + bias in fp32, unfused.
using DecodeFn = codec::DecodeRowFn;

// The decoder of storage `s` for this host (fp16 through F16C when the host has AVX2 and F16C);
// null for fp32, whose rows are read in place.
DecodeFn DecoderFor(Storage s);

}  // namespace shardrec::serving
