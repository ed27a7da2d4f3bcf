// A tiered row's record in its store (docs/disk-tier.md): the row's weights in their storage
// dtype, bit for bit, then its optimizer state floats in the table's StateSpecs order
// (element-wise states cols floats, row-wise ones one); RecordBytes (cache_layout.h) is its size.
// Copying a cache slot to a record and back changes no bit.
#pragma once

#include <cstdint>

#include "impl/embedding/layout.h"
#include "impl/embedding/param_store.h"

namespace shardrec::embedding::tiered {

// Cache slot `slot` of `ls` (host arenas) into `out`, and back.
void PackSlot(ParamStore& params, const Layout& layout, const LocalShard& ls, int64_t slot,
              uint8_t* out);
void UnpackSlot(ParamStore& params, const Layout& layout, const LocalShard& ls, int64_t slot,
                const uint8_t* in);

// Weights (state < 0) or optimizer state `state` of a record as fp32 into `out` (cols floats, or
// one for a row-wise state): 16-bit weights widen exactly.
void RecordToFloats(const Layout& layout, const LocalShard& ls, const uint8_t* record,
                    int32_t state, float* out);
// The reverse: `in` (as RecordToFloats gives it) into the record's weights (rounded to nearest
// even for 16-bit tables) or state `state`; the rest of the record is kept.
void FloatsToRecord(const Layout& layout, const LocalShard& ls, const float* in, int32_t state,
                    uint8_t* record);

}  // namespace shardrec::embedding::tiered
