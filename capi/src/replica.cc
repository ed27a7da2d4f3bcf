// C API of the 2D mesh (shardrec/replica.h): thin wrappers over shardrec::replica::Mesh, which
// owns the splits, the sync policy and the replica check.
#include "shardrec/replica.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "capi/src/embedding_convert.h"
#include "capi/src/entry.h"
#include "capi/src/handles.h"
#include "capi/src/versioned.h"
#include "impl/replica/mesh.h"

namespace shardrec::capi {
namespace {

static_assert(SHARDREC_MESH_LAYOUT_INTER_HOST == static_cast<int>(replica::MeshKind::kInterHost));
static_assert(SHARDREC_SYNC_WEIGHTS_ONLY == static_cast<int>(replica::SyncMode::kWeightsOnly));

Status ToMeshOptions(const shardrec_mesh_options_t* o, replica::MeshOptions* out) {
  *out = replica::MeshOptions();
  if (o == nullptr) return Status::Ok();
  SR_RETURN_IF_ERROR(CheckStructVersion(o->version, SHARDREC_MESH_OPTIONS_VERSION, "options"));
  out->shard_size = o->sharding_group_size;
  out->kind = static_cast<replica::MeshKind>(o->layout);
  out->ranks_per_node = o->ranks_per_node;
  out->sync_interval = o->sync_interval;
  out->sync_mode = static_cast<replica::SyncMode>(o->sync_mode);
  return Status::Ok();
}

// A C hook as the mesh's hook: its int status becomes a Status naming the hook.
replica::SyncHook ToHook(shardrec_sync_hook_fn hook, void* payload) {
  if (hook == nullptr) return {};
  return [hook, payload](void* data, size_t count, DType dtype) {
    const int32_t rc = hook(data, count, static_cast<int32_t>(dtype), payload);
    if (rc == 0) return Status::Ok();
    return Status(
        rc < 0 && rc >= static_cast<int32_t>(Code::kAborted) ? static_cast<Code>(rc) : Code::kError,
        StrCat("the sync hook returned ", rc));
  };
}

}  // namespace
}  // namespace shardrec::capi

using shardrec::Status;
using shardrec::capi::CheckNotNull;
using shardrec::capi::Enter;
using shardrec::capi::Exclusive;
using shardrec::capi::Handle;
using shardrec::capi::NotNull;

extern "C" {

SHARDREC_API shardrec_status_t shardrec_mesh_options_init(shardrec_mesh_options_t* options,
                                                          uint32_t version) {
  const shardrec_mesh_options_t d = SHARDREC_MESH_OPTIONS_INIT;
  return shardrec::capi::InitStruct(options, version, SHARDREC_MESH_OPTIONS_VERSION, d, "options");
}

SHARDREC_API shardrec_status_t shardrec_mesh_create(shardrec_mesh_t** out, shardrec_comm_t* world,
                                                    const shardrec_mesh_options_t* options) {
  if (out != nullptr) *out = nullptr;
  return Enter({Handle(world, "world")}, [&] {
    // Creation is collective: a rank refusing its own arguments still meets its peers'
    // agreement (in Create), so they fail naming it rather than wait out their timeout.
    Status args = CheckNotNull(out, "out");
    shardrec::replica::MeshOptions o;
    if (args.ok()) args = shardrec::capi::ToMeshOptions(options, &o);
    auto mesh = std::make_unique<shardrec_mesh>();
    SR_RETURN_IF_ERROR(shardrec::replica::Mesh::Create(world->impl, o, &mesh->impl, args));
    *out = mesh.release();
    return Status::Ok();
  });
}

SHARDREC_API void shardrec_mesh_destroy(shardrec_mesh_t* mesh) { delete mesh; }

SHARDREC_API shardrec_status_t shardrec_mesh_coords(const shardrec_mesh_t* mesh,
                                                    int32_t* sharding_group, int32_t* shard_rank,
                                                    int32_t* replica_group, int32_t* replica_rank) {
  return Enter({Handle(mesh, "mesh")}, [&] {
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
  return Enter({NotNull(out, "out"), Handle(mesh, "mesh")}, [&] {
    *out = new shardrec_comm{mesh->impl->sharding()};
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_mesh_replica_comm(shardrec_comm_t** out,
                                                          const shardrec_mesh_t* mesh) {
  return Enter({NotNull(out, "out"), Handle(mesh, "mesh")}, [&] {
    *out = new shardrec_comm{mesh->impl->replica()};
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_mesh_describe(const shardrec_mesh_t* mesh, char** text_out,
                                                      size_t* len_out) {
  return Enter({NotNull(text_out, "text_out"), Handle(mesh, "mesh")}, [&] {
    const std::string text = mesh->impl->Describe();
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
  // Cleared as soon as `out` is known to be usable, also where the mesh is then refused.
  if (out != nullptr) *out = nullptr;
  return Enter({NotNull(out, "out"), Exclusive(mesh, "mesh", "mesh")}, [&] {
    shardrec::optim::OptimizerConfig oc;
    shardrec::embedding::CollectionOptions co;
    // A NULL plan is refused with the peers (creation is collective): the mesh takes part in
    // their agreements without one.
    Status local = CheckNotNull(plan, "plan");
    if (local.ok()) local = shardrec::capi::ToOptimizer(optimizer, &oc);
    if (local.ok()) local = shardrec::capi::ToCollectionOptions(options, &co);
    auto handle = std::make_unique<shardrec_embedding>();
    // Mesh::CollectionArgs says how: every rank reaches the replicas' check, whether or not its
    // group created the collection, unless its group's communication failed (its peers may be
    // gone: no second wait for them).
    local = mesh->impl->CollectionArgs(plan != nullptr ? plan->impl.get() : nullptr, &co, local);
    using shardrec::embedding::EmbeddingCollection;
    const Status created = plan == nullptr
                               ? EmbeddingCollection::RefuseCreate(mesh->impl->sharding(), local)
                               : EmbeddingCollection::Create(plan->impl, mesh->impl->sharding(),
                                                             optimizer != nullptr ? &oc : nullptr,
                                                             co, &handle->impl, local);
    if (shardrec::comm::IsExchangeFailure(created)) return created;
    SR_RETURN_IF_ERROR(
        mesh->impl->VerifyReplicas(created.ok() ? &handle->impl->storage() : nullptr, created));
    handle->states = handle->impl->States();
    *out = handle.release();
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_mesh_sync(shardrec_mesh_t* mesh, shardrec_embedding_t* coll,
                                                  int32_t mode) {
  return Enter({Exclusive(mesh, "mesh", "mesh"), Exclusive(coll, "collection", "collection")}, [&] {
    return mesh->impl->Sync(coll->impl->storage(), static_cast<shardrec::replica::SyncMode>(mode));
  });
}

SHARDREC_API shardrec_status_t shardrec_mesh_step(shardrec_mesh_t* mesh, shardrec_embedding_t* coll,
                                                  int32_t* synced_out) {
  // Cleared once the mesh is known to be usable, also where the collection is then refused.
  if (synced_out != nullptr && shardrec::capi::HandlePresent(mesh)) *synced_out = 0;
  return Enter({Exclusive(mesh, "mesh", "mesh"), Exclusive(coll, "collection", "collection")}, [&] {
    bool synced = false;
    SR_RETURN_IF_ERROR(mesh->impl->Step(coll->impl->storage(), &synced));
    if (synced_out) *synced_out = synced ? 1 : 0;
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_mesh_set_sync_hook(shardrec_mesh_t* mesh,
                                                           shardrec_sync_hook_fn hook,
                                                           void* payload) {
  return Enter({Exclusive(mesh, "mesh", "mesh")}, [&] {
    mesh->impl->SetHook(shardrec::capi::ToHook(hook, payload));
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_mesh_sync_stats(const shardrec_mesh_t* mesh,
                                                        uint64_t* bytes_out,
                                                        int32_t* collectives_out,
                                                        int64_t* syncs_out) {
  return Enter({Exclusive(mesh, "mesh", "mesh")}, [&] {
    const auto& last = mesh->impl->last_sync();
    if (bytes_out) *bytes_out = last.bytes;
    if (collectives_out) *collectives_out = last.collectives;
    if (syncs_out) *syncs_out = mesh->impl->syncs();
    return Status::Ok();
  });
}

}  // extern "C"
