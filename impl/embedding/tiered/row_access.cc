// A tiered shard's rows read and written whole, in fp32, for the collection's accessors and
// checkpoint loads (tables.h, ReadShard / WriteShard): cached rows in their slots, the others
// through the write-back queue and the store. Not on the step's path: each call waits out the
// prefetch job and holds the cache lock for its whole walk.
#include <algorithm>
#include <cstring>
#include <vector>

#include "impl/embedding/tiered/record.h"
#include "impl/embedding/tiered/tables.h"

namespace shardrec::embedding::tiered {

namespace {

// Uncached rows fetched from the store at once.
constexpr int64_t kAccessChunk = 4096;

}  // namespace

Status TieredTables::VisitRows(
    Shard& sh, int64_t first, int64_t count,
    const std::function<Status(int64_t, int32_t, const uint8_t*)>& visit) {
  double waited = 0;
  TakePrefetch(&waited, nullptr);
  std::lock_guard<std::mutex> cache_lock(cache_mu_);
  if (first < 0 || count < 0 || first + count > sh.spec.rows)
    return Status::Internal("rows ", first, "+", count, " of a tiered shard of ", sh.spec.rows);
  const size_t rb = sh.record_bytes;
  std::vector<int64_t> rows;
  for (int64_t r0 = first; r0 < first + count; r0 += kAccessChunk) {
    const int64_t r1 = std::min(first + count, r0 + kAccessChunk);
    rows.clear();
    for (int64_t r = r0; r < r1; ++r)
      if (sh.cache->Find(r) < 0) rows.push_back(r);
    Fetched f;
    SR_RETURN_IF_ERROR(Fetch(sh, rows.data(), rows.size(), &f));
    size_t i = 0;  // the next of `rows`, which are the uncached rows in order
    for (int64_t r = r0; r < r1; ++r) {
      const int32_t slot = sh.cache->Find(r);
      const uint8_t* record = nullptr;
      if (slot < 0) {
        const size_t k = i++;
        if (f.found[k]) record = f.records.data() + k * rb;
      }
      SR_RETURN_IF_ERROR(visit(r, slot, record));
    }
  }
  return Status::Ok();
}

Status TieredTables::ReadShard(int32_t local, int32_t state, float* out) {
  const int32_t j = ShardOf(local);
  if (j < 0) return Status::Internal("local shard ", local, " is not tiered");
  return ReadRows(local, state, 0, shards_[j].spec.rows, out);
}

Status TieredTables::ReadRows(int32_t local, int32_t state, int64_t first, int64_t count,
                              float* out) {
  const int32_t j = ShardOf(local);
  if (j < 0) return Status::Internal("local shard ", local, " is not tiered");
  Shard& sh = shards_[j];
  const LocalShard& ls = layout_->local[local];
  const bool row_wise = state >= 0 && layout_->tables[ls.table].state_specs[state].row_wise;
  const int64_t width = row_wise ? 1 : ls.cols;
  std::vector<uint8_t> packed(sh.record_bytes);
  return VisitRows(sh, first, count, [&](int64_t r, int32_t slot, const uint8_t* record) {
    float* dst = out + (r - first) * width;
    if (slot >= 0) {
      PackSlot(*params_, *layout_, ls, slot, packed.data());
      RecordToFloats(*layout_, ls, packed.data(), state, dst);
    } else if (record != nullptr) {
      RecordToFloats(*layout_, ls, record, state, dst);
    } else if (state >= 0) {
      std::fill(dst, dst + width, 0.0f);
    } else {
      params_->InitialValues(ls, static_cast<uint64_t>(ls.row_offset + r), seed_, dst);
    }
    return Status::Ok();
  });
}

Status TieredTables::WriteShard(int32_t local, int32_t state, const float* in) {
  const int32_t j = ShardOf(local);
  if (j < 0) return Status::Internal("local shard ", local, " is not tiered");
  return WriteRows(local, state, 0, shards_[j].spec.rows, in);
}

Status TieredTables::WriteRows(int32_t local, int32_t state, int64_t first, int64_t count,
                               const float* in) {
  const int32_t j = ShardOf(local);
  if (j < 0) return Status::Internal("local shard ", local, " is not tiered");
  Shard& sh = shards_[j];
  const LocalShard& ls = layout_->local[local];
  const auto& name = layout_->plan->tables[ls.table].name;
  const bool row_wise = state >= 0 && layout_->tables[ls.table].state_specs[state].row_wise;
  const int64_t width = row_wise ? 1 : ls.cols;
  const size_t rb = sh.record_bytes;
  std::vector<uint8_t> packed(rb);
  std::vector<float> init(static_cast<size_t>(ls.cols));
  return VisitRows(sh, first, count, [&](int64_t r, int32_t slot, const uint8_t* record) {
    const float* src = in + (r - first) * width;
    if (slot >= 0) {
      PackSlot(*params_, *layout_, ls, slot, packed.data());
      FloatsToRecord(*layout_, ls, src, state, packed.data());
      UnpackSlot(*params_, *layout_, ls, slot, packed.data());
      sh.cache->set_dirty(slot, true);
      return Status::Ok();
    }
    if (record != nullptr) {
      std::memcpy(packed.data(), record, rb);
    } else {
      // A row never written: its initial weights and zero state, then the new part.
      std::fill(packed.begin(), packed.end(), 0);
      params_->InitialValues(ls, static_cast<uint64_t>(ls.row_offset + r), seed_, init.data());
      FloatsToRecord(*layout_, ls, init.data(), -1, packed.data());
    }
    FloatsToRecord(*layout_, ls, src, state, packed.data());
    const Status s = queue_->Push(sh.store.get(), r, packed.data());
    if (!s.ok()) return Status(s.code(), StrCat("tiered table '", name, "': ", s.message()));
    return Status::Ok();
  });
}

}  // namespace shardrec::embedding::tiered
