// Codec passes compiled for AVX2 (codec.cmake sets the flags of this file only).
#include "impl/comm/codec/codec.h"
#include "impl/core/half.h"  // before the body, which is included inside a namespace

namespace shardrec::comm::codec {

#include "impl/comm/codec/codec_body.h"

const Passes& Avx2() { return kPasses; }

}  // namespace shardrec::comm::codec
