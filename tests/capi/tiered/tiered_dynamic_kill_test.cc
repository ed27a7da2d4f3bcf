// A process killed (SIGKILL) while it trains tiered tables or saves a checkpoint of them leaves
// the last complete checkpoint loadable (docs/disk-tier.md, "Crashes"): a child process trains a
// tiered dynamic table and a tiered fixed table with caches small enough to write rows back every
// step and saves a checkpoint into one directory every other step; the test kills it at a random
// moment of a save (within the last save's duration) or of the training between saves (rows
// being written back). The directory then loads, into a tiered collection over the dead
// process's store directories (which it must empty, not read) and into an in-memory one, at a
// step the child had finished saving, and training goes on bit for bit as an uninterrupted run
// in memory from that step. Forks: its own executable, which starts no thread before forking;
// left out of the TSan stage like the other fork tests.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "shardrec/checkpoint.h"
#include "shardrec/tier.h"
#include "tests/capi/dynamic/stream.h"
#include "tests/capi/dynamic/test_util.h"
#include "tests/capi/tiered/tiered_test_util.h"

namespace shardrec::testing {
namespace {

constexpr int32_t kSteps = 24;  // the child trains at most this many steps
constexpr int32_t kTail = 3;    // steps trained after a load and compared
// The compaction runs' child trains at most this many steps (it is killed long before).
constexpr int32_t kLongSteps = 400;

// t0 dynamic (capacity 2000 over 6000 ids), t1 fixed (40000 rows), Adagrad, world 1.
DynScenario KillScenario() {
  DynScenario s =
      MakeDynScenario(1, SHARDREC_SHARDING_TABLE_WISE, SHARDREC_OPTIMIZER_ADAGRAD, 2000, 6000);
  s.fixed_table = 1;
  s.base.tables[1].rows = 40000;
  for (size_t i = 0; i < s.pools[1].size(); ++i) s.pools[1][i] = static_cast<int64_t>(i * 6);
  for (auto& d : s.dynamic) d.eviction = SHARDREC_EVICTION_LRU;
  return s;
}

void Tiered(DynScenario* s, const std::string& dir) {
  s->tiers = {{"t0", dir + "/t0", CacheBytesFor(s->base, 0, 64)},
              {"t1", dir + "/t1", CacheBytesFor(s->base, 1, 64)}};
}

// What the child reports through its pipe: an event and the step it concerns.
enum Event : int32_t { kTrained = 1, kSaving = 2, kSaved = 3 };
struct Report {
  int32_t event;
  int32_t step;
  int64_t micros;  // kSaved: how long the save took
};

// The child: trains, saving after every other step into `ckpt`, reporting each event, then waits
// to be killed. Never returns.
[[noreturn]] void Child(const std::string& ckpt, const std::string& tiers, int fd, int32_t steps) {
  DynScenario s = KillScenario();
  Tiered(&s, tiers);
  const int64_t dim = DynOutputDim(s);
  const Stream st = MakeStream(s, dim, steps);
  PlanPtr plan = MakeDynPlan(s);
  CollPtr coll = CreateDynCollection(s, plan.get(), 1, 0);
  if (coll == nullptr) _exit(3);
  auto send = [&](int32_t e, int32_t step, int64_t us) {
    const Report r{e, step, us};
    if (write(fd, &r, sizeof(r)) != sizeof(r)) _exit(4);
  };
  std::vector<float> out(static_cast<size_t>(kGlobalBatch * dim));
  for (int32_t step = 0; step < steps; ++step) {
    KjtHolder kjt(st.batches[step], 3, false);
    if (shardrec_embedding_forward(coll.get(), kjt.view(), out.data(), out.size(), nullptr) !=
            SHARDREC_OK ||
        shardrec_embedding_backward(coll.get(), st.grads[step].data(), st.grads[step].size(),
                                    nullptr) != SHARDREC_OK)
      _exit(5);
    send(kTrained, step + 1, 0);
    if ((step + 1) % 2 != 0) continue;
    send(kSaving, step + 1, 0);
    const auto t0 = std::chrono::steady_clock::now();
    if (shardrec_checkpoint_save(coll.get(), ckpt.c_str(), nullptr) != SHARDREC_OK) _exit(6);
    send(
        kSaved, step + 1,
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0)
            .count());
  }
  // Done: the parent sees the end of the pipe, and a kill it already decided on (a delay after
  // the last save may outlast the remaining steps on a loaded machine) still meets a live
  // process. An alarm ends a child whose parent never kills it.
  close(fd);
  alarm(60);
  for (;;) pause();
}

// The outputs of steps [from, from + kTail) of a collection loaded from `ckpt` (tiers under
// `tiers`, or in memory when empty), and its step counter after the load.
std::vector<std::vector<float>> TrainAfterLoad(const std::string& ckpt, const std::string& tiers,
                                               int32_t* loaded_step) {
  DynScenario s = KillScenario();
  if (!tiers.empty()) Tiered(&s, tiers);
  const int64_t dim = DynOutputDim(s);
  const Stream st = MakeStream(s, dim, kLongSteps + kTail);
  PlanPtr plan = MakeDynPlan(s);
  std::vector<std::vector<float>> outs;
  std::thread([&] {
    CollPtr coll = CreateDynCollection(s, plan.get(), 1, 0);
    if (coll == nullptr) return;
    ASSERT_EQ(shardrec_checkpoint_load(coll.get(), ckpt.c_str(), nullptr), SHARDREC_OK)
        << shardrec_last_error();
    int64_t steps = -1;
    ASSERT_EQ(shardrec_embedding_num_steps(coll.get(), &steps), SHARDREC_OK);
    *loaded_step = static_cast<int32_t>(steps);
    for (int32_t step = *loaded_step; step < *loaded_step + kTail; ++step) {
      KjtHolder kjt(st.batches[step], 3, false);
      std::vector<float> out(static_cast<size_t>(kGlobalBatch * dim));
      ASSERT_EQ(shardrec_embedding_forward(coll.get(), kjt.view(), out.data(), out.size(), nullptr),
                SHARDREC_OK)
          << shardrec_last_error();
      ASSERT_EQ(shardrec_embedding_backward(coll.get(), st.grads[step].data(),
                                            st.grads[step].size(), nullptr),
                SHARDREC_OK)
          << shardrec_last_error();
      outs.push_back(out);
    }
  }).join();
  return outs;
}

// The outputs of steps [from, from + kTail) of an uninterrupted run in memory.
std::vector<std::vector<float>> Uninterrupted(int32_t from) {
  DynScenario s = KillScenario();
  const int64_t dim = DynOutputDim(s);
  const Stream st = MakeStream(s, dim, kLongSteps + kTail);
  PlanPtr plan = MakeDynPlan(s);
  std::vector<std::vector<float>> outs;
  std::thread([&] {
    CollPtr coll = CreateDynCollection(s, plan.get(), 1, 0);
    if (coll == nullptr) return;
    for (int32_t step = 0; step < from + kTail; ++step) {
      KjtHolder kjt(st.batches[step], 3, false);
      std::vector<float> out(static_cast<size_t>(kGlobalBatch * dim));
      ASSERT_EQ(shardrec_embedding_forward(coll.get(), kjt.view(), out.data(), out.size(), nullptr),
                SHARDREC_OK);
      ASSERT_EQ(shardrec_embedding_backward(coll.get(), st.grads[step].data(),
                                            st.grads[step].size(), nullptr),
                SHARDREC_OK);
      if (step >= from) outs.push_back(out);
    }
  }).join();
  return outs;
}

// Kills the child `delay_fraction` of the last save's duration after it reports the start of
// the save of step `at` (during_save), or that long after it reports step `at` trained (between
// saves: an odd step, so the next save has not begun).
struct Kill {
  int32_t at;
  bool during_save;
  double delay_fraction;
};

// Runs one child to its kill; returns the last step whose save it reported finished (and in
// *save_us how long the last save took).
int32_t RunAndKill(const Kill& k, const std::string& ckpt, const std::string& tiers,
                   int64_t* save_us_out) {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    Child(ckpt, tiers, fds[1], kSteps);
  }
  close(fds[1]);
  int32_t saved = 0;
  int64_t save_us = 20000;
  Report r{};
  bool killed = false;
  while (read(fds[0], &r, sizeof(r)) == sizeof(r)) {
    if (r.event == kSaved) {
      saved = r.step;
      save_us = r.micros;
    }
    const bool trigger = k.during_save ? (r.event == kSaving && r.step == k.at)
                                       : (r.event == kTrained && r.step == k.at);
    if (trigger) {
      std::this_thread::sleep_for(
          std::chrono::microseconds(static_cast<int64_t>(k.delay_fraction * save_us)));
      kill(pid, SIGKILL);
      killed = true;
      // Reports written before the kill are still in the pipe.
      while (read(fds[0], &r, sizeof(r)) == sizeof(r))
        if (r.event == kSaved) saved = r.step;
      break;
    }
  }
  close(fds[0]);
  if (!killed) kill(pid, SIGKILL);  // it waits to be killed (Child); the expectation below fails
  int status = 0;
  waitpid(pid, &status, 0);
  *save_us_out = save_us;
  EXPECT_TRUE(killed) << "the child ended before its kill (status " << status << ")";
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
  return saved;
}

// The segment files of the stores under `dir` (any depth). Tolerates files that vanish while it
// looks: the child compacts meanwhile.
std::set<std::string> SegmentFiles(const std::string& dir) {
  std::set<std::string> out;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind("seg-", 0) == 0 && name.size() > 4 && name.substr(name.size() - 4) == ".dat")
      out.insert(it->path().string());
  }
  return out;
}

// Runs a child whose stores seal segments of 16 KiB and compact them every few milliseconds
// (SHARDREC_TIER_TEST_SEGMENT_KIB) until it is killed: once it has reported a save and compaction
// has removed a segment it wrote (a file seen under `tiers` is gone: only compaction unlinks
// segments during a run), the child is killed `delay_us` later, while it goes on training,
// writing back and compacting. Returns the last step whose save it reported; *removed: the
// segments seen removed before the kill.
int32_t RunAndKillDuringCompaction(int64_t delay_us, const std::string& ckpt,
                                   const std::string& tiers, int* removed) {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    setenv("SHARDREC_TIER_TEST_SEGMENT_KIB", "16", 1);
    Child(ckpt, tiers, fds[1], kLongSteps);
  }
  close(fds[1]);
  fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK);
  int32_t saved = 0;
  std::set<std::string> seen;
  *removed = 0;
  bool ended = false;
  while (!ended && (saved == 0 || *removed == 0)) {
    pollfd p{fds[0], POLLIN, 0};
    poll(&p, 1, 1);
    Report r{};
    ssize_t n;
    while ((n = read(fds[0], &r, sizeof(r))) == sizeof(r))
      if (r.event == kSaved) saved = r.step;
    if (n == 0) ended = true;  // the child exited: it trained every step without compacting
    const std::set<std::string> now = SegmentFiles(tiers);
    for (const std::string& f : seen) *removed += now.count(f) == 0 ? 1 : 0;
    seen = now;
  }
  std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) & ~O_NONBLOCK);
  Report r{};
  while (read(fds[0], &r, sizeof(r)) == sizeof(r))
    if (r.event == kSaved) saved = r.step;
  close(fds[0]);
  EXPECT_FALSE(ended) << "the child trained " << kLongSteps << " steps and never compacted";
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
  return saved;
}

// Whether the manifest of the checkpoint in `dir` is of version 5 (a dynamic table's store
// snapshot) and names store snapshots.
bool NamesAStoreSnapshot(const std::string& dir) {
  std::FILE* f = std::fopen((dir + "/manifest.json").c_str(), "rb");
  if (f == nullptr) return false;
  std::string text;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), f)) > 0;) text.append(buf, n);
  std::fclose(f);
  return text.find("\"format_version\": 5") != std::string::npos &&
         text.find(".store\"") != std::string::npos;
}

TEST(TieredKill, KilledDuringSaveOrWriteBackLeavesTheLastCheckpointLoadable) {
  std::mt19937_64 gen(std::random_device{}());
  std::uniform_real_distribution<double> frac(0.0, 1.2);
  const std::vector<Kill> kills = {
      {8, true, frac(gen)}, {13, false, frac(gen)}, {18, true, frac(gen)}};
  // Every child is forked before this process starts a thread (the loads below do).
  std::vector<int32_t> saved(kills.size());
  std::vector<int64_t> save_us(kills.size());
  std::vector<std::string> ckpts, tiers;
  for (size_t i = 0; i < kills.size(); ++i) {
    ckpts.push_back(FreshDir("kill_ckpt" + std::to_string(i)));
    tiers.push_back(FreshDir("kill_tiers" + std::to_string(i)));
    saved[i] = RunAndKill(kills[i], ckpts[i], tiers[i], &save_us[i]);
  }
  for (size_t i = 0; i < kills.size(); ++i) {
    const Kill& k = kills[i];
    SCOPED_TRACE("kill at step " + std::to_string(k.at) +
                 (k.during_save ? " during its save" : " after its training") + ", delay " +
                 std::to_string(k.delay_fraction) + " of a save");
    ASSERT_GE(saved[i], k.at - 2);
    int32_t tiered_step = -1, memory_step = -1;
    // A tiered collection over the dead child's store directories, and one in memory.
    const auto tiered = TrainAfterLoad(ckpts[i], tiers[i], &tiered_step);
    const auto memory = TrainAfterLoad(ckpts[i], "", &memory_step);
    ASSERT_FALSE(::testing::Test::HasFailure());
    // The last reported save, or the next one, in flight at the kill, which may have published
    // (its manifest is written last) before its report.
    EXPECT_TRUE(tiered_step == saved[i] || tiered_step == saved[i] + 2)
        << "loaded step " << tiered_step << ", last reported save " << saved[i];
    EXPECT_EQ(memory_step, tiered_step);
    // t0 (dynamic) and t1 (fixed) were saved as their stores' snapshots (format version 5).
    EXPECT_TRUE(NamesAStoreSnapshot(ckpts[i]));
    std::printf("kill at step %d (%s, %.2f of a save of %lld us): loaded step %d\n", k.at,
                k.during_save ? "during its save" : "after its training", k.delay_fraction,
                static_cast<long long>(save_us[i]), tiered_step);
    const auto want = Uninterrupted(tiered_step);
    ASSERT_EQ(want.size(), static_cast<size_t>(kTail));
    for (int32_t j = 0; j < kTail; ++j) {
      EXPECT_EQ(FirstBitDifference(tiered[j], want[j]), "") << "tiered, step " << tiered_step + j;
      EXPECT_EQ(FirstBitDifference(memory[j], want[j]), "") << "memory, step " << tiered_step + j;
    }
  }
}

// The same with the stores compacting (docs/disk-tier.md, "Crashes"): a process killed while its
// tiered tables' stores compact leaves the last checkpoint loadable, into a tiered collection
// over its store directories (emptied, not read) and into one in memory, and training goes on bit
// for bit.
TEST(TieredKill, KilledWhileItsStoresCompactLeavesTheLastCheckpointLoadable) {
  std::mt19937_64 gen(std::random_device{}());
  constexpr int kTrials = 3;
  std::vector<int32_t> saved(kTrials);
  std::vector<int> removed(kTrials);
  std::vector<int64_t> delays(kTrials);
  std::vector<std::string> ckpts, tiers;
  // Every child is forked before this process starts a thread (the loads below do).
  for (int i = 0; i < kTrials; ++i) {
    ckpts.push_back(FreshDir("compact_ckpt" + std::to_string(i)));
    tiers.push_back(FreshDir("compact_tiers" + std::to_string(i)));
    delays[i] = static_cast<int64_t>(gen() % 20000);
    saved[i] = RunAndKillDuringCompaction(delays[i], ckpts[i], tiers[i], &removed[i]);
  }
  for (int i = 0; i < kTrials; ++i) {
    SCOPED_TRACE("trial " + std::to_string(i) + ", killed " + std::to_string(delays[i]) +
                 " us after compaction had removed " + std::to_string(removed[i]) + " segments");
    ASSERT_GE(saved[i], 2);
    ASSERT_GT(removed[i], 0);
    int32_t tiered_step = -1, memory_step = -1;
    const auto tiered = TrainAfterLoad(ckpts[i], tiers[i], &tiered_step);
    const auto memory = TrainAfterLoad(ckpts[i], "", &memory_step);
    ASSERT_FALSE(::testing::Test::HasFailure());
    EXPECT_TRUE(tiered_step == saved[i] || tiered_step == saved[i] + 2)
        << "loaded step " << tiered_step << ", last reported save " << saved[i];
    EXPECT_EQ(memory_step, tiered_step);
    std::printf("killed %lld us after compaction removed %d segments: loaded step %d\n",
                static_cast<long long>(delays[i]), removed[i], tiered_step);
    const auto want = Uninterrupted(tiered_step);
    ASSERT_EQ(want.size(), static_cast<size_t>(kTail));
    for (int32_t j = 0; j < kTail; ++j) {
      EXPECT_EQ(FirstBitDifference(tiered[j], want[j]), "") << "tiered, step " << tiered_step + j;
      EXPECT_EQ(FirstBitDifference(memory[j], want[j]), "") << "memory, step " << tiered_step + j;
    }
  }
}

}  // namespace
}  // namespace shardrec::testing
