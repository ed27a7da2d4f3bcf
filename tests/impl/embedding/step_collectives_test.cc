// The planner prices a host training step as a number of collectives (planner::StepOverhead: 5,
// 4 at world 2, +1 with a data-parallel table, +1 when column shards exchange row statistics;
// the planner's estimator test pins the same counts). This counts what a host collection really
// issues per step, so the model and the runtime cannot drift apart unnoticed. At world 2 the
// input exchange's counts ride with its ids (input_dist.h InputCaps), one collective fewer while
// batches keep their size.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "impl/comm/factory.h"
#include "impl/embedding/collection.h"
#include "impl/sharding/layout.h"
#include "tests/impl/sharding/test_plans.h"

namespace shardrec::embedding {
namespace {

// Forwards every call to `inner` and counts the collectives, its splits' included.
class CountingComm : public comm::Communicator {
 public:
  CountingComm(std::unique_ptr<comm::Communicator> inner, std::shared_ptr<std::atomic<int>> count)
      : inner_(std::move(inner)), count_(std::move(count)) {}
  int Rank() const override { return inner_->Rank(); }
  int Size() const override { return inner_->Size(); }
  Device device() const override { return inner_->device(); }
  const char* backend() const override { return inner_->backend(); }
  std::chrono::milliseconds timeout() const override { return inner_->timeout(); }
  void set_timeout(std::chrono::milliseconds t) override { inner_->set_timeout(t); }
  Status AllReduce(const void* send, void* recv, size_t count, DType dtype, comm::ReduceOp op,
                   const comm::CallOptions& opts) override {
    ++*count_;
    return inner_->AllReduce(send, recv, count, dtype, op, opts);
  }
  Status AllToAllV(const void* send, std::span<const size_t> send_counts, void* recv,
                   std::span<const size_t> recv_counts, DType dtype,
                   const comm::CallOptions& opts) override {
    ++*count_;
    return inner_->AllToAllV(send, send_counts, recv, recv_counts, dtype, opts);
  }
  Status AllGatherV(const void* send, size_t send_count, void* recv,
                    std::span<const size_t> recv_counts, DType dtype,
                    const comm::CallOptions& opts) override {
    ++*count_;
    return inner_->AllGatherV(send, send_count, recv, recv_counts, dtype, opts);
  }
  Status ReduceScatterV(const void* send, void* recv, std::span<const size_t> recv_counts,
                        DType dtype, comm::ReduceOp op, const comm::CallOptions& opts) override {
    ++*count_;
    return inner_->ReduceScatterV(send, recv, recv_counts, dtype, op, opts);
  }
  Status Broadcast(void* buf, size_t count, DType dtype, int root,
                   const comm::CallOptions& opts) override {
    ++*count_;
    return inner_->Broadcast(buf, count, dtype, root, opts);
  }
  Status Barrier(const comm::CallOptions& opts) override {
    ++*count_;
    return inner_->Barrier(opts);
  }
  Status Split(int color, int key, std::unique_ptr<comm::Communicator>* out) override {
    std::unique_ptr<comm::Communicator> child;
    SR_RETURN_IF_ERROR(inner_->Split(color, key, &child));
    if (child) *out = std::make_unique<CountingComm>(std::move(child), count_);
    return Status::Ok();
  }
  void Abort() override { inner_->Abort(); }
  Status AsyncError() const override { return inner_->AsyncError(); }

 private:
  std::unique_ptr<comm::Communicator> inner_;
  std::shared_ptr<std::atomic<int>> count_;
};

// Collectives per training step of rank 0 (both ranks issue the same ones), counted over three
// steps after two warm-up steps.
int CollectivesPerStep(std::shared_ptr<const sharding::Plan> plan, optim::OptimizerType type,
                       int kWorld = 2) {
  constexpr int kBatch = 4, kLen = 2;
  std::vector<std::unique_ptr<comm::Communicator>> group;
  EXPECT_TRUE(comm::CreateLocalGroup(kWorld, comm::CommOptions(), &group).ok());
  std::vector<std::shared_ptr<std::atomic<int>>> counts;
  std::vector<int> per_step(kWorld, -1);
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) counts.push_back(std::make_shared<std::atomic<int>>(0));
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      auto comm = std::make_shared<CountingComm>(std::move(group[r]), counts[r]);
      optim::OptimizerConfig opt;
      opt.type = type;
      std::unique_ptr<EmbeddingCollection> coll;
      if (!EmbeddingCollection::Create(plan, comm, &opt, CollectionOptions(), &coll).ok()) return;
      const auto features = static_cast<int64_t>(plan->features.size());
      std::vector<int32_t> lengths(static_cast<size_t>(features * kBatch), kLen);
      std::vector<int64_t> ids;
      for (const auto& t : plan->tables) {
        for (int64_t i = 0; i < kBatch * kLen; ++i) ids.push_back((i * 7 + r) % t.rows);
      }
      Batch batch;
      batch.batch_size = kBatch;
      batch.num_features = features;
      batch.lengths = lengths.data();
      batch.num_lengths = lengths.size();
      batch.values = ids.data();
      batch.num_values = ids.size();
      int64_t dim = 0;
      for (const auto& t : plan->tables) dim += t.dim;
      std::vector<float> out(static_cast<size_t>(kBatch * dim)), grad(out.size(), 0.25f);
      constexpr int kWarmup = 2, kSteps = 3;
      for (int s = 0; s < kWarmup + kSteps; ++s) {
        if (s == kWarmup) counts[r]->store(0);
        if (!coll->Forward(batch, out.data(), out.size()).ok()) return;
        if (!coll->Backward(grad.data(), grad.size()).ok()) return;
      }
      per_step[r] = counts[r]->load() / kSteps;
      EXPECT_EQ(counts[r]->load() % kSteps, 0) << "rank " << r;
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 1; r < kWorld; ++r) EXPECT_EQ(per_step[0], per_step[r]) << "rank " << r;
  return per_step[0];
}

using sharding::testing::Table;

struct Case {
  const char* name;
  bool data_parallel;
  bool column_wise;
  optim::OptimizerType optimizer;
  int expected;
};

TEST(StepCollectives, AHostStepIssuesWhatThePlannerCounts) {
  using optim::OptimizerType;
  const Case cases[] = {
      // World 2: the planner's count less the input exchange's round of counts.
      {"table-wise, SGD", false, false, OptimizerType::kSgd, 4},
      {"table-wise + data-parallel, row-wise Adagrad", true, false, OptimizerType::kRowWiseAdagrad,
       5},
      {"column-wise, SGD (no row statistics)", false, true, OptimizerType::kSgd, 4},
      {"column-wise, row-wise Adagrad (row statistics exchanged)", false, true,
       OptimizerType::kRowWiseAdagrad, 5},
      {"column-wise + data-parallel, LAMB", true, true, OptimizerType::kLamb, 6},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto plan = std::make_shared<sharding::Plan>();
    plan->world_size = 2;
    plan->features = {{"a", 2.0f}, {"b", 2.0f}};
    plan->tables = {Table("tw", 40, 8, {0}), Table("second", 30, 8, {1})};
    plan->table_plans.push_back(sharding::MakeTableWise(plan->tables[0], 1));
    plan->table_plans.push_back(
        c.data_parallel ? sharding::MakeDataParallel(plan->tables[1], 2)
        : c.column_wise ? sharding::MakeColumnSplit(
                              plan->tables[1], sharding::ShardingType::kColumnWise, {4, 4}, {0, 1})
                        : sharding::MakeTableWise(plan->tables[1], 0));
    if (c.data_parallel && c.column_wise) {
      plan->features.push_back({"c", 2.0f});
      plan->tables.push_back(Table("cw", 20, 8, {2}));
      plan->table_plans.push_back(sharding::MakeColumnSplit(
          plan->tables[2], sharding::ShardingType::kColumnWise, {4, 4}, {1, 0}));
    }
    EXPECT_EQ(CollectivesPerStep(plan, c.optimizer), c.expected);
  }
}

// A table-row-wise table on one of two hosts reduces inside its host before its rows cross
// (host_reduce.h): two collectives more, over the host's communicator, forward and backward.
TEST(StepCollectives, AReducedTableRowWiseTableAddsTheHostRounds) {
  auto plan = std::make_shared<sharding::Plan>();
  plan->world_size = 4;
  plan->local_world_size = 2;
  plan->features = {{"a", 2.0f}, {"b", 2.0f}};
  plan->tables = {Table("trw", 40, 8, {0}), Table("tw", 30, 8, {1})};
  plan->table_plans.push_back(sharding::MakeTableRowWise(plan->tables[0], 1, 2));
  plan->table_plans.push_back(sharding::MakeTableWise(plan->tables[1], 0));
  EXPECT_EQ(CollectivesPerStep(plan, optim::OptimizerType::kSgd, 4), 7);
}

// A dynamic table's forward must agree on every rank's output buffer and mode before it inserts
// rows; a plain forward does so in its input exchange, so its step issues what a fixed table's
// does (the planner prices both alike). A data-parallel dynamic table's copies add only the
// all-gather of their ids: the gather sizes ride on the input exchange too.
TEST(StepCollectives, ADynamicTableAddsNoCollectiveToAPlainStep) {
  for (bool data_parallel : {false, true}) {
    SCOPED_TRACE(data_parallel ? "data-parallel" : "table-wise");
    auto plan = std::make_shared<sharding::Plan>();
    plan->world_size = 2;
    plan->features = {{"a", 2.0f}, {"b", 2.0f}};
    plan->tables = {Table("tw", 40, 8, {0}), Table("second", 30, 8, {1})};
    plan->tables[0].dynamic.enabled = true;
    plan->tables[1].dynamic.enabled = data_parallel;
    plan->table_plans.push_back(sharding::MakeTableWise(plan->tables[0], 1));
    plan->table_plans.push_back(data_parallel ? sharding::MakeDataParallel(plan->tables[1], 2)
                                              : sharding::MakeTableWise(plan->tables[1], 0));
    // 4 at world 2, + the data-parallel table's all-reduce and its copies' id all-gather.
    EXPECT_EQ(CollectivesPerStep(plan, optim::OptimizerType::kSgd), data_parallel ? 6 : 4);
  }
}

}  // namespace
}  // namespace shardrec::embedding
