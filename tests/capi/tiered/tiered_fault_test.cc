// A tiered table's store directory damaged while the collection trains (docs/disk-tier.md,
// "Write-back"): removed, replaced by a regular file, or its segment files cut to nothing. Checked
// through the C API against the same table in memory fed the same batches:
//  - no crash and no hang: every forward either succeeds, with the in-memory table's output bit
//    for bit, or fails with the store's error naming the path (SHARDREC_EIO for a segment that
//    cannot be made, SHARDREC_ECORRUPT for a segment cut short), and its backward then fails
//    (SHARDREC_EUSAGE) with nothing trained;
//  - no row is lost or read wrong: while the store can still be read (a removed directory's
//    files stay open) the weights are the in-memory table's, bit for bit, rows queued for the
//    failed writes included; a store cut short refuses the read (SHARDREC_ECORRUPT) rather
//    than returning other bytes.
// A full disk (a small tmpfs the test mounts), at worlds 1 and 2: refused while it lasts, trained
// with the in-memory table's bits, nothing lost, once it has room again.
// And at creation: a directory one rank cannot make fails creation on every rank at once.
// The store seals segments at 64 KiB here (SHARDREC_TIER_TEST_SEGMENT_KIB, the tiered tests'
// switch), so a short run needs new segment files after the damage. A read-only directory is not
// among the cases: the tests run as root in CI, which writes through the permissions.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "shardrec/shardrec.h"
#include "tests/capi/embedding/embedding_test_util.h"
#include "tests/capi/tiered/tiered_test_util.h"
#include "tests/support/small_tmpfs.h"
#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kRows = 4000;
constexpr int32_t kDim = 16;
constexpr int64_t kBatch = 8;
constexpr int32_t kBag = 4;

// Creates the tiered collection (cache of 64 rows: each step evicts) and its in-memory twin.
void CreatePair(const shardrec_plan_t* plan, const std::string& dir, CollPtr* tiered,
                CollPtr* memory) {
  shardrec_table_tier_t tier;
  ASSERT_EQ(shardrec_table_tier_init(&tier, SHARDREC_TABLE_TIER_VERSION), SHARDREC_OK);
  tier.table = "t";
  tier.dir = dir.c_str();
  tier.cache_bytes = 64 * (kDim * 4 + 32);
  shardrec_embedding_options_t o;
  ASSERT_EQ(shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION), SHARDREC_OK);
  o.tiers = &tier;
  o.num_tiers = 1;
  // The store reads the switch when it opens, at creation.
  ASSERT_EQ(setenv("SHARDREC_TIER_TEST_SEGMENT_KIB", "64", 1), 0);
  shardrec_embedding_t* c = nullptr;
  const shardrec_status_t rc = shardrec_embedding_create(&c, plan, GroupComm(1, 0), nullptr, &o);
  unsetenv("SHARDREC_TIER_TEST_SEGMENT_KIB");
  ASSERT_EQ(rc, SHARDREC_OK) << shardrec_last_error();
  tiered->reset(c);
  c = nullptr;
  ASSERT_EQ(shardrec_embedding_create(&c, plan, GroupComm(1, 0), nullptr, nullptr), SHARDREC_OK)
      << shardrec_last_error();
  memory->reset(c);
}

std::vector<float> Weights(shardrec_embedding_t* c, shardrec_status_t* rc) {
  std::vector<float> w(static_cast<size_t>(kRows * kDim));
  *rc = shardrec_embedding_get_weights(c, "t", w.data(), w.size());
  return w;
}

// A batch of kBatch samples of kBag ids drawn uniformly from the table's rows, with its storage.
struct RandomBatch {
  explicit RandomBatch(std::mt19937_64* rng)
      : lengths(kBatch, kBag), ids(static_cast<size_t>(kBatch * kBag)) {
    for (auto& id : ids) id = static_cast<int64_t>((*rng)() % kRows);
    view.batch_size = kBatch;
    view.num_features = 1;
    view.lengths = lengths.data();
    view.num_lengths = lengths.size();
    view.values = ids.data();
    view.num_values = ids.size();
  }
  RandomBatch(const RandomBatch&) = delete;
  RandomBatch& operator=(const RandomBatch&) = delete;

  std::vector<int32_t> lengths;
  std::vector<int64_t> ids;
  shardrec_kjt_view_t view = SHARDREC_KJT_VIEW_INIT;
};

// Trains both collections on the same random batches for 60 steps, damaging the tiered table's
// directory with `fault` before step 10; returns how many tiered forwards were refused. Every
// refusal must be `code` with `says` in its message.
// With `heal` (not null), calls it before step 30 and counts the refusals from then on in
// `*refused_after_heal`.
int TrainThroughFault(shardrec_embedding_t* tiered, shardrec_embedding_t* memory,
                      const std::function<void()>& fault, shardrec_status_t code,
                      const std::string& says, const std::function<void()>& heal = nullptr,
                      int* refused_after_heal = nullptr) {
  std::mt19937_64 rng(7);
  int refused = 0;
  for (int step = 0; step < 60; ++step) {
    if (step == 10) fault();
    if (step == 30 && heal) {
      heal();
      *refused_after_heal = 0;
    }
    const RandomBatch batch(&rng);
    const shardrec_kjt_view_t& v = batch.view;
    std::vector<float> out(static_cast<size_t>(kBatch * kDim)), want(out.size());
    const std::vector<float> grad(out.size(), 0.125f);
    const shardrec_status_t rc =
        shardrec_embedding_forward(tiered, &v, out.data(), out.size(), nullptr);
    if (rc != SHARDREC_OK) {
      ++refused;
      if (heal && step >= 30) ++*refused_after_heal;
      EXPECT_EQ(rc, code) << "step " << step << ": " << shardrec_last_error();
      EXPECT_NE(std::string(shardrec_last_error()).find(says), std::string::npos)
          << "step " << step << ": " << shardrec_last_error();
      EXPECT_EQ(shardrec_embedding_backward(tiered, grad.data(), grad.size(), nullptr),
                SHARDREC_EUSAGE);
      continue;  // the twin skips the step too
    }
    EXPECT_EQ(shardrec_embedding_backward(tiered, grad.data(), grad.size(), nullptr), SHARDREC_OK)
        << "step " << step << ": " << shardrec_last_error();
    EXPECT_EQ(shardrec_embedding_forward(memory, &v, want.data(), want.size(), nullptr),
              SHARDREC_OK);
    EXPECT_EQ(shardrec_embedding_backward(memory, grad.data(), grad.size(), nullptr), SHARDREC_OK);
    EXPECT_EQ(FirstBitDifference(out, want), "") << "step " << step;
  }
  return refused;
}

shardrec_table_config_t Table() {
  shardrec_table_config_t t;
  EXPECT_EQ(shardrec_table_config_init(&t, SHARDREC_TABLE_CONFIG_VERSION), SHARDREC_OK);
  t.name = "t";
  t.rows = kRows;
  t.dim = kDim;
  return t;
}

// Removed: the store's open files go on working until it needs a new segment, which it cannot
// make; the rows of the failed writes stay queued, so none is lost.
TEST(TieredFault, DirectoryRemovedMidRunRefusesForwardsAndLosesNoRow) {
  PlanPtr plan = OneTablePlan(Table());
  ASSERT_NE(plan, nullptr);
  const std::string dir = FreshDir("fault_removed");
  CollPtr tiered, memory;
  CreatePair(plan.get(), dir, &tiered, &memory);
  ASSERT_NE(tiered, nullptr);
  const int refused = TrainThroughFault(
      tiered.get(), memory.get(), [&] { fs::remove_all(dir); }, SHARDREC_EIO,
      "cannot create segment");
  EXPECT_GT(refused, 0) << "the run never needed a new segment: the case tests nothing";
  shardrec_status_t rc_t = SHARDREC_OK, rc_m = SHARDREC_OK;
  const std::vector<float> got = Weights(tiered.get(), &rc_t);
  const std::vector<float> want = Weights(memory.get(), &rc_m);
  ASSERT_EQ(rc_t, SHARDREC_OK) << shardrec_last_error();
  ASSERT_EQ(rc_m, SHARDREC_OK);
  EXPECT_EQ(FirstBitDifference(got, want), "");
  shardrec_tier_stats_t st = SHARDREC_TIER_STATS_INIT;
  ASSERT_EQ(shardrec_embedding_tier_stats(tiered.get(), "t", &st), SHARDREC_OK);
  EXPECT_GT(st.queue_depth, 0) << "the failed writes' rows are still queued";
  tiered.reset();  // destroying it with failed writes queued returns
}

// Replaced by a regular file of the same name: the same, "Not a directory".
TEST(TieredFault, DirectoryReplacedByAFileRefusesForwardsAndLosesNoRow) {
  PlanPtr plan = OneTablePlan(Table());
  ASSERT_NE(plan, nullptr);
  const std::string dir = FreshDir("fault_file");
  CollPtr tiered, memory;
  CreatePair(plan.get(), dir, &tiered, &memory);
  ASSERT_NE(tiered, nullptr);
  const int refused = TrainThroughFault(
      tiered.get(), memory.get(),
      [&] {
        fs::remove_all(dir);
        FILE* f = std::fopen(dir.c_str(), "w");
        ASSERT_NE(f, nullptr);
        std::fclose(f);
      },
      SHARDREC_EIO, "Not a directory");
  EXPECT_GT(refused, 0);
  shardrec_status_t rc_t = SHARDREC_OK, rc_m = SHARDREC_OK;
  const std::vector<float> got = Weights(tiered.get(), &rc_t);
  const std::vector<float> want = Weights(memory.get(), &rc_m);
  ASSERT_EQ(rc_t, SHARDREC_OK) << shardrec_last_error();
  EXPECT_EQ(FirstBitDifference(got, want), "");
  tiered.reset();
  fs::remove(dir);
}

// Segment files cut to nothing: a read of a row they held is refused as corrupt, naming the
// segment, never served as other bytes (also once the store has appended past the cut, which
// leaves zeros where the records were); the forwards that read only cached or queued rows still
// match the in-memory table.
TEST(TieredFault, SegmentsCutShortAreRefusedAsCorruptNotReadAsZeros) {
  PlanPtr plan = OneTablePlan(Table());
  ASSERT_NE(plan, nullptr);
  const std::string dir = FreshDir("fault_truncated");
  CollPtr tiered, memory;
  CreatePair(plan.get(), dir, &tiered, &memory);
  ASSERT_NE(tiered, nullptr);
  const int refused = TrainThroughFault(
      tiered.get(), memory.get(),
      [&] {
        // The queue's thread writes when it gets a core: cut only once it has written what the
        // first steps evicted, or a loaded machine cuts files that hold nothing yet and the
        // case tests nothing.
        shardrec_tier_stats_t st = SHARDREC_TIER_STATS_INIT;
        for (int wait = 0; wait < 10000; ++wait) {
          ASSERT_EQ(shardrec_embedding_tier_stats(tiered.get(), "t", &st), SHARDREC_OK);
          if (st.queue_depth == 0 && st.written > 0) break;
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        ASSERT_GT(st.written, 0);
        int cut = 0;
        for (const auto& e : fs::recursive_directory_iterator(dir))
          if (e.is_regular_file() && e.path().extension() == ".dat") {
            fs::resize_file(e.path(), 0);
            ++cut;
          }
        ASSERT_GT(cut, 0);
      },
      // Cut short ("ends inside slot") or, once the store has written past the cut again,
      // zeros where a record was ("fails its checksum"): either names the segment.
      SHARDREC_ECORRUPT, "/seg-");
  EXPECT_GT(refused, 0);
  shardrec_status_t rc = SHARDREC_OK;
  Weights(tiered.get(), &rc);
  EXPECT_EQ(rc, SHARDREC_ECORRUPT) << shardrec_last_error();
  EXPECT_NE(std::string(shardrec_last_error()).find(".dat"), std::string::npos)
      << shardrec_last_error();
  tiered.reset();
  fs::remove_all(dir);
}

// Writes a file of zeros until the file system is full; the bytes written.
size_t FillUp(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "w");
  EXPECT_NE(f, nullptr);
  if (f == nullptr) return 0;
  std::setvbuf(f, nullptr, _IONBF, 0);
  const std::vector<char> chunk(4096, 0);
  size_t total = 0;
  while (std::fwrite(chunk.data(), 1, chunk.size(), f) == chunk.size()) total += chunk.size();
  std::fclose(f);
  return total;
}

// A full disk is a passing condition: while it lasts the forwards that need a write refuse with
// SHARDREC_EIO ("No space left on device", nothing trained), and so does a checkpoint save (which
// writes the queued rows first); once it has room again the next forward writes the queued rows
// and trains, every later step with the in-memory table's bits, and a save then loads back as
// the in-memory table.
TEST(TieredFault, AFullDiskRefusesUntilItHasRoomAgainAndLosesNoRow) {
  SmallTmpfs tmp("fault_full", "size=2m");
  if (!tmp.mounted()) GTEST_SKIP() << "cannot mount a small tmpfs here: " << tmp.error();
  PlanPtr plan = OneTablePlan(Table());
  ASSERT_NE(plan, nullptr);
  CollPtr tiered, memory;
  CreatePair(plan.get(), tmp.dir() + "/store", &tiered, &memory);
  ASSERT_NE(tiered, nullptr);
  const std::string filler = tmp.dir() + "/filler";
  const std::string ckpt = FreshDir("fault_full_ckpt");
  int refused_after = -1;
  const int refused = TrainThroughFault(
      tiered.get(), memory.get(), [&] { EXPECT_GT(FillUp(filler), 0u); }, SHARDREC_EIO,
      "No space left on device",
      [&] {
        // Still full: the save drains the queue first and refuses, publishing nothing.
        EXPECT_EQ(shardrec_checkpoint_save(tiered.get(), ckpt.c_str(), nullptr), SHARDREC_EIO)
            << shardrec_last_error();
        const std::string err = shardrec_last_error();
        EXPECT_NE(err.find("tiered table 't'"), std::string::npos) << err;
        EXPECT_NE(err.find(tmp.dir() + "/store"), std::string::npos) << err;
        EXPECT_NE(err.find("No space left on device"), std::string::npos) << err;
        fs::remove(filler);
      },
      &refused_after);
  EXPECT_GT(refused, 0) << "the disk never filled: the case tests nothing";
  EXPECT_EQ(refused_after, 0) << "the forwards after the disk had room again were refused";
  shardrec_status_t rc_t = SHARDREC_OK, rc_m = SHARDREC_OK;
  const std::vector<float> got = Weights(tiered.get(), &rc_t);
  const std::vector<float> want = Weights(memory.get(), &rc_m);
  ASSERT_EQ(rc_t, SHARDREC_OK) << shardrec_last_error();
  ASSERT_EQ(rc_m, SHARDREC_OK);
  EXPECT_EQ(FirstBitDifference(got, want), "");
  // Saved once there is room, the checkpoint loads into memory as the in-memory table.
  ASSERT_EQ(shardrec_checkpoint_save(tiered.get(), ckpt.c_str(), nullptr), SHARDREC_OK)
      << shardrec_last_error();
  shardrec_embedding_t* c = nullptr;
  ASSERT_EQ(shardrec_embedding_create(&c, plan.get(), GroupComm(1, 0), nullptr, nullptr),
            SHARDREC_OK);
  CollPtr loaded(c);
  ASSERT_EQ(shardrec_checkpoint_load(loaded.get(), ckpt.c_str(), nullptr), SHARDREC_OK)
      << shardrec_last_error();
  shardrec_status_t rc_l = SHARDREC_OK;
  EXPECT_EQ(FirstBitDifference(Weights(loaded.get(), &rc_l), want), "");
  EXPECT_EQ(rc_l, SHARDREC_OK);
  tiered.reset();
  fs::remove_all(ckpt);
}

// The same at world 2, the table row-wise sharded, with only rank 0's store on the small tmpfs:
// while it is full every rank's forward fails (rank 1's naming rank 0), none trains, and once it
// has room every step trains on both ranks with the in-memory pair's bits.
TEST(TieredFault, AFullDiskOnOneRankRefusesOnEveryRankUntilItHasRoom) {
  SmallTmpfs tmp("fault_full_w2", "size=2m");
  if (!tmp.mounted()) GTEST_SKIP() << "cannot mount a small tmpfs here: " << tmp.error();
  shardrec_table_config_t table = Table();
  const int32_t feature_index = 0;
  table.features = &feature_index;
  table.num_features = 1;
  shardrec_feature_config_t feature = SHARDREC_FEATURE_CONFIG_INIT;
  feature.name = "f";
  shardrec_topology_t topo;
  ASSERT_EQ(shardrec_topology_init(&topo, SHARDREC_TOPOLOGY_VERSION), SHARDREC_OK);
  topo.world_size = 2;
  topo.optimizer = SHARDREC_OPTIMIZER_SGD;
  shardrec_table_constraints_t cons;
  ASSERT_EQ(shardrec_table_constraints_init(&cons, SHARDREC_TABLE_CONSTRAINTS_VERSION),
            SHARDREC_OK);
  cons.table = "t";
  cons.sharding_types = 1u << SHARDREC_SHARDING_ROW_WISE;
  shardrec_plan_t* p = nullptr;
  ASSERT_EQ(shardrec_plan_create(&p, &table, 1, &feature, 1, &topo, &cons, 1), SHARDREC_OK)
      << shardrec_last_error();
  PlanPtr plan(p);
  const std::string other = FreshDir("fault_full_w2_rank1");
  const std::string filler = tmp.dir() + "/filler";
  std::vector<int> refused(2, 0), refused_after(2, 0);
  std::vector<std::vector<float>> got(2), want(2);
  // 64 KiB segments, as CreatePair's: the stores read the switch when they open, at creation.
  ASSERT_EQ(setenv("SHARDREC_TIER_TEST_SEGMENT_KIB", "64", 1), 0);
  SpawnRanks(2, [&](int r) {
    const std::string dir = r == 0 ? tmp.dir() + "/store" : other;
    shardrec_table_tier_t tier;
    ASSERT_EQ(shardrec_table_tier_init(&tier, SHARDREC_TABLE_TIER_VERSION), SHARDREC_OK);
    tier.table = "t";
    tier.dir = dir.c_str();
    tier.cache_bytes = 64 * (kDim * 4 + 32);
    shardrec_embedding_options_t o;
    ASSERT_EQ(shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION), SHARDREC_OK);
    o.tiers = &tier;
    o.num_tiers = 1;
    shardrec_embedding_t* c = nullptr;
    ASSERT_EQ(shardrec_embedding_create(&c, plan.get(), GroupComm(2, r), nullptr, &o), SHARDREC_OK)
        << shardrec_last_error();
    CollPtr tiered(c);
    c = nullptr;
    ASSERT_EQ(shardrec_embedding_create(&c, plan.get(), GroupComm(2, r), nullptr, nullptr),
              SHARDREC_OK);
    CollPtr memory(c);
    std::mt19937_64 rng(11 + static_cast<uint64_t>(r));
    for (int step = 0; step < 60; ++step) {
      // Both ranks between the same two steps (each fill or free happens between collectives
      // every rank takes part in, so no rank's step sees half of it).
      if (r == 0 && step == 10) EXPECT_GT(FillUp(filler), 0u);
      if (r == 0 && step == 30) fs::remove(filler);
      const RandomBatch batch(&rng);
      const shardrec_kjt_view_t& v = batch.view;
      std::vector<float> out(static_cast<size_t>(kBatch * kDim)), ref(out.size());
      const std::vector<float> grad(out.size(), 0.125f);
      const shardrec_status_t rc =
          shardrec_embedding_forward(tiered.get(), &v, out.data(), out.size(), nullptr);
      if (rc != SHARDREC_OK) {
        ++refused[r];
        if (step >= 30) ++refused_after[r];
        const std::string err = shardrec_last_error();
        EXPECT_EQ(rc, SHARDREC_EIO) << "rank " << r << " step " << step << ": " << err;
        EXPECT_NE(err.find("No space left on device"), std::string::npos) << err;
        if (r == 1) EXPECT_NE(err.find("rank 0"), std::string::npos) << err;
        EXPECT_EQ(shardrec_embedding_backward(tiered.get(), grad.data(), grad.size(), nullptr),
                  SHARDREC_EUSAGE);
        continue;
      }
      ASSERT_EQ(shardrec_embedding_backward(tiered.get(), grad.data(), grad.size(), nullptr),
                SHARDREC_OK)
          << shardrec_last_error();
      ASSERT_EQ(shardrec_embedding_forward(memory.get(), &v, ref.data(), ref.size(), nullptr),
                SHARDREC_OK);
      ASSERT_EQ(shardrec_embedding_backward(memory.get(), grad.data(), grad.size(), nullptr),
                SHARDREC_OK);
      EXPECT_EQ(FirstBitDifference(out, ref), "") << "rank " << r << " step " << step;
    }
    shardrec_status_t rc_t = SHARDREC_OK, rc_m = SHARDREC_OK;
    got[r] = Weights(tiered.get(), &rc_t);
    EXPECT_EQ(rc_t, SHARDREC_OK) << shardrec_last_error();
    want[r] = Weights(memory.get(), &rc_m);
    EXPECT_EQ(rc_m, SHARDREC_OK);
  });
  unsetenv("SHARDREC_TIER_TEST_SEGMENT_KIB");
  EXPECT_GT(refused[0], 0) << "the disk never filled: the case tests nothing";
  EXPECT_EQ(refused[0], refused[1]) << "the ranks did not refuse the same steps";
  EXPECT_EQ(refused_after[0] + refused_after[1], 0);
  for (int r = 0; r < 2; ++r) EXPECT_EQ(FirstBitDifference(got[r], want[r]), "") << "rank " << r;
}

// A directory one rank cannot make (a path through a regular file): that rank's creation fails
// with SHARDREC_EIO naming the path, and its peer's at once with SHARDREC_EINVAL naming the rank,
// not at the communicator's timeout.
TEST(TieredFault, ADirectoryOneRankCannotMakeFailsCreationOnEveryRank) {
  const Scenario s =
      TieredScenario(2, SHARDREC_SHARDING_ROW_WISE, 0, 0, SHARDREC_POOLING_SUM, false);
  PlanPtr plan = MakePlan(s);
  ASSERT_NE(plan, nullptr);
  const std::string dir = FreshDir("fault_create");
  fs::create_directories(dir);
  const std::string file = dir + "/file";
  FILE* f = std::fopen(file.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  SpawnRanks(2, [&](int r) {
    const std::string mine = r == 1 ? file + "/sub" : dir + "/rank0";
    shardrec_table_tier_t tier;
    ASSERT_EQ(shardrec_table_tier_init(&tier, SHARDREC_TABLE_TIER_VERSION), SHARDREC_OK);
    tier.table = "t0";
    tier.dir = mine.c_str();
    tier.cache_bytes = 1 << 16;
    shardrec_embedding_options_t o;
    ASSERT_EQ(shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION), SHARDREC_OK);
    o.tiers = &tier;
    o.num_tiers = 1;
    shardrec_embedding_t* sentinel = reinterpret_cast<shardrec_embedding_t*>(&o);
    shardrec_embedding_t* c = sentinel;
    const shardrec_status_t rc =
        shardrec_embedding_create(&c, plan.get(), GroupComm(2, r), &opt, &o);
    const std::string err = shardrec_last_error();
    EXPECT_EQ(c, sentinel) << "a failed creation sets no collection";
    if (r == 1) {
      EXPECT_EQ(rc, SHARDREC_EIO) << err;
      EXPECT_NE(err.find(file + "/sub"), std::string::npos) << err;
    } else {
      EXPECT_EQ(rc, SHARDREC_EINVAL) << err;
      EXPECT_NE(err.find("rank 1"), std::string::npos) << err;
    }
  });
  fs::remove_all(dir);
}

}  // namespace
}  // namespace shardrec::testing
