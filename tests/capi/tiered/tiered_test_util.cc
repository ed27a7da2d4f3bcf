// Shared helpers of the tiered-table tests (tiered_test_util.h).
#include "tiered_test_util.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "shardrec/checkpoint.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {

Scenario TieredScenario(int32_t world, int32_t sharding, int32_t optimizer, int32_t dtype,
                        int32_t pooling, bool weighted) {
  Scenario s;
  s.world = world;
  s.ranks_per_node = world;
  s.num_features = 4;
  RefTable t0{"t0", 200, 8, pooling, {0}, 1, -0.5f, 0.5f, dtype};
  RefTable t1{"t1", 300, 12, pooling, {1, 2}, 0, 0, 0, dtype};
  RefTable t2{"t2", 120, 16, pooling, {3}, 1, -0.25f, 0.25f, dtype};
  s.tables = {t0, t1, t2};
  s.sharding.assign(s.tables.size(), sharding);
  s.optimizer.type = optimizer;
  s.optimizer.lr = 0.05f;
  s.weighted = weighted;
  s.batch_sizes.assign(static_cast<size_t>(world), 6);
  s.max_bag = 4;
  s.steps = 6;
  return s;
}

int64_t CacheBytesFor(const Scenario& s, size_t t, int64_t slots) {
  const RefTable& rt = s.tables[t];
  const int64_t dsize = rt.dtype == 0 ? 4 : 2;
  int64_t state = 0;
  switch (s.optimizer.type) {
    case 1:
      state = rt.dim;
      break;  // Adagrad
    case 2:
      state = 1;
      break;  // row-wise Adagrad
    case 3:
      state = 2 * rt.dim;
      break;  // Adam
    case 4:
      state = rt.dim + 1;
      break;  // partial row-wise Adam
    case 5:
      state = 2 * rt.dim;
      break;  // LAMB
    default:
      break;
  }
  const int64_t slot = rt.dim * dsize + state * 4 + 32;
  const int64_t shards = s.sharding[t] == SHARDREC_SHARDING_COLUMN_WISE ? rt.dim / 4 : 1;
  return slots * slot * shards;
}

std::string FreshDir(const std::string& name) {
  const char* tmp = std::getenv("TMPDIR");
  const std::filesystem::path p = std::filesystem::path(tmp != nullptr ? tmp : "/tmp") /
                                  ("shardrec_tiered_" + std::to_string(::getpid()) + "_" + name);
  std::filesystem::remove_all(p);
  return p.string();
}

std::vector<TieredRun> RunTiered(const Scenario& s, const shardrec_plan_t* plan,
                                 const std::vector<shardrec_table_tier_t>& tiers, bool pipelined,
                                 const Scenario* snapshot, const char* load_dir,
                                 const char* save_dir,
                                 const shardrec_checkpoint_options_t* load_options) {
  ReferenceModel ref(s.num_features, s.tables, s.optimizer, s.seed, s.world);
  const auto batches = MakeBatches(s, ref);
  const auto grads = MakeGrads(s, batches, ref.output_dim());
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  std::vector<TieredRun> runs(static_cast<size_t>(s.world));
  SpawnRanks(s.world, [&](int r) {
    std::vector<std::string> dirs;
    std::vector<shardrec_table_tier_t> mine = tiers;
    for (auto& t : mine) dirs.push_back(std::string(t.dir) + "/rank" + std::to_string(r));
    for (size_t i = 0; i < mine.size(); ++i) mine[i].dir = dirs[i].c_str();
    shardrec_embedding_options_t o;
    shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
    o.seed = s.seed;
    o.tiers = mine.empty() ? nullptr : mine.data();
    o.num_tiers = mine.size();
    shardrec_embedding_t* c = nullptr;
    ASSERT_EQ(shardrec_embedding_create(&c, plan, GroupComm(s.world, r), &opt, &o), SHARDREC_OK)
        << "rank " << r << ": " << shardrec_last_error();
    CollPtr coll(c);
    if (load_dir != nullptr) {
      ASSERT_EQ(shardrec_checkpoint_load(c, load_dir, load_options), SHARDREC_OK)
          << "rank " << r << ": " << shardrec_last_error();
    }
    TieredRun& run = runs[static_cast<size_t>(r)];
    const auto out_len = [&](int32_t step) {
      return static_cast<size_t>(batches[step][r].batch_size * ref.output_dim());
    };
    // The last forward reuses the first batch: it shows the last update.
    const auto batch_of = [&](int32_t step) { return step < s.steps ? step : 0; };
    std::vector<KjtHolder> kjts;
    for (int32_t step = 0; step <= s.steps; ++step)
      kjts.emplace_back(batches[batch_of(step)][r], s.num_features, s.int32_ids);
    if (pipelined) {
      ASSERT_EQ(shardrec_embedding_input_dist_start(c, kjts[0].view(), nullptr), SHARDREC_OK)
          << shardrec_last_error();
    }
    for (int32_t step = 0; step <= s.steps; ++step) {
      std::vector<float> out(out_len(batch_of(step)));
      if (pipelined) {
        ASSERT_EQ(shardrec_embedding_input_dist_wait(c, nullptr), SHARDREC_OK)
            << shardrec_last_error();
        ASSERT_EQ(shardrec_embedding_forward_distributed(c, out.data(), out.size(), nullptr),
                  SHARDREC_OK)
            << "rank " << r << " step " << step << ": " << shardrec_last_error();
        // The next batch's ids travel (and its misses are read) while this one trains.
        if (step < s.steps) {
          ASSERT_EQ(shardrec_embedding_input_dist_start(c, kjts[step + 1].view(), nullptr),
                    SHARDREC_OK)
              << shardrec_last_error();
        }
      } else {
        ASSERT_EQ(shardrec_embedding_forward(c, kjts[step].view(), out.data(), out.size(), nullptr),
                  SHARDREC_OK)
            << "rank " << r << " step " << step << ": " << shardrec_last_error();
      }
      run.out.push_back(std::move(out));
      if (step == s.steps) break;
      ASSERT_EQ(
          shardrec_embedding_backward(c, grads[step][r].data(), grads[step][r].size(), nullptr),
          SHARDREC_OK)
          << "rank " << r << " step " << step << ": " << shardrec_last_error();
    }
    run.snap = Snapshot(c, snapshot != nullptr ? *snapshot : s);
    if (save_dir != nullptr) {
      ASSERT_EQ(shardrec_checkpoint_save(c, save_dir, nullptr), SHARDREC_OK)
          << "rank " << r << ": " << shardrec_last_error();
    }
    for (const shardrec_table_tier_t& t : mine) {
      shardrec_tier_stats_t st;
      shardrec_tier_stats_init(&st, SHARDREC_TIER_STATS_VERSION);
      const shardrec_status_t rc = shardrec_embedding_tier_stats(c, t.table, &st);
      // A rank may hold no shard of a table-wise table.
      if (rc != SHARDREC_OK) std::memset(&st, 0, sizeof(st));
      run.stats.push_back(st);
    }
  });
  return runs;
}

std::string FirstBitDifference(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size())
    return "sizes " + std::to_string(a.size()) + " and " + std::to_string(b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    uint32_t x, y;
    std::memcpy(&x, &a[i], 4);
    std::memcpy(&y, &b[i], 4);
    if (x != y)
      return "element " + std::to_string(i) + ": " + std::to_string(a[i]) + " vs " +
             std::to_string(b[i]);
  }
  return "";
}

}  // namespace shardrec::testing
