// Helpers of the dynamic-table mesh tests (mesh_test.cc, mesh_sync_test.cc):
// checkpoints read back by id, the documented merge rule, one rank's training step and a rank
// of a mesh with its collection.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "shardrec/replica.h"
#include "tests/capi/dynamic/test_util.h"

namespace shardrec::testing {

// A dynamic table by id: each row tensor's ("weights" and the optimizer states) row, fp32.
using Rows = std::map<std::string, std::vector<float>>;
using Table = std::map<int64_t, Rows>;

// Both tables of a checkpoint in `dir` (docs/checkpoint-format.md, "Dynamic tables"), read from
// its rank files' safetensors headers: per row block, the ids and each tensor's live rows (a
// fixed table's stays empty).
std::vector<Table> ReadCheckpoint(const std::string& dir);

// Both tables' scores in a checkpoint in `dir` (SCORE tables: the "score" record of each row
// block, beside its "ids"), by id.
std::vector<std::map<int64_t, double>> ReadScores(const std::string& dir);

// The merge rule on tables saved by each replica (in replica order), before eviction: the
// union of the ids, each tensor the fp32 sum over the holders in replica order over their number.
Table Merge(const std::vector<Table>& replicas);

// Expects `got` to hold exactly `want`'s ids with bit-identical rows (gtest failures name `what`).
void ExpectSame(const Table& got, const Table& want, const std::string& what);

// Deterministic output gradients of one rank's step.
std::vector<float> Grads(int64_t n, int32_t step, int32_t rank);

// One forward and backward of `b`, the output kept in `out` when not null.
void TrainStep(shardrec_embedding_t* c, const RefBatch& b, int64_t dim, int32_t step, int32_t rank,
               std::vector<float>* out);

// One rank of a mesh and its collection; destroys both.
struct MeshRank {
  shardrec_mesh_t* mesh = nullptr;
  shardrec_embedding_t* coll = nullptr;
  int32_t group = 0, shard_rank = 0, replica_rank = 0;
  ~MeshRank() {
    shardrec_embedding_destroy(coll);
    shardrec_mesh_destroy(mesh);
  }
};

// Rank r of a mesh of `world` ranks in sharding groups of `shard_size` (collective over the
// world), with a collection of `plan` on it.
void MakeMeshRank(int32_t world, int32_t shard_size, int r, const shardrec_plan_t* plan,
                  const shardrec_optimizer_config_t* opt, uint64_t seed, MeshRank* m);

// A 1D checkpoint of one sharding group's collection (collective over the group).
void SaveGroup(shardrec_embedding_t* c, const std::string& dir);

// Where a sharding group's checkpoint of one stage ("pre", "post", ...) goes.
std::string GroupDir(const std::string& dir, const char* stage, int32_t group);

// A scenario planned for one sharding group, with batches for every rank of a `world`-rank mesh
// (so every replica sees other ids) for `steps` steps (0: the scenario's).
struct MeshScenario {
  DynScenario s;
  std::vector<std::vector<RefBatch>> batches;  // [step][world rank]
  int64_t dim = 0;                             // a rank's output columns
  PlanPtr plan;                                // null when planning failed
  shardrec_optimizer_config_t opt{};
};
MeshScenario PlanMesh(const DynScenario& s, int32_t world, int32_t steps = 0);

}  // namespace shardrec::testing
