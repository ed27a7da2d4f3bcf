// Crash and fault injection during a checkpoint save, on the in-memory file system: at every
// step of a save (create, append, fsync, close, rename, directory fsync, remove), a crash, a
// write that fails halfway, a full disk or a failing rename leaves a directory whose checkpoint
// loads and is exactly the previous one or exactly the new one, never a mix; a save that
// reports success always left the new one. And read faults in the middle of a load or a table
// import at worlds 1, 2 and 4, and a peer that never arrives: every rank fails and nothing
// changes on any rank.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "impl/checkpoint/checkpoint.h"
#include "impl/checkpoint/format.h"
#include "impl/comm/factory.h"
#include "impl/core/check.h"
#include "impl/embedding/collection.h"
#include "impl/sharding/layout.h"

namespace shardrec::checkpoint {
namespace {

using embedding::EmbeddingCollection;
using Values = std::vector<std::vector<float>>;

sharding::TableConfig Table(const std::string& name, int64_t rows, int32_t dim, int32_t feature,
                            DType dtype) {
  sharding::TableConfig t;
  t.name = name;
  t.rows = rows;
  t.dim = dim;
  t.features = {feature};
  t.dtype = dtype;
  return t;
}

std::shared_ptr<sharding::Plan> TwoRankPlan() {
  auto plan = std::make_shared<sharding::Plan>();
  plan->world_size = 2;
  plan->local_world_size = 2;
  plan->features = {{"a", 1.0f}, {"b", 1.0f}, {"c", 1.0f}};
  plan->tables = {Table("cw", 40, 8, 0, DType::kFloat32), Table("rw", 30, 4, 1, DType::kFloat16),
                  Table("tw", 10, 4, 2, DType::kFloat32)};
  plan->table_plans = {sharding::MakeColumnSplit(
                           plan->tables[0], sharding::ShardingType::kColumnWise, {4, 4}, {0, 1}),
                       sharding::MakeRowWise(plan->tables[1], 2),
                       sharding::MakeTableWise(plan->tables[2], 1)};
  return plan;
}

// Sets every weight and state to a pattern of `version` (collective), and the step counter.
void Fill(EmbeddingCollection& c, int version) {
  for (const auto& t : c.plan().tables) {
    std::vector<float> w(static_cast<size_t>(t.rows * t.dim));
    // Values exact in fp16, so the 16-bit table holds them unchanged.
    for (size_t i = 0; i < w.size(); ++i)
      w[i] = static_cast<float>(version * 100 + static_cast<int>(i % 97)) / 8.0f;
    ASSERT_TRUE(c.SetWeights(t.name, w.data(), w.size()).ok());
    std::vector<embedding::StateInfo> states;
    ASSERT_TRUE(c.TableStates(t.name, &states).ok());
    for (const auto& s : states) {
      std::vector<float> v(static_cast<size_t>(s.row_wise ? t.rows : t.rows * t.dim));
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(version) + 0.5f * i;
      ASSERT_TRUE(c.SetState(t.name, s.name, v.data(), v.size()).ok());
    }
  }
  ASSERT_TRUE(c.SetNumSteps(version * 10).ok());
}

Values Take(EmbeddingCollection& c) {
  Values out;
  for (const auto& t : c.plan().tables) {
    out.emplace_back(static_cast<size_t>(t.rows * t.dim));
    EXPECT_TRUE(c.GetWeights(t.name, out.back().data(), out.back().size()).ok());
    std::vector<embedding::StateInfo> states;
    EXPECT_TRUE(c.TableStates(t.name, &states).ok());
    for (const auto& s : states) {
      out.emplace_back(static_cast<size_t>(s.row_wise ? t.rows : t.rows * t.dim));
      EXPECT_TRUE(c.GetState(t.name, s.name, out.back().data(), out.back().size()).ok());
    }
  }
  out.push_back({static_cast<float>(c.num_steps())});
  return out;
}

std::shared_ptr<MemoryFileSystem> Copy(const MemoryFileSystem& from) {
  auto fs = std::make_shared<MemoryFileSystem>();
  for (const std::string& p : from.List()) fs->SetContents(p, from.Contents(p));
  return fs;
}

// Column-wise over every rank, row-wise over every rank, table-wise on the last rank; tables
// large enough that a rank file's data is several times its header.
std::shared_ptr<sharding::Plan> WorldPlan(int world) {
  auto plan = std::make_shared<sharding::Plan>();
  plan->world_size = world;
  plan->local_world_size = world;
  plan->features = {{"a", 1.0f}, {"b", 1.0f}, {"c", 1.0f}};
  plan->tables = {Table("cw", 200, 8, 0, DType::kFloat32), Table("rw", 150, 4, 1, DType::kFloat16),
                  Table("tw", 60, 4, 2, DType::kFloat32)};
  std::vector<int32_t> ranks(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) ranks[static_cast<size_t>(r)] = r;
  plan->table_plans = {
      sharding::MakeColumnSplit(plan->tables[0], sharding::ShardingType::kColumnWise,
                                std::vector<int32_t>(static_cast<size_t>(world), 8 / world), ranks),
      sharding::MakeRowWise(plan->tables[1], world),
      sharding::MakeTableWise(plan->tables[2], world - 1)};
  return plan;
}

// Runs fn(rank, collection) on `world` threads over an in-process group.
template <typename Fn>
void Ranks(int world, std::shared_ptr<sharding::Plan> plan, Fn fn) {
  std::vector<std::unique_ptr<comm::Communicator>> comms;
  ASSERT_TRUE(comm::CreateLocalGroup(world, comm::CommOptions(), &comms).ok());
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      optim::OptimizerConfig opt;
      opt.type = optim::OptimizerType::kPartialRowWiseAdam;  // element-wise + row-wise state
      std::unique_ptr<EmbeddingCollection> coll;
      Status s = EmbeddingCollection::Create(plan, std::move(comms[r]), &opt,
                                             embedding::CollectionOptions(), &coll);
      ASSERT_TRUE(s.ok()) << s.ToString();
      fn(r, *coll);
    });
  }
  for (auto& t : threads) t.join();
}

template <typename Fn>
void TwoRanks(Fn fn) {
  Ranks(2, TwoRankPlan(), fn);
}

// What rank 0 prepares and both ranks use. The ranks also meet in Gloo barriers, but a mutex
// makes the hand-over visible to ThreadSanitizer (it cannot see ordering through sockets).
class Shared {
 public:
  void set(std::shared_ptr<MemoryFileSystem> fs) {
    std::lock_guard<std::mutex> lock(mu_);
    fs_ = std::move(fs);
  }
  std::shared_ptr<MemoryFileSystem> get() {
    std::lock_guard<std::mutex> lock(mu_);
    return fs_;
  }

 private:
  std::mutex mu_;
  std::shared_ptr<MemoryFileSystem> fs_;
};

TEST(CheckpointFaults, EveryStepOfASaveLeavesALoadableCheckpoint) {
  const MemoryFileSystem::Fault kinds[] = {
      MemoryFileSystem::Fault::kCrash, MemoryFileSystem::Fault::kWriteHalf,
      MemoryFileSystem::Fault::kDiskFull, MemoryFileSystem::Fault::kRenameFail};
  MemoryFileSystem base;
  Shared shared;
  std::atomic<int64_t> save_steps{0};
  std::atomic<int> failed_saves{0}, old_kept{0}, new_landed{0};
  TwoRanks([&](int r, EmbeddingCollection& c) {
    Group g;
    g.comm = &c.comm();
    Fill(c, 1);
    ASSERT_TRUE(Save(c.storage(), g, base, "ck", {}).ok());
    const Values a = Take(c);  // every rank holds both expected states
    Fill(c, 2);
    const Values b = Take(c);
    if (r == 0) shared.set(Copy(base));
    ASSERT_TRUE(c.comm().Barrier().ok());
    std::shared_ptr<MemoryFileSystem> fs = shared.get();
    const int64_t before = fs->steps();
    ASSERT_TRUE(Save(c.storage(), g, *fs, "ck", {}).ok());  // a clean save, to count its steps
    ASSERT_TRUE(c.comm().Barrier().ok());
    if (r == 0) save_steps = fs->steps() - before;
    ASSERT_TRUE(c.comm().Barrier().ok());
    ASSERT_GT(save_steps.load(), 10);
    for (const auto kind : kinds) {
      for (int64_t k = 0; k <= save_steps.load(); ++k) {
        if (r == 0) {
          auto fresh = Copy(base);  // holds checkpoint 1
          fresh->SetFault(kind, k);
          shared.set(fresh);
        }
        ASSERT_TRUE(c.comm().Barrier().ok());
        fs = shared.get();
        Fill(c, 2);
        const Status saved = Save(c.storage(), g, *fs, "ck", {});
        ASSERT_TRUE(c.comm().Barrier().ok());
        if (r == 0) fs->SetFault(MemoryFileSystem::Fault::kNone, 0);
        ASSERT_TRUE(c.comm().Barrier().ok());
        Fill(c, 3);  // neither checkpoint: a load must overwrite everything
        const Status loaded = Load(c.storage(), g, *fs, "ck", {});
        ASSERT_TRUE(loaded.ok()) << "fault " << static_cast<int>(kind) << " at step " << k << ": "
                                 << loaded.ToString();
        const Values got = Take(c);
        EXPECT_TRUE(got == a || got == b)
            << "fault " << static_cast<int>(kind) << " at step " << k << ": a mixed checkpoint";
        if (saved.ok()) {
          EXPECT_TRUE(got == b) << "a save that succeeded did not land, step " << k;
        } else {
          EXPECT_EQ(saved.code(), Code::kIo) << saved.ToString();
          // A failed write takes its temporary file with it (after a crash nothing can).
          if (kind != MemoryFileSystem::Fault::kCrash) {
            for (const std::string& name : fs->List()) {
              EXPECT_EQ(name.find(".tmp"), std::string::npos)
                  << "fault " << static_cast<int>(kind) << " at step " << k << " left " << name;
            }
          }
        }
        if (r == 0) {
          failed_saves += saved.ok() ? 0 : 1;
          old_kept += got == a ? 1 : 0;
          new_landed += got == b ? 1 : 0;
        }
      }
    }
  });
  // Both outcomes happened: faults before the manifest's rename keep checkpoint 1, faults after
  // it (or none) land checkpoint 2.
  EXPECT_GT(failed_saves.load(), 0);
  EXPECT_GT(old_kept.load(), 0);
  EXPECT_GT(new_landed.load(), 0);
}

TEST(CheckpointFaults, MemoryFileSystemFaultsBehaveLikeTheirNames) {
  MemoryFileSystem fs;
  std::unique_ptr<WritableFile> f;
  ASSERT_TRUE(fs.NewWritable("x", &f).ok());
  fs.SetFault(MemoryFileSystem::Fault::kWriteHalf, 0);
  const char data[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_EQ(f->Append(data, 8).code(), Code::kIo);
  EXPECT_EQ(fs.Contents("x").size(), 4u);  // half written
  EXPECT_TRUE(f->Append(data, 8).ok());    // one-shot
  fs.SetFault(MemoryFileSystem::Fault::kDiskFull, 0);
  const Status full = f->Append(data, 8);
  EXPECT_NE(full.message().find("No space"), std::string::npos) << full.ToString();
  EXPECT_EQ(fs.Contents("x").size(), 12u);
  ASSERT_TRUE(WriteAtomically(fs, "d", "y", {{data, 8}}).ok());
  fs.SetFault(MemoryFileSystem::Fault::kRenameFail, 0);
  EXPECT_EQ(WriteAtomically(fs, "d", "y", {{data, 2}}).code(), Code::kIo);
  EXPECT_EQ(fs.Contents("d/y").size(), 8u);  // the old file is intact
  fs.SetFault(MemoryFileSystem::Fault::kDiskFull, 0);
  EXPECT_EQ(WriteAtomically(fs, "d", "y", {{data, 2}}).code(), Code::kIo);
  EXPECT_EQ(fs.Contents("d/y").size(), 8u);
  // Neither failed write left its temporary copy beside the file.
  for (const std::string& name : fs.List())
    EXPECT_EQ(name.find("d/y.tmp"), std::string::npos) << name;
  fs.SetFault(MemoryFileSystem::Fault::kCrash, 1);
  EXPECT_TRUE(f->Sync().ok());
  EXPECT_FALSE(f->Close().ok());
  EXPECT_FALSE(fs.Remove("d/y").ok());  // everything after a crash fails
}

// Both ranks' shards, filled, saved as checkpoint "ck" in `fs`; the group that loads it.
Group SavedCk(EmbeddingCollection& c, MemoryFileSystem& fs) {
  Group g;
  g.comm = &c.comm();
  Fill(c, 1);
  EXPECT_TRUE(Save(c.storage(), g, fs, "ck", {}).ok());
  EXPECT_TRUE(c.comm().Barrier().ok());
  return g;
}

// Rank 0 rewrites file `path` of `fs` with edit(bytes) while the other rank waits for it.
void EditOnRankZero(int r, EmbeddingCollection& c, MemoryFileSystem& fs, const std::string& path,
                    const std::function<void(std::vector<uint8_t>&)>& edit) {
  ASSERT_TRUE(c.comm().Barrier().ok());
  if (r == 0) {
    std::vector<uint8_t> bytes = fs.Contents(path);
    ASSERT_FALSE(bytes.empty());
    edit(bytes);
    fs.SetContents(path, bytes);
  }
  ASSERT_TRUE(c.comm().Barrier().ok());
}

// A corrupt chunk in the middle of a large record is reported with the file and the record.
TEST(CheckpointFaults, CorruptChunkNamesFileAndRecord) {
  MemoryFileSystem fs;
  TwoRanks([&](int r, EmbeddingCollection& c) {
    const Group g = SavedCk(c, fs);
    EditOnRankZero(r, c, fs, "ck/g1-rank1.safetensors",
                   [](std::vector<uint8_t>& bytes) { bytes[bytes.size() - 1] ^= 1; });
    const Status s = Load(c.storage(), g, fs, "ck", {});
    EXPECT_EQ(s.code(), Code::kCorrupt) << s.ToString();
    EXPECT_NE(s.message().find("g1-rank1.safetensors"), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find("record tw/"), std::string::npos) << s.ToString();
  });
}

// The manifest carries a checksum of itself: an edited step counter is refused, naming the
// manifest, and changes nothing; a manifest without the member (older writers) still loads.
TEST(CheckpointFaults, AnEditedManifestIsRefusedByItsChecksum) {
  MemoryFileSystem fs;
  TwoRanks([&](int r, EmbeddingCollection& c) {
    const Group g = SavedCk(c, fs);
    const std::vector<uint8_t> saved = fs.Contents("ck/manifest.json");
    const std::string text(saved.begin(), saved.end());
    ASSERT_NE(text.find("\"manifest_xxh3\""), std::string::npos);
    const size_t at = text.find("\"step\": ");
    ASSERT_NE(at, std::string::npos) << text;
    EditOnRankZero(r, c, fs, "ck/manifest.json", [&](std::vector<uint8_t>& bytes) {
      bytes.insert(bytes.begin() + static_cast<std::ptrdiff_t>(at + 8), '1');  // 0 -> 10
    });
    const int64_t steps = c.num_steps();
    const Status s = Load(c.storage(), g, fs, "ck", {});
    EXPECT_EQ(s.code(), Code::kCorrupt) << s.ToString();
    EXPECT_NE(s.message().find("manifest"), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find("checksum"), std::string::npos) << s.ToString();
    EXPECT_EQ(c.num_steps(), steps);
    // Without the member, as written before it existed: read as it is. Its line goes (members
    // are sorted, so a later one follows it and the commas stay right).
    const size_t k = text.find("\"manifest_xxh3\"");
    const size_t line_start = text.rfind('\n', k) + 1;
    const size_t line_end = text.find('\n', k);
    ASSERT_EQ(text[line_end - 1], ',');
    // A float where the checksum's integer belongs (undefined behaviour in the conversion, seen
    // by UBSan, before the value was checked): corrupt, nothing changed.
    const std::string floated =
        text.substr(0, line_start) + "  \"manifest_xxh3\": 1e99," + text.substr(line_end);
    EditOnRankZero(r, c, fs, "ck/manifest.json", [&](std::vector<uint8_t>& bytes) {
      bytes.assign(floated.begin(), floated.end());
    });
    const Status f = Load(c.storage(), g, fs, "ck", {});
    EXPECT_EQ(f.code(), Code::kCorrupt) << f.ToString();
    EXPECT_EQ(c.num_steps(), steps);
    const std::string old = text.substr(0, line_start) + text.substr(line_end + 1);
    EditOnRankZero(r, c, fs, "ck/manifest.json",
                   [&](std::vector<uint8_t>& bytes) { bytes.assign(old.begin(), old.end()); });
    const Status legacy = Load(c.storage(), g, fs, "ck", {});
    EXPECT_TRUE(legacy.ok()) << legacy.ToString();
  });
}

// This rank's shard tensors' bytes and its step counter, read without a collective.
std::vector<uint8_t> LocalBytes(EmbeddingCollection& c) {
  std::vector<uint8_t> out;
  for (const embedding::ShardTensor& t : c.ShardTensors()) {
    const size_t es = DTypeSize(t.dtype);
    for (int64_t r = 0; r < t.rows; ++r) {
      const auto* row =
          static_cast<const uint8_t*>(t.data) + static_cast<size_t>(r * t.row_stride) * es;
      out.insert(out.end(), row, row + static_cast<size_t>(t.cols) * es);
    }
  }
  const int64_t steps = c.num_steps();
  const auto* p = reinterpret_cast<const uint8_t*>(&steps);
  out.insert(out.end(), p, p + sizeof(steps));
  return out;
}

// The first byte of a safetensors file's data area (after its 8-byte length and JSON header).
uint64_t DataStart(const std::vector<uint8_t>& file) {
  SR_CHECK(file.size() >= 8);
  uint64_t len = 0;
  for (int i = 0; i < 8; ++i) len |= static_cast<uint64_t>(file[static_cast<size_t>(i)]) << (8 * i);
  return 8 + len;
}

// Read faults while a load reads its records (the first data byte, the middle, the last byte of
// the last rank's file, and in the middle of rank 0's file, which holds the dense tensors every
// rank reads), and while a table import reads: at worlds 1, 2 and 4 every rank returns kIo and
// the weights, every optimizer state, the step counter and the dense tensors stay bit-identical
// on every rank. Then the same loads without the fault land the checkpoint exactly.
TEST(CheckpointLoadFaults, ReadFaultMidLoadChangesNothingOnAnyRank) {
  for (int world : {1, 2, 4}) {
    MemoryFileSystem fs;
    Ranks(world, WorldPlan(world), [&](int r, EmbeddingCollection& c) {
      Group g;
      g.comm = &c.comm();
      std::vector<float> dense(300), state(7);
      for (size_t i = 0; i < dense.size(); ++i) dense[i] = 0.25f * static_cast<float>(i);
      for (size_t i = 0; i < state.size(); ++i) state[i] = -1.0f - static_cast<float>(i);
      SaveOptions so;
      so.dense = {{"mlp.w", dense.data(), dense.size()}, {"mlp.s", state.data(), state.size()}};
      Fill(c, 1);
      ASSERT_TRUE(Save(c.storage(), g, fs, "ck", so).ok());
      const Values saved = Take(c);
      const std::vector<float> saved_dense = dense, saved_state = state;
      ASSERT_TRUE(ExportTable(c.storage(), fs, "x/cw.safetensors", "cw", true).ok());
      Fill(c, 2);
      for (float& v : dense) v += 1000.0f;
      for (float& v : state) v += 1000.0f;
      const Values before = Take(c);
      const std::vector<float> dense_before = dense, state_before = state;
      LoadOptions lo;
      lo.dense = {{"mlp.w", dense.data(), dense.size()}, {"mlp.s", state.data(), state.size()}};
      const std::string last = "ck/g1-rank" + std::to_string(world - 1) + ".safetensors";
      const std::vector<uint8_t> last_bytes = fs.Contents(last);
      const std::vector<uint8_t> first_bytes = fs.Contents("ck/g1-rank0.safetensors");
      ASSERT_FALSE(last_bytes.empty());
      const uint64_t start = DataStart(last_bytes);
      ASSERT_LT(start, last_bytes.size() / 2);
      const std::vector<std::pair<std::string, uint64_t>> faults = {
          {last, start},
          {last, (start + last_bytes.size()) / 2},
          {last, last_bytes.size() - 1},
          {"ck/g1-rank0.safetensors", (DataStart(first_bytes) + first_bytes.size()) / 2},
          {"x/cw.safetensors", 0}};  // offset set below: the middle of the weights
      for (const auto& [path, at] : faults) {
        const bool import = path == "x/cw.safetensors";
        ASSERT_TRUE(c.comm().Barrier().ok());
        if (r == 0) {
          const std::vector<uint8_t> file = fs.Contents(path);
          fs.SetReadFault(path, import ? (DataStart(file) + file.size()) / 2 : at);
        }
        ASSERT_TRUE(c.comm().Barrier().ok());
        const Status s = import ? ImportTable(c.storage(), fs, "x/cw.safetensors", "cw", true)
                                : Load(c.storage(), g, fs, "ck", lo);
        EXPECT_EQ(s.code(), Code::kIo) << "world " << world << " rank " << r << " " << path
                                       << " byte " << at << ": " << s.ToString();
        EXPECT_TRUE(Take(c) == before) << "world " << world << " rank " << r << ": " << path
                                       << " byte " << at << " changed the collection";
        EXPECT_EQ(dense, dense_before) << "world " << world << " " << path;
        EXPECT_EQ(state, state_before) << "world " << world << " " << path;
      }
      ASSERT_TRUE(c.comm().Barrier().ok());
      if (r == 0) fs.SetReadFault("", 0);
      ASSERT_TRUE(c.comm().Barrier().ok());
      const Status s = Load(c.storage(), g, fs, "ck", lo);
      ASSERT_TRUE(s.ok()) << s.ToString();
      EXPECT_TRUE(Take(c) == saved) << "world " << world;
      EXPECT_EQ(dense, saved_dense);
      EXPECT_EQ(state, saved_state);
    });
  }
}

// Beyond the staging limit the loader verifies in a first read and reads again to commit:
// corrupt and unreadable bytes are still found before anything changes, and a clean load with
// nothing staged lands the checkpoint exactly.
TEST(CheckpointLoadFaults, BeyondTheStagingLimitFaultsStillChangeNothing) {
  MemoryFileSystem fs;
  TwoRanks([&](int r, EmbeddingCollection& c) {
    Group g;
    g.comm = &c.comm();
    Fill(c, 1);
    ASSERT_TRUE(Save(c.storage(), g, fs, "ck", {}).ok());
    const Values saved = Take(c);
    Fill(c, 2);
    const Values before = Take(c);
    LoadOptions lo;
    lo.staging_limit = 1000;  // some tensors staged, most read twice
    const std::string file = "ck/g1-rank1.safetensors";
    const std::vector<uint8_t> good = fs.Contents(file);
    ASSERT_TRUE(c.comm().Barrier().ok());
    if (r == 0) {
      std::vector<uint8_t> bad = good;
      bad[bad.size() - 2] ^= 4;
      fs.SetContents(file, bad);
    }
    ASSERT_TRUE(c.comm().Barrier().ok());
    Status s = Load(c.storage(), g, fs, "ck", lo);
    EXPECT_EQ(s.code(), Code::kCorrupt) << s.ToString();
    EXPECT_TRUE(Take(c) == before) << "a corrupt chunk beyond the limit changed rank " << r;
    ASSERT_TRUE(c.comm().Barrier().ok());
    if (r == 0) {
      fs.SetContents(file, good);
      fs.SetReadFault(file, DataStart(good) + 3);
    }
    ASSERT_TRUE(c.comm().Barrier().ok());
    s = Load(c.storage(), g, fs, "ck", lo);
    EXPECT_EQ(s.code(), Code::kIo) << s.ToString();
    EXPECT_TRUE(Take(c) == before) << "a read fault beyond the limit changed rank " << r;
    ASSERT_TRUE(c.comm().Barrier().ok());
    if (r == 0) fs.SetReadFault("", 0);
    ASSERT_TRUE(c.comm().Barrier().ok());
    for (uint64_t limit : {uint64_t{1000}, uint64_t{0}}) {
      Fill(c, 2);
      lo.staging_limit = limit;
      s = Load(c.storage(), g, fs, "ck", lo);
      ASSERT_TRUE(s.ok()) << s.ToString();
      EXPECT_TRUE(Take(c) == saved) << "limit " << limit;
    }
  });
}

// A peer that never arrives: the load times out on the agreement (the communicator's timeout),
// and the rank that waited for it has changed nothing.
// Forwards every call to `inner`; the `lose_at`-th all-reduce (counting from 0) instead aborts
// `inner` and fails, as a rank killed at that point of a call would leave its peers.
class LosesItself : public comm::Communicator {
 public:
  LosesItself(comm::Communicator& inner, int lose_at) : inner_(inner), lose_at_(lose_at) {}
  int all_reduces() const { return all_reduces_; }
  int Rank() const override { return inner_.Rank(); }
  int Size() const override { return inner_.Size(); }
  Device device() const override { return inner_.device(); }
  const char* backend() const override { return inner_.backend(); }
  std::chrono::milliseconds timeout() const override { return inner_.timeout(); }
  void set_timeout(std::chrono::milliseconds t) override { inner_.set_timeout(t); }
  Status AllReduce(const void* send, void* recv, size_t count, DType dtype, comm::ReduceOp op,
                   const comm::CallOptions& opts) override {
    if (all_reduces_++ == lose_at_) {
      inner_.Abort();
      return Status::Aborted("this rank was lost (test)");
    }
    return inner_.AllReduce(send, recv, count, dtype, op, opts);
  }
  Status AllToAllV(const void* send, std::span<const size_t> send_counts, void* recv,
                   std::span<const size_t> recv_counts, DType dtype,
                   const comm::CallOptions& opts) override {
    return inner_.AllToAllV(send, send_counts, recv, recv_counts, dtype, opts);
  }
  Status AllGatherV(const void* send, size_t send_count, void* recv,
                    std::span<const size_t> recv_counts, DType dtype,
                    const comm::CallOptions& opts) override {
    return inner_.AllGatherV(send, send_count, recv, recv_counts, dtype, opts);
  }
  Status ReduceScatterV(const void* send, void* recv, std::span<const size_t> recv_counts,
                        DType dtype, comm::ReduceOp op, const comm::CallOptions& opts) override {
    return inner_.ReduceScatterV(send, recv, recv_counts, dtype, op, opts);
  }
  Status Broadcast(void* buf, size_t count, DType dtype, int root,
                   const comm::CallOptions& opts) override {
    return inner_.Broadcast(buf, count, dtype, root, opts);
  }
  Status Barrier(const comm::CallOptions& opts) override { return inner_.Barrier(opts); }
  Status Split(int color, int key, std::unique_ptr<comm::Communicator>* out) override {
    return inner_.Split(color, key, out);
  }
  void Abort() override { inner_.Abort(); }
  Status AsyncError() const override { return inner_.AsyncError(); }

 private:
  comm::Communicator& inner_;
  int lose_at_;
  int all_reduces_ = 0;
};

// A rank lost in a save's last agreement, after rank 0 published the manifest: the ranks cannot
// agree on the outcome, so each says what it knows (rank 0 that it published; the other that
// rank 0 may have), and the directory holds the new checkpoint, complete.
TEST(CheckpointFaults, APeerLostAfterThePublishIsReportedWithWhatWasPublished) {
  MemoryFileSystem fs;
  Values saved[2];
  Status results[2];
  TwoRanks([&](int r, EmbeddingCollection& c) {
    Group g;
    LosesItself counting(c.comm(), -1);
    g.comm = &counting;
    Fill(c, 1);
    ASSERT_TRUE(Save(c.storage(), g, fs, "ck", {}).ok());
    const int last = counting.all_reduces() - 1;  // the publish agreement's
    Fill(c, 2);
    saved[r] = Take(c);
    ASSERT_TRUE(c.comm().Barrier().ok());
    LosesItself loses(c.comm(), r == 1 ? last : -1);
    g.comm = &loses;
    results[r] = Save(c.storage(), g, fs, "ck", {});
  });
  EXPECT_TRUE(comm::IsExchangeFailure(results[0])) << results[0].ToString();
  EXPECT_NE(results[0].message().find("after rank 0 published the new checkpoint, generation 2"),
            std::string::npos)
      << results[0].ToString();
  EXPECT_EQ(results[1].code(), Code::kAborted) << results[1].ToString();
  EXPECT_NE(results[1].message().find("rank 0 may have published the new checkpoint"),
            std::string::npos)
      << results[1].ToString();
  TwoRanks([&](int r, EmbeddingCollection& c) {
    Group g;
    g.comm = &c.comm();
    Fill(c, 3);
    ASSERT_TRUE(Load(c.storage(), g, fs, "ck", {}).ok());
    EXPECT_TRUE(Take(c) == saved[r]) << "rank " << r << ": not the new checkpoint";
  });
}

TEST(CheckpointLoadFaults, APeerThatNeverArrivesTimesOutChangingNothing) {
  MemoryFileSystem fs;
  std::atomic<bool> done{false};
  TwoRanks([&](int r, EmbeddingCollection& c) {
    Group g;
    g.comm = &c.comm();
    Fill(c, 1);
    ASSERT_TRUE(Save(c.storage(), g, fs, "ck", {}).ok());
    Fill(c, 2);
    ASSERT_TRUE(c.comm().Barrier().ok());
    if (r == 1) {
      while (!done.load()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return;  // never loads
    }
    // The communicator is poisoned after the timeout: compare this rank's own shards' bytes.
    const std::vector<uint8_t> before = LocalBytes(c);
    c.comm().set_timeout(std::chrono::milliseconds(300));
    const Status s = Load(c.storage(), g, fs, "ck", {});
    done = true;
    EXPECT_EQ(s.code(), Code::kTimeout) << s.ToString();
    EXPECT_TRUE(LocalBytes(c) == before) << "the rank that waited changed its shards";
  });
}

}  // namespace
}  // namespace shardrec::checkpoint
