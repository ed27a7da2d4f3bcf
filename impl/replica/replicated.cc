// Collections on a mesh: creation over the sharding group, and the check that every replica
// starts from the same weights.
#include <cstring>

#include "impl/core/rng.h"
#include "impl/replica/mesh.h"

namespace shardrec::replica {

namespace {

// Order-sensitive 64-bit digest of the local weights; cheap next to creating the tables.
uint64_t WeightDigest(const std::vector<embedding::ParamBuffer>& buffers, uint64_t seed) {
  uint64_t h = Mix64(seed);
  for (const auto& b : buffers) {
    if (b.kind != embedding::ParamKind::kWeights) continue;
    const auto* p = static_cast<const uint8_t*>(b.data);
    const size_t bytes = b.count * DTypeSize(b.dtype);
    size_t i = 0;
    for (; i + 8 <= bytes; i += 8) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      h = Mix64(h ^ w);
    }
    for (; i < bytes; ++i) h = Mix64(h ^ p[i]);
  }
  return h;
}

// Every replica of this rank's shards must hold the same initial weights; the verdict is shared
// with the whole world so that no rank proceeds alone.
Status VerifyReplicasIdentical(Mesh& mesh, embedding::EmbeddingCollection& coll) {
  const std::vector<embedding::ParamBuffer> buffers = coll.ParamBuffers();
  Status local;
  for (const embedding::ParamBuffer& b : buffers) {
    // The digest reads the buffers as host memory; a GPU collection's are on its device.
    if (!b.device.is_host() && local.ok())
      local =
          Status::Unsupported("2D (replicated) training of a collection on ", b.device.ToString(),
                              " is not implemented (GPU collection v1: host collections only)");
  }
  const uint64_t digest = local.ok() ? WeightDigest(buffers, coll.plan().Hash()) : 0;
  // Max and min of the digest (min as max of the complement) in one collective.
  int64_t mm[2] = {static_cast<int64_t>(digest >> 1), static_cast<int64_t>(~digest >> 1)};
  SR_RETURN_IF_ERROR(mesh.replica()->AllReduce(mm, mm, 2, DType::kInt64, comm::ReduceOp::kMax));
  const bool mismatch =
      mm[0] != static_cast<int64_t>(digest >> 1) || mm[1] != static_cast<int64_t>(~digest >> 1);
  const bool failed = mismatch || !local.ok();
  int32_t flags[2] = {failed ? 1 : 0, failed ? mesh.rank() : -1};
  SR_RETURN_IF_ERROR(mesh.world()->AllReduce(flags, flags, 2, DType::kInt32, comm::ReduceOp::kMax));
  if (!local.ok()) return local;
  if (flags[0] != 0) {
    return Status::InvalidArgument(
        "replicas do not start identical: the initial weights of the replica group of rank ",
        flags[1], " differ (different seeds or plans on different ranks?)");
  }
  return Status::Ok();
}

}  // namespace

Status Mesh::CreateCollection(std::shared_ptr<const sharding::Plan> plan,
                              const optim::OptimizerConfig* optimizer,
                              embedding::CollectionOptions options,
                              std::unique_ptr<embedding::EmbeddingCollection>* out,
                              const Status& rejected) {
  if (plan == nullptr) return Status::InvalidArgument("plan must not be null");
  Status local = rejected;
  if (local.ok() && plan->world_size != layout_.shard_size())
    local = Status::InvalidArgument(
        "the plan is made for ", plan->world_size, " ranks but the mesh's sharding groups have ",
        layout_.shard_size(), " ranks: plan once for the sharding group size");
  if (local.ok() && !options.device.is_host())
    local = Status::Unsupported("2D (replicated) training of a collection on ",
                                options.device.ToString(),
                                " is not implemented (GPU collection v1: host collections only)");
  if (options.dp_comm == nullptr) options.dp_comm = world_;
  std::unique_ptr<embedding::EmbeddingCollection> coll;
  SR_RETURN_IF_ERROR(embedding::EmbeddingCollection::Create(std::move(plan), sharding_, optimizer,
                                                            options, &coll, local));
  SR_RETURN_IF_ERROR(VerifyReplicasIdentical(*this, *coll));
  *out = std::move(coll);
  return Status::Ok();
}

}  // namespace shardrec::replica
