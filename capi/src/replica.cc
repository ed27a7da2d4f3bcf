// C API of the 2D mesh: creation, collections created on it, and replica sync.
#include "shardrec/replica.h"

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "capi/src/embedding_handle.h"
#include "capi/src/guard.h"
#include "capi/src/handles.h"
#include "capi/src/plan_handle.h"
#include "capi/src/versioned.h"
#include "impl/core/rng.h"
#include "impl/replica/mesh.h"
#include "impl/replica/sync.h"

struct shardrec_mesh {
  std::unique_ptr<shardrec::replica::Mesh> impl;
  int32_t ranks_per_node = 0;
  int32_t sync_interval = 1;
  int32_t sync_mode = SHARDREC_SYNC_WEIGHTS_AND_STATE;
  shardrec_sync_hook_fn hook = nullptr;
  void* hook_payload = nullptr;
  int64_t steps = 0;
  int64_t syncs = 0;
  shardrec::replica::SyncStats last;
  std::vector<uint8_t> staging;
};

namespace shardrec::capi {
namespace {

Status CheckMesh(const shardrec_mesh_t* mesh) {
  if (mesh == nullptr || !mesh->impl) return Status::InvalidArgument("mesh must not be NULL");
  return Status::Ok();
}

// Weight buffers are named "weights" (fp32) or "weights_<dtype>" (16-bit storage); everything
// else a collection exposes is optimizer state or counters.
bool IsWeights(const std::string& name) { return name.rfind("weights", 0) == 0; }

// Order-sensitive 64-bit digest of the local weights; cheap next to creating the tables.
uint64_t Digest(const std::vector<embedding::ParamBuffer>& buffers, uint64_t seed) {
  uint64_t h = Mix64(seed);
  for (const auto& b : buffers) {
    if (!IsWeights(b.name)) continue;
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

// Verifies that every replica of this rank's shards holds the same initial weights; the verdict
// is shared with the whole world so that no rank proceeds alone.
Status VerifyReplicasIdentical(replica::Mesh& mesh, embedding::EmbeddingCollection& coll) {
  const uint64_t digest = Digest(coll.LocalParameterBuffers(), coll.plan().Hash());
  // Max and min of the digest (min as max of the complement) in one collective.
  int64_t mm[2] = {static_cast<int64_t>(digest >> 1), static_cast<int64_t>(~digest >> 1)};
  SR_RETURN_IF_ERROR(mesh.replica()->AllReduce(mm, mm, 2, DType::kInt64, comm::ReduceOp::kMax));
  const bool mismatch =
      mm[0] != static_cast<int64_t>(digest >> 1) || mm[1] != static_cast<int64_t>(~digest >> 1);
  int32_t flags[2] = {mismatch ? 1 : 0, mismatch ? mesh.rank() : -1};
  SR_RETURN_IF_ERROR(mesh.world()->AllReduce(flags, flags, 2, DType::kInt32, comm::ReduceOp::kMax));
  if (flags[0] != 0) {
    return Status::InvalidArgument(
        "replicas do not start identical: the initial weights of the replica group of rank ",
        flags[1], " differ (different seeds or plans on different ranks?)");
  }
  return Status::Ok();
}

Status Sync(shardrec_mesh_t* mesh, shardrec_embedding_t* coll, int32_t mode) {
  if (coll == nullptr || !coll->impl) return Status::InvalidArgument("collection must not be NULL");
  if (mode == SHARDREC_SYNC_DEFAULT) mode = mesh->sync_mode;
  if (mode != SHARDREC_SYNC_WEIGHTS_AND_STATE && mode != SHARDREC_SYNC_WEIGHTS_ONLY) {
    return Status::InvalidArgument("unknown sync mode ", mode);
  }
  if (coll->impl->input_dist_pending()) {
    return Status::InvalidUsage("cannot sync while an input distribution is in flight");
  }
  if (coll->impl->plan().world_size != mesh->impl->layout().shard_size()) {
    return Status::InvalidArgument("the collection's plan has ", coll->impl->plan().world_size,
                                   " ranks but the mesh's sharding groups have ",
                                   mesh->impl->layout().shard_size());
  }
  std::vector<replica::SyncBuffer> buffers;
  for (const auto& b : coll->impl->LocalParameterBuffers()) {
    const bool weights = IsWeights(b.name);
    if (!weights && mode == SHARDREC_SYNC_WEIGHTS_ONLY) continue;
    replica::SyncBuffer sb;
    sb.data = b.data;
    sb.count = b.count;
    sb.dtype = b.dtype;
    sb.op = b.dtype == DType::kInt64 ? comm::ReduceOp::kMax : comm::ReduceOp::kAvg;
    buffers.push_back(sb);
  }
  replica::SyncHook hook;
  if (mesh->hook != nullptr) {
    hook = [mesh](void* data, size_t count, DType dtype) {
      int32_t rc = mesh->hook(data, count, static_cast<int32_t>(dtype), mesh->hook_payload);
      if (rc == 0) return Status::Ok();
      return Status(rc < 0 && rc >= -13 ? static_cast<Code>(rc) : Code::kError,
                    StrCat("the sync hook returned ", rc));
    };
  }
  SR_RETURN_IF_ERROR(
      replica::SyncBuffers(*mesh->impl->replica(), buffers, hook, &mesh->staging, &mesh->last));
  mesh->syncs += 1;
  return Status::Ok();
}

}  // namespace
}  // namespace shardrec::capi

using shardrec::Status;
using shardrec::capi::CheckMesh;
using shardrec::capi::CheckNotNull;
using shardrec::capi::Guard;

extern "C" {

SHARDREC_API shardrec_status_t shardrec_mesh_options_init(shardrec_mesh_options_t* options,
                                                          uint32_t version) {
  const shardrec_mesh_options_t d = SHARDREC_MESH_OPTIONS_INIT;
  return shardrec::capi::InitStruct(options, version, SHARDREC_MESH_OPTIONS_VERSION, d, "options");
}

SHARDREC_API shardrec_status_t shardrec_mesh_create(shardrec_mesh_t** out, shardrec_comm_t* world,
                                                    const shardrec_mesh_options_t* options) {
  return Guard([&] {
    SR_RETURN_IF_ERROR(CheckNotNull(out, "out"));
    *out = nullptr;
    if (world == nullptr || !world->impl) return Status::InvalidArgument("world must not be NULL");
    shardrec_mesh_options_t o = SHARDREC_MESH_OPTIONS_INIT;
    if (options != nullptr) {
      SR_RETURN_IF_ERROR(shardrec::capi::CheckStructVersion(
          options->version, SHARDREC_MESH_OPTIONS_VERSION, "options"));
      o = *options;
    }
    const int world_size = world->impl->Size();
    const int s = o.sharding_group_size == 0 ? world_size : o.sharding_group_size;
    if (o.layout != SHARDREC_MESH_LAYOUT_DEFAULT && o.layout != SHARDREC_MESH_LAYOUT_INTER_HOST) {
      return Status::InvalidArgument("options.layout: unknown mesh layout ", o.layout);
    }
    if (o.sync_interval < 0) {
      return Status::InvalidArgument("options.sync_interval must be >= 0, got ", o.sync_interval);
    }
    if (o.ranks_per_node < 0) {
      return Status::InvalidArgument("options.ranks_per_node must be >= 0, got ", o.ranks_per_node);
    }
    if (o.sync_mode < SHARDREC_SYNC_DEFAULT || o.sync_mode > SHARDREC_SYNC_WEIGHTS_ONLY) {
      return Status::InvalidArgument("options.sync_mode: unknown mode ", o.sync_mode);
    }
    auto mesh = std::make_unique<shardrec_mesh>();
    SR_RETURN_IF_ERROR(shardrec::replica::Mesh::Create(
        world->impl, s, static_cast<shardrec::replica::MeshKind>(o.layout), &mesh->impl));
    mesh->ranks_per_node = o.ranks_per_node;
    mesh->sync_interval = o.sync_interval == 0 ? 1 : o.sync_interval;
    mesh->sync_mode =
        o.sync_mode == SHARDREC_SYNC_DEFAULT ? SHARDREC_SYNC_WEIGHTS_AND_STATE : o.sync_mode;
    *out = mesh.release();
    return Status::Ok();
  });
}

SHARDREC_API void shardrec_mesh_destroy(shardrec_mesh_t* mesh) { delete mesh; }

SHARDREC_API shardrec_status_t shardrec_mesh_coords(const shardrec_mesh_t* mesh,
                                                    int32_t* sharding_group, int32_t* shard_rank,
                                                    int32_t* replica_group, int32_t* replica_rank) {
  return Guard([&] {
    SR_RETURN_IF_ERROR(CheckMesh(mesh));
    const auto& l = mesh->impl->layout();
    const int r = mesh->impl->rank();
    if (sharding_group) *sharding_group = l.ShardingGroup(r);
    if (shard_rank) *shard_rank = l.ShardRank(r);
    if (replica_group) *replica_group = l.ReplicaGroup(r);
    if (replica_rank) *replica_rank = l.ReplicaRank(r);
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_mesh_sharding_comm(shardrec_comm_t** out,
                                                           const shardrec_mesh_t* mesh) {
  return Guard([&] {
    SR_RETURN_IF_ERROR(CheckNotNull(out, "out"));
    SR_RETURN_IF_ERROR(CheckMesh(mesh));
    auto handle = std::make_unique<shardrec_comm>();
    handle->impl = mesh->impl->sharding();
    *out = handle.release();
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_mesh_replica_comm(shardrec_comm_t** out,
                                                          const shardrec_mesh_t* mesh) {
  return Guard([&] {
    SR_RETURN_IF_ERROR(CheckNotNull(out, "out"));
    SR_RETURN_IF_ERROR(CheckMesh(mesh));
    auto handle = std::make_unique<shardrec_comm>();
    handle->impl = mesh->impl->replica();
    *out = handle.release();
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_mesh_describe(const shardrec_mesh_t* mesh, char** text_out,
                                                      size_t* len_out) {
  return Guard([&] {
    SR_RETURN_IF_ERROR(CheckNotNull(text_out, "text_out"));
    SR_RETURN_IF_ERROR(CheckMesh(mesh));
    std::string text = mesh->impl->layout().Describe(mesh->ranks_per_node);
    char* buf = static_cast<char*>(std::malloc(text.size() + 1));
    if (buf == nullptr) return Status::OutOfMemory("describing the mesh");
    std::memcpy(buf, text.c_str(), text.size() + 1);
    *text_out = buf;
    if (len_out) *len_out = text.size();
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_mesh_embedding_create(
    shardrec_embedding_t** out, shardrec_mesh_t* mesh, const shardrec_plan_t* plan,
    const shardrec_optimizer_config_t* optimizer, const shardrec_embedding_options_t* options) {
  return Guard([&] {
    SR_RETURN_IF_ERROR(CheckNotNull(out, "out"));
    *out = nullptr;
    SR_RETURN_IF_ERROR(CheckMesh(mesh));
    SR_RETURN_IF_ERROR(CheckNotNull(plan, "plan"));
    const int s = mesh->impl->layout().shard_size();
    if (plan->impl && plan->impl->world_size != s) {
      return Status::InvalidArgument("the plan is made for ", plan->impl->world_size,
                                     " ranks but the mesh's sharding groups have ", s,
                                     " ranks: plan once for the sharding group size");
    }
    shardrec_embedding_options_t o;
    SR_RETURN_IF_ERROR(Status(static_cast<shardrec::Code>(shardrec_embedding_options_init(
                                  &o, SHARDREC_EMBEDDING_OPTIONS_VERSION)),
                              "initialising options"));
    if (options != nullptr) {
      SR_RETURN_IF_ERROR(shardrec::capi::CheckStructVersion(
          options->version, SHARDREC_EMBEDDING_OPTIONS_VERSION, "options"));
      o = *options;
    }
    shardrec_comm sharding{mesh->impl->sharding()};
    shardrec_comm world{mesh->impl->world()};
    if (o.dp_comm == nullptr) o.dp_comm = &world;
    shardrec_embedding_t* coll = nullptr;
    shardrec_status_t rc = shardrec_embedding_create(&coll, plan, &sharding, optimizer, &o);
    if (rc != SHARDREC_OK) return Status(static_cast<shardrec::Code>(rc), shardrec_last_error());
    std::unique_ptr<shardrec_embedding_t, void (*)(shardrec_embedding_t*)> guard(
        coll, shardrec_embedding_destroy);
    SR_RETURN_IF_ERROR(shardrec::capi::VerifyReplicasIdentical(*mesh->impl, *coll->impl));
    *out = guard.release();
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_mesh_sync(shardrec_mesh_t* mesh, shardrec_embedding_t* coll,
                                                  int32_t mode) {
  return Guard([&] {
    SR_RETURN_IF_ERROR(CheckMesh(mesh));
    return shardrec::capi::Sync(mesh, coll, mode);
  });
}

SHARDREC_API shardrec_status_t shardrec_mesh_step(shardrec_mesh_t* mesh, shardrec_embedding_t* coll,
                                                  int32_t* synced_out) {
  return Guard([&] {
    SR_RETURN_IF_ERROR(CheckMesh(mesh));
    if (coll == nullptr || !coll->impl)
      return Status::InvalidArgument("collection must not be NULL");
    if (synced_out) *synced_out = 0;
    const int64_t next = mesh->steps + 1;
    if (next % mesh->sync_interval == 0) {
      SR_RETURN_IF_ERROR(shardrec::capi::Sync(mesh, coll, SHARDREC_SYNC_DEFAULT));
      if (synced_out) *synced_out = 1;
    }
    mesh->steps = next;
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_mesh_set_sync_hook(shardrec_mesh_t* mesh,
                                                           shardrec_sync_hook_fn hook,
                                                           void* payload) {
  return Guard([&] {
    SR_RETURN_IF_ERROR(CheckMesh(mesh));
    mesh->hook = hook;
    mesh->hook_payload = hook ? payload : nullptr;
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_mesh_sync_stats(const shardrec_mesh_t* mesh,
                                                        uint64_t* bytes_out,
                                                        int32_t* collectives_out,
                                                        int64_t* syncs_out) {
  return Guard([&] {
    SR_RETURN_IF_ERROR(CheckMesh(mesh));
    if (bytes_out) *bytes_out = mesh->last.bytes;
    if (collectives_out) *collectives_out = mesh->last.collectives;
    if (syncs_out) *syncs_out = mesh->syncs;
    return Status::Ok();
  });
}

}  // extern "C"
