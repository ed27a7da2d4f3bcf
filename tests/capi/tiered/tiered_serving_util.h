// Shared helpers of the tests that serve checkpoints of dynamic (or fixed) tables from their
// files (shardrec_serving_tier_t): a training run that saves twice, opening its checkpoints with
// both tables tiered or in memory, and lookups and statistics through the C API.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shardrec/inference.h"
#include "tests/capi/dynamic/test_util.h"

namespace shardrec::testing {

struct Saved {
  std::string first, second;      // checkpoints after 5 steps and after 8
  std::vector<RefBatch> batches;  // the stream's batches and its probe of every pool id
};

// Trains `s` at `world` under `sharding` (tiered with caches smaller than a shard, or in
// memory) for 8 steps and saves after 5 and after 8. `tag` names its directories.
Saved TrainAndSave(DynScenario s, int32_t world, int32_t sharding, bool tiered,
                   const std::string& tag);

// Opens `ckpt` with every table in `storage`, t0 and t1 served from the files through caches
// of `cache_bytes` each (0: in memory).
shardrec_status_t Open(const std::string& ckpt, int32_t storage, uint64_t cache_bytes,
                       shardrec_inference_t** out);

struct InfDeleter {
  void operator()(shardrec_inference_t* p) const { shardrec_inference_destroy(p); }
};
using Inf = std::unique_ptr<shardrec_inference_t, InfDeleter>;

// Open, failing the test on error.
Inf OpenOk(const std::string& ckpt, int32_t storage, uint64_t cache_bytes);

// The lookup of batch `b` (3 features), failing the test on error.
std::vector<float> Lookup(shardrec_inference_t* inf, const RefBatch& b, uint64_t* version);

// The lookup of batch `b` (3 features) into `out`, its status returned.
shardrec_status_t TryLookup(shardrec_inference_t* inf, const RefBatch& b, std::vector<float>* out);

// The statistics of tiered table `table`, failing the test on error.
shardrec_serving_tier_stats_t Stats(shardrec_inference_t* inf, const char* table);

}  // namespace shardrec::testing
