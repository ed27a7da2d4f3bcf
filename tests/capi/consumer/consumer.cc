// Downstream C++ program built against the INSTALLED prefix through find_package(shardrec) and
// the header-only shardrec.hpp: the C++ sample of docs/bindings.md, then 2 ranks (threads) training
// 3 tables (one forced column-wise over both ranks) with a per-table optimizer, the output keys and
// offsets, samples/s from the step timings, and one bad id sent on purpose: the rank that sent it
// and its peer both get a shardrec::Error carrying SHARDREC_EINVAL and a message; and a sequence
// collection's forward into a vector the wrapper sizes.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "shardrec/shardrec.hpp"

namespace {

// The C++ sample of docs/bindings.md: plan, create, one forward/backward step at world size 1.
double ReadmeSample() {
  // readme:cpp:begin
  shardrec_feature_config_t feature = SHARDREC_FEATURE_CONFIG_INIT;
  feature.name = "user";
  int32_t reads[] = {0};
  shardrec_table_config_t table = SHARDREC_TABLE_CONFIG_INIT;
  table.name = "users";
  table.rows = 1000;
  table.dim = 16;
  table.features = reads;
  table.num_features = 1;
  shardrec_topology_t topology = SHARDREC_TOPOLOGY_INIT;
  topology.world_size = 1;

  auto plan = shardrec::Plan::create({&table, 1}, {&feature, 1}, topology);  // throws Error
  auto comms = shardrec::Comm::local_group(1);
  auto coll = shardrec::EmbeddingCollection::create(plan, comms[0]);
  std::vector<int32_t> lengths = {2, 1};
  std::vector<int64_t> ids = {3, 7, 999};
  std::vector<float> out = coll.forward(shardrec::kjt_view(2, 1, lengths, ids));  // [2, 16]
  coll.backward(out);  // gradient of 0.5 * |out|^2
  // readme:cpp:end
  double loss = 0;
  for (float v : out) loss += 0.5 * v * v;
  return loss;
}

// A sequence (NONE-pooled) collection through the wrapper: forward(batch) sizes its vector by
// output_size (one row per id), and the rows match the pooled lookup of one-id bags.
void SequenceSample() {
  shardrec_feature_config_t feature = SHARDREC_FEATURE_CONFIG_INIT;
  feature.name = "clicks";
  int32_t reads[] = {0};
  shardrec_table_config_t table = SHARDREC_TABLE_CONFIG_INIT;
  table.name = "items";
  table.rows = 100;
  table.dim = 8;
  table.pooling = SHARDREC_POOLING_NONE;
  table.features = reads;
  table.num_features = 1;
  shardrec_topology_t topology = SHARDREC_TOPOLOGY_INIT;
  topology.world_size = 1;
  auto plan = shardrec::Plan::create({&table, 1}, {&feature, 1}, topology);
  auto comms = shardrec::Comm::local_group(1);
  auto coll = shardrec::EmbeddingCollection::create(plan, comms[0]);
  std::vector<int32_t> lengths = {3, 0, 2};
  std::vector<int64_t> ids = {4, 9, 4, 50, 1};
  const auto view = shardrec::kjt_view(3, 1, lengths, ids);
  if (!coll.is_sequence() || coll.output_size(view) != ids.size() * 8)
    throw std::runtime_error("sequence collection: wrong output size");
  std::vector<float> out = coll.forward(view);  // [5 ids, 8]
  if (out.size() != ids.size() * 8) throw std::runtime_error("sequence forward: wrong size");
  for (int k = 0; k < 8; ++k)  // ids[0] and ids[2] are both row 4
    if (out[k] != out[2 * 8 + k]) throw std::runtime_error("sequence forward: rows differ");
  std::printf("sequence sample: %zu rows of 8\n", out.size() / 8);
}

constexpr int kWorld = 2;
constexpr int kBatch = 16;
const char* const kFeatures[] = {"user", "item", "shop"};

shardrec::Plan MakePlan() {
  shardrec_feature_config_t features[3];
  for (int f = 0; f < 3; ++f) {
    features[f] = SHARDREC_FEATURE_CONFIG_INIT;
    features[f].name = kFeatures[f];
  }
  static const int32_t reads[3][1] = {{0}, {1}, {2}};
  const char* names[] = {"users", "items", "shops"};
  const int64_t rows[] = {500, 2000, 100};
  shardrec_optimizer_config_t adagrad = SHARDREC_OPTIMIZER_CONFIG_INIT;
  adagrad.type = SHARDREC_OPTIMIZER_ROWWISE_ADAGRAD;
  adagrad.learning_rate = 0.05f;
  shardrec_table_config_t tables[3];
  for (int t = 0; t < 3; ++t) {
    tables[t] = SHARDREC_TABLE_CONFIG_INIT;
    tables[t].name = names[t];
    tables[t].rows = rows[t];
    tables[t].dim = 16;
    tables[t].features = reads[t];
    tables[t].num_features = 1;
  }
  tables[1].optimizer = &adagrad;  // "items" trains with its own optimizer
  // "shops" column-wise, one 8-wide block per rank.
  static const int32_t both[] = {0, 1};
  shardrec_table_constraints_t cw = SHARDREC_TABLE_CONSTRAINTS_INIT;
  cw.table = "shops";
  cw.sharding_types = 1u << SHARDREC_SHARDING_COLUMN_WISE;
  cw.ranks = both;
  cw.num_ranks = 2;
  shardrec_topology_t topo = SHARDREC_TOPOLOGY_INIT;
  topo.world_size = kWorld;
  topo.batch_size = kBatch;
  return shardrec::Plan::create(tables, features, topo, {&cw, 1});
}

struct RankResult {
  double loss = -1;
  double samples_per_second = 0;
  int bad_code = 0;
  std::string bad_message;
  std::string error;
};

void TrainRank(const shardrec::Plan& plan, shardrec::Comm& comm, int rank, RankResult* res) {
  try {
    auto coll = shardrec::EmbeddingCollection::create(plan, comm);
    const int64_t dim = coll.output_dim();
    std::vector<int32_t> lengths(3 * kBatch, 1);
    std::vector<int64_t> ids(3 * kBatch);
    std::vector<float> out(static_cast<size_t>(kBatch * dim));
    for (int step = 0; step < 20; ++step) {
      for (int b = 0; b < kBatch; ++b) {
        ids[b] = (rank * 37 + b * 11 + step) % 500;
        ids[kBatch + b] = (rank * 53 + b * 7 + step * 3) % 2000;
        ids[2 * kBatch + b] = (rank + b) % 100;
      }
      coll.forward(shardrec::kjt_view(kBatch, 3, lengths, ids), out);
      double loss = 0;
      for (float& v : out) {  // regress every output to 0: gradient = out
        loss += 0.5 * v * v;
      }
      res->loss = loss / kBatch;
      coll.backward(out);
    }
    auto t = coll.step_timings();
    res->samples_per_second = t.total_seconds > 0 ? t.samples / t.total_seconds : 0;
    if (rank == 0) {
      for (const auto& o : coll.outputs()) {
        std::printf("output %s (table %s): offset %lld, width %lld\n", o.feature.c_str(),
                    o.table.c_str(), static_cast<long long>(o.offset),
                    static_cast<long long>(o.width));
      }
    }
    // Rank 1 sends an id outside "users" on purpose; both ranks must fail the forward.
    if (rank == 1) ids[3] = 500;
    try {
      coll.forward(shardrec::kjt_view(kBatch, 3, lengths, ids), out);
    } catch (const shardrec::Error& e) {
      res->bad_code = e.code();
      res->bad_message = e.what();
    }
  } catch (const std::exception& e) {
    res->error = e.what();
  }
}

// A barrier no peer enters, aborted from another thread: the blocked call throws EABORTED.
void AbortUnblocksABarrier() {
  auto comms = shardrec::Comm::local_group(2);
  shardrec_status_t code = SHARDREC_OK;
  std::thread blocked([&] {
    try {
      comms[1].barrier();
    } catch (const shardrec::Error& e) {
      code = e.code();
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  comms[1].abort();
  blocked.join();
  if (code != SHARDREC_EABORTED)
    throw std::runtime_error(std::string("an aborted barrier gave ") +
                             shardrec_status_string(code));
  std::printf("abort from another thread unblocked a barrier\n");
}

}  // namespace

int main() {
  try {
    double sample = ReadmeSample();
    if (!(sample > 0)) throw std::runtime_error("the documented sample gave no output");
    std::printf("readme sample loss %f\n", sample);
    SequenceSample();
    AbortUnblocksABarrier();

    auto plan = MakePlan();
    auto [type, shards] = plan.table_sharding(plan.find_table("shops"));
    if (type != SHARDREC_SHARDING_COLUMN_WISE || shards != 2) {
      std::fprintf(stderr, "shops: sharding %d with %zu shards\n%s", type, shards,
                   plan.stats().c_str());
      return 1;
    }
    auto comms = shardrec::Comm::local_group(kWorld);
    RankResult results[kWorld];
    std::vector<std::thread> threads;
    for (int r = 0; r < kWorld; ++r)
      threads.emplace_back(TrainRank, std::cref(plan), std::ref(comms[r]), r, &results[r]);
    for (auto& t : threads) t.join();
    for (int r = 0; r < kWorld; ++r) {
      const RankResult& res = results[r];
      if (!res.error.empty() || !std::isfinite(res.loss)) {
        std::fprintf(stderr, "rank %d failed: %s\n", r, res.error.c_str());
        return 1;
      }
      if (res.bad_code != SHARDREC_EINVAL || res.bad_message.empty()) {
        std::fprintf(stderr, "rank %d: the bad id gave code %d (%s)\n", r, res.bad_code,
                     res.bad_message.c_str());
        return 1;
      }
      std::printf("rank %d: bad id rejected: %s\n", r, res.bad_message.c_str());
      std::printf("rank %d: %.0f samples/s\n", r, res.samples_per_second);
    }
    std::printf("final loss %f (rank 0), %f (rank 1)\n", results[0].loss, results[1].loss);
    return 0;
  } catch (const shardrec::Error& e) {
    std::fprintf(stderr, "%s: %s\n", e.code_name(), e.what());
    return 1;
  }
}
