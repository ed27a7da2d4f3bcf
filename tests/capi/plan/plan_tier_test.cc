// The planner's view of tiered tables through the public C API (docs/disk-tier.md, "Planning"):
// a table too large for memory plans once it is tiered (its cache in memory, its records on the
// topology's disk), a disk too small refuses it, the hit rate and the disk's rate move the
// estimated step, the stats name the tier; shardrec_topology_calibrate_disk measures a disk.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "shardrec/shardrec.h"
#include "tests/support/temp_dirs.h"

namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;

struct Planned {
  shardrec_status_t status = SHARDREC_OK;
  std::string stats;  // shardrec_plan_stats, or the error
  double step_ms = 0;
};

// One 10M x 64 fp32 table under Adagrad (5 GiB of rows and state), world 1, 4 GiB of memory.
Planned PlanIt(const shardrec_table_constraints_t* c, const shardrec_topology_t* base = nullptr) {
  shardrec_feature_config_t f = SHARDREC_FEATURE_CONFIG_INIT;
  f.name = "f";
  f.pooling_factor = 20.0f;
  int32_t fi = 0;
  shardrec_table_config_t t = SHARDREC_TABLE_CONFIG_INIT;
  t.name = "big";
  t.rows = 10'000'000;
  t.dim = 64;
  t.features = &fi;
  t.num_features = 1;
  shardrec_topology_t topo = SHARDREC_TOPOLOGY_INIT;
  if (base != nullptr) topo = *base;
  topo.memory_bytes = 4 * kGiB;
  topo.optimizer = SHARDREC_OPTIMIZER_ADAGRAD;
  shardrec_plan_t* plan = nullptr;
  Planned p;
  p.status = shardrec_plan_create(&plan, &t, 1, &f, 1, &topo, c, c != nullptr ? 1 : 0);
  if (p.status != SHARDREC_OK) {
    p.stats = shardrec_last_error();
    return p;
  }
  char* text = nullptr;
  EXPECT_EQ(shardrec_plan_stats(plan, &text, nullptr), SHARDREC_OK);
  p.stats = text;
  shardrec_free(text);
  shardrec_plan_destroy(plan);
  const std::string key = "estimated step cost of the busiest rank: ";
  const size_t at = p.stats.find(key);
  EXPECT_NE(at, std::string::npos);
  p.step_ms = std::strtod(p.stats.c_str() + at + key.size(), nullptr);
  return p;
}

shardrec_table_constraints_t Tier(uint64_t cache_bytes) {
  shardrec_table_constraints_t c = SHARDREC_TABLE_CONSTRAINTS_INIT;
  c.table = "big";
  c.tier_cache_bytes = cache_bytes;
  return c;
}

TEST(CapiPlanTier, ATieredTablePlansWhereTheTableInMemoryDoesNot) {
  const Planned mem = PlanIt(nullptr);
  EXPECT_EQ(mem.status, SHARDREC_ENOMEM) << mem.stats;
  const shardrec_table_constraints_t c = Tier(512 * kMiB);
  const Planned tiered = PlanIt(&c);
  ASSERT_EQ(tiered.status, SHARDREC_OK) << tiered.stats;
  EXPECT_NE(tiered.stats.find("Tier"), std::string::npos) << tiered.stats;
  EXPECT_NE(tiered.stats.find("cache 512.00 MiB"), std::string::npos) << tiered.stats;
  EXPECT_NE(tiered.stats.find("disk (tiered tables)"), std::string::npos) << tiered.stats;
  // The records (256 B of weights + 256 B of Adagrad state + 16) on disk, x2 for compaction:
  // 10M rows at 7 per 4 KiB page.
  const uint64_t pages = (10'000'000 + 6) / 7;
  const std::string disk = "disk " + std::to_string(pages * 4096 * 2 / kMiB);
  EXPECT_NE(tiered.stats.find(disk), std::string::npos) << disk << "\n" << tiered.stats;

  // A disk too small for the records: no placement.
  shardrec_topology_t small = SHARDREC_TOPOLOGY_INIT;
  small.disk_capacity = 10 * kGiB;
  const Planned no_disk = PlanIt(&c, &small);
  EXPECT_EQ(no_disk.status, SHARDREC_ENOMEM);
  EXPECT_NE(no_disk.stats.find("does not fit on disk"), std::string::npos) << no_disk.stats;
  // A cache larger than the memory: no placement either (the cache is memory).
  const shardrec_table_constraints_t huge = Tier(8 * kGiB);
  EXPECT_EQ(PlanIt(&huge).status, SHARDREC_ENOMEM);
}

TEST(CapiPlanTier, HitRateAndDiskRateMoveTheStep) {
  shardrec_table_constraints_t c = Tier(512 * kMiB);
  const Planned uniform = PlanIt(&c);  // hit rate = the cache's share of the rows
  ASSERT_EQ(uniform.status, SHARDREC_OK) << uniform.stats;
  c.id_zipf_alpha = 1.05;
  const Planned zipf = PlanIt(&c);
  ASSERT_EQ(zipf.status, SHARDREC_OK) << zipf.stats;
  EXPECT_LT(zipf.step_ms, uniform.step_ms);
  c.tier_hit_rate = 0.99;
  const Planned hot = PlanIt(&c);
  ASSERT_EQ(hot.status, SHARDREC_OK);
  EXPECT_NE(hot.stats.find("hit 0.99"), std::string::npos) << hot.stats;
  c.tier_hit_rate = 0.5;
  const Planned half = PlanIt(&c);
  EXPECT_LT(hot.step_ms, half.step_ms);
  shardrec_topology_t fast = SHARDREC_TOPOLOGY_INIT;
  fast.disk_read_iops = 1e7;
  fast.disk_read_bandwidth = 20.0 * kGiB;
  EXPECT_LT(PlanIt(&c, &fast).step_ms, half.step_ms);
}

TEST(CapiPlanTier, RefusesBadTierConstraints) {
  shardrec_table_constraints_t c = Tier(512 * kMiB);
  c.tier_hit_rate = 1.5;
  const Planned bad = PlanIt(&c);
  EXPECT_EQ(bad.status, SHARDREC_EINVAL);
  EXPECT_NE(bad.stats.find("tier_hit_rate"), std::string::npos) << bad.stats;
  c.tier_hit_rate = 0;
  c.id_zipf_alpha = -1;
  EXPECT_EQ(PlanIt(&c).status, SHARDREC_EINVAL);
  c.id_zipf_alpha = 0;
  c.sharding_types = 1u << SHARDREC_SHARDING_DATA_PARALLEL;  // a tiered table is never DP
  EXPECT_EQ(PlanIt(&c).status, SHARDREC_EINVAL);
  shardrec_topology_t t = SHARDREC_TOPOLOGY_INIT;
  t.disk_read_iops = -1;
  c.sharding_types = 0;
  EXPECT_EQ(PlanIt(&c, &t).status, SHARDREC_EINVAL);
  // A version-2 topology has no disk fields: whatever lies there is never read.
  t.version = 2;
  EXPECT_EQ(PlanIt(&c, &t).status, SHARDREC_OK) << PlanIt(&c, &t).stats;
}

TEST(CapiPlanTier, CalibrateDiskMeasuresADirectory) {
  shardrec_topology_t v2;
  ASSERT_EQ(shardrec_topology_init(&v2, 2), SHARDREC_OK);
  const std::string dir = shardrec::testing::FreshDir("calibrate_disk");
  EXPECT_EQ(shardrec_topology_calibrate_disk(&v2, dir.c_str(), 0, 0.1, nullptr, nullptr),
            SHARDREC_EINVAL);
  shardrec_topology_t topo = SHARDREC_TOPOLOGY_INIT;
  topo.world_size = 2;
  EXPECT_EQ(
      shardrec_topology_calibrate_disk(&topo, (dir + "/none").c_str(), 0, 0.1, nullptr, nullptr),
      SHARDREC_ENOTFOUND);
  EXPECT_EQ(shardrec_topology_calibrate_disk(&topo, dir.c_str(), 0, -1, nullptr, nullptr),
            SHARDREC_EINVAL);
  EXPECT_EQ(topo.disk_read_iops, 0.0);
  double iops = 0;
  int32_t direct = -1;
  ASSERT_EQ(shardrec_topology_calibrate_disk(&topo, dir.c_str(), 16 * kMiB, 0.2, &iops, &direct),
            SHARDREC_OK)
      << shardrec_last_error();
  EXPECT_TRUE(direct == 0 || direct == 1);
  // Plausible for any disk or page cache: 100 .. 1e8 reads/s, 1 MB/s .. 1 TB/s.
  EXPECT_GT(iops, 100);
  EXPECT_LT(iops, 1e8);
  EXPECT_DOUBLE_EQ(topo.disk_read_iops, iops / 2);  // the machine's two ranks share it
  EXPECT_GT(topo.disk_read_bandwidth, 1e6);
  EXPECT_LT(topo.disk_read_bandwidth, 1e12);
  EXPECT_GT(topo.disk_capacity, 0u);
  // The scratch file is gone.
  EXPECT_EQ(std::system(("test -z \"$(ls -A " + dir + ")\"").c_str()), 0);
  // The figures plan.
  const shardrec_table_constraints_t c = Tier(512 * kMiB);
  topo.world_size = 1;
  topo.disk_capacity = 0;
  EXPECT_EQ(PlanIt(&c, &topo).status, SHARDREC_OK);
}

}  // namespace
