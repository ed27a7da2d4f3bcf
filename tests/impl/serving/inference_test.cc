// The served collection's versions, white box (inference.cc): open numbers version 1, a reload
// or a delta publishes the next number, a pinned snapshot keeps its version's rows after the swap,
// a refused reload or delta keeps the served version, and readers running through many swaps
// always see one whole version.
#include "impl/serving/inference.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "impl/serving/serving_file.h"
#include "tests/impl/serving/serving_test_util.h"
#include "tests/support/temp_dirs.h"

namespace shardrec::serving {
namespace {

using testing::MakeModel;
using testing::ReadRow;
using Rows = std::vector<float>;

constexpr int64_t kRows = 16;
constexpr int32_t kDim = 4;

// A serving file of one fixed fp32 table (kRows x kDim, every value `value`) in `dir`.
std::string SaveFile(const std::string& dir, const std::string& name, float value,
                     int32_t dim = kDim) {
  auto m = MakeModel({{"t", dim, Storage::kFp32, Rows(kRows * dim, value), {}}});
  const std::string path = dir + "/" + name;
  const Status st = SaveServingFile(*m, path);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return path;
}

std::unique_ptr<Inference> OpenFile(const std::string& path) {
  std::unique_ptr<Inference> inf;
  const Status st = Inference::Open(path, OpenOptions(), &inf);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return inf;
}

TEST(ServingVersions, ReloadPublishesTheNextVersionAndAPinnedSnapshotKeepsItsRows) {
  const std::string dir = shardrec::testing::FreshDir("serving_versions");
  auto inf = OpenFile(SaveFile(dir, "a.srv", 1.0f));
  ASSERT_NE(inf, nullptr);
  std::shared_ptr<const Model> pinned = inf->Current();
  EXPECT_EQ(pinned->number, 1u);
  ASSERT_TRUE(inf->Reload(SaveFile(dir, "b.srv", 2.0f)).ok());
  EXPECT_EQ(inf->Read([](const Model& m) { return m.number; }), 2u);
  EXPECT_EQ(ReadRow(inf->Current()->tables[0], 3), Rows(kDim, 2.0f));
  // The snapshot taken before the swap still reads version 1, whole.
  EXPECT_EQ(pinned->number, 1u);
  EXPECT_EQ(ReadRow(pinned->tables[0], 3), Rows(kDim, 1.0f));
  EXPECT_EQ(inf->table_names(), std::vector<std::string>{"t"});
}

TEST(ServingVersions, ARefusedReloadKeepsServingTheCurrentVersion) {
  const std::string dir = shardrec::testing::FreshDir("serving_refused");
  auto inf = OpenFile(SaveFile(dir, "a.srv", 1.0f));
  ASSERT_NE(inf, nullptr);
  const Status shape = inf->Reload(SaveFile(dir, "wide.srv", 5.0f, kDim + 1));
  EXPECT_EQ(shape.code(), Code::kInvalidArgument);
  EXPECT_NE(shape.message().find("cannot reload from"), std::string::npos) << shape.message();
  EXPECT_EQ(inf->Reload(dir + "/missing.srv").code(), Code::kNotFound);
  EXPECT_EQ(inf->Current()->number, 1u);
  EXPECT_EQ(ReadRow(inf->Current()->tables[0], 0), Rows(kDim, 1.0f));
  // A later good reload still numbers from the served version.
  ASSERT_TRUE(inf->Reload(SaveFile(dir, "b.srv", 3.0f)).ok());
  EXPECT_EQ(inf->Current()->number, 2u);
}

TEST(ServingVersions, DeltasPublishNumberedVersionsAndUnknownTablesAreRefused) {
  const std::string dir = shardrec::testing::FreshDir("serving_delta");
  auto inf = OpenFile(SaveFile(dir, "a.srv", 1.0f));
  ASSERT_NE(inf, nullptr);
  const int64_t ids[] = {5};
  const Rows row(kDim, 9.0f);
  Delta d;
  d.ids = ids;
  d.rows = row.data();
  d.num_rows = 1;
  uint64_t number = 0;
  ASSERT_TRUE(inf->ApplyDelta("t", d, &number).ok());
  EXPECT_EQ(number, 2u);
  EXPECT_EQ(inf->Current()->number, 2u);
  EXPECT_EQ(ReadRow(inf->Current()->tables[0], 5), row);
  EXPECT_EQ(ReadRow(inf->Current()->tables[0], 4), Rows(kDim, 1.0f));
  number = 0;
  EXPECT_EQ(inf->ApplyDelta("nope", d, &number).code(), Code::kNotFound);
  EXPECT_EQ(number, 0u);
  EXPECT_EQ(inf->Current()->number, 2u);
}

// Every delta writes one value into every row, so a version is whole when all its values are
// equal, and version n holds n - 1 (version 1 holds 0). Readers check that through 200 swaps.
TEST(ServingVersions, ReadersAlwaysSeeOneWholeVersionAcrossSwaps) {
  const std::string dir = shardrec::testing::FreshDir("serving_swaps");
  auto inf = OpenFile(SaveFile(dir, "a.srv", 0.0f));
  ASSERT_NE(inf, nullptr);
  constexpr int kSwaps = 200;
  std::atomic<bool> done{false};
  std::atomic<int64_t> reads{0}, torn{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 3; ++r) {
    readers.emplace_back([&] {
      uint64_t last = 0;
      while (!done.load()) {
        const bool whole = inf->Read([&](const Model& m) {
          const float want = static_cast<float>(m.number - 1);
          const auto* v = reinterpret_cast<const float*>(m.tables[0].data);
          for (int64_t i = 0; i < kRows * kDim; ++i)
            if (v[i] != want) return false;
          // Versions only move forward for one reader.
          const bool forward = m.number >= last;
          last = m.number;
          return forward;
        });
        if (!whole) torn.fetch_add(1);
        reads.fetch_add(1);
      }
    });
  }
  std::vector<int64_t> ids(kRows);
  for (int64_t i = 0; i < kRows; ++i) ids[i] = i;
  // On a loaded machine the readers may not run at all while 200 swaps finish: every tenth swap
  // waits (bounded) until they have read since the last wait, so reads interleave with swaps.
  int64_t seen = 0;
  auto await_reads = [&] {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (reads.load() <= seen && std::chrono::steady_clock::now() < until)
      std::this_thread::yield();
    seen = reads.load();
  };
  for (int k = 1; k <= kSwaps; ++k) {
    if (k % 10 == 1) await_reads();
    const Rows rows(kRows * kDim, static_cast<float>(k));
    Delta d;
    d.ids = ids.data();
    d.rows = rows.data();
    d.num_rows = kRows;
    uint64_t number = 0;
    ASSERT_TRUE(inf->ApplyDelta("t", d, &number).ok());
    ASSERT_EQ(number, static_cast<uint64_t>(k + 1));
  }
  done.store(true);
  for (auto& t : readers) t.join();
  EXPECT_EQ(torn.load(), 0);
  EXPECT_GT(reads.load(), 0);
  EXPECT_EQ(inf->Current()->number, static_cast<uint64_t>(kSwaps + 1));
}

}  // namespace
}  // namespace shardrec::serving
