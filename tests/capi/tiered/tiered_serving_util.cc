// Shared helpers of the tests that serve checkpoints from their files (tiered_serving_util.h).
#include "tests/capi/tiered/tiered_serving_util.h"

#include <gtest/gtest.h>

#include <cmath>

#include "shardrec/checkpoint.h"
#include "tests/capi/dynamic/stream.h"
#include "tests/capi/tiered/tiered_test_util.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {
namespace {

constexpr int32_t kSteps = 8;
constexpr int32_t kFirstSave = 5;

}  // namespace

Saved TrainAndSave(DynScenario s, int32_t world, int32_t sharding, bool tiered,
                   const std::string& tag) {
  s.base.world = world;
  s.base.ranks_per_node = world;
  s.base.sharding = {sharding, sharding};
  s.tiers.clear();
  if (tiered)
    for (size_t t = 0; t < 2; ++t)
      s.tiers.push_back({s.base.tables[t].name, FreshDir(tag + "_" + s.base.tables[t].name),
                         CacheBytesFor(s.base, t, t == 0 ? 22 : 30)});
  const int64_t dim = DynOutputDim(s);
  const Stream st = MakeStream(s, dim, kSteps);
  Saved out;
  out.first = FreshDir(tag + "_ck1");
  out.second = FreshDir(tag + "_ck2");
  out.batches = st.batches;
  out.batches.push_back(st.probe);
  PlanPtr plan = MakeDynPlan(s);
  if (plan == nullptr) return out;
  SpawnRanks(world, [&](int r) {
    CollPtr coll;
    MakeStreamCollection(s, plan.get(), world, r, &coll);
    shardrec_embedding_t* c = coll.get();
    if (c == nullptr) return;
    for (int32_t step = 0; step < kSteps; ++step) {
      ForwardSlice(c, st.batches[step], world, r, dim, nullptr);
      BackwardSlice(c, st.grads[step], world, r, dim, static_cast<float>(world));
      if (step + 1 == kFirstSave || step + 1 == kSteps) {
        const std::string& dir = step + 1 == kSteps ? out.second : out.first;
        ASSERT_EQ(shardrec_checkpoint_save(c, dir.c_str(), nullptr), SHARDREC_OK)
            << "rank " << r << ": " << shardrec_last_error();
      }
    }
  });
  return out;
}

shardrec_status_t Open(const std::string& ckpt, int32_t storage, uint64_t cache_bytes,
                       shardrec_inference_t** out) {
  shardrec_serving_tier_t tiers[2] = {SHARDREC_SERVING_TIER_INIT, SHARDREC_SERVING_TIER_INIT};
  tiers[0].table = "t0";
  tiers[1].table = "t1";
  tiers[0].cache_bytes = tiers[1].cache_bytes = cache_bytes;
  shardrec_inference_options_t o = SHARDREC_INFERENCE_OPTIONS_INIT;
  o.default_storage = storage;
  o.tiers = cache_bytes > 0 ? tiers : nullptr;
  o.num_tiers = cache_bytes > 0 ? 2 : 0;
  *out = nullptr;
  return shardrec_inference_open(ckpt.c_str(), &o, out);
}

Inf OpenOk(const std::string& ckpt, int32_t storage, uint64_t cache_bytes) {
  shardrec_inference_t* raw = nullptr;
  EXPECT_EQ(Open(ckpt, storage, cache_bytes, &raw), SHARDREC_OK)
      << ckpt << ": " << shardrec_last_error();
  return Inf(raw);
}

shardrec_status_t TryLookup(shardrec_inference_t* inf, const RefBatch& b, std::vector<float>* out) {
  int64_t dim = 0;
  EXPECT_EQ(shardrec_inference_output_dim(inf, &dim), SHARDREC_OK);
  KjtHolder kjt(b, 3, false);
  out->assign(static_cast<size_t>(b.batch_size * dim), NAN);
  return shardrec_inference_lookup(inf, kjt.view(), out->data(), out->size(), nullptr);
}

std::vector<float> Lookup(shardrec_inference_t* inf, const RefBatch& b, uint64_t* version) {
  int64_t dim = 0;
  EXPECT_EQ(shardrec_inference_output_dim(inf, &dim), SHARDREC_OK);
  KjtHolder kjt(b, 3, false);
  std::vector<float> out(static_cast<size_t>(b.batch_size * dim), NAN);
  EXPECT_EQ(shardrec_inference_lookup(inf, kjt.view(), out.data(), out.size(), version),
            SHARDREC_OK)
      << shardrec_last_error();
  return out;
}

shardrec_serving_tier_stats_t Stats(shardrec_inference_t* inf, const char* table) {
  shardrec_serving_tier_stats_t s = SHARDREC_SERVING_TIER_STATS_INIT;
  EXPECT_EQ(shardrec_inference_tier_stats(inf, table, &s), SHARDREC_OK) << shardrec_last_error();
  return s;
}

}  // namespace shardrec::testing
