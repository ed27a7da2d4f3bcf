// 2D parallelism with ranks as processes: the parent (rank 0) forks three children before it
// has any thread, creates the unique id, sends it down pipes, and all four processes train a
// 2 replica x 2-way sharded collection with SGD, checking against the global reference model.
// Children report through their exit code (their gtest failures stay in their own process).
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "shardrec/replica.h"
#include "tests/capi/embedding/embedding_test_util.h"

namespace shardrec::testing {
namespace {

constexpr int32_t kWorld = 4;
constexpr int32_t kShard = 2;
constexpr float kRtol = 1e-5f, kAtol = 1e-6f;

// Trains on this rank and returns the number of mismatches (or a large code on API errors).
int TrainRank(const shardrec_unique_id_t& id, int32_t rank, int32_t sharding_type, int32_t layout) {
  Scenario s = StandardScenario(kShard, sharding_type, SHARDREC_POOLING_SUM);
  s.optimizer.lr = 0.1f;
  s.steps = 3;
  Scenario global = s;
  global.world = kWorld;
  ReferenceModel ref(s.num_features, s.tables, s.optimizer, s.seed, kWorld);
  const auto batches = MakeBatches(global, ref);
  const auto grads = MakeGrads(global, batches, ref.output_dim());
  std::vector<std::vector<float>> expected_out;
  for (int32_t step = 0; step < s.steps; ++step) {
    expected_out.push_back(ref.Forward(batches[step][rank]));
    ref.Backward(batches[step], grads[step]);
  }
  shardrec_comm_options_t co = SHARDREC_COMM_OPTIONS_INIT;
  co.timeout_ms = 30000;
  shardrec_comm_t* world = nullptr;
  if (shardrec_comm_create(&world, &id, kWorld, rank, &co) != SHARDREC_OK) return 200;
  shardrec_mesh_options_t mo;
  shardrec_mesh_options_init(&mo, SHARDREC_MESH_OPTIONS_VERSION);
  mo.sharding_group_size = kShard;
  mo.layout = layout;
  shardrec_mesh_t* mesh = nullptr;
  if (shardrec_mesh_create(&mesh, world, &mo) != SHARDREC_OK) return 201;
  PlanPtr plan = MakePlan(s);
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  shardrec_embedding_options_t eo;
  shardrec_embedding_options_init(&eo, SHARDREC_EMBEDDING_OPTIONS_VERSION);
  eo.seed = s.seed;
  shardrec_embedding_t* coll = nullptr;
  if (!plan || shardrec_mesh_embedding_create(&coll, mesh, plan.get(), &opt, &eo) != SHARDREC_OK) {
    return 202;
  }
  int mismatches = 0;
  for (int32_t step = 0; step < s.steps; ++step) {
    KjtHolder kjt(batches[step][rank], s.num_features, false);
    std::vector<float> out(expected_out[step].size());
    if (shardrec_embedding_forward(coll, kjt.view(), out.data(), out.size(), nullptr) !=
        SHARDREC_OK)
      return 203;
    std::string first;
    mismatches += static_cast<int>(CountMismatches(out, expected_out[step], kRtol, kAtol, &first));
    if (shardrec_embedding_backward(coll, grads[step][rank].data(), grads[step][rank].size(),
                                    nullptr) != SHARDREC_OK)
      return 204;
    if (shardrec_mesh_step(mesh, coll, nullptr) != SHARDREC_OK) return 205;
  }
  for (size_t t = 0; t < s.tables.size(); ++t) {
    std::vector<float> w(static_cast<size_t>(s.tables[t].rows) * s.tables[t].dim);
    if (shardrec_embedding_get_weights(coll, s.tables[t].name.c_str(), w.data(), w.size()) !=
        SHARDREC_OK)
      return 206;
    std::string first;
    mismatches += static_cast<int>(CountMismatches(w, ref.weights(t), kRtol, kAtol, &first));
  }
  shardrec_embedding_destroy(coll);
  shardrec_mesh_destroy(mesh);
  shardrec_comm_destroy(world);
  return mismatches > 100 ? 100 : mismatches;
}

struct Child {
  pid_t pid;
  int fd;
};

Child ForkRank(int32_t rank, int32_t sharding_type, int32_t layout) {
  int p[2];
  if (pipe(p) != 0) return {-1, -1};
  pid_t pid = fork();
  if (pid == 0) {
    close(p[1]);
    shardrec_unique_id_t id;
    size_t got = 0;
    while (got < sizeof(id)) {
      ssize_t n = read(p[0], reinterpret_cast<char*>(&id) + got, sizeof(id) - got);
      if (n <= 0) _exit(90);
      got += static_cast<size_t>(n);
    }
    int rc = TrainRank(id, rank, sharding_type, layout);
    _exit(rc != 0 ? rc : (::testing::Test::HasFailure() ? 91 : 0));
  }
  close(p[0]);
  return {pid, p[1]};
}

int WaitExit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status)
                           : 150 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

int ThreadCount() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
  }
  return n;
}

void RunProcesses(int32_t sharding_type, int32_t layout) {
  // Forking is only safe while this process is single-threaded: communicators of an earlier
  // test must have taken their threads with them when destroyed.
  ASSERT_EQ(ThreadCount(), 1) << "threads left behind before fork";
  std::vector<Child> children;
  for (int32_t r = 1; r < kWorld; ++r) children.push_back(ForkRank(r, sharding_type, layout));
  for (const Child& c : children) ASSERT_GT(c.pid, 0) << "fork failed";
  shardrec_unique_id_t id;
  ASSERT_EQ(shardrec_comm_unique_id_create(&id), SHARDREC_OK) << shardrec_last_error();
  for (const Child& c : children) {
    ASSERT_EQ(write(c.fd, &id, sizeof(id)), static_cast<ssize_t>(sizeof(id)));
    close(c.fd);
  }
  EXPECT_EQ(TrainRank(id, 0, sharding_type, layout), 0) << "rank 0: " << shardrec_last_error();
  for (size_t i = 0; i < children.size(); ++i) {
    EXPECT_EQ(WaitExit(children[i].pid), 0) << "rank " << i + 1 << " reported a failure";
  }
}

// Each test forks before any thread exists in this process (the unique id's store thread is
// created after the forks), so every fork is safe.
TEST(Replica2DProcesses, RowWiseDefaultLayoutEqualsTheGlobalModel) {
  RunProcesses(SHARDREC_SHARDING_ROW_WISE, SHARDREC_MESH_LAYOUT_DEFAULT);
}

TEST(Replica2DProcesses, ColumnWiseInterHostLayoutEqualsTheGlobalModel) {
  RunProcesses(SHARDREC_SHARDING_COLUMN_WISE, SHARDREC_MESH_LAYOUT_INTER_HOST);
}

}  // namespace
}  // namespace shardrec::testing
