// What makes a table tiered (docs/disk-tier.md): its rows and optimizer state live in a record
// store on local disk (impl/store/row_store.h), one per local shard under `dir`, and a DRAM cache
// of `cache_bytes` holds the hot rows. A rank's own setting: its directory is on its own disk and
// its cache in its own memory; the results do not depend on either (a tiered table trains to the
// bits of the same table in memory).
#pragma once

#include <cstdint>
#include <string>

namespace shardrec::embedding::tiered {

struct TierConfig {
  std::string table;        // a table of the plan, named once
  std::string dir;          // this rank's directory for the table's stores (created if missing)
  int64_t cache_bytes = 0;  // > 0: DRAM for this rank's cached rows of the table
};

}  // namespace shardrec::embedding::tiered
