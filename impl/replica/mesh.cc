// Mesh creation (two collective splits of the world) and the sync policy.
#include "impl/replica/mesh.h"

#include "impl/core/check.h"

namespace shardrec::replica {

Status Mesh::Create(std::shared_ptr<comm::Communicator> world, const MeshOptions& options,
                    std::unique_ptr<Mesh>* out) {
  if (world == nullptr) return Status::InvalidArgument("world must not be NULL");
  MeshOptions o = options;
  if (o.kind != MeshKind::kDefault && o.kind != MeshKind::kInterHost)
    return Status::InvalidArgument("options.layout: unknown mesh layout ",
                                   static_cast<int32_t>(o.kind));
  if (o.sync_interval < 0)
    return Status::InvalidArgument("options.sync_interval must be >= 0, got ", o.sync_interval);
  if (o.ranks_per_node < 0)
    return Status::InvalidArgument("options.ranks_per_node must be >= 0, got ", o.ranks_per_node);
  const auto mode = static_cast<int32_t>(o.sync_mode);
  if (mode < 0 || mode > static_cast<int32_t>(SyncMode::kWeightsOnly))
    return Status::InvalidArgument("options.sync_mode: unknown mode ", mode);
  if (o.shard_size == 0) o.shard_size = world->Size();
  if (o.sync_interval == 0) o.sync_interval = 1;
  if (o.sync_mode == SyncMode::kDefault) o.sync_mode = SyncMode::kWeightsAndState;
  auto mesh = std::make_unique<Mesh>();
  SR_RETURN_IF_ERROR(Layout::Make(world->Size(), o.shard_size, o.kind, &mesh->layout_));
  const int rank = world->Rank();
  const Layout& l = mesh->layout_;
  std::unique_ptr<comm::Communicator> sharding, replica;
  SR_RETURN_IF_ERROR(world->Split(l.ShardingGroup(rank), l.ShardRank(rank), &sharding)
                         .WithContext("creating the sharding group"));
  SR_RETURN_IF_ERROR(world->Split(l.ReplicaGroup(rank), l.ReplicaRank(rank), &replica)
                         .WithContext("creating the replica group"));
  SR_CHECK(sharding && sharding->Rank() == l.ShardRank(rank));
  SR_CHECK(replica && replica->Rank() == l.ReplicaRank(rank));
  mesh->options_ = o;
  mesh->world_ = std::move(world);
  mesh->sharding_ = std::move(sharding);
  mesh->replica_ = std::move(replica);
  *out = std::move(mesh);
  return Status::Ok();
}

Status Mesh::Sync(embedding::EmbeddingCollection& coll, SyncMode mode) {
  if (mode == SyncMode::kDefault) mode = options_.sync_mode;
  if (mode != SyncMode::kWeightsAndState && mode != SyncMode::kWeightsOnly)
    return Status::InvalidArgument("unknown sync mode ", static_cast<int32_t>(mode));
  // A pending input distribution (the next batch's id exchange) may be in flight on the
  // collection's communication worker: it touches only the routed ids and the collection's
  // private input communicator (split from the sharding group), never a weight or optimizer
  // state, while the sync reads and writes only those over the replica group's communicator.
  // The lookup that reads the weights runs later, on this thread (forward_distributed).
  if (coll.plan().world_size != layout_.shard_size())
    return Status::InvalidArgument("the collection's plan has ", coll.plan().world_size,
                                   " ranks but the mesh's sharding groups have ",
                                   layout_.shard_size());
  std::vector<SyncBuffer> buffers;
  for (const embedding::ParamBuffer& b : coll.ParamBuffers()) {
    // The sync reads and writes the buffers as host memory; a GPU collection's are on its device.
    if (!b.device.is_host())
      return Status::Unsupported("replica sync of a collection on ", b.device.ToString(),
                                 " is not implemented (GPU collection v1: host collections only)");
    if (b.kind != embedding::ParamKind::kWeights && mode == SyncMode::kWeightsOnly) continue;
    SyncBuffer sb;
    sb.data = b.data;
    sb.count = b.count;
    sb.dtype = b.dtype;
    // Counters (the optimizer step) take the maximum so a replica that skipped a step cannot drag
    // the bias correction backwards; everything else is averaged.
    sb.op = b.kind == embedding::ParamKind::kCounter ? comm::ReduceOp::kMax : comm::ReduceOp::kAvg;
    buffers.push_back(sb);
  }
  SR_RETURN_IF_ERROR(SyncBuffers(*replica_, buffers, hook_, &staging_, &last_));
  syncs_ += 1;
  return Status::Ok();
}

Status Mesh::Step(embedding::EmbeddingCollection& coll, bool* synced) {
  if (synced != nullptr) *synced = false;
  const int64_t next = steps_ + 1;
  if (next % options_.sync_interval == 0) {
    SR_RETURN_IF_ERROR(Sync(coll, SyncMode::kDefault));
    if (synced != nullptr) *synced = true;
  }
  steps_ = next;
  return Status::Ok();
}

}  // namespace shardrec::replica
