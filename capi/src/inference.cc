// C API of the inference collection (shardrec/inference.h): argument checks and conversions over
// impl/serving. Every read-path call runs inside the current version's slot (lock-free).
#include "shardrec/inference.h"

#include <array>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "capi/src/entry.h"
#include "capi/src/handles.h"
#include "capi/src/versioned.h"
#include "impl/serving/inference.h"
#include "impl/serving/lookup.h"
#include "impl/serving/lookup_vbe.h"
#include "impl/serving/row_quant.h"
#include "impl/serving/serving_file.h"
#include "impl/serving/tiered_rows.h"
#include "shardrec/embedding.h"

namespace shardrec::capi {
namespace {

using serving::Model;

Status CheckPath(const char* path) {
  if (path == nullptr || *path == '\0')
    return Status::InvalidArgument("path must not be NULL or empty");
  return Status::Ok();
}

Status CheckStorage(int32_t s, const std::string& what) {
  if (!serving::IsValidStorage(s))
    return Status::InvalidArgument(what, ": storage ", s,
                                   " is not a shardrec_serving_storage_t "
                                   "(SHARDREC_SERVING_AS_TRAINED .. SHARDREC_SERVING_FP8_E5M2)");
  return Status::Ok();
}

// options.tiers (version 2): tables served from the checkpoint's files through a row cache.
Status ToTiers(const shardrec_inference_options_t& o, serving::OpenOptions* out) {
  if (o.num_tiers > 0 && o.tiers == nullptr)
    return Status::InvalidArgument("options.tiers is NULL but num_tiers is ", o.num_tiers);
  const shardrec_serving_tier_t d = SHARDREC_SERVING_TIER_INIT;
  const StructVersion versions[] = {
      {sizeof(shardrec_serving_tier_t), sizeof(shardrec_serving_tier_t)}};
  std::vector<shardrec_serving_tier_t> tiers;
  SR_RETURN_IF_ERROR(
      ReadVersionedArray(o.tiers, o.num_tiers, d, std::span(versions), "options.tiers", &tiers));
  for (size_t i = 0; i < tiers.size(); ++i) {
    const shardrec_serving_tier_t& t = tiers[i];
    if (t.table == nullptr || t.table[0] == '\0')
      return Status::InvalidArgument("options.tiers[", i, "].table is ",
                                     t.table == nullptr ? "NULL" : "empty");
    if (t.cache_bytes == 0)
      return Status::InvalidArgument("options.tiers[", i, "] (table '", t.table,
                                     "'): cache_bytes must be > 0");
    if (!out->tiers.emplace(t.table, t.cache_bytes).second)
      return Status::InvalidArgument("options.tiers[", i, "] names table ", t.table,
                                     " a second time");
  }
  return Status::Ok();
}

Status ToOptions(const shardrec_inference_options_t* o, serving::OpenOptions* out) {
  if (o == nullptr) return Status::Ok();
  SR_RETURN_IF_ERROR(CheckStructVersion(o->version, SHARDREC_INFERENCE_OPTIONS_VERSION, "options"));
  if (o->device_type != SHARDREC_DEVICE_HOST)
    return Status::Unsupported("options.device_type ", o->device_type,
                               ": inference collections live in host memory only "
                               "(SHARDREC_DEVICE_HOST); GPU serving is not supported");
  SR_RETURN_IF_ERROR(CheckStorage(o->default_storage, "options.default_storage"));
  out->default_storage = static_cast<serving::Storage>(o->default_storage);
  if (o->bounds_policy < SHARDREC_BOUNDS_ERROR || o->bounds_policy > SHARDREC_BOUNDS_SKIP)
    return Status::InvalidArgument("options.bounds_policy ", o->bounds_policy,
                                   " is not a shardrec_bounds_policy_t");
  out->bounds = static_cast<serving::Bounds>(o->bounds_policy);
  if (o->num_table_storage > 0 && o->table_storage == nullptr)
    return Status::InvalidArgument("options.table_storage is NULL but num_table_storage is ",
                                   o->num_table_storage);
  for (size_t i = 0; i < o->num_table_storage; ++i) {
    const shardrec_table_storage_t& ts = o->table_storage[i];
    const std::string what = "options.table_storage[" + std::to_string(i) + "]";
    SR_RETURN_IF_ERROR(CheckStructVersion(ts.version, SHARDREC_TABLE_STORAGE_VERSION, what));
    if (ts.table == nullptr) return Status::InvalidArgument(what, ".table is NULL");
    SR_RETURN_IF_ERROR(CheckStorage(ts.storage, what));
    if (!out->table_storage.emplace(ts.table, static_cast<serving::Storage>(ts.storage)).second)
      return Status::InvalidArgument(what, " names table ", ts.table, " a second time");
  }
  if (o->version >= 2) SR_RETURN_IF_ERROR(ToTiers(*o, out));
  return Status::Ok();
}

Status ToRequest(const shardrec_kjt_view_t* b, serving::Request* r) {
  SR_RETURN_IF_ERROR(CheckNotNull(b, "batch"));
  if (b->device_type != SHARDREC_DEVICE_HOST)
    return Status::Unsupported("batch.device_type ", b->device_type,
                               ": inference lookups take host batches only");
  if (b->values_dtype != SHARDREC_DTYPE_INT64 && b->values_dtype != SHARDREC_DTYPE_INT32)
    return Status::InvalidArgument("batch.values_dtype ", b->values_dtype,
                                   " must be SHARDREC_DTYPE_INT64 or SHARDREC_DTYPE_INT32");
  r->batch_size = b->batch_size;
  r->num_features = b->num_features;
  r->lengths = b->lengths;
  r->num_lengths = b->num_lengths;
  r->values = b->values;
  r->values_int64 = b->values_dtype == SHARDREC_DTYPE_INT64;
  r->num_values = b->num_values;
  r->weights = b->weights;
  r->num_weights = b->num_weights;
  return Status::Ok();
}

Status Lookup(const Model& m, const shardrec_kjt_view_t* batch, float* out, size_t out_len) {
  serving::Request r;
  SR_RETURN_IF_ERROR(ToRequest(batch, &r));
  return serving::Lookup(m, r, out, out_len);
}

Status ToVbeRequest(const shardrec_kjt_vbe_view_t* b, serving::VbeRequest* r) {
  SR_RETURN_IF_ERROR(CheckNotNull(b, "batch"));
  SR_RETURN_IF_ERROR(CheckStructVersion(b->version, SHARDREC_KJT_VBE_VIEW_VERSION, "batch"));
  SR_RETURN_IF_ERROR(ToRequest(&b->kjt, &r->bags));
  if (b->feature_batch_sizes == nullptr && b->num_feature_batch_sizes != 0)
    return Status::InvalidArgument("batch.feature_batch_sizes is NULL but num_feature_batch_sizes ",
                                   "is ", b->num_feature_batch_sizes);
  if (b->inverse_indices == nullptr && b->num_inverse_indices != 0)
    return Status::InvalidArgument("batch.inverse_indices is NULL but num_inverse_indices is ",
                                   b->num_inverse_indices);
  r->batch_sizes = b->feature_batch_sizes;
  r->num_batch_sizes = b->num_feature_batch_sizes;
  r->inverse = b->inverse_indices;
  r->num_inverse = b->num_inverse_indices;
  return Status::Ok();
}

Status LookupVbe(const Model& m, const shardrec_kjt_vbe_view_t* batch, float* out, size_t out_len) {
  serving::VbeRequest r;
  SR_RETURN_IF_ERROR(ToVbeRequest(batch, &r));
  return serving::LookupVbe(m, r, out, out_len);
}

Status DenseTensor(const Model& m, const char* name, const float** data, size_t* count) {
  SR_RETURN_IF_ERROR(CheckNotNull(name, "name"));
  SR_RETURN_IF_ERROR(CheckNotNull(data, "data"));
  SR_RETURN_IF_ERROR(CheckNotNull(count, "count"));
  auto it = m.dense.find(name);
  if (it == m.dense.end()) return Status::NotFound("no dense tensor named ", name);
  *data = it->second.data;
  *count = it->second.count;
  return Status::Ok();
}

// Runs `fn(model)` on the handle's current version, held for the call.
template <typename Fn>
shardrec_status_t OnCurrent(const shardrec_inference_t* inf, Fn&& fn) {
  return Enter({Handle(inf, "inference handle", " is NULL")},
               [&] { return inf->impl->Read([&](const Model& m) { return fn(m); }); });
}

}  // namespace
}  // namespace shardrec::capi

using shardrec::Status;
using shardrec::capi::CheckNotNull;
using shardrec::capi::Enter;
using shardrec::capi::Handle;
using shardrec::capi::NotNull;
using shardrec::serving::Model;

extern "C" {

SHARDREC_API shardrec_status_t
shardrec_inference_options_init(shardrec_inference_options_t* options, uint32_t version) {
  const shardrec_inference_options_t defaults = SHARDREC_INFERENCE_OPTIONS_INIT;
  return shardrec::capi::InitStruct(
      options, version, SHARDREC_INFERENCE_OPTIONS_VERSION, defaults, "options",
      {offsetof(shardrec_inference_options_t, tiers), sizeof(shardrec_inference_options_t)});
}

SHARDREC_API shardrec_status_t shardrec_serving_tier_init(shardrec_serving_tier_t* tier,
                                                          uint32_t version) {
  const shardrec_serving_tier_t defaults = SHARDREC_SERVING_TIER_INIT;
  return shardrec::capi::InitStruct(tier, version, SHARDREC_SERVING_TIER_VERSION, defaults, "tier");
}

SHARDREC_API shardrec_status_t
shardrec_serving_tier_stats_init(shardrec_serving_tier_stats_t* stats, uint32_t version) {
  const shardrec_serving_tier_stats_t defaults = SHARDREC_SERVING_TIER_STATS_INIT;
  return shardrec::capi::InitStruct(stats, version, SHARDREC_SERVING_TIER_STATS_VERSION, defaults,
                                    "stats");
}

SHARDREC_API shardrec_status_t shardrec_inference_tier_stats(const shardrec_inference_t* inf,
                                                             const char* table,
                                                             shardrec_serving_tier_stats_t* out) {
  return shardrec::capi::OnCurrent(inf, [&](const Model& m) {
    SR_RETURN_IF_ERROR(CheckNotNull(table, "table"));
    SR_RETURN_IF_ERROR(CheckNotNull(out, "out"));
    SR_RETURN_IF_ERROR(shardrec::capi::CheckStructVersion(
        out->version, SHARDREC_SERVING_TIER_STATS_VERSION, "stats"));
    shardrec::serving::TieredStats s;
    SR_RETURN_IF_ERROR(shardrec::serving::TableTierStats(m, table, &s));
    out->model_version = m.number;
    out->cache_bytes = static_cast<int64_t>(s.cache_bytes);
    out->cache_slots = s.cache_slots;
    out->cache_rows = s.cache_rows;
    out->hits = static_cast<int64_t>(s.hits);
    out->misses = static_cast<int64_t>(s.misses);
    const uint64_t seen = s.hits + s.misses;
    out->hit_rate = seen == 0 ? 0.0 : static_cast<double>(s.hits) / static_cast<double>(seen);
    out->disk_reads = static_cast<int64_t>(s.disk_reads);
    out->disk_read_bytes = static_cast<int64_t>(s.disk_read_bytes);
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_inference_open(const char* path,
                                                       const shardrec_inference_options_t* options,
                                                       shardrec_inference_t** out) {
  if (out != nullptr) *out = nullptr;
  return Enter({NotNull(out, "out")}, [&] {
    SR_RETURN_IF_ERROR(shardrec::capi::CheckPath(path));
    shardrec::serving::OpenOptions o;
    SR_RETURN_IF_ERROR(shardrec::capi::ToOptions(options, &o));
    auto h = std::make_unique<shardrec_inference>();
    SR_RETURN_IF_ERROR(shardrec::serving::Inference::Open(path, o, &h->impl));
    *out = h.release();
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_inference_save(const shardrec_inference_t* inf,
                                                       const char* path) {
  return Enter({Handle(inf, "inference handle", " is NULL")}, [&] {
    SR_RETURN_IF_ERROR(shardrec::capi::CheckPath(path));
    return shardrec::serving::SaveServingFile(*inf->impl->Current(), path);
  });
}

SHARDREC_API void shardrec_inference_destroy(shardrec_inference_t* inf) { delete inf; }

SHARDREC_API shardrec_status_t shardrec_inference_output_dim(const shardrec_inference_t* inf,
                                                             int64_t* out) {
  return shardrec::capi::OnCurrent(inf, [&](const Model& m) {
    SR_RETURN_IF_ERROR(CheckNotNull(out, "out"));
    *out = m.output_dim;
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_inference_is_sequence(const shardrec_inference_t* inf,
                                                              int32_t* out) {
  return shardrec::capi::OnCurrent(inf, [&](const Model& m) {
    SR_RETURN_IF_ERROR(CheckNotNull(out, "out"));
    *out = m.sequence ? 1 : 0;
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_inference_num_features(const shardrec_inference_t* inf,
                                                               size_t* out) {
  return shardrec::capi::OnCurrent(inf, [&](const Model& m) {
    SR_RETURN_IF_ERROR(CheckNotNull(out, "out"));
    *out = m.features.size();
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_inference_num_tables(const shardrec_inference_t* inf,
                                                             size_t* out) {
  return shardrec::capi::OnCurrent(inf, [&](const Model& m) {
    SR_RETURN_IF_ERROR(CheckNotNull(out, "out"));
    *out = m.tables.size();
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_inference_table_info(const shardrec_inference_t* inf,
                                                             size_t index, const char** name,
                                                             int64_t* rows, int32_t* dim,
                                                             int32_t* storage) {
  return shardrec::capi::OnCurrent(inf, [&](const Model& m) {
    if (index >= m.tables.size())
      return Status::InvalidArgument("table index ", index, " is out of range (", m.tables.size(),
                                     " tables)");
    const auto& t = m.tables[index];
    // The handle's copy of the name: it outlives this version.
    if (name != nullptr) *name = inf->impl->table_names()[index].c_str();
    if (rows != nullptr) *rows = t.rows;
    if (dim != nullptr) *dim = t.dim;
    if (storage != nullptr) *storage = static_cast<int32_t>(t.storage);
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_inference_version(const shardrec_inference_t* inf,
                                                          uint64_t* out) {
  return shardrec::capi::OnCurrent(inf, [&](const Model& m) {
    SR_RETURN_IF_ERROR(CheckNotNull(out, "out"));
    *out = m.number;
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_inference_lookup(const shardrec_inference_t* inf,
                                                         const shardrec_kjt_view_t* batch,
                                                         float* out, size_t out_len,
                                                         uint64_t* version_out) {
  return shardrec::capi::OnCurrent(inf, [&](const Model& m) {
    SR_RETURN_IF_ERROR(shardrec::capi::Lookup(m, batch, out, out_len));
    if (version_out != nullptr) *version_out = m.number;
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_inference_lookup_vbe(const shardrec_inference_t* inf,
                                                             const shardrec_kjt_vbe_view_t* batch,
                                                             float* out, size_t out_len,
                                                             uint64_t* version_out) {
  return shardrec::capi::OnCurrent(inf, [&](const Model& m) {
    SR_RETURN_IF_ERROR(shardrec::capi::LookupVbe(m, batch, out, out_len));
    if (version_out != nullptr) *version_out = m.number;
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_inference_vbe_output_len(
    const shardrec_inference_t* inf, const shardrec_kjt_vbe_view_t* batch, size_t* out) {
  return shardrec::capi::OnCurrent(inf, [&](const Model& m) {
    SR_RETURN_IF_ERROR(CheckNotNull(out, "out"));
    shardrec::serving::VbeRequest r;
    SR_RETURN_IF_ERROR(shardrec::capi::ToVbeRequest(batch, &r));
    return shardrec::serving::VbeOutputSize(m, r, out);
  });
}

SHARDREC_API shardrec_status_t shardrec_inference_dense_tensor(const shardrec_inference_t* inf,
                                                               const char* name, const float** data,
                                                               size_t* count,
                                                               uint64_t* version_out) {
  return shardrec::capi::OnCurrent(inf, [&](const Model& m) {
    SR_RETURN_IF_ERROR(shardrec::capi::DenseTensor(m, name, data, count));
    if (version_out != nullptr) *version_out = m.number;
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_inference_pin(const shardrec_inference_t* inf,
                                                      shardrec_inference_version_t** out) {
  if (out != nullptr) *out = nullptr;
  return Enter({Handle(inf, "inference handle", " is NULL"), NotNull(out, "out")}, [&] {
    auto v = std::make_unique<shardrec_inference_snapshot>();
    v->model = inf->impl->Current();
    *out = v.release();
    return Status::Ok();
  });
}

SHARDREC_API void shardrec_inference_unpin(shardrec_inference_version_t* ver) { delete ver; }

SHARDREC_API shardrec_status_t
shardrec_inference_snapshot_version(const shardrec_inference_version_t* ver, uint64_t* out) {
  return Enter({Handle(ver, "snapshot", " is NULL"), NotNull(out, "out")}, [&] {
    *out = ver->model->number;
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t
shardrec_inference_snapshot_lookup(const shardrec_inference_version_t* ver,
                                   const shardrec_kjt_view_t* batch, float* out, size_t out_len) {
  return Enter({Handle(ver, "snapshot", " is NULL")},
               [&] { return shardrec::capi::Lookup(*ver->model, batch, out, out_len); });
}

SHARDREC_API shardrec_status_t shardrec_inference_snapshot_lookup_vbe(
    const shardrec_inference_version_t* ver, const shardrec_kjt_vbe_view_t* batch, float* out,
    size_t out_len) {
  return Enter({Handle(ver, "snapshot", " is NULL")},
               [&] { return shardrec::capi::LookupVbe(*ver->model, batch, out, out_len); });
}

SHARDREC_API shardrec_status_t shardrec_inference_snapshot_dense_tensor(
    const shardrec_inference_version_t* ver, const char* name, const float** data, size_t* count) {
  return Enter({Handle(ver, "snapshot", " is NULL")},
               [&] { return shardrec::capi::DenseTensor(*ver->model, name, data, count); });
}

SHARDREC_API shardrec_status_t shardrec_inference_reload(shardrec_inference_t* inf,
                                                         const char* path) {
  return Enter({Handle(inf, "inference handle", " is NULL")}, [&] {
    SR_RETURN_IF_ERROR(shardrec::capi::CheckPath(path));
    return inf->impl->Reload(path);
  });
}

SHARDREC_API shardrec_status_t shardrec_inference_apply_delta(
    shardrec_inference_t* inf, const char* table, const int64_t* ids, const float* rows,
    size_t num_rows, const int64_t* tombstones, size_t num_tombstones, uint64_t* version_out) {
  return shardrec_inference_apply_delta_ext(inf, table, ids, rows, num_rows, tombstones,
                                            num_tombstones, 0u, version_out);
}

SHARDREC_API shardrec_status_t
shardrec_inference_apply_delta_ext(shardrec_inference_t* inf, const char* table, const int64_t* ids,
                                   const float* rows, size_t num_rows, const int64_t* tombstones,
                                   size_t num_tombstones, uint32_t flags, uint64_t* version_out) {
  return Enter({Handle(inf, "inference handle", " is NULL"), NotNull(table, "table")}, [&] {
    // A bit from a newer exporter may change what the delta means: applying it as if it were
    // absent could serve the wrong rows.
    constexpr uint32_t kKnown = SHARDREC_DELTA_FULL;
    if ((flags & ~kKnown) != 0)
      return Status::InvalidArgument("delta of table ", table, ": unknown flag bits ",
                                     flags & ~kKnown, " (this library knows SHARDREC_DELTA_FULL)");
    shardrec::serving::Delta d;
    d.ids = ids;
    d.rows = rows;
    d.num_rows = num_rows;
    d.tombstones = tombstones;
    d.num_tombstones = num_tombstones;
    d.full = (flags & SHARDREC_DELTA_FULL) != 0;
    uint64_t number = 0;
    SR_RETURN_IF_ERROR(inf->impl->ApplyDelta(table, d, &number));
    if (version_out != nullptr) *version_out = number;
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_inference_row_scales(const shardrec_inference_t* inf,
                                                             const char* table, const int64_t* ids,
                                                             size_t n, float* scales, float* biases,
                                                             uint64_t* version_out) {
  return shardrec::capi::OnCurrent(inf, [&](const Model& m) {
    SR_RETURN_IF_ERROR(CheckNotNull(table, "table"));
    if (n > 0) {
      SR_RETURN_IF_ERROR(CheckNotNull(ids, "ids"));
      SR_RETURN_IF_ERROR(CheckNotNull(scales, "scales"));
    }
    SR_RETURN_IF_ERROR(shardrec::serving::RowQuantization(m, table, ids, n, scales, biases));
    if (version_out != nullptr) *version_out = m.number;
    return Status::Ok();
  });
}

}  // extern "C"
