// Mesh creation (two collective splits of the world) and the sync policy.
#include "impl/replica/mesh.h"

#include <algorithm>

#include "impl/comm/agree.h"
#include "impl/comm/staged_comm.h"
#include "impl/core/check.h"
#include "impl/embedding/device_copy.h"
#include "impl/replica/fp8_sync.h"
#include "impl/replica/sync_scope.h"

namespace shardrec::replica {

namespace {

Status CheckMeshOptions(const MeshOptions& o) {
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
  return Status::Ok();
}

}  // namespace

Status Mesh::Create(std::shared_ptr<comm::Communicator> world, const MeshOptions& options,
                    std::unique_ptr<Mesh>* out, const Status& local) {
  if (world == nullptr) return Status::InvalidArgument("world must not be NULL");
  MeshOptions o = options;
  Status args = local;
  if (args.ok() && out == nullptr) args = Status::InvalidArgument("out must not be NULL");
  if (args.ok()) args = CheckMeshOptions(o);
  if (o.shard_size == 0) o.shard_size = world->Size();
  if (o.sync_interval == 0) o.sync_interval = 1;
  if (o.sync_mode == SyncMode::kDefault) o.sync_mode = SyncMode::kWeightsAndState;
  auto mesh = std::make_unique<Mesh>();
  if (args.ok()) args = Layout::Make(world->Size(), o.shard_size, o.kind, &mesh->layout_);
  // The options every rank must share, compared in the same agreement: the layout follows from
  // S and the kind, and replicas syncing at different steps or in different modes would pair one
  // step's sync with another's (a step sync returned OK having merged different steps' states).
  const int64_t same[] = {o.shard_size, static_cast<int64_t>(o.kind), o.sync_interval,
                          static_cast<int64_t>(o.sync_mode)};
  SR_RETURN_IF_ERROR(comm::AgreeToCreate(
      *world, args, "mesh", same,
      "shard_size, layout, sync_interval or sync_mode differ; every rank must give the same mesh "
      "options"));
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
  mesh->world_host_ = mesh->world_;
  mesh->replica_host_ = mesh->replica_;
  if (!mesh->world_->device().is_host()) {
    // A device (NCCL) world: the mesh's own host-buffer collectives (the replicas-identical
    // check, agreements) are staged through the device, on its legacy default stream.
    const int device = mesh->world_->device().index;
    std::unique_ptr<comm::StagedComm> w, r;
    SR_RETURN_IF_ERROR(comm::StagedComm::Create(mesh->world_, device, nullptr, false, &w));
    SR_RETURN_IF_ERROR(comm::StagedComm::Create(mesh->replica_, device, nullptr, false, &r));
    mesh->world_host_ = std::move(w);
    mesh->replica_host_ = std::move(r);
  }
  *out = std::move(mesh);
  return Status::Ok();
}

Status Mesh::Sync(embedding::TableStorage& storage, SyncMode mode) {
  if (mode == SyncMode::kDefault) mode = options_.sync_mode;
  Status args = Status::Ok();
  if (mode != SyncMode::kWeightsAndState && mode != SyncMode::kWeightsOnly)
    args = Status::InvalidArgument("unknown sync mode ", static_cast<int32_t>(mode));
  if (args.ok() && storage.plan().world_size != layout_.shard_size())
    args = Status::InvalidArgument("the collection's plan has ", storage.plan().world_size,
                                   " ranks but the mesh's sharding groups have ",
                                   layout_.shard_size());
  // One replica has nothing to sync; several would sync the caches of tiered tables, not rows.
  if (args.ok() && replica_->Size() > 1)
    args = embedding::RefuseTiered(storage, "a 2D replica sync");
  // The sync is collective over the replica group: a replica refusing its own arguments still
  // takes part in one small agreement, so its peers fail at once naming it instead of waiting
  // for it in the first exchange (or pairing that exchange with its next collective). Over an
  // NCCL group that agreement would be staged through the device on every sync, so there a
  // refusal fails its replica alone (replica.h).
  if (replica_->Size() > 1 && replica_->device().is_host()) {
    // The replicas must also sync in one mode (each merges what the mode names).
    const int64_t same[] = {static_cast<int64_t>(mode)};
    SR_RETURN_IF_ERROR(comm::AgreeOnArguments(
        *replica_host_, args, "mesh sync", same,
        "the replicas asked for different sync modes (weights only, weights and state)"));
  } else {
    SR_RETURN_IF_ERROR(args);
  }
  // A pending input distribution (the next batch's id exchange) may be in flight on the
  // collection's communication worker: it touches only the routed ids and the collection's
  // private input communicator (split from the sharding group), never a weight or optimizer
  // state, while the sync reads and writes only those over the replica group's communicator.
  // The lookup that reads the weights runs later, on this thread (forward_distributed).
  // A GPU collection's stream-ordered calls finish (and report) before its arenas are averaged.
  SR_RETURN_IF_ERROR(storage.Synchronize());
  // Replicas of a dynamic table may hold different ids in one slot: its shards merge by key
  // (dynamic/replica_merge.h) and are cut out of the arena average (CutDynamic). Their rows are
  // gathered first, so a failed or refused gather changes nothing. A data-parallel dynamic table
  // agreed over the world is neither merged nor averaged (sync_scope.h).
  embedding::dynamic::ReplicaMerge& merge = merge_;
  const int replicas = replica_->Size();
  bool dynamic = false;
  for (const embedding::LocalShard& ls : storage.layout().local)
    dynamic = dynamic || (storage.layout().tables[static_cast<size_t>(ls.table)].dynamic &&
                          replicas > 1 && !SyncLeavesAlone(storage, ls.table, replicas));
  if (dynamic)
    SR_RETURN_IF_ERROR(storage.GatherReplicaRows(&merge, *replica_host_,
                                                 mode == SyncMode::kWeightsOnly,
                                                 TablesLeftAlone(storage, replicas)));
  std::vector<SyncBuffer> buffers;
  std::vector<embedding::ParamBuffer> on_device;  // staged at the same index of `buffers`
  for (const embedding::ParamBuffer& b : storage.ParamBuffers()) {
    if (b.kind != embedding::ParamKind::kWeights && mode == SyncMode::kWeightsOnly) continue;
    if (IsFp8Arena(b)) continue;  // FP8 rows: averaged decoded, below
    SyncBuffer sb;
    sb.data = b.data;
    sb.count = b.count;
    sb.dtype = b.dtype;
    // Counters (the optimizer step) take the maximum so a replica that skipped a step cannot drag
    // the bias correction backwards; everything else is averaged.
    sb.op = b.kind == embedding::ParamKind::kCounter ? comm::ReduceOp::kMax : comm::ReduceOp::kAvg;
    buffers.push_back(sb);
    on_device.push_back(b);
    if (b.device.is_host()) on_device.back().data = nullptr;
  }
  CutDynamic(storage, replicas, &buffers, &on_device);
  // FP8 weights (host collections only) average as decoded fp32 rows and are encoded again.
  const bool fp8 = replicas > 1 && replica_->device().is_host();
  if (fp8) {
    const size_t before = buffers.size();
    SR_RETURN_IF_ERROR(DecodeFp8Weights(storage, &fp8_rows_, &buffers));
    on_device.resize(on_device.size() + buffers.size() - before);  // host buffers: data null
  }
  if (!replica_->device().is_host()) {
    SR_RETURN_IF_ERROR(SyncOverDevice(&buffers, &on_device));
    if (dynamic) storage.CommitReplicaRows(&merge);
    syncs_ += 1;
    return Status::Ok();
  }
  // A single replica has nothing to average (SyncBuffers returns at once): no staging either.
  const bool staged = replica_->Size() > 1 && std::any_of(on_device.begin(), on_device.end(),
                                                          [](const embedding::ParamBuffer& b) {
                                                            return b.data != nullptr;
                                                          });
  if (staged) SR_RETURN_IF_ERROR(StageIn(on_device, &buffers));
  SR_RETURN_IF_ERROR(SyncBuffers(*replica_, buffers, hook_, &staging_, &last_));
  if (staged) SR_RETURN_IF_ERROR(StageOut(on_device, buffers));
  if (fp8) SR_RETURN_IF_ERROR(EncodeFp8Weights(storage, fp8_rows_));
  if (dynamic) {
    storage.CommitReplicaRows(&merge);
    last_.bytes += merge.sent_bytes();
    last_.collectives += merge.collectives();
  }
  syncs_ += 1;
  return Status::Ok();
}

Status Mesh::StageIn(const std::vector<embedding::ParamBuffer>& on_device,
                     std::vector<SyncBuffer>* buffers) {
  // One host area for all of them, laid out in the collection's order without gaps between
  // buffers of one element size: the weights and the optimizer states, adjacent in the device
  // arena, stay adjacent, so SyncBuffers issues the same collectives as for a host collection.
  size_t total = 0;
  std::vector<size_t> offsets(on_device.size(), 0);
  Device device = Device::Host();  // the collection's (every device buffer is on it)
  for (size_t i = 0; i < on_device.size(); ++i) {
    if (on_device[i].data == nullptr) continue;
    device = on_device[i].device;
    const size_t es = DTypeSize(on_device[i].dtype);
    total = (total + es - 1) / es * es;
    offsets[i] = total;
    total += on_device[i].count * es;
  }
  Status local = device_staging_.Reserve(device, total);
  for (size_t i = 0; i < on_device.size() && local.ok(); ++i) {
    const embedding::ParamBuffer& b = on_device[i];
    if (b.data == nullptr) continue;
    (*buffers)[i].data = device_staging_.data() + offsets[i];
    local =
        embedding::CopyToHost(b.device, (*buffers)[i].data, b.data, b.count * DTypeSize(b.dtype));
  }
  // Every replica learns whether all staged their values before anyone enters the collectives,
  // so a failed copy fails the sync on every replica instead of leaving the others waiting.
  int32_t failed = local.ok() ? 0 : 1;
  SR_RETURN_IF_ERROR(
      replica_host_->AllReduce(&failed, &failed, 1, DType::kInt32, comm::ReduceOp::kMax));
  if (!local.ok()) return local.WithContext("staging the replica sync");
  if (failed != 0)
    return Status::Remote(
        "replica sync: another replica of this rank's shards could not stage "
        "its parameters from its device; nothing was synced");
  return Status::Ok();
}

Status Mesh::StageOut(const std::vector<embedding::ParamBuffer>& on_device,
                      const std::vector<SyncBuffer>& buffers) {
  for (size_t i = 0; i < on_device.size(); ++i) {
    const embedding::ParamBuffer& b = on_device[i];
    if (b.data == nullptr) continue;
    SR_RETURN_IF_ERROR(
        embedding::CopyToDevice(b.device, b.data, buffers[i].data, b.count * DTypeSize(b.dtype))
            .WithContext("writing back the replica sync (this replica's parameters are now "
                         "partly averaged: restore them from a checkpoint)"));
  }
  return Status::Ok();
}

Status Mesh::Step(embedding::TableStorage& storage, bool* synced) {
  if (synced != nullptr) *synced = false;
  const int64_t next = steps_ + 1;
  if (next % options_.sync_interval == 0) {
    SR_RETURN_IF_ERROR(Sync(storage, SyncMode::kDefault));
    if (synced != nullptr) *synced = true;
  }
  steps_ = next;
  return Status::Ok();
}

}  // namespace shardrec::replica
