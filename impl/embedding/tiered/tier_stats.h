// What a tiered table's cache and store did on this rank (docs/disk-tier.md, "Stats"), summed
// over its local shards; counters since the collection was created.
#pragma once

#include <cstdint>

namespace shardrec::embedding::tiered {

struct TierStats {
  int64_t cache_bytes = 0;  // DRAM of the cache slots (records and per-slot metadata)
  int64_t cache_slots = 0;  // rows the cache can hold
  int64_t cache_rows = 0;   // rows it holds now
  int64_t hits = 0;         // distinct rows of a batch found in the cache
  int64_t misses = 0;       // distinct rows of a batch that were not
  int64_t disk_reads = 0;   // records the store read from disk
  int64_t disk_read_bytes = 0;
  int64_t queue_reads = 0;  // misses served from the write-back queue
  int64_t initialised = 0;  // misses of rows never written (their initial values)
  int64_t prefetched = 0;   // misses fetched ahead, while the previous batch computed
  int64_t write_backs = 0;  // dirty rows evicted to the write-back queue
  int64_t written = 0;      // records the writer put into the stores (all tiered tables)
  int64_t queue_depth = 0;  // records queued now (all tiered tables)
  int64_t queue_max_depth = 0;
  int64_t disk_bytes = 0;                 // the stores' files
  int64_t steps = 0;                      // forwards resolved
  double exposed_fetch_seconds = 0;       // fetch time a forward waited for, in total
  double last_exposed_fetch_seconds = 0;  // ... in the last forward
};

}  // namespace shardrec::embedding::tiered
