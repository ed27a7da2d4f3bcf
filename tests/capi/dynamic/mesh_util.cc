// Helpers of the dynamic-table mesh tests (mesh_util.h).
#include "tests/capi/dynamic/mesh_util.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "shardrec/checkpoint.h"

namespace shardrec::testing {
namespace {

// A safetensors file's JSON header; `data` gets the bytes after it.
nlohmann::json ReadSafetensorsFile(const std::filesystem::path& path, std::string* data) {
  std::ifstream in(path, std::ios::binary);
  uint64_t hlen = 0;
  in.read(reinterpret_cast<char*>(&hlen), 8);
  std::string header(hlen, '\0');
  in.read(header.data(), static_cast<std::streamsize>(hlen));
  data->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return nlohmann::json::parse(header);
}

}  // namespace

std::vector<Table> ReadCheckpoint(const std::string& dir) {
  std::vector<Table> out(2);
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".safetensors") continue;
    ++files;
    std::string data;
    const nlohmann::json h = ReadSafetensorsFile(e.path(), &data);
    // key "table/tensor/rOFFSET_cCOL" -> its tensor of one row block
    std::map<std::string, std::vector<int64_t>> ids;  // "table/rOFFSET" -> ids
    for (const auto& [key, t] : h.items()) {
      if (key == "__metadata__") continue;
      const size_t a = key.find('/'), b = key.rfind('/');
      if (key.substr(a + 1, b - a - 1) != "ids") continue;
      const int64_t n = t["shape"][0].get<int64_t>();
      std::vector<int64_t>& v = ids[key.substr(0, a) + key.substr(b, key.find('_', b) - b)];
      v.resize(static_cast<size_t>(n));
      std::memcpy(v.data(), data.data() + t["data_offsets"][0].get<size_t>(), n * 8);
    }
    for (const auto& [key, t] : h.items()) {
      if (key == "__metadata__") continue;
      const size_t a = key.find('/'), b = key.rfind('/');
      const std::string table = key.substr(0, a), tensor = key.substr(a + 1, b - a - 1);
      if (tensor == "ids" || tensor == "last_seen" || tensor == "count" || tensor == "admission" ||
          tensor == "dynamic_meta" || tensor == "score")
        continue;
      const auto block = ids.find(table + key.substr(b, key.find('_', b) - b));
      if (block == ids.end()) continue;  // a fixed table's tensor
      EXPECT_EQ(key.substr(key.find('_', b)), "_c0") << "row-wise or table-wise only";
      const std::vector<int64_t>& v = block->second;
      EXPECT_EQ(t["dtype"], "F32") << key;
      const int64_t cols = t["shape"].size() > 1 ? t["shape"][1].get<int64_t>() : 1;
      const size_t at = t["data_offsets"][0].get<size_t>();
      Table& tab = out[table == "t0" ? 0 : 1];
      for (size_t i = 0; i < v.size(); ++i) {
        std::vector<float>& row = tab[v[i]][tensor];
        row.resize(static_cast<size_t>(cols));
        std::memcpy(row.data(), data.data() + at + i * static_cast<size_t>(cols) * 4, cols * 4);
      }
    }
  }
  EXPECT_GT(files, 0u) << dir;
  return out;
}

std::vector<std::map<int64_t, double>> ReadScores(const std::string& dir) {
  std::vector<std::map<int64_t, double>> out(2);
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".safetensors") continue;
    std::string data;
    const nlohmann::json h = ReadSafetensorsFile(e.path(), &data);
    for (const auto& [key, t] : h.items()) {
      const size_t a = key.find('/'), b = key.rfind('/');
      if (key == "__metadata__" || key.substr(a + 1, b - a - 1) != "score") continue;
      const nlohmann::json& ids = h.at(key.substr(0, a) + "/ids" + key.substr(b));
      const auto n = t["shape"][0].get<size_t>();
      EXPECT_EQ(ids["shape"][0].get<size_t>(), n) << key;
      for (size_t i = 0; i < n; ++i) {
        int64_t id;
        double score;
        std::memcpy(&id, data.data() + ids["data_offsets"][0].get<size_t>() + i * 8, 8);
        std::memcpy(&score, data.data() + t["data_offsets"][0].get<size_t>() + i * 8, 8);
        out[key.substr(0, a) == "t0" ? 0 : 1][id] = score;
      }
    }
  }
  return out;
}

Table Merge(const std::vector<Table>& replicas) {
  std::map<int64_t, std::vector<const Rows*>> holders;
  for (const Table& t : replicas)
    for (const auto& [id, rows] : t) holders[id].push_back(&rows);
  Table out;
  for (const auto& [id, hs] : holders) {
    Rows& r = out[id];
    if (hs.size() == 1) {
      r = *hs[0];
      continue;
    }
    for (const auto& [name, first] : *hs[0]) {
      std::vector<float> sum(first.size(), 0.0f);
      for (const Rows* h : hs)
        for (size_t c = 0; c < sum.size(); ++c) sum[c] += h->at(name)[c];
      for (float& x : sum) x /= static_cast<float>(hs.size());
      r[name] = sum;
    }
  }
  return out;
}

void ExpectSame(const Table& got, const Table& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (const auto& [id, rows] : want) {
    auto it = got.find(id);
    ASSERT_NE(it, got.end()) << what << ": id " << id;
    ASSERT_EQ(it->second.size(), rows.size()) << what;
    for (const auto& [name, v] : rows)
      EXPECT_EQ(std::memcmp(it->second.at(name).data(), v.data(), v.size() * 4), 0)
          << what << ": id " << id << " tensor " << name;
  }
}

std::vector<float> Grads(int64_t n, int32_t step, int32_t rank) {
  std::vector<float> g(static_cast<size_t>(n));
  uint64_t x = 0x9e37u + static_cast<uint64_t>(step) * 131 + static_cast<uint64_t>(rank) * 7919;
  for (float& v : g) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    v = static_cast<float>(static_cast<int64_t>(x >> 40) % 2001 - 1000) / 1000.0f;
  }
  return g;
}

void TrainStep(shardrec_embedding_t* c, const RefBatch& b, int64_t dim, int32_t step, int32_t rank,
               std::vector<float>* out) {
  KjtHolder kjt(b, 3, false);
  std::vector<float> y(static_cast<size_t>(b.batch_size * dim));
  ASSERT_EQ(shardrec_embedding_forward(c, kjt.view(), y.data(), y.size(), nullptr), SHARDREC_OK)
      << shardrec_last_error();
  const std::vector<float> g = Grads(b.batch_size * dim, step, rank);
  ASSERT_EQ(shardrec_embedding_backward(c, g.data(), g.size(), nullptr), SHARDREC_OK)
      << shardrec_last_error();
  if (out != nullptr) *out = y;
}

void MakeMeshRank(int32_t world, int32_t shard_size, int r, const shardrec_plan_t* plan,
                  const shardrec_optimizer_config_t* opt, uint64_t seed, MeshRank* m) {
  shardrec_mesh_options_t mo;
  shardrec_mesh_options_init(&mo, SHARDREC_MESH_OPTIONS_VERSION);
  mo.sharding_group_size = shard_size;
  ASSERT_EQ(shardrec_mesh_create(&m->mesh, GroupComm(world, r), &mo), SHARDREC_OK)
      << shardrec_last_error();
  shardrec_embedding_options_t o;
  shardrec_embedding_options_init(&o, SHARDREC_EMBEDDING_OPTIONS_VERSION);
  o.seed = seed;
  ASSERT_EQ(shardrec_mesh_embedding_create(&m->coll, m->mesh, plan, opt, &o), SHARDREC_OK)
      << shardrec_last_error();
  ASSERT_EQ(shardrec_mesh_coords(m->mesh, &m->group, &m->shard_rank, nullptr, &m->replica_rank),
            SHARDREC_OK);
}

void SaveGroup(shardrec_embedding_t* c, const std::string& dir) {
  ASSERT_EQ(shardrec_checkpoint_save(c, dir.c_str(), nullptr), SHARDREC_OK)
      << shardrec_last_error();
}

std::string GroupDir(const std::string& dir, const char* stage, int32_t group) {
  return dir + "/" + stage + "_g" + std::to_string(group);
}

MeshScenario PlanMesh(const DynScenario& s, int32_t world, int32_t steps) {
  MeshScenario m;
  m.s = s;
  DynScenario sw = s;
  sw.base.world = world;
  if (steps > 0) sw.base.steps = steps;
  m.batches = MakeDynBatches(sw);
  m.dim = DynOutputDim(s);
  m.plan = MakeDynPlan(s);
  m.opt = ToCOptimizer(s.base.optimizer);
  return m;
}

}  // namespace shardrec::testing
