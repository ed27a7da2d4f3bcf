// C API of a tiered table's statistics (shardrec/tier.h).
#include "capi/src/embedding_convert.h"
#include "capi/src/entry.h"
#include "capi/src/handles.h"
#include "capi/src/versioned.h"
#include "impl/embedding/storage/table_storage.h"
#include "shardrec/tier.h"

using shardrec::Status;
using shardrec::capi::CheckNotNull;
using shardrec::capi::Enter;
using shardrec::capi::Exclusive;

extern "C" {

SHARDREC_API shardrec_status_t shardrec_tier_stats_init(shardrec_tier_stats_t* stats,
                                                        uint32_t version) {
  const shardrec_tier_stats_t d = SHARDREC_TIER_STATS_INIT;
  return shardrec::capi::InitStruct(stats, version, SHARDREC_TIER_STATS_VERSION, d, "tier stats");
}

SHARDREC_API shardrec_status_t shardrec_embedding_tier_stats(const shardrec_embedding_t* coll,
                                                             const char* table,
                                                             shardrec_tier_stats_t* out) {
  return Enter({Exclusive(coll, "coll", "collection")}, [&] {
    SR_RETURN_IF_ERROR(CheckNotNull(table, "table"));
    SR_RETURN_IF_ERROR(CheckNotNull(out, "out"));
    SR_RETURN_IF_ERROR(shardrec::capi::CheckStructVersion(out->version, SHARDREC_TIER_STATS_VERSION,
                                                          "tier stats"));
    int32_t t = -1;
    SR_RETURN_IF_ERROR(shardrec::capi::FindTable(*coll->impl, table, &t));
    shardrec::embedding::tiered::TierStats s;
    if (!coll->impl->storage().TierStats(t, &s))
      return Status::InvalidArgument("table '", table, "' is not tiered on this rank");
    out->cache_bytes = s.cache_bytes;
    out->cache_slots = s.cache_slots;
    out->cache_rows = s.cache_rows;
    out->hits = s.hits;
    out->misses = s.misses;
    out->hit_rate = s.hits + s.misses > 0
                        ? static_cast<double>(s.hits) / static_cast<double>(s.hits + s.misses)
                        : 0.0;
    out->disk_reads = s.disk_reads;
    out->disk_read_bytes = s.disk_read_bytes;
    out->disk_bytes = s.disk_bytes;
    out->queue_reads = s.queue_reads;
    out->initialised = s.initialised;
    out->prefetched = s.prefetched;
    out->write_backs = s.write_backs;
    out->written = s.written;
    out->queue_depth = s.queue_depth;
    out->queue_max_depth = s.queue_max_depth;
    out->steps = s.steps;
    out->exposed_fetch_seconds = s.exposed_fetch_seconds;
    out->last_exposed_fetch_seconds = s.last_exposed_fetch_seconds;
    return Status::Ok();
  });
}

}  // extern "C"
