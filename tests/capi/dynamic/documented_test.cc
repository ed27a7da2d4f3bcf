// The formulas docs/dynamic-tables.md fixes forever, written out here from the doc alone (no
// library code, not even the reference's generator, which shares impl/core/rng.h with the
// library): a new row's first values (splitmix64 steps over the FNV-1a-64 hash of the table's
// name, seed, id and column) and the row-wise placement of an id (splitmix64(id) mod blocks),
// checked through the C API.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "tests/capi/dynamic/test_util.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {
namespace {

// "One full splitmix64 step with state x": the golden gamma added, then the published mix.
uint64_t M(uint64_t x) {
  uint64_t z = x + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t Fnv1a64(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

// h = M(seed ^ M(T ^ M(x ^ M(column)))), U = (h >> 40) / 2^24 in fp32, low + (high - low) * U.
float DocumentedInit(const RefTable& t, uint64_t seed, int64_t id, int32_t column) {
  float low = t.init_low, high = t.init_high;
  if (t.init_kind == SHARDREC_INIT_DEFAULT) {
    high = static_cast<float>(std::sqrt(1.0 / static_cast<double>(t.rows)));
    low = -high;
  }
  if (t.init_kind == SHARDREC_INIT_CONSTANT) return low;
  const uint64_t h = M(
      seed ^ M(Fnv1a64(t.name) ^ M(static_cast<uint64_t>(id) ^ M(static_cast<uint64_t>(column)))));
  const float u = static_cast<float>(h >> 40) / 16777216.0f;
  const float span = high - low;
  const float scaled = span * u;  // two roundings, as the doc's fp32 expression has
  return low + scaled;
}

// A new row holds exactly the documented generator's values for its id, bit for bit, and so the
// reference's (RefInitValue, the fixed tables' draw keyed by the id), with widths that fill the
// batched draw's vectors (64 columns) and leave a tail (13), under UNIFORM and DEFAULT init, at
// worlds 1 and 2 (row-wise: each row's owner draws it): training forwards create the rows (a zero
// learning rate keeps them) and an evaluation forward of one-id SUM bags reads them back.
TEST(DynamicDocumented, NewRowsHoldTheDocumentedGeneratorValues) {
  for (int32_t world : {1, 2})
    for (int32_t init : {SHARDREC_INIT_UNIFORM, SHARDREC_INIT_DEFAULT}) {
      SCOPED_TRACE("world " + std::to_string(world) + " init " + std::to_string(init));
      DynScenario s = MakeDynScenario(world, SHARDREC_SHARDING_ROW_WISE, 1, 96, 24);
      s.base.tables[0].dim = 64;
      s.base.tables[1].dim = 13;
      for (RefTable& t : s.base.tables) t.init_kind = init;
      s.base.steps = 1;
      s.base.optimizer.lr = 0.0f;  // the backward leaves every row as created
      s.probe = true;
      const auto batches = MakeDynBatches(s);
      const auto grads = MakeGrads(s.base, batches, DynOutputDim(s));
      const DynRun got = RunDynamic(s, batches, grads);
      ASSERT_EQ(got.probe.size(), static_cast<size_t>(world));
      const int64_t dim = DynOutputDim(s);  // f0 (t0), f1 and f2 (t1) side by side
      int64_t rows_checked = 0;
      for (int32_t t = 0; t < 2; ++t) {
        const RefTable& rt = s.base.tables[t];
        for (size_t i = 0; i < s.pools[t].size(); ++i) {
          const float* row = got.probe[0].data() + static_cast<int64_t>(i) * dim +
                             (t == 0 ? 0 : s.base.tables[0].dim);
          bool zero = true;
          for (int32_t c = 0; c < rt.dim; ++c) zero = zero && row[c] == 0.0f;
          if (zero) continue;  // not in the forward's batch: no row
          ++rows_checked;
          for (int32_t c = 0; c < rt.dim; ++c) {
            const float doc = DocumentedInit(rt, s.base.seed, s.pools[t][i], c);
            const float ref =
                RefInitValue(rt, s.base.seed, static_cast<uint64_t>(s.pools[t][i]), c);
            ASSERT_EQ(std::memcmp(&row[c], &doc, sizeof(float)), 0)
                << "table " << t << " id " << s.pools[t][i] << " column " << c << ": " << row[c]
                << " vs " << doc;
            ASSERT_EQ(std::memcmp(&ref, &doc, sizeof(float)), 0) << "the reference's draw";
          }
        }
      }
      EXPECT_GE(rows_checked, 10);
    }
}

// Row-wise at world 4 (one row block per rank): the ranks' row counts after one forward are the
// counts of the batch's distinct ids by splitmix64(id) mod 4, whichever rank holds which block.
TEST(DynamicDocumented, RowWisePlacementIsSplitmixModBlocks) {
  constexpr int32_t kWorld = 4;
  DynScenario s = MakeDynScenario(kWorld, SHARDREC_SHARDING_ROW_WISE, 1, 400, 96);
  s.base.steps = 1;
  const auto batches = MakeDynBatches(s);
  const auto grads = MakeGrads(s.base, batches, DynOutputDim(s));
  const DynRun got = RunDynamic(s, batches, grads);
  ASSERT_EQ(got.stats.size(), static_cast<size_t>(kWorld));
  for (size_t t = 0; t < 2; ++t) {
    // The ids the first forward saw for table t (every id is admitted at once: threshold 0).
    std::set<int64_t> seen;
    for (const auto& per_rank : batches[0]) {
      size_t at = 0;
      for (int32_t f = 0; f < s.base.num_features; ++f)
        for (int64_t b = 0; b < per_rank.batch_size; ++b) {
          const int32_t len = per_rank.lengths[static_cast<size_t>(f * per_rank.batch_size + b)];
          const bool reads_t =
              std::count(s.base.tables[t].features.begin(), s.base.tables[t].features.end(), f) > 0;
          for (int32_t k = 0; k < len; ++k, ++at)
            if (reads_t) seen.insert(per_rank.ids[at]);
        }
    }
    // RunDynamic's last forward repeats the last step's batch (steps = 1: batches[0]).
    std::vector<int64_t> want(kWorld, 0), have(kWorld, 0);
    for (int64_t x : seen) ++want[M(static_cast<uint64_t>(x)) % kWorld];
    for (int32_t r = 0; r < kWorld; ++r) have[r] = got.stats[r][t].size;
    std::sort(want.begin(), want.end());
    std::sort(have.begin(), have.end());
    EXPECT_EQ(have, want) << "table " << t;
    EXPECT_GT(*std::max_element(want.begin(), want.end()), 0);
  }
}

}  // namespace
}  // namespace shardrec::testing
