// Collections on a mesh: the arguments of their creation over the sharding group (which the C
// layer runs), and the check that every replica starts from the same weights.
#include <algorithm>
#include <cstring>

#include "impl/core/rng.h"
#include "impl/embedding/device_copy.h"
#include "impl/replica/mesh.h"

namespace shardrec::replica {

namespace {

// Device weights are digested through host staging in blocks of this many bytes (a multiple of
// 8, so the digest is the same as over the whole buffer at once).
constexpr size_t kDigestBlockBytes = size_t{8} << 20;

// Folds `bytes` bytes into `h`, 8 at a time, then the tail of fewer than 8 bytes one by one.
uint64_t Fold(uint64_t h, const uint8_t* p, size_t bytes) {
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = Mix64(h ^ w);
  }
  for (; i < bytes; ++i) h = Mix64(h ^ p[i]);
  return h;
}

// Order-sensitive 64-bit digest of the local weights; cheap next to creating the tables. A GPU
// collection's weights are read back in blocks, giving the digest of the same values on the host.
Status WeightDigest(const std::vector<embedding::ParamBuffer>& buffers, uint64_t seed,
                    uint64_t* out) {
  uint64_t h = Mix64(seed);
  embedding::HostStaging staging;
  for (const auto& b : buffers) {
    if (b.kind != embedding::ParamKind::kWeights) continue;
    const auto* p = static_cast<const uint8_t*>(b.data);
    const size_t bytes = b.count * DTypeSize(b.dtype);
    if (b.device.is_host()) {
      h = Fold(h, p, bytes);
      continue;
    }
    SR_RETURN_IF_ERROR(staging.Reserve(b.device, std::min(bytes, kDigestBlockBytes)));
    for (size_t at = 0; at < bytes; at += kDigestBlockBytes) {
      const size_t n = std::min(kDigestBlockBytes, bytes - at);
      SR_RETURN_IF_ERROR(embedding::CopyToHost(b.device, staging.data(), p + at, n));
      h = Fold(h, staging.data(), n);
    }
  }
  *out = h;
  return Status::Ok();
}

// Every replica of this rank's shards must hold the same initial weights; the verdict is shared
// with the whole world so that no rank proceeds alone.
Status VerifyReplicasIdentical(Mesh& mesh, embedding::TableStorage* storage,
                               const Status& created) {
  // A rank whose sharding group did not create its collection (`created`) still takes part, so
  // the other groups learn it instead of waiting for it: with digest and kind words no rank's
  // exceed (the maximum of the others stands), and its rank in the verdict.
  uint64_t digest = 0;
  Status local = Status::Ok();
  bool on_device = false;
  if (created.ok()) {
    const std::vector<embedding::ParamBuffer> buffers = storage->ParamBuffers();
    // A mesh of one replica group is a 1D collection; several replicas refuse tiered tables.
    if (mesh.host_replica().Size() > 1)
      local = embedding::RefuseTiered(*storage, "2D training (a replica mesh)");
    if (local.ok()) local = WeightDigest(buffers, storage->plan().Hash(), &digest);
    for (const embedding::ParamBuffer& b : buffers) on_device = on_device || !b.device.is_host();
  }
  // Max and min of the digest (min as max of the complement) and of the collection's kind, in
  // one collective.
  int64_t mm[4] = {static_cast<int64_t>(digest >> 1), static_cast<int64_t>(~digest >> 1),
                   on_device ? 1 : 0, on_device ? 0 : 1};
  if (!created.ok()) mm[0] = mm[1] = -1, mm[3] = 0;
  SR_RETURN_IF_ERROR(mesh.host_replica().AllReduce(mm, mm, 4, DType::kInt64, comm::ReduceOp::kMax));
  const bool mismatch = created.ok() && (mm[0] != static_cast<int64_t>(digest >> 1) ||
                                         mm[1] != static_cast<int64_t>(~digest >> 1));
  // A sync stages a GPU collection's parameters through the host around the collectives and
  // agrees on the staging first; a host collection does neither, so one replica group cannot
  // mix the two kinds.
  const bool mixed = mm[2] != 0 && mm[3] != 0;
  // {mismatch, its rank, mixed kinds, a rank that could not digest, a rank whose group did not
  // create}: the verdict reaches the whole world, so that no rank proceeds alone.
  int32_t flags[5] = {mismatch ? 1 : 0, mismatch ? mesh.rank() : -1, mixed ? mesh.rank() : -1,
                      local.ok() ? -1 : mesh.rank(), created.ok() ? -1 : mesh.rank()};
  SR_RETURN_IF_ERROR(
      mesh.host_world().AllReduce(flags, flags, 5, DType::kInt32, comm::ReduceOp::kMax));
  if (!created.ok()) return created;
  if (flags[4] >= 0)
    return Status::InvalidArgument("the sharding group of rank ", flags[4],
                                   " did not create its collection (its error says why); no "
                                   "replica group keeps one");
  if (!local.ok()) return local;
  if (flags[3] >= 0)
    return Status::Remote("rank ", flags[3],
                          " could not read its initial weights for the replicas-identical check");
  if (flags[2] >= 0)
    return Status::Unsupported(
        "the replica group of rank ", flags[2],
        " mixes host and GPU collections: the replicas of a shard must all be of one kind (the "
        "same device_type on every rank of a replica group)");
  if (flags[0] != 0) {
    return Status::InvalidArgument(
        "replicas do not start identical: the initial weights of the replica group of rank ",
        flags[1], " differ (different seeds or plans on different ranks?)");
  }
  return Status::Ok();
}

}  // namespace

Status Mesh::CollectionArgs(const sharding::Plan* plan, embedding::CollectionOptions* options,
                            const Status& rejected) const {
  Status local = rejected;
  if (local.ok() && plan == nullptr) local = Status::InvalidArgument("plan must not be null");
  if (local.ok() && plan->world_size != layout_.shard_size())
    local = Status::InvalidArgument(
        "the plan is made for ", plan->world_size, " ranks but the mesh's sharding groups have ",
        layout_.shard_size(), " ranks: plan once for the sharding group size");
  if (options->dp_comm == nullptr) options->dp_comm = world_;
  return local;
}

Status Mesh::VerifyReplicas(embedding::TableStorage* storage, const Status& created) {
  return VerifyReplicasIdentical(*this, storage, created);
}

}  // namespace shardrec::replica
