// C API of checkpoints (shardrec/checkpoint.h): thin wrappers over impl/checkpoint on the POSIX
// file system.
#include "shardrec/checkpoint.h"

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "capi/src/entry.h"
#include "capi/src/handles.h"
#include "capi/src/versioned.h"
#include "impl/checkpoint/checkpoint.h"
#include "impl/comm/agree.h"

namespace shardrec::capi {
namespace {

checkpoint::FileSystem& Posix() {
  static const std::shared_ptr<checkpoint::FileSystem> fs = checkpoint::PosixFileSystem();
  return *fs;
}

Status CheckPath(const char* p, const char* what) {
  if (p == nullptr || *p == '\0')
    return Status::InvalidArgument(what, " must not be NULL or empty");
  return Status::Ok();
}

Status ToDense(const shardrec_checkpoint_options_t* o, std::vector<checkpoint::DenseTensor>* out) {
  if (o == nullptr) return Status::Ok();
  SR_RETURN_IF_ERROR(
      CheckStructVersion(o->version, SHARDREC_CHECKPOINT_OPTIONS_VERSION, "options"));
  if (o->num_dense > 0 && o->dense == nullptr)
    return Status::InvalidArgument("options.dense is NULL but options.num_dense is ", o->num_dense);
  for (size_t i = 0; i < o->num_dense; ++i) {
    const shardrec_dense_tensor_t& d = o->dense[i];
    if (d.name == nullptr) return Status::InvalidArgument("options.dense[", i, "].name is NULL");
    out->push_back({d.name, d.data, d.count});
  }
  return Status::Ok();
}

Status ToLoadOptions(const shardrec_checkpoint_options_t* o, checkpoint::LoadOptions* out) {
  SR_RETURN_IF_ERROR(ToDense(o, &out->dense));
  if (o != nullptr) {
    out->reset_optimizer_state = o->reset_optimizer_state != 0;
    out->allow_dtype_change = o->allow_dtype_change != 0;
    out->verify_first = o->verify_first != 0;
    // Version 1 callers have no allow_partial_load: they load all-or-nothing.
    out->allow_partial_load = o->version >= 2 && o->allow_partial_load != 0;
  }
  return Status::Ok();
}

// Checks the handles (a NULL one fails this rank alone: there is no communicator to tell the
// others), takes the collection (and the mesh) for the call, then agrees over `comm(coll, mesh)`
// on every rank's verdict on its other arguments (`args`: paths, options, names): a rank refusing
// them still takes part in that one small all-reduce, so its peers fail at once naming it instead
// of waiting for it in the call's first exchange, and nothing changes anywhere. The same
// all-reduce compares `*same` when given: a load's options (LoadOptionWords, filled once `args`
// ran), which every rank must give alike because the load's exchanges follow from them.
template <typename Args, typename Fn>
shardrec_status_t Run(shardrec_embedding_t* coll, shardrec_mesh_t* mesh, bool need_mesh,
                      const char* call, Args&& args, Fn&& body,
                      const std::vector<int64_t>* same = nullptr) {
  const EntryArg mesh_arg = need_mesh ? Exclusive(mesh, "mesh", "mesh") : Unused();
  return Enter({Exclusive(coll, "collection", "collection"), mesh_arg}, [&] {
    // A GPU collection's stream-ordered calls finish (and report) before its parameters are read.
    SR_RETURN_IF_ERROR(coll->impl->Synchronize());
    comm::Communicator& c = need_mesh ? mesh->impl->host_world() : coll->impl->comm();
    const Status local = args();
    if (same == nullptr) {
      SR_RETURN_IF_ERROR(comm::AgreeOnArguments(c, local, call));
    } else {
      SR_RETURN_IF_ERROR(
          comm::AgreeOnArguments(c, local, call, *same,
                                 "allow_partial_load, verify_first, "
                                 "reset_optimizer_state or allow_dtype_change differ; "
                                 "every rank must give the same load options"));
    }
    return body();
  });
}

// The load options whose difference between ranks would make them run different exchanges
// (partial or staged, verified first or not) or end with different states.
std::vector<int64_t> LoadOptionWords(const checkpoint::LoadOptions& o) {
  return {o.allow_partial_load ? 1 : 0, o.verify_first ? 1 : 0, o.reset_optimizer_state ? 1 : 0,
          o.allow_dtype_change ? 1 : 0};
}

checkpoint::Group MeshGroup(shardrec_mesh_t* mesh) {
  const replica::Mesh& m = *mesh->impl;
  checkpoint::Group g;
  g.comm = &m.host_world();  // host buffers: staged when the world is NCCL
  g.replicas = m.layout().replicas();
  g.replica_rank = m.layout().ReplicaRank(m.rank());
  g.replica = &m.host_replica();
  return g;
}

}  // namespace
}  // namespace shardrec::capi

using shardrec::Status;
using shardrec::capi::CheckNotNull;
using shardrec::capi::CheckPath;
using shardrec::capi::LoadOptionWords;
using shardrec::capi::MeshGroup;
using shardrec::capi::Posix;
using shardrec::capi::Run;
using shardrec::capi::ToDense;
using shardrec::capi::ToLoadOptions;
namespace ck = shardrec::checkpoint;

extern "C" {

SHARDREC_API shardrec_status_t
shardrec_checkpoint_options_init(shardrec_checkpoint_options_t* options, uint32_t version) {
  const shardrec_checkpoint_options_t d = SHARDREC_CHECKPOINT_OPTIONS_INIT;
  return shardrec::capi::InitStruct(options, version, SHARDREC_CHECKPOINT_OPTIONS_VERSION, d,
                                    "options",
                                    {offsetof(shardrec_checkpoint_options_t, allow_partial_load),
                                     sizeof(shardrec_checkpoint_options_t)});
}

SHARDREC_API shardrec_status_t shardrec_checkpoint_save(
    shardrec_embedding_t* coll, const char* dir, const shardrec_checkpoint_options_t* options) {
  ck::SaveOptions o;
  auto args = [&]() -> Status {
    SR_RETURN_IF_ERROR(CheckPath(dir, "dir"));
    return ToDense(options, &o.dense);
  };
  return Run(coll, nullptr, false, "checkpoint save", args, [&] {
    ck::Group g;
    g.comm = &coll->impl->comm();
    return ck::Save(coll->impl->storage(), g, Posix(), dir, o);
  });
}

SHARDREC_API shardrec_status_t shardrec_checkpoint_load(
    shardrec_embedding_t* coll, const char* dir, const shardrec_checkpoint_options_t* options) {
  ck::LoadOptions o;
  // Sized alike on every rank, also where the arguments are refused before the options are read.
  std::vector<int64_t> same = LoadOptionWords(o);
  auto args = [&]() -> Status {
    SR_RETURN_IF_ERROR(CheckPath(dir, "dir"));
    SR_RETURN_IF_ERROR(ToLoadOptions(options, &o));
    same = LoadOptionWords(o);
    return Status::Ok();
  };
  return Run(
      coll, nullptr, false, "checkpoint load", args,
      [&] {
        ck::Group g;
        g.comm = &coll->impl->comm();
        return ck::Load(coll->impl->storage(), g, Posix(), dir, o);
      },
      &same);
}

SHARDREC_API shardrec_status_t
shardrec_checkpoint_save_mesh(shardrec_mesh_t* mesh, shardrec_embedding_t* coll, const char* dir,
                              const shardrec_checkpoint_options_t* options) {
  ck::SaveOptions o;
  auto args = [&]() -> Status {
    SR_RETURN_IF_ERROR(CheckPath(dir, "dir"));
    return ToDense(options, &o.dense);
  };
  return Run(coll, mesh, true, "mesh checkpoint save", args,
             [&] { return ck::Save(coll->impl->storage(), MeshGroup(mesh), Posix(), dir, o); });
}

SHARDREC_API shardrec_status_t
shardrec_checkpoint_load_mesh(shardrec_mesh_t* mesh, shardrec_embedding_t* coll, const char* dir,
                              const shardrec_checkpoint_options_t* options) {
  ck::LoadOptions o;
  // Sized alike on every rank, also where the arguments are refused before the options are read.
  std::vector<int64_t> same = LoadOptionWords(o);
  auto args = [&]() -> Status {
    SR_RETURN_IF_ERROR(CheckPath(dir, "dir"));
    SR_RETURN_IF_ERROR(ToLoadOptions(options, &o));
    same = LoadOptionWords(o);
    return Status::Ok();
  };
  return Run(
      coll, mesh, true, "mesh checkpoint load", args,
      [&] { return ck::Load(coll->impl->storage(), MeshGroup(mesh), Posix(), dir, o); }, &same);
}

SHARDREC_API shardrec_status_t shardrec_checkpoint_export_table(shardrec_embedding_t* coll,
                                                                const char* table, const char* path,
                                                                int32_t with_optimizer_state) {
  auto args = [&]() -> Status {
    SR_RETURN_IF_ERROR(CheckNotNull(table, "table"));
    return CheckPath(path, "path");
  };
  return Run(coll, nullptr, false, "table export", args, [&] {
    return ck::ExportTable(coll->impl->storage(), Posix(), path, table, with_optimizer_state != 0);
  });
}

SHARDREC_API shardrec_status_t shardrec_checkpoint_import_table(shardrec_embedding_t* coll,
                                                                const char* table, const char* path,
                                                                int32_t with_optimizer_state) {
  auto args = [&]() -> Status {
    SR_RETURN_IF_ERROR(CheckNotNull(table, "table"));
    return CheckPath(path, "path");
  };
  return Run(coll, nullptr, false, "table import", args, [&] {
    return ck::ImportTable(coll->impl->storage(), Posix(), path, table, with_optimizer_state != 0);
  });
}

}  // extern "C"
