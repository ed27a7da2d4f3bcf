// Copies between cache slots and records (record.h).
#include "impl/embedding/tiered/record.h"

#include <cstring>

#include "impl/core/dtype.h"
#include "impl/core/element.h"

namespace shardrec::embedding::tiered {

namespace {

size_t StateWidth(const Layout& layout, const LocalShard& ls, size_t k) {
  return layout.tables[ls.table].state_specs[k].row_wise ? 1 : static_cast<size_t>(ls.cols);
}

}  // namespace

void PackSlot(ParamStore& params, const Layout& layout, const LocalShard& ls, int64_t slot,
              uint8_t* out) {
  const size_t row_bytes = static_cast<size_t>(ls.cols) * DTypeSize(ls.dtype);
  std::memcpy(out, static_cast<const uint8_t*>(params.ShardWeights(ls)) + slot * row_bytes,
              row_bytes);
  out += row_bytes;
  for (size_t k = 0; k < ls.state_offsets.size(); ++k) {
    const size_t w = StateWidth(layout, ls, k);
    std::memcpy(out, params.State(ls, k) + slot * static_cast<int64_t>(w), w * sizeof(float));
    out += w * sizeof(float);
  }
}

void UnpackSlot(ParamStore& params, const Layout& layout, const LocalShard& ls, int64_t slot,
                const uint8_t* in) {
  const size_t row_bytes = static_cast<size_t>(ls.cols) * DTypeSize(ls.dtype);
  std::memcpy(static_cast<uint8_t*>(params.ShardWeights(ls)) + slot * row_bytes, in, row_bytes);
  in += row_bytes;
  for (size_t k = 0; k < ls.state_offsets.size(); ++k) {
    const size_t w = StateWidth(layout, ls, k);
    std::memcpy(params.State(ls, k) + slot * static_cast<int64_t>(w), in, w * sizeof(float));
    in += w * sizeof(float);
  }
}

void RecordToFloats(const Layout& layout, const LocalShard& ls, const uint8_t* record,
                    int32_t state, float* out) {
  const size_t dsize = DTypeSize(ls.dtype);
  if (state < 0) {
    for (int32_t c = 0; c < ls.cols; ++c) out[c] = LoadElement(ls.dtype, record + c * dsize);
    return;
  }
  const uint8_t* p = record + static_cast<size_t>(ls.cols) * dsize;
  for (int32_t k = 0; k < state; ++k) p += StateWidth(layout, ls, k) * sizeof(float);
  std::memcpy(out, p, StateWidth(layout, ls, state) * sizeof(float));
}

void FloatsToRecord(const Layout& layout, const LocalShard& ls, const float* in, int32_t state,
                    uint8_t* record) {
  const size_t dsize = DTypeSize(ls.dtype);
  if (state < 0) {
    for (int32_t c = 0; c < ls.cols; ++c) StoreElement(ls.dtype, in[c], record + c * dsize);
    return;
  }
  uint8_t* p = record + static_cast<size_t>(ls.cols) * dsize;
  for (int32_t k = 0; k < state; ++k) p += StateWidth(layout, ls, k) * sizeof(float);
  std::memcpy(p, in, StateWidth(layout, ls, state) * sizeof(float));
}

}  // namespace shardrec::embedding::tiered
