// The 2D mesh layout: world W = R replica groups x S-way sharding groups, as pure arithmetic.
#pragma once

#include <string>
#include <vector>

#include "impl/core/status.h"

namespace shardrec::replica {

enum class MeshKind : int32_t {
  // Replica groups are consecutive ranks (inside a node when R <= ranks per node), so the weight
  // all-reduce of sync() stays on intra-node links; sharding groups stride across nodes.
  kDefault = 0,
  // Sharding groups are consecutive ranks (all-to-alls stay inside a node); replica groups stride
  // across nodes.
  kInterHost = 1,
};

class Layout {
 public:
  // Errors: kInvalidArgument unless 1 <= shard_size <= world and shard_size divides world.
  static Status Make(int world, int shard_size, MeshKind kind, Layout* out);

  int world() const { return world_; }
  int shard_size() const { return shard_size_; }         // S
  int replicas() const { return world_ / shard_size_; }  // R
  MeshKind kind() const { return kind_; }

  // Which sharding group rank r belongs to, and its position (0..S-1) inside it. The position
  // is the plan rank: the plan made for S ranks is reused by every sharding group.
  int ShardingGroup(int rank) const;
  int ShardRank(int rank) const;
  // Which replica group rank r belongs to (= its shard rank: replicas hold the same shards), and
  // its position (0..R-1) inside it.
  int ReplicaGroup(int rank) const;
  int ReplicaRank(int rank) const;

  std::vector<int> ShardingGroupRanks(int group) const;
  std::vector<int> ReplicaGroupRanks(int group) const;
  // Global rank that holds plan rank `shard_rank` in sharding group `group` (TorchRec's remap).
  int GlobalRank(int group, int shard_rank) const;

  // A human-readable picture: the groups, and with ranks_per_node > 0 which node each rank is on
  // and whether every replica group stays inside one node.
  std::string Describe(int ranks_per_node) const;

 private:
  int world_ = 1;
  int shard_size_ = 1;
  MeshKind kind_ = MeshKind::kDefault;
};

}  // namespace shardrec::replica
