// Layout arithmetic (TorchRec DMPCollection's rank layout and plan remapping; docs/semantics.md).
#include "impl/replica/layout.h"

#include <algorithm>
#include <sstream>

namespace shardrec::replica {

Status Layout::Make(int world, int shard_size, MeshKind kind, Layout* out) {
  if (world < 1) return Status::InvalidArgument("world size must be >= 1, got ", world);
  if (shard_size < 1 || shard_size > world || world % shard_size != 0) {
    return Status::InvalidArgument("sharding group size ", shard_size,
                                   " must divide the world size ", world);
  }
  if (kind != MeshKind::kDefault && kind != MeshKind::kInterHost) {
    return Status::InvalidArgument("unknown mesh layout ", static_cast<int>(kind));
  }
  out->world_ = world;
  out->shard_size_ = shard_size;
  out->kind_ = kind;
  return Status::Ok();
}

int Layout::ShardingGroup(int rank) const {
  return kind_ == MeshKind::kDefault ? rank % replicas() : rank / shard_size_;
}
int Layout::ShardRank(int rank) const {
  return kind_ == MeshKind::kDefault ? rank / replicas() : rank % shard_size_;
}
int Layout::ReplicaGroup(int rank) const { return ShardRank(rank); }
int Layout::ReplicaRank(int rank) const { return ShardingGroup(rank); }

int Layout::GlobalRank(int group, int shard_rank) const {
  return kind_ == MeshKind::kDefault ? shard_rank * replicas() + group
                                     : group * shard_size_ + shard_rank;
}

std::vector<int> Layout::ShardingGroupRanks(int group) const {
  std::vector<int> ranks;
  for (int s = 0; s < shard_size_; ++s) ranks.push_back(GlobalRank(group, s));
  return ranks;
}

std::vector<int> Layout::ReplicaGroupRanks(int group) const {
  std::vector<int> ranks;
  for (int g = 0; g < replicas(); ++g) ranks.push_back(GlobalRank(g, group));
  return ranks;
}

namespace {
std::string Join(const std::vector<int>& v) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < v.size(); ++i) os << (i ? "," : "") << v[i];
  os << ']';
  return os.str();
}
}  // namespace

std::string Layout::Describe(int ranks_per_node) const {
  std::ostringstream os;
  os << "2D mesh: world " << world_ << " = " << replicas() << " replica(s) x " << shard_size_
     << "-way sharding, layout "
     << (kind_ == MeshKind::kDefault ? "default (replica groups contiguous)"
                                     : "inter-host (sharding groups contiguous)")
     << "\n  sharding groups (model parallel, plan ranks 0.." << shard_size_ - 1 << "):";
  for (int g = 0; g < replicas(); ++g) os << ' ' << Join(ShardingGroupRanks(g));
  os << "\n  replica groups (weight sync):";
  for (int c = 0; c < shard_size_; ++c) os << ' ' << Join(ReplicaGroupRanks(c));
  os << '\n';
  if (ranks_per_node > 0) {
    bool intra = true;
    for (int c = 0; c < shard_size_; ++c) {
      auto ranks = ReplicaGroupRanks(c);
      for (int r : ranks) intra = intra && (r / ranks_per_node == ranks[0] / ranks_per_node);
    }
    os << "  nodes of " << ranks_per_node << " ranks:";
    for (int n = 0; n * ranks_per_node < world_; ++n) {
      std::vector<int> node;
      for (int r = n * ranks_per_node; r < std::min(world_, (n + 1) * ranks_per_node); ++r)
        node.push_back(r);
      os << " node" << n << '=' << Join(node);
    }
    os << "\n  replica groups " << (intra ? "stay inside one node each" : "cross nodes") << '\n';
  }
  return os.str();
}

}  // namespace shardrec::replica
