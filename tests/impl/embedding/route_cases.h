// Random plans and batches for the routing tests (device_route_test.cc on the host executor,
// kernels/device_route_dispatch_test.cc through the plugin), and the field-by-field comparison of
// two routed batches.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "impl/embedding/input_dist.h"
#include "impl/embedding/layout.h"
#include "impl/sharding/layout.h"

namespace shardrec::embedding::testing {

struct Case {
  std::shared_ptr<sharding::Plan> plan;
  Layout layout;
};

// A random plan over `world` ranks (2 per node when world is 4): every sharding type, SUM/MEAN
// tables, or (sequence) NONE tables of one dim with each feature read by one table at most.
inline bool RandomCase(std::mt19937& rng, Case* c) {
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint32_t>(n)); };
  auto plan = std::make_shared<sharding::Plan>();
  const int world = 1 + pick(4);
  plan->world_size = world;
  plan->local_world_size = world == 4 ? 2 : world;
  const int nodes = world / plan->local_world_size;
  const int nf = 1 + pick(4);
  for (int f = 0; f < nf; ++f) plan->features.push_back({"f" + std::to_string(f), 1.0f});
  const bool sequence = pick(4) == 0;
  const int nt = 1 + pick(4);
  std::vector<int> feature_tables(nf, 0);
  for (int t = 0; t < nt; ++t) {
    sharding::TableConfig tc;
    tc.name = "t" + std::to_string(t);
    tc.rows = 1 + pick(40);
    tc.dim = sequence ? 8 : 8 * (1 + pick(2));
    tc.pooling = sequence
                     ? sharding::PoolingType::kNone
                     : (pick(2) == 0 ? sharding::PoolingType::kSum : sharding::PoolingType::kMean);
    const int f = t < nf ? t : pick(nf);
    if (sequence && feature_tables[f] > 0) continue;
    tc.features = {f};
    ++feature_tables[f];
    if (!sequence && pick(3) == 0 && nf > 1) {
      const int g = pick(nf);
      if (g != f) {
        tc.features.push_back(g);
        ++feature_tables[g];
      }
    }
    sharding::TablePlan tp;
    const int node = pick(nodes);
    switch (pick(7)) {
      case 0:
        tp = sharding::MakeDataParallel(tc, world);
        break;
      case 1:
        tp = sharding::MakeTableWise(tc, pick(world));
        break;
      case 2:
        tp = sharding::MakeRowWise(tc, world);
        break;
      case 3:
        tp = sharding::MakeColumnSplit(tc, sharding::ShardingType::kColumnWise,
                                       sharding::EqualColumnWidths(tc.dim, 4),
                                       std::vector<int32_t>(tc.dim / 4, pick(world)));
        for (auto& r : tp.shards) r.rank = pick(world);
        break;
      case 4:
        tp = sharding::MakeTableRowWise(tc, node, plan->local_world_size);
        break;
      case 5: {
        std::vector<int32_t> ranks(tc.dim / 4);
        for (auto& r : ranks) r = node * plan->local_world_size + pick(plan->local_world_size);
        tp = sharding::MakeColumnSplit(tc, sharding::ShardingType::kTableColumnWise,
                                       sharding::EqualColumnWidths(tc.dim, 4), ranks);
        break;
      }
      default: {
        std::vector<int32_t> widths = sharding::EqualColumnWidths(tc.dim, 4);
        std::vector<int32_t> ns(widths.size());
        for (auto& n : ns) n = pick(nodes);
        tp = sharding::MakeGrid(tc, widths, ns, plan->local_world_size);
        break;
      }
    }
    plan->tables.push_back(tc);
    plan->table_plans.push_back(tp);
  }
  for (int f = 0; f < nf; ++f) {
    if (feature_tables[f] != 0) continue;
    if (sequence) return false;  // every feature must be read
    plan->tables[0].features.push_back(f);
  }
  c->plan = plan;
  const int rank = pick(world);
  return BuildLayout(
             plan, rank,
             std::vector<optim::OptimizerType>(plan->tables.size(), optim::OptimizerType::kSgd),
             &c->layout)
      .ok();
}

struct BatchData {
  std::vector<int32_t> lengths;
  std::vector<int64_t> ids64;
  std::vector<int32_t> ids32;
  std::vector<float> weights;
  Batch batch;
};

// Ids mostly in range of the smallest table reading their feature, some outside any table.
inline void RandomBatch(std::mt19937& rng, const Case& c, bool bad_ids, BatchData* d) {
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint32_t>(n)); };
  const auto& plan = *c.plan;
  const int64_t B = pick(6);
  const size_t nf = plan.features.size();
  d->lengths.assign(nf * static_cast<size_t>(B), 0);
  d->ids64.clear();
  d->ids32.clear();
  d->weights.clear();
  for (size_t f = 0; f < nf; ++f) {
    int64_t rows = std::numeric_limits<int64_t>::max();
    for (const auto& t : plan.tables)
      for (int32_t g : t.features)
        if (static_cast<size_t>(g) == f) rows = std::min(rows, t.rows);
    for (int64_t b = 0; b < B; ++b) {
      const int32_t len = pick(5) == 0 ? 0 : pick(6);
      d->lengths[f * static_cast<size_t>(B) + static_cast<size_t>(b)] = len;
      for (int32_t k = 0; k < len; ++k) {
        int64_t x = static_cast<int64_t>(rng() % static_cast<uint64_t>(rows));
        if (bad_ids && pick(8) == 0) x = pick(2) == 0 ? -1 - pick(3) : rows + 50 + pick(3);
        d->ids64.push_back(x);
        d->ids32.push_back(static_cast<int32_t>(x));
        d->weights.push_back(static_cast<float>(pick(1000)) / 7.0f - 30.0f);
      }
    }
  }
  const bool weighted = pick(2) == 0;
  const bool ids32 = pick(2) == 0;
  Batch& b = d->batch;
  b = Batch{};
  b.batch_size = B;
  b.num_features = static_cast<int64_t>(nf);
  b.lengths = d->lengths.data();
  b.num_lengths = d->lengths.size();
  b.values = ids32 ? static_cast<const void*>(d->ids32.data()) : d->ids64.data();
  b.values_dtype = ids32 ? DType::kInt32 : DType::kInt64;
  b.num_values = d->ids64.size();
  b.weights = weighted ? d->weights.data() : nullptr;
  b.num_weights = weighted ? d->weights.size() : 0;
}

inline void ExpectSameRoute(const RoutedBatch& want, const RoutedBatch& got,
                            const std::string& what) {
  SCOPED_TRACE(what);
  EXPECT_EQ(want.batch_size, got.batch_size);
  EXPECT_EQ(want.num_values, got.num_values);
  EXPECT_EQ(want.weighted, got.weighted);
  EXPECT_EQ(want.counts_send, got.counts_send);
  EXPECT_EQ(want.send_bytes, got.send_bytes);
  EXPECT_EQ(want.send, got.send);
  EXPECT_EQ(want.self_offset, got.self_offset);
  EXPECT_EQ(want.ret_count, got.ret_count);
  EXPECT_EQ(want.ret_target, got.ret_target);
  EXPECT_EQ(want.ret_floats_from, got.ret_floats_from);
  ASSERT_EQ(want.mean_div.size(), got.mean_div.size());
  // Bits, not values (memcmp of empty vectors would pass null pointers).
  if (!want.mean_div.empty()) {
    EXPECT_EQ(0, std::memcmp(want.mean_div.data(), got.mean_div.data(), 4 * want.mean_div.size()));
  }
  EXPECT_EQ(want.dp_offsets, got.dp_offsets);
  EXPECT_EQ(want.dp_offsets_begin, got.dp_offsets_begin);
  EXPECT_EQ(want.dp_rows, got.dp_rows);
  ASSERT_EQ(want.dp_weights.size(), got.dp_weights.size());
  if (!want.dp_weights.empty()) {
    EXPECT_EQ(
        0, std::memcmp(want.dp_weights.data(), got.dp_weights.data(), 4 * want.dp_weights.size()));
  }
  EXPECT_EQ(want.dp_pos, got.dp_pos);
}

}  // namespace shardrec::embedding::testing
