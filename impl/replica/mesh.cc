// Mesh creation: two collective splits of the world communicator.
#include "impl/replica/mesh.h"

#include "impl/core/check.h"

namespace shardrec::replica {

Status Mesh::Create(std::shared_ptr<comm::Communicator> world, int shard_size, MeshKind kind,
                    std::unique_ptr<Mesh>* out) {
  auto mesh = std::make_unique<Mesh>();
  SR_RETURN_IF_ERROR(Layout::Make(world->Size(), shard_size, kind, &mesh->layout_));
  const int rank = world->Rank();
  const Layout& l = mesh->layout_;
  std::unique_ptr<comm::Communicator> sharding, replica;
  SR_RETURN_IF_ERROR(world->Split(l.ShardingGroup(rank), l.ShardRank(rank), &sharding)
                         .WithContext("creating the sharding group"));
  SR_RETURN_IF_ERROR(world->Split(l.ReplicaGroup(rank), l.ReplicaRank(rank), &replica)
                         .WithContext("creating the replica group"));
  SR_CHECK(sharding && sharding->Rank() == l.ShardRank(rank));
  SR_CHECK(replica && replica->Rank() == l.ReplicaRank(rank));
  mesh->world_ = std::move(world);
  mesh->sharding_ = std::move(sharding);
  mesh->replica_ = std::move(replica);
  *out = std::move(mesh);
  return Status::Ok();
}

}  // namespace shardrec::replica
