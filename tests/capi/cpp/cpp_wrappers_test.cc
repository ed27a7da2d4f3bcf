// Every wrapper of shardrec.hpp through one small real scenario: two ranks on threads train a
// fixed and a dynamic table for two steps, read the dynamic table's statistics and delta, save
// a checkpoint that a serving handle opens, pins, patches with the delta and reloads; a 2D mesh
// of two replicas syncs; DDP averages and FSDP steps; an MLP, a DCN and a dense optimizer train
// and infer; a world-1 group joins from launcher variables; moved-from objects say so.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "shardrec/shardrec.hpp"

namespace {

void Require(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("check failed: " + what);
}

// Runs body(rank) on one thread per rank of a local group; rethrows the first failure.
void OnRanks(std::vector<shardrec::Comm>& comms, const std::function<void(int)>& body) {
  std::vector<std::string> errors(comms.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < comms.size(); ++r) {
    threads.emplace_back([&, r] {
      try {
        body(static_cast<int>(r));
      } catch (const std::exception& e) {
        errors[r] = "rank " + std::to_string(r) + ": " + e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) Require(e.empty(), e);
}

// Error's code and message for a call that must fail.
shardrec::Error Failure(const std::function<void()>& call) {
  try {
    call();
  } catch (const shardrec::Error& e) {
    return e;
  }
  throw std::runtime_error("the call did not throw shardrec::Error");
}

shardrec::Plan MakePlan(int32_t world) {
  static const char* const names[] = {"user", "item"};
  shardrec_feature_config_t features[2];
  for (int f = 0; f < 2; ++f) {
    features[f] = SHARDREC_FEATURE_CONFIG_INIT;
    features[f].name = names[f];
  }
  static const int32_t reads[2][1] = {{0}, {1}};
  static shardrec_dynamic_table_config_t dynamic = SHARDREC_DYNAMIC_TABLE_CONFIG_INIT;
  dynamic.eviction = SHARDREC_EVICTION_LRU;
  shardrec_table_config_t tables[2];
  tables[0] = SHARDREC_TABLE_CONFIG_INIT;
  tables[0].name = "users";
  tables[0].rows = 100;
  tables[0].dim = 8;
  tables[0].features = reads[0];
  tables[0].num_features = 1;
  tables[1] = SHARDREC_TABLE_CONFIG_INIT;
  tables[1].name = "items";
  tables[1].rows = 64;  // capacity of the dynamic table
  tables[1].dim = 8;
  tables[1].features = reads[1];
  tables[1].num_features = 1;
  tables[1].dynamic = &dynamic;
  shardrec_topology_t topology = SHARDREC_TOPOLOGY_INIT;
  topology.world_size = world;
  topology.batch_size = 4;
  return shardrec::Plan::create(tables, features, topology);
}

// One training step on rank r's 4 samples; returns the forward output.
std::vector<float> Step(shardrec::EmbeddingCollection& coll, int r, int step) {
  std::vector<int32_t> lengths(8, 1);
  std::vector<int64_t> ids;
  for (int i = 0; i < 4; ++i) ids.push_back(r * 4 + i);                              // users
  for (int i = 0; i < 4; ++i) ids.push_back(int64_t{1} << 40 | (r * 4 + i + step));  // items
  auto batch = shardrec::kjt_view(4, 2, lengths, ids);
  std::vector<float> out = coll.forward(batch);
  coll.backward(out);
  return out;
}

void TrainSaveServe(const std::string& dir) {
  const shardrec::Plan plan = MakePlan(2);
  Require(plan.num_tables() == 2 && plan.num_features() == 2 && plan.world_size() == 2,
          "plan shape");
  Require(plan.table_name(plan.find_table("items")) == "items" && plan.table_dim(1) == 8 &&
              plan.table_rows(0) == 100 && plan.feature_name(1) == "item",
          "plan queries");
  Require(plan.shard(0, 0).cols > 0 && !plan.to_json().empty() && plan.hash() != 0,
          "plan shard, json, hash");
  Require(shardrec::Plan::from_json(plan.to_json()).hash() == plan.hash(), "plan json round trip");

  auto comms = shardrec::Comm::local_group(2);
  std::vector<shardrec::DynamicDelta> deltas(2);
  std::vector<int64_t> sizes(2), global_sizes(2);
  OnRanks(comms, [&](int r) {
    shardrec::Comm& comm = comms[r];
    Require(comm.rank() == r && comm.size() == 2, "comm rank and size");
    comm.set_timeout(60000);
    std::vector<float> send = {float(r + 1), 2}, sum(2), gathered(4), bcast = {float(r), 0};
    comm.allreduce(send, sum);
    Require(sum[0] == 3 && sum[1] == 4, "allreduce");
    comm.allgather(send, gathered);
    Require(gathered[0] == 1 && gathered[2] == 2, "allgather");
    comm.broadcast(bcast, 1);
    Require(bcast[0] == 1, "broadcast");
    shardrec::Comm half = comm.split(0, -r);
    Require(half.size() == 2 && half.rank() == 1 - r, "split");
    comm.barrier();

    auto coll = shardrec::EmbeddingCollection::create(plan, comm);
    Require(coll.output_dim() == 16 && !coll.is_sequence() && coll.outputs().size() == 2,
            "collection shape");
    Step(coll, r, 0);
    coll.dynamic_mark("items");
    Step(coll, r, 1);
    Require(coll.num_steps() == 2 && coll.is_training(), "steps and mode");
    const shardrec_dynamic_table_stats_t stats = coll.dynamic_stats("items");
    Require(stats.size > 0 && stats.total_inserted >= stats.size, "dynamic stats");
    // Table-wide: the sum over both ranks, the same on each.
    const shardrec_dynamic_table_stats_t global = coll.dynamic_stats_global("items");
    sizes[r] = stats.size;
    global_sizes[r] = global.size;
    deltas[r] = coll.dynamic_delta("items");
    Require(deltas[r].dim == 8 && !deltas[r].ids.empty() &&
                deltas[r].rows.size() == deltas[r].ids.size() * 8,
            "dynamic delta");
    std::vector<float> users(100 * 8);
    coll.get_weights("users", users);
    coll.set_weights("users", users);
    Require(coll.table_optimizer("users").type == SHARDREC_OPTIMIZER_SGD, "table optimizer");
    Require(coll.timings().second >= 0 && coll.step_timings().samples > 0, "timings");
    coll.save_checkpoint(dir);
    coll.load_checkpoint(dir);
    coll.set_training(false);
    Require(!coll.is_training(), "eval mode");
  });
  Require(deltas[0].ids == deltas[1].ids && deltas[0].rows == deltas[1].rows,
          "every rank has the whole delta");
  Require(global_sizes[0] == sizes[0] + sizes[1] && global_sizes[1] == global_sizes[0],
          "dynamic_stats_global sums the ranks' sizes on every rank");

  // Serving: open, look up, pin, patch with the delta (a new version), reload.
  auto inf = shardrec::Inference::open(dir);
  Require(inf.output_dim() == 16 && inf.tables().size() == 2 && inf.num_features() == 2,
          "serving shape");
  std::vector<int32_t> lengths = {1, 1};
  std::vector<int64_t> ids = {3, deltas[0].ids[0]};
  const auto batch = shardrec::kjt_view(1, 2, lengths, ids);
  std::vector<float> out = inf.lookup(batch);
  auto snapshot = inf.pin();
  const uint64_t pinned = snapshot.version();
  std::vector<float> rows(deltas[0].rows.size(), 0.5f);
  const uint64_t patched = inf.apply_delta("items", deltas[0].ids, rows, {});
  Require(patched > pinned && inf.version() == patched, "delta publishes a version");
  std::vector<float> now = inf.lookup(batch), then(out.size());
  snapshot.lookup(batch, then);
  Require(then == out && now[8] == 0.5f, "the snapshot keeps its version, the handle moves on");
  // VBE: the user's bag once, two item bags; the expanded batch repeats the user's bag.
  std::vector<int32_t> vbe_lengths = {1, 1, 2};
  std::vector<int64_t> vbe_ids = {3, deltas[0].ids[0], 7, 9}, user_once = {1, 2},
                       item_twice = {0, 0, 0, 1};
  const auto vbe =
      shardrec::kjt_vbe_view(shardrec::kjt_view(2, 2, vbe_lengths, vbe_ids), user_once, item_twice);
  std::vector<int32_t> expanded_lengths = {1, 1, 1, 2};
  std::vector<int64_t> expanded_ids = {3, 3, deltas[0].ids[0], 7, 9};
  const auto expanded = shardrec::kjt_view(2, 2, expanded_lengths, expanded_ids);
  std::vector<float> pinned_vbe(inf.output_size(vbe));
  snapshot.lookup(vbe, pinned_vbe);
  Require(inf.lookup(vbe) == inf.lookup(expanded), "a VBE lookup equals the expanded batch's");
  std::vector<float> then_expanded(out.size() * 2);
  snapshot.lookup(expanded, then_expanded);
  Require(pinned_vbe == then_expanded, "a pinned VBE lookup equals the pinned expanded one");
  const auto feature_major =
      shardrec::kjt_vbe_view(shardrec::kjt_view(2, 2, vbe_lengths, vbe_ids), user_once);
  const std::vector<float> rows3 = inf.lookup(feature_major), all = inf.lookup(expanded);
  Require(rows3.size() == 3 * 8 && std::equal(rows3.begin(), rows3.begin() + 16, all.begin()) &&
              std::equal(rows3.begin() + 16, rows3.end(), all.begin() + 24),
          "without inverse indices each feature's rows come feature-major");
  Require(Failure([&] { (void)inf.lookup(shardrec::kjt_vbe_view(expanded, user_once)); }).code() ==
              SHARDREC_EINVAL,
          "a VBE view whose sizes do not add up is refused");
  inf.reload(dir);
  Require(inf.version() > patched, "reload publishes a version");
  // int8 rows: their scale and bias, and a lookup within scale / 2 of the fp32 one.
  shardrec_inference_options_t q = SHARDREC_INFERENCE_OPTIONS_INIT;
  q.default_storage = SHARDREC_SERVING_INT8;
  auto quantized = shardrec::Inference::open(dir, &q);
  std::vector<int32_t> one = {1, 0};
  std::vector<int64_t> row3 = {3};
  const auto users_only = shardrec::kjt_view(1, 2, one, row3);
  const std::vector<float> exact = inf.lookup(users_only), approx = quantized.lookup(users_only);
  const auto scales = quantized.row_scales("users", row3);
  Require(scales.scales.size() == 1 && scales.scales[0] > 0 && scales.version == 1,
          "row_scales of an int8 table");
  for (size_t c = 0; c < 8; ++c)
    Require(std::fabs(exact[c] - approx[c]) <= scales.scales[0] / 2 + 1e-6f,
            "an int8 lookup is within scale / 2");
  Require(Failure([&] { (void)inf.row_scales("users", row3); }).code() == SHARDREC_EINVAL,
          "row_scales of an fp32 table is refused");
  const auto missing = Failure([&] { (void)inf.dense_tensor("nope"); });
  Require(missing.code() < 0, "an unknown dense tensor is refused");
  std::printf("train, save, serve: %zu delta rows, versions %llu -> %llu\n", deltas[0].ids.size(),
              static_cast<unsigned long long>(pinned), static_cast<unsigned long long>(patched));
}

// A VBE training step (one user bag read by 3 samples, 2 item bags) against the same step of the
// expanded batch on a twin collection: the same forward bits, and tables updated alike (within
// fp32 rounding of the summed gradients).
void VbeTraining() {
  const shardrec::Plan plan = MakePlan(1);
  auto comms = shardrec::Comm::local_group(1);
  auto twins = shardrec::Comm::local_group(1);
  auto vbe_coll = shardrec::EmbeddingCollection::create(plan, comms[0]);
  auto plain_coll = shardrec::EmbeddingCollection::create(plan, twins[0]);
  std::vector<int32_t> lengths = {1, 1, 2}, expanded_lengths = {1, 1, 1, 1, 2, 2};
  std::vector<int64_t> ids = {3, 5, 7, 9}, expanded_ids = {3, 3, 3, 5, 7, 9, 7, 9};
  std::vector<int64_t> sizes = {1, 2}, inverse = {0, 0, 0, 0, 1, 1};
  const auto vbe = shardrec::kjt_vbe_view(shardrec::kjt_view(3, 2, lengths, ids), sizes, inverse);
  const auto expanded = shardrec::kjt_view(3, 2, expanded_lengths, expanded_ids);
  Require(vbe_coll.output_size(vbe) == plain_coll.output_size(expanded), "VBE output size");
  const std::vector<float> got = vbe_coll.forward(vbe), want = plain_coll.forward(expanded);
  Require(got == want, "a VBE forward equals the expanded batch's");
  vbe_coll.backward(got);
  plain_coll.backward(want);
  const std::vector<float> after_vbe = vbe_coll.forward(expanded),
                           after_plain = plain_coll.forward(expanded);
  bool moved = false;
  for (size_t i = 0; i < after_vbe.size(); ++i) {
    Require(std::fabs(after_vbe[i] - after_plain[i]) <= 1e-6f * (1 + std::fabs(after_plain[i])),
            "the VBE backward updates the rows as the expanded batch's");
    moved = moved || after_plain[i] != want[i];
  }
  Require(moved, "the backward moved the rows");
  Require(Failure([&] {
            (void)vbe_coll.forward(shardrec::kjt_vbe_view(expanded, sizes, inverse));
          }).code() == SHARDREC_EINVAL,
          "a VBE batch whose sizes do not add up is refused");
  // A zero-size batch with inverse indices: an empty vector's span is inverse indices still.
  std::vector<int32_t> no_lengths = {1, 1, 2};
  const std::vector<int64_t> no_inverse;
  const auto empty = shardrec::kjt_vbe_view(shardrec::kjt_view(0, 2, no_lengths, ids), sizes,
                                            std::span<const int64_t>(no_inverse));
  Require(empty.inverse_indices != nullptr && empty.num_inverse_indices == 0,
          "an empty span of inverse indices is a non-NULL pointer with 0 entries");
  Require(vbe_coll.output_size(empty) == 0, "a zero-size VBE batch has no output");
  Require(vbe_coll.forward(empty).empty(), "a zero-size VBE batch is a forward");
  Require(shardrec::kjt_vbe_view(expanded, sizes).inverse_indices == nullptr,
          "no inverse indices by default");
  std::printf("VBE training step: %zu floats as the expanded batch\n", got.size());
}

void MeshDdpFsdp() {
  const shardrec::Plan plan = MakePlan(1);  // one shard per sharding group of 1
  auto comms = shardrec::Comm::local_group(2);
  OnRanks(comms, [&](int r) {
    shardrec_mesh_options_t options = SHARDREC_MESH_OPTIONS_INIT;
    options.sharding_group_size = 1;
    auto mesh = shardrec::Mesh::create(comms[r], &options);
    const shardrec::MeshCoords c = mesh.coords();
    Require(c.replica_rank == r && c.shard_rank == 0, "mesh coords");
    Require(mesh.replica_comm().size() == 2 && mesh.sharding_comm().size() == 1, "mesh comms");
    Require(!mesh.describe().empty(), "mesh describe");
    auto coll = mesh.embedding(plan);
    Step(coll, r, 0);
    Require(mesh.step(coll), "mesh step syncs every step by default");
    std::vector<float> users(100 * 8), other(100 * 8);
    coll.get_weights("users", users);
    comms[r].allreduce(users, other);
    for (size_t i = 0; i < users.size(); ++i)
      Require(std::fabs(other[i] - 2 * users[i]) < 1e-5f, "replicas equal after the sync");
    Require(mesh.sync_stats().syncs == 1, "mesh sync stats");

    const std::vector<int64_t> counts = {3, 5};
    auto ddp = shardrec::Ddp::create(comms[r], counts);
    for (size_t t = 0; t < 2; ++t) {
      for (float& g : ddp.grad(t)) g = float(r);
      ddp.mark_ready(t);
    }
    ddp.finish();
    Require(ddp.grad(1)[4] == 0.5f && ddp.stats().steps == 1, "ddp average");

    shardrec_optimizer_config_t sgd = SHARDREC_OPTIMIZER_CONFIG_INIT;
    sgd.learning_rate = 1.0f;
    const std::vector<float> unit(6, 1.0f);
    const std::span<const float> units[] = {unit};
    auto fsdp = shardrec::Fsdp::create(comms[r], units, sgd);
    Require(fsdp.gather(0)[5] == 1.0f, "fsdp gather");
    for (float& g : fsdp.grad(0)) g = float(r + 1);
    fsdp.release(0);
    fsdp.reduce_grad(0);
    fsdp.step();
    const auto [shard, offset] = fsdp.shard(0);
    Require(shard.size() == 3 && offset == 3 * r && shard[0] == -0.5f, "fsdp step");
    Require(fsdp.memory().second > 0, "fsdp memory");
  });
  std::printf("mesh, ddp, fsdp: ok\n");
}

void Dense() {
  const int64_t widths[] = {4, 1};
  shardrec_mlp_options_t options = SHARDREC_MLP_OPTIONS_INIT;
  options.in_features = 3;
  options.out_features = widths;
  options.num_layers = 2;
  options.seed = 7;
  auto mlp = shardrec::Mlp::create(options);
  Require(mlp.dims() == std::make_pair(int64_t{3}, int64_t{1}) && mlp.tensors().size() == 4,
          "mlp shape");
  const std::vector<float> x = {0.1f, 0.2f, 0.3f, -0.4f, 0.5f, 0.6f};
  std::vector<float> y(2), inferred(2), dx(6);
  mlp.forward(x, 2, y);
  mlp.infer(x, 2, inferred);
  Require(y == inferred, "mlp infer equals forward");
  const std::vector<float> labels = {1, 0};
  std::vector<float> dy(2);
  const double loss = shardrec::bce_with_logits(y, labels, 2, dy);
  mlp.zero_grad();
  mlp.backward(dy, dx);
  auto adam = [] {
    shardrec_optimizer_config_t c = SHARDREC_OPTIMIZER_CONFIG_INIT;
    c.type = SHARDREC_OPTIMIZER_ADAM;
    c.learning_rate = 0.1f;
    return shardrec::DenseOptimizer::create(c);
  }();
  adam.step(mlp.tensors());
  Require(adam.steps() == 1 && !adam.state(0, 0).empty(), "dense optimizer");
  mlp.forward(x, 2, y);
  Require(shardrec::bce_with_logits(y, labels, 2) < loss, "a dense step lowers the loss");

  auto dcn = shardrec::Dcn::create(4, 1, 2, 3);
  std::vector<float> x0(8, 0.25f), d(8), di(8);
  dcn.forward(x0, 2, d);
  dcn.infer(x0, 2, di);
  Require(d == di && dcn.tensors().size() == 3, "dcn");
  Require(shardrec::dot_interaction_width(2, 4) > 0, "dot interaction width");
  std::printf("dense: loss %.4f -> lower\n", loss);
}

void FromEnv() {
  // A world of 1 from launcher variables (torchrun's), on a port of this process's own.
  const std::string port = std::to_string(20000 + getpid() % 20000);
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "1", 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", port.c_str(), 1);
  auto comm = shardrec::Comm::from_env();
  Require(comm.size() == 1 && comm.local_size() == 1, "comm from env");
  shardrec_topology_t topology = SHARDREC_TOPOLOGY_INIT;
  shardrec::topology_from_comm(topology, comm);
  Require(topology.world_size == 1 && topology.ranks_per_node == 1, "topology from comm");
  // One host: nothing to measure, the topology stays as it was.
  const double before = topology.inter_node_bandwidth;
  Require(shardrec::topology_calibrate_network(topology, comm) == 0 &&
              topology.inter_node_bandwidth == before,
          "calibrate_network on one host measures nothing");
  // Rank 0's address handed in code: a world of 2 on threads over loopback.
  const int32_t tcp_port = 20000 + (getpid() + 7919) % 20000;
  std::vector<int32_t> sizes(2, 0);
  std::vector<std::string> failures(2);
  std::vector<std::thread> ranks;
  for (int32_t r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      try {
        auto c = shardrec::Comm::tcp("127.0.0.1", tcp_port, r, 2);
        sizes[r] = c.size();
      } catch (const std::exception& e) {
        failures[r] = e.what();
      }
    });
  for (auto& t : ranks) t.join();
  Require(sizes[0] == 2 && sizes[1] == 2,
          "Comm::tcp joins rank 0's address: " + failures[0] + failures[1]);
}

// A tiered table trains to the bits of the same table in memory (tier_stats), its checkpoint
// serves through a row cache (Inference::tier_stats), and the tier's disk calibrates.
void Tiers(const std::string& dir) {
  auto memory = shardrec::Comm::local_group(1), tiered = shardrec::Comm::local_group(1);
  const shardrec::Plan plan = MakePlan(1);
  shardrec_table_tier_t tier = SHARDREC_TABLE_TIER_INIT;
  const std::string stores = dir + "_tier";
  tier.table = "users";
  tier.dir = stores.c_str();
  tier.cache_bytes = 4 * (8 * 4 + 32);  // 4 rows of 8 fp32 under SGD
  shardrec_embedding_options_t options = SHARDREC_EMBEDDING_OPTIONS_INIT;
  options.tiers = &tier;
  options.num_tiers = 1;
  auto in_memory = shardrec::EmbeddingCollection::create(plan, memory[0]);
  auto on_disk = shardrec::EmbeddingCollection::create(plan, tiered[0], nullptr, &options);
  std::vector<int32_t> lengths = {1, 1, 1, 1};
  for (int64_t step = 0; step < 4; ++step) {
    std::vector<int64_t> ids = {step * 3, 40 + step, step * 3 + 1, 70 - step};
    const auto batch = shardrec::kjt_view(2, 2, lengths, ids);
    std::vector<float> a = in_memory.forward(batch), b = on_disk.forward(batch);
    Require(a == b, "a tiered forward equals the forward in memory");
    in_memory.backward(a);
    on_disk.backward(b);
  }
  const shardrec_tier_stats_t stats = on_disk.tier_stats("users");
  Require(stats.cache_slots == 4 && stats.steps == 4 && stats.misses > 4 && stats.write_backs > 0,
          "tier_stats counts the evicting steps");
  Require(Failure([&] { (void)on_disk.tier_stats("nope"); }).code() == SHARDREC_ENOTFOUND,
          "tier_stats of a table not in the plan");
  std::vector<float> users(100 * 8);
  in_memory.get_weights("users", users);
  on_disk.save_checkpoint(dir + "_tiered");
  shardrec_serving_tier_t serving = SHARDREC_SERVING_TIER_INIT;
  serving.table = "users";
  serving.cache_bytes = 2 * (8 * 4 + 64);
  shardrec_inference_options_t open = SHARDREC_INFERENCE_OPTIONS_INIT;
  open.tiers = &serving;
  open.num_tiers = 1;
  auto inf = shardrec::Inference::open(dir + "_tiered", &open);
  std::vector<int32_t> one = {1, 0};
  std::vector<int64_t> row = {40};
  const std::vector<float> out = inf.lookup(shardrec::kjt_view(1, 2, one, row));
  Require(std::equal(users.begin() + 40 * 8, users.begin() + 41 * 8, out.begin()),
          "a served tiered row equals the trained one");
  const shardrec_serving_tier_stats_t served = inf.tier_stats("users");
  Require(served.cache_slots == 2 && served.misses == 1 && served.model_version == 1,
          "Inference::tier_stats");
  Require(Failure([&] { (void)inf.tier_stats("items"); }).code() == SHARDREC_EINVAL,
          "tier_stats of a table served from memory");
  shardrec_topology_t topology = SHARDREC_TOPOLOGY_INIT;
  topology.world_size = 1;
  const shardrec::DiskCalibration disk = shardrec::topology_calibrate_disk(
      topology, std::filesystem::temp_directory_path().string(), 1 << 20, 0.05);
  Require(disk.iops > 0 && topology.disk_read_iops > 0 && topology.disk_read_bandwidth > 0,
          "topology_calibrate_disk");
  Require(Failure([&] {
            (void)shardrec::topology_calibrate_disk(topology, stores + "/none");
          }).code() == SHARDREC_ENOTFOUND,
          "topology_calibrate_disk of a missing folder");
  std::filesystem::remove_all(stores);
  std::filesystem::remove_all(dir + "_tiered");
}

void MovedFrom() {
  auto comms = shardrec::Comm::local_group(1);
  const shardrec::Plan plan = MakePlan(1);
  auto coll = shardrec::EmbeddingCollection::create(plan, comms[0]);
  auto moved = std::move(coll);
  Require(moved.output_dim() == 16, "the moved-to object works");
  const auto e = Failure([&] { (void)coll.output_dim(); });
  const std::string what = e.what();
  Require(e.code() == SHARDREC_EINVAL &&
              what.find("shardrec::EmbeddingCollection") != std::string::npos &&
              what.find("moved from") != std::string::npos &&
              what.find("must not be NULL") == std::string::npos,
          "a moved-from collection says so: " + what);
  shardrec::Comm gone = std::move(comms[0]);
  const auto c = Failure([&] { (void)shardrec::EmbeddingCollection::create(plan, comms[0]); });
  Require(std::string(c.what()).find("shardrec::Comm has no handle") != std::string::npos,
          "a moved-from comm passed to create says so");
  shardrec::Inference none;
  Require(std::string(Failure([&] { (void)none.version(); }).what()).find("shardrec::Inference") !=
              std::string::npos,
          "a default-constructed Inference says so");
}

}  // namespace

int main() {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("shardrec_cpp_" + std::to_string(getpid())))
          .string();
  try {
    TrainSaveServe(dir);
    MeshDdpFsdp();
    VbeTraining();
    Dense();
    FromEnv();
    Tiers(dir);
    MovedFrom();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FAILED: %s\n", e.what());
    std::filesystem::remove_all(dir);
    return 1;
  }
  std::filesystem::remove_all(dir);
  std::printf("all C++ wrappers ok\n");
  return 0;
}
