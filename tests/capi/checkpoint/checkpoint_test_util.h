// Helpers of the checkpoint C API tests: one "side" of a save/load pair (world size, 1D or 2D,
// sharding type, column split, storage type), running a collection on it, training it, and
// bit-exact snapshots of every table's weights and optimizer states, and re-signed manifest edits.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "shardrec/checkpoint.h"
#include "tests/capi/embedding/embedding_test_util.h"
#include "tests/support/temp_dirs.h"

namespace shardrec::testing {

struct Side {
  int32_t world = 2;
  int32_t shard_size = 0;  // 0: 1D; else a mesh with sharding groups of this size
  int32_t sharding = SHARDREC_SHARDING_TABLE_WISE;
  int32_t min_partition = 4;
  int32_t dtype = SHARDREC_DTYPE_FLOAT32;
};

std::string SideName(const Side& s);

// A file's bytes, and a file replaced by `bytes` (what the tests damage files with).
std::string Slurp(const std::string& path);
void Spit(const std::string& path, const std::string& bytes);

// The scenario of one sharding group of `side` (StandardScenario's three tables).
Scenario SideScenario(const Side& side, int32_t optimizer, uint64_t seed);

struct Snap {
  std::vector<std::vector<float>> tensors;  // Snapshot(): weights and states per table
  int64_t steps = 0;
};

// True when every tensor is bit-identical; `why` names the first difference.
bool BitEqual(const Snap& a, const Snap& b, std::string* why);

using RankFn = std::function<void(int rank, shardrec_embedding_t* coll, shardrec_mesh_t* mesh)>;
// Creates the side's collection on every rank (threads) and runs fn on each.
void OnSide(const Side& side, const Scenario& s, const RankFn& fn);

// Trains `steps` steps (batches of s.data_seed for the side's world, steps [first, first+steps))
// on one rank; syncs the mesh after every step.
void TrainSteps(const Side& side, const Scenario& s, int rank, shardrec_embedding_t* coll,
                shardrec_mesh_t* mesh, int32_t first, int32_t steps);

shardrec_status_t SaveOn(shardrec_embedding_t* coll, shardrec_mesh_t* mesh, const std::string& dir,
                         const shardrec_checkpoint_options_t* o = nullptr);
shardrec_status_t LoadOn(shardrec_embedding_t* coll, shardrec_mesh_t* mesh, const std::string& dir,
                         const shardrec_checkpoint_options_t* o = nullptr);

// Collective snapshot (every rank calls it); the values are the same on every rank.
Snap TakeSnap(shardrec_embedding_t* coll, const Scenario& s);

// Rewrites the manifest of the checkpoint in `dir` with edit(manifest) and signs it again as a
// writer does (manifest_xxh3: the XXH3 of its compact form without that member), so that only
// the loader's checks of what it says can tell.
void EditManifest(const std::string& dir, const std::function<void(nlohmann::json&)>& edit);

}  // namespace shardrec::testing
