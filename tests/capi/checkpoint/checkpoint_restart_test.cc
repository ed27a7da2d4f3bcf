// Restart after a crash, with ranks as processes: 4 processes train a row-wise Adam model and
// checkpoint after every step (the data position travels in the checkpoint as a dense tensor);
// one process is killed in the middle of a step (after its forward, before its backward). Every
// survivor must get an error within the communicator timeout and destroy its handles cleanly.
// A restart from the last checkpoint with the same world size reproduces the uninterrupted run
// bit for bit; a restart with 2 processes continues from the same checkpoint.
//
// Each run is one coordinator process (forked from the test, which never starts a thread) that
// forks its peers before it has any thread, hands them the unique id and plays rank 0; ranks
// report through their exit codes and rank 0 writes the final snapshot to a file.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/capi/checkpoint/checkpoint_test_util.h"

namespace shardrec::testing {
namespace {

constexpr int32_t kSteps = 6;
constexpr int32_t kKillStep = 3;
constexpr int32_t kVictim = 2;
constexpr int kTimeoutMs = 8000;

enum class Mode { kStraight, kCrash, kResume };

struct RunSpec {
  Mode mode;
  int32_t world;
  std::string dir;       // checkpoint directory
  std::string snapshot;  // where rank 0 writes its final snapshot
};

Scenario TheScenario(int32_t world) {
  Scenario s = StandardScenario(world, SHARDREC_SHARDING_ROW_WISE, SHARDREC_POOLING_SUM);
  s.optimizer.type = SHARDREC_OPTIMIZER_ADAM;
  s.optimizer.lr = 0.05f;
  s.steps = kSteps;
  return s;
}

// One rank's life; returns its exit code (0: behaved as expected).
int RankMain(const RunSpec& run, const shardrec_unique_id_t& id, int32_t rank) {
  const Scenario s = TheScenario(run.world);
  ReferenceModel ref(s.num_features, s.tables, s.optimizer, s.seed, s.world);
  const auto batches = MakeBatches(s, ref);
  const auto grads = MakeGrads(s, batches, ref.output_dim());
  shardrec_comm_options_t co = SHARDREC_COMM_OPTIONS_INIT;
  co.timeout_ms = kTimeoutMs;
  shardrec_comm_t* comm = nullptr;
  if (shardrec_comm_create(&comm, &id, run.world, rank, &co) != SHARDREC_OK) return 200;
  PlanPtr plan = MakePlan(s);
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  shardrec_embedding_options_t eo;
  shardrec_embedding_options_init(&eo, SHARDREC_EMBEDDING_OPTIONS_VERSION);
  eo.seed = run.mode == Mode::kResume ? 4242 : s.seed;  // a resume gets everything from the file
  shardrec_embedding_t* coll = nullptr;
  if (!plan || shardrec_embedding_create(&coll, plan.get(), comm, &opt, &eo) != SHARDREC_OK)
    return 201;
  float position = 0;  // the next step to train: the data position
  shardrec_dense_tensor_t dense{"data_position", &position, 1};
  shardrec_checkpoint_options_t ck = SHARDREC_CHECKPOINT_OPTIONS_INIT;
  ck.dense = &dense;
  ck.num_dense = 1;
  if (run.mode == Mode::kResume) {
    if (shardrec_checkpoint_load(coll, run.dir.c_str(), &ck) != SHARDREC_OK) return 202;
    if (position != static_cast<float>(kKillStep)) return 203;
  }
  int rc = 0;
  for (int32_t step = static_cast<int32_t>(position); step < kSteps; ++step) {
    KjtHolder kjt(batches[step][rank], s.num_features, false);
    std::vector<float> out(grads[step][rank].size());
    if (shardrec_embedding_forward(coll, kjt.view(), out.data(), out.size(), nullptr) !=
        SHARDREC_OK)
      return 204;
    if (run.mode == Mode::kCrash && step == kKillStep && rank == kVictim) raise(SIGKILL);
    const auto t0 = std::chrono::steady_clock::now();
    const shardrec_status_t b = shardrec_embedding_backward(coll, grads[step][rank].data(),
                                                            grads[step][rank].size(), nullptr);
    if (run.mode == Mode::kCrash && step == kKillStep) {
      // A survivor: the step must fail with a peer error, within the timeout (plus slack).
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (b != SHARDREC_ETIMEOUT && b != SHARDREC_EREMOTE) rc = 205;
      if (secs > kTimeoutMs / 1000.0 + 10) rc = 206;
      break;
    }
    if (b != SHARDREC_OK) return 207;
    position = static_cast<float>(step + 1);
    if (run.mode == Mode::kCrash && shardrec_checkpoint_save(coll, run.dir.c_str(), &ck) != 0)
      return 208;
  }
  if (rc == 0 && run.mode != Mode::kCrash && rank == 0) {
    const Snap snap = TakeSnap(coll, s);  // collective: every rank takes it
    std::ofstream f(run.snapshot, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(&snap.steps), sizeof(snap.steps));
    for (const auto& t : snap.tensors)
      f.write(reinterpret_cast<const char*>(t.data()),
              static_cast<std::streamsize>(t.size() * sizeof(float)));
  } else if (rc == 0 && run.mode != Mode::kCrash) {
    TakeSnap(coll, s);
  }
  shardrec_embedding_destroy(coll);  // survivors too: destroying a poisoned collection is clean
  shardrec_comm_destroy(comm);
  return rc;
}

int WaitExit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status)
                           : 150 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

// The coordinator: forks ranks 1.., sends them the unique id, plays rank 0. Exit code: 0 when
// every rank behaved as expected (the victim must have been killed), else a code naming one.
int Coordinate(const RunSpec& run) {
  std::vector<std::pair<pid_t, int>> children;
  for (int32_t r = 1; r < run.world; ++r) {
    int p[2];
    if (pipe(p) != 0) return 100;
    const pid_t pid = fork();
    if (pid == 0) {
      close(p[1]);
      shardrec_unique_id_t id;
      size_t got = 0;
      while (got < sizeof(id)) {
        const ssize_t n = read(p[0], reinterpret_cast<char*>(&id) + got, sizeof(id) - got);
        if (n <= 0) _exit(90);
        got += static_cast<size_t>(n);
      }
      _exit(RankMain(run, id, r));
    }
    close(p[0]);
    children.push_back({pid, p[1]});
  }
  shardrec_unique_id_t id;
  if (shardrec_comm_unique_id_create(&id) != SHARDREC_OK) return 101;
  for (const auto& [pid, fd] : children) {
    if (write(fd, &id, sizeof(id)) != static_cast<ssize_t>(sizeof(id))) return 102;
    close(fd);
  }
  int rc = RankMain(run, id, 0);
  for (size_t i = 0; i < children.size(); ++i) {
    const int code = WaitExit(children[i].first);
    const bool victim = run.mode == Mode::kCrash && static_cast<int32_t>(i + 1) == kVictim;
    if (victim ? code != 150 + SIGKILL : code != 0) rc = rc ? rc : 110 + static_cast<int>(i);
    if (code != 0 && !victim) fprintf(stderr, "rank %zu exited with %d\n", i + 1, code);
  }
  return rc;
}

int RunInChild(const RunSpec& run) {
  const pid_t pid = fork();
  if (pid == 0) {
    const int rc = Coordinate(run);
    fflush(nullptr);
    _exit(rc);
  }
  return WaitExit(pid);
}

TEST(CheckpointRestart, KilledRankThenRestartReproducesTheUninterruptedRun) {
  const std::string base = FreshDir("restart");
  const RunSpec straight{Mode::kStraight, 4, base + "/unused", base + "/straight.bin"};
  ASSERT_EQ(RunInChild(straight), 0) << "uninterrupted run";
  const RunSpec crash{Mode::kCrash, 4, base + "/ckpt", ""};
  ASSERT_EQ(RunInChild(crash), 0) << "crash run: a survivor did not fail cleanly in time";
  const RunSpec resume{Mode::kResume, 4, base + "/ckpt", base + "/resumed.bin"};
  ASSERT_EQ(RunInChild(resume), 0) << "restart with 4 processes";
  const std::string a = Slurp(straight.snapshot), b = Slurp(resume.snapshot);
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(a == b) << "the restarted run differs from the uninterrupted one";
  // A different world size continues from the same checkpoint (its batches differ, so only
  // the step counter is comparable).
  const RunSpec resume2{Mode::kResume, 2, base + "/ckpt", base + "/resumed2.bin"};
  ASSERT_EQ(RunInChild(resume2), 0) << "restart with 2 processes";
  const std::string c = Slurp(resume2.snapshot);
  ASSERT_GE(c.size(), sizeof(int64_t));
  int64_t steps = 0;
  std::memcpy(&steps, c.data(), sizeof(steps));
  EXPECT_EQ(steps, kSteps);
}

}  // namespace
}  // namespace shardrec::testing
