// Mesh: the world communicator cut into a sharding-group communicator (model parallel, ranks
// 0..S-1 = plan ranks) and a replica-group communicator (weight sync) for this rank, together
// with the mesh's sync policy: how often a step syncs, what a sync averages, an optional hook
// replacing the collective, and the figures of the last sync.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "impl/comm/communicator.h"
#include "impl/embedding/device_copy.h"
#include "impl/embedding/dynamic/replica_merge.h"
#include "impl/embedding/step_state.h"
#include "impl/embedding/storage/table_storage.h"
#include "impl/replica/fp8_sync.h"
#include "impl/replica/layout.h"
#include "impl/replica/sync.h"

namespace shardrec::replica {

// What a sync averages. Values mirror SHARDREC_SYNC_*.
enum class SyncMode : int32_t {
  kDefault = 0,          // the mesh's configured mode
  kWeightsAndState = 1,  // weights, every optimizer state, and the step counter (max)
  kWeightsOnly = 2,      // weights; optimizer state stays per replica
};

struct MeshOptions {
  int32_t shard_size = 0;  // S; 0 means the world size (1D)
  MeshKind kind = MeshKind::kDefault;
  int32_t ranks_per_node = 0;  // only for Describe; 0 means unknown
  int32_t sync_interval = 1;   // Step syncs every N steps
  SyncMode sync_mode = SyncMode::kWeightsAndState;
};

class Mesh {
 public:
  // Collective over `world`: validates the options (the same on every rank) and splits `world`
  // twice. Errors: kInvalidArgument for bad options, plus whatever the splits return. `local`:
  // the caller's verdict on arguments it checked itself; a rank refusing its arguments still
  // meets its peers' agreement (comm/agree.h), so over a host world every rank fails at once.
  static Status Create(std::shared_ptr<comm::Communicator> world, const MeshOptions& options,
                       std::unique_ptr<Mesh>* out, const Status& local = Status::Ok());

  // A collection on the mesh is sharded over this rank's sharding group, its data-parallel
  // tables reduce over the world (unless options.dp_comm says otherwise), and every replica of
  // this rank's shards starts with the same weights. The C layer creates it (the replica module
  // sees collections only through the storage seam) in three steps, every rank alike:
  // CollectionArgs, which returns this rank's verdict (`rejected`, as in
  // EmbeddingCollection::Create, or a plan not made for the sharding group's size) and sets
  // options->dp_comm to the world when unset; EmbeddingCollection::Create over sharding() with
  // that verdict (RefuseCreate without a plan); and, unless that failed in an exchange
  // (comm::IsExchangeFailure: the peers may be gone), VerifyReplicas, collective over the world,
  // with the created collection's storage (null where it was not created, `created` saying why,
  // which is then returned).
  Status CollectionArgs(const sharding::Plan* plan, embedding::CollectionOptions* options,
                        const Status& rejected) const;
  Status VerifyReplicas(embedding::TableStorage* storage, const Status& created);

  // Over a device (NCCL) replica group a GPU collection's fp32 and integer arenas are instead
  // all-reduced in place on the device (device_sync.cc: no host staging, one wait); its 16-bit
  // ones (averaged in fp32 and rounded once) still go through the host staging.
  // Averages the collection's weights (and, unless weights-only, optimizer states; the step
  // counter takes the maximum) across the replica group, one collective per dtype. Collective
  // over the replica group. Allowed while the collection's next input distribution is in
  // flight (the two use different communicators and disjoint data). A GPU collection's arenas
  // are copied to one reused host staging area, averaged there exactly as a host collection's,
  // and copied back (each copy waited for with the device wait bound); a replica whose copy to
  // the host fails fails the sync on every replica before anything changes. Dynamic tables'
  // shards merge by key instead (dynamic/replica_merge.h, through the storage seam), gathered
  // before anything changes.
  Status Sync(embedding::TableStorage& storage, SyncMode mode);
  // Counts one training step; syncs (in the configured mode) when the count reaches a multiple
  // of the sync interval.
  Status Step(embedding::TableStorage& storage, bool* synced);
  // Replaces the sync collective for floating-point buffers; an empty hook restores it.
  void SetHook(SyncHook hook) { hook_ = std::move(hook); }

  const Layout& layout() const { return layout_; }
  const MeshOptions& options() const { return options_; }
  int rank() const { return world_->Rank(); }
  const std::shared_ptr<comm::Communicator>& world() const { return world_; }
  const std::shared_ptr<comm::Communicator>& sharding() const { return sharding_; }
  const std::shared_ptr<comm::Communicator>& replica() const { return replica_; }
  // The world and the replica group for host buffers: the communicators themselves on the host,
  // a staging wrapper (embedding/staged_comm.h) when they are device (NCCL) communicators.
  comm::Communicator& host_world() const { return *world_host_; }
  comm::Communicator& host_replica() const { return *replica_host_; }
  const SyncStats& last_sync() const { return last_; }
  int64_t syncs() const { return syncs_; }
  std::string Describe() const { return layout_.Describe(options_.ranks_per_node); }

 private:
  Layout layout_;
  MeshOptions options_;
  std::shared_ptr<comm::Communicator> world_;
  std::shared_ptr<comm::Communicator> sharding_;
  std::shared_ptr<comm::Communicator> replica_;
  std::shared_ptr<comm::Communicator> world_host_;
  std::shared_ptr<comm::Communicator> replica_host_;
  SyncHook hook_;
  int64_t steps_ = 0;
  int64_t syncs_ = 0;
  // A GPU collection's buffers through `device_staging_`: copied in (entries of `on_device`
  // with a null data pointer are host buffers, left alone) and `buffers` pointed at the copies,
  // with a replica-wide agreement that every replica staged; then the averages copied back.
  Status StageIn(const std::vector<embedding::ParamBuffer>& on_device,
                 std::vector<SyncBuffer>* buffers);
  // Sync over a device (NCCL) replica group (device_sync.cc): `buffers` and `params` as Sync
  // collects them (params[i].data null for a host buffer).
  Status SyncOverDevice(std::vector<SyncBuffer>* buffers,
                        std::vector<embedding::ParamBuffer>* params);
  Status StageOut(const std::vector<embedding::ParamBuffer>& on_device,
                  const std::vector<SyncBuffer>& buffers);

  SyncStats last_;
  std::vector<uint8_t> staging_;
  // The dynamic tables' merge of a sync; kept from sync to sync so its buffers are reused.
  embedding::dynamic::ReplicaMerge merge_;
  // The decoded FP8 weights of a sync (fp8_sync.h), reused from sync to sync.
  Fp8SyncRows fp8_rows_;
  // Host copies of a GPU collection's parameter arenas during a sync, reused from sync to sync
  // (pinned when the plugin can pin them).
  embedding::HostStaging device_staging_;
};

}  // namespace shardrec::replica
