// The choice of a table's row decoder (decode.h): the row codec's, by the table's row format.
// Every level gives the same bits: fp16 and bf16 widen exactly, and dequantization is one
// multiply and one add in fp32.
#include "impl/serving/decode.h"

namespace shardrec::serving {

DecodeFn DecoderFor(Storage s) {
  if (s == Storage::kAsTrained) return nullptr;
  return codec::Best().decode_row[static_cast<int32_t>(FormatOf(s))];
}

}  // namespace shardrec::serving
