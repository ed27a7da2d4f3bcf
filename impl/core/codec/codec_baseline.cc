// Codec passes for baseline x86-64 (and any other architecture).
#include <cstring>

#include "impl/core/codec/codec.h"
#include "impl/core/fp8_table.h"
#include "impl/core/half.h"  // before the body, which is included inside a namespace

namespace shardrec::codec {

#include "impl/core/codec/codec_body.h"

const Passes& Baseline() { return kPasses; }

}  // namespace shardrec::codec
