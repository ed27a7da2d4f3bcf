// Helpers of the checkpoint C API tests (checkpoint_test_util.h).
#include "tests/capi/checkpoint/checkpoint_test_util.h"

#include <gtest/gtest.h>
// Header-only XXH3, to sign an edited manifest as a writer would.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>

#include "tests/support/spawn_ranks.h"

namespace shardrec::testing {

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void Spit(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}
namespace {

struct MeshDeleter {
  void operator()(shardrec_mesh_t* m) const { shardrec_mesh_destroy(m); }
};

}  // namespace

std::string SideName(const Side& s) {
  static const char* kTypes[] = {"DP", "TW", "RW", "CW", "TWRW", "TWCW", "GRID"};
  std::string n = std::string(kTypes[s.sharding]) + "/w" + std::to_string(s.world);
  if (s.shard_size) n += "/2D_S" + std::to_string(s.shard_size);
  if (s.min_partition != 4) n += "/mp" + std::to_string(s.min_partition);
  if (s.dtype) n += "/dtype" + std::to_string(s.dtype);
  return n;
}

Scenario SideScenario(const Side& side, int32_t optimizer, uint64_t seed) {
  const int32_t group = side.shard_size ? side.shard_size : side.world;
  Scenario s = StandardScenario(group, side.sharding, SHARDREC_POOLING_SUM);
  s.min_partition = side.min_partition;
  s.optimizer.type = optimizer;
  s.optimizer.lr = optimizer == SHARDREC_OPTIMIZER_SGD ? 0.1f : 0.05f;
  s.seed = seed;
  for (RefTable& t : s.tables) t.dtype = side.dtype;
  return s;
}

bool BitEqual(const Snap& a, const Snap& b, std::string* why) {
  if (a.steps != b.steps) {
    *why = "step counters differ: " + std::to_string(a.steps) + " vs " + std::to_string(b.steps);
    return false;
  }
  if (a.tensors.size() != b.tensors.size()) {
    *why = "tensor counts differ";
    return false;
  }
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    if (a.tensors[i].size() != b.tensors[i].size()) {
      *why = "tensor " + std::to_string(i) + " sizes differ";
      return false;
    }
    for (size_t k = 0; k < a.tensors[i].size(); ++k) {
      if (std::memcmp(&a.tensors[i][k], &b.tensors[i][k], sizeof(float)) != 0) {
        *why = "tensor " + std::to_string(i) + " element " + std::to_string(k) + ": " +
               std::to_string(a.tensors[i][k]) + " vs " + std::to_string(b.tensors[i][k]);
        return false;
      }
    }
  }
  return true;
}

void OnSide(const Side& side, const Scenario& s, const RankFn& fn) {
  PlanPtr plan = MakePlan(s);
  ASSERT_NE(plan, nullptr) << SideName(side);
  const shardrec_optimizer_config_t opt = ToCOptimizer(s.optimizer);
  SpawnRanks(side.world, [&](int r) {
    std::unique_ptr<shardrec_mesh_t, MeshDeleter> mesh;
    shardrec_embedding_options_t eo;
    shardrec_embedding_options_init(&eo, SHARDREC_EMBEDDING_OPTIONS_VERSION);
    eo.seed = s.seed;
    shardrec_embedding_t* raw = nullptr;
    if (side.shard_size) {
      shardrec_mesh_options_t mo;
      shardrec_mesh_options_init(&mo, SHARDREC_MESH_OPTIONS_VERSION);
      mo.sharding_group_size = side.shard_size;
      shardrec_mesh_t* m = nullptr;
      ASSERT_EQ(shardrec_mesh_create(&m, GroupComm(side.world, r), &mo), SHARDREC_OK)
          << shardrec_last_error();
      mesh.reset(m);
      ASSERT_EQ(shardrec_mesh_embedding_create(&raw, m, plan.get(), &opt, &eo), SHARDREC_OK)
          << SideName(side) << " rank " << r << ": " << shardrec_last_error();
    } else {
      ASSERT_EQ(shardrec_embedding_create(&raw, plan.get(), GroupComm(side.world, r), &opt, &eo),
                SHARDREC_OK)
          << SideName(side) << " rank " << r << ": " << shardrec_last_error();
    }
    CollPtr coll(raw);
    fn(r, raw, mesh.get());
  });
}

void TrainSteps(const Side& side, const Scenario& s, int rank, shardrec_embedding_t* coll,
                shardrec_mesh_t* mesh, int32_t first, int32_t steps) {
  Scenario g = s;
  g.world = side.world;
  g.steps = first + steps;
  ReferenceModel ref(g.num_features, g.tables, g.optimizer, g.seed, g.world);
  const auto batches = MakeBatches(g, ref);
  const auto grads = MakeGrads(g, batches, ref.output_dim());
  for (int32_t step = first; step < first + steps; ++step) {
    KjtHolder kjt(batches[step][rank], g.num_features, false);
    std::vector<float> out(grads[step][rank].size());
    ASSERT_EQ(shardrec_embedding_forward(coll, kjt.view(), out.data(), out.size(), nullptr),
              SHARDREC_OK)
        << shardrec_last_error();
    ASSERT_EQ(shardrec_embedding_backward(coll, grads[step][rank].data(), grads[step][rank].size(),
                                          nullptr),
              SHARDREC_OK)
        << shardrec_last_error();
    if (mesh) {
      ASSERT_EQ(shardrec_mesh_step(mesh, coll, nullptr), SHARDREC_OK) << shardrec_last_error();
    }
  }
}

shardrec_status_t SaveOn(shardrec_embedding_t* coll, shardrec_mesh_t* mesh, const std::string& dir,
                         const shardrec_checkpoint_options_t* o) {
  return mesh ? shardrec_checkpoint_save_mesh(mesh, coll, dir.c_str(), o)
              : shardrec_checkpoint_save(coll, dir.c_str(), o);
}

shardrec_status_t LoadOn(shardrec_embedding_t* coll, shardrec_mesh_t* mesh, const std::string& dir,
                         const shardrec_checkpoint_options_t* o) {
  return mesh ? shardrec_checkpoint_load_mesh(mesh, coll, dir.c_str(), o)
              : shardrec_checkpoint_load(coll, dir.c_str(), o);
}

Snap TakeSnap(shardrec_embedding_t* coll, const Scenario& s) {
  Snap snap;
  snap.tensors = Snapshot(coll, s);
  shardrec_embedding_num_steps(coll, &snap.steps);
  return snap;
}

void EditManifest(const std::string& dir, const std::function<void(nlohmann::json&)>& edit) {
  const std::string path = dir + "/manifest.json";
  std::ifstream in(path);
  nlohmann::json m = nlohmann::json::parse(
      std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()));
  edit(m);
  m.erase("manifest_xxh3");
  const std::string canonical = m.dump();
  m["manifest_xxh3"] = XXH3_64bits(canonical.data(), canonical.size());
  std::ofstream(path, std::ios::trunc) << m.dump(1);
}

}  // namespace shardrec::testing
