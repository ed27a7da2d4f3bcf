// Shared helpers of the tiered-table tests: a scenario of tables larger than a cache that one
// batch fits, its tiers, and the training run of a collection (tiered or in memory) through the
// C API that the tests compare bit for bit.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "shardrec/checkpoint.h"
#include "shardrec/embedding.h"
#include "shardrec/tier.h"
#include "tests/capi/embedding/embedding_test_util.h"
#include "tests/support/temp_dirs.h"

namespace shardrec::testing {

// Three tables of 200, 300 and 120 rows (dims 8, 12, 16; t1 read by two features), `sharding`
// for all, 6 samples per rank of up to 4 ids per bag, 6 steps.
Scenario TieredScenario(int32_t world, int32_t sharding, int32_t optimizer, int32_t dtype,
                        int32_t pooling, bool weighted);

// Cache bytes that give every shard of table `t` of `s` about `slots` slots, whatever the most
// shards of it one rank holds (column-wise: up to dim / 4).
int64_t CacheBytesFor(const Scenario& s, size_t t, int64_t slots);

// What one run leaves on each rank.
struct TieredRun {
  std::vector<std::vector<float>> out;       // per forward (steps + 1), the output
  std::vector<std::vector<float>> snap;      // every table's weights and states (Snapshot)
  std::vector<shardrec_tier_stats_t> stats;  // per table (tiered runs)
};

// Trains a collection of `s` (plan `plan`) for s.steps steps and one more forward, per rank;
// `tiers` (per rank the same array, its dir suffixed with the rank) make tables tiered, empty:
// in memory. `pipelined`: input_dist_start of batch i+1 before the backward of batch i.
// `snapshot` (default: s) names the tables whose weights and states the run snapshots.
// `load_dir` (when not null): the collection first loads that checkpoint (with `load_options`,
// null: defaults); `save_dir` (when not null): it saves one there after the snapshot.
// `after_backward` (when set) is called on each rank after each step's backward.
std::vector<TieredRun> RunTiered(
    const Scenario& s, const shardrec_plan_t* plan, const std::vector<shardrec_table_tier_t>& tiers,
    bool pipelined, const Scenario* snapshot = nullptr, const char* load_dir = nullptr,
    const char* save_dir = nullptr, const shardrec_checkpoint_options_t* load_options = nullptr,
    const std::function<void(shardrec_embedding_t*, int32_t step)>& after_backward = {});

// The first difference between two float vectors, bit for bit ("" when identical).
std::string FirstBitDifference(const std::vector<float>& a, const std::vector<float>& b);

// Tiers of every table of `s` under `dir` with caches small enough that every step evicts (about
// 52, 100 and 52 slots; half at world 2 row-wise).
std::vector<shardrec_table_tier_t> SmallTiers(const Scenario& s, const std::string& dir);

// Expects each rank's outputs and table snapshots in `got` to be `want`'s, bit for bit.
void ExpectSameRuns(const std::vector<TieredRun>& got, const std::vector<TieredRun>& want,
                    const std::string& what);

// Loads `ckpt` into a tiered collection of `s` (stores under `stores`) and, when
// `also_in_memory`, an in-memory one, staged and partial with verify_first: each load must fail
// with `code`, a message holding `says`, and leave the collection's weights and states as they
// were.
void ExpectLoadRefusedUnchanged(const Scenario& s, const shardrec_plan_t* plan,
                                const std::string& ckpt, const std::string& stores,
                                bool also_in_memory, shardrec_status_t code,
                                const std::string& says);

// Store snapshots in checkpoints (docs/checkpoint-format.md, "Store snapshots"): the manifest of
// checkpoint `ckpt`; its store snapshot directories as the manifest names them; the segment
// files of one.
nlohmann::json ReadManifest(const std::string& ckpt);
std::vector<std::string> StoreDirs(const std::string& ckpt);
std::vector<std::string> Segments(const std::string& dir);

// The (device, inode) of every file under the directories `stores`, by path.
using FileIds = std::map<std::string, std::pair<uint64_t, uint64_t>>;
FileIds StoreFileIds(const std::vector<std::string>& stores);

// Expects every segment of `ckpt`'s store snapshots (of rank `rank`'s; -1: every rank's) to be
// the file of that name of its store (found by identity under the directories `stores`): the
// file `before` (taken before the save; null: none) had there, or else the store's file now, of
// at least two links; linked, not copied. A file the store made during the save and compacted
// away since is the checkpoint's alone (one link) and proves nothing. Returns how many segments
// were shown to be the stores' files.
size_t ExpectSegmentsAreTheStores(const std::string& ckpt, const std::vector<std::string>& stores,
                                  int rank = -1, const FileIds* before = nullptr);

// Flips one byte inside the value of every record slot of every segment of snapshot directory
// `dir` (records of `value_bytes`).
void DamageSegments(const std::string& dir, uint64_t value_bytes);

// A copy of checkpoint `from` at `to` (segments copied, not linked) whose manifest `edit`
// changed, written without its checksum member (a manifest may lack it), so the edit itself is
// what a load meets.
void EditedCopy(const std::string& from, const std::string& to,
                const std::function<void(nlohmann::json&)>& edit);

}  // namespace shardrec::testing
