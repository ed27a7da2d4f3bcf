// C API of data-parallel dense training (shardrec/ddp.h): thin wrappers over impl/ddp.
#include "shardrec/ddp.h"

#include <atomic>
#include <memory>
#include <vector>

#include "capi/src/embedding_convert.h"
#include "capi/src/entry.h"
#include "capi/src/handles.h"
#include "capi/src/versioned.h"
#include "impl/ddp/bucketer.h"
#include "impl/ddp/sharded.h"

namespace shardrec::capi {
namespace {

static_assert(SHARDREC_DDP_COMPRESSION_BF16 == static_cast<int>(ddp::Compression::kBFloat16));

Status ToDdpOptions(const shardrec_ddp_options_t* o, ddp::DdpOptions* out) {
  *out = ddp::DdpOptions();
  if (o == nullptr) return Status::Ok();
  SR_RETURN_IF_ERROR(CheckStructVersion(o->version, SHARDREC_DDP_OPTIONS_VERSION, "options"));
  if (o->first_bucket_bytes < 0 || o->bucket_cap_bytes < 0) {
    return Status::InvalidArgument("DDP options: bucket caps ", o->first_bucket_bytes, " and ",
                                   o->bucket_cap_bytes, " must be >= 0 (0 is the default)");
  }
  if (o->compression != SHARDREC_DDP_COMPRESSION_NONE &&
      o->compression != SHARDREC_DDP_COMPRESSION_BF16) {
    return Status::InvalidArgument("DDP options: unknown compression ", o->compression);
  }
  if (o->first_bucket_bytes > 0) out->first_bucket_bytes = o->first_bucket_bytes;
  if (o->bucket_cap_bytes > 0) out->bucket_cap_bytes = o->bucket_cap_bytes;
  out->compression = static_cast<ddp::Compression>(o->compression);
  return Status::Ok();
}

Status CheckComm(const shardrec_comm_t* comm) {
  if (comm == nullptr || !comm->impl) return Status::InvalidArgument("comm must not be NULL");
  return Status::Ok();
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

SHARDREC_API shardrec_status_t shardrec_ddp_options_init(shardrec_ddp_options_t* options,
                                                         uint32_t version) {
  const shardrec_ddp_options_t d = SHARDREC_DDP_OPTIONS_INIT;
  return shardrec::capi::InitStruct(options, version, SHARDREC_DDP_OPTIONS_VERSION, d, "options");
}

SHARDREC_API shardrec_status_t shardrec_ddp_create(shardrec_ddp_t** out, shardrec_comm_t* comm,
                                                   const int64_t* counts, size_t n,
                                                   const shardrec_ddp_options_t* options) {
  return Enter({}, [&] {
    if (out != nullptr) *out = nullptr;
    SR_RETURN_IF_ERROR(shardrec::capi::CheckComm(comm));
    // Creation is collective: a rank refusing its own arguments still meets its peers'
    // agreement (in Create), so they fail naming it rather than wait out their timeout.
    Status args = CheckNotNull(out, "out");
    if (args.ok() && n > 0) args = CheckNotNull(counts, "counts");
    shardrec::ddp::DdpOptions o;
    if (args.ok()) args = shardrec::capi::ToDdpOptions(options, &o);
    auto h = std::make_unique<shardrec_ddp>();
    SR_RETURN_IF_ERROR(shardrec::ddp::Bucketer::Create(
        comm->impl, args.ok() ? std::vector<int64_t>(counts, counts + n) : std::vector<int64_t>(),
        o, &h->impl, args));
    *out = h.release();
    return Status::Ok();
  });
}

SHARDREC_API void shardrec_ddp_destroy(shardrec_ddp_t* ddp) { delete ddp; }

SHARDREC_API shardrec_status_t shardrec_ddp_grad(const shardrec_ddp_t* ddp, size_t index,
                                                 float** out) {
  return Enter({Handle(ddp, "ddp"), NotNull(out, "out")}, [&] {
    if (index >= ddp->impl->num_tensors()) {
      return Status::InvalidArgument("gradient ", index, " out of range (",
                                     ddp->impl->num_tensors(), " registered)");
    }
    *out = ddp->impl->Grad(index);
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_ddp_set_external(shardrec_ddp_t* ddp, size_t index,
                                                         float* grad) {
  return Enter({Exclusive(ddp, "ddp", "bucketer")},
               [&] { return ddp->impl->SetExternal(index, grad); });
}

SHARDREC_API shardrec_status_t shardrec_ddp_zero_grad(shardrec_ddp_t* ddp) {
  return Enter({Exclusive(ddp, "ddp", "bucketer")}, [&] { return ddp->impl->ZeroGrad(); });
}

SHARDREC_API shardrec_status_t shardrec_ddp_mark_ready(shardrec_ddp_t* ddp, size_t index) {
  return Enter({Exclusive(ddp, "ddp", "bucketer")}, [&] { return ddp->impl->MarkReady(index); });
}

SHARDREC_API shardrec_status_t shardrec_ddp_finish(shardrec_ddp_t* ddp) {
  return Enter({Exclusive(ddp, "ddp", "bucketer")}, [&] { return ddp->impl->Finish(); });
}

SHARDREC_API shardrec_status_t shardrec_ddp_set_sync(shardrec_ddp_t* ddp, int32_t enabled) {
  return Enter({Exclusive(ddp, "ddp", "bucketer")}, [&] {
    ddp->impl->set_sync(enabled != 0);
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_ddp_stats(const shardrec_ddp_t* ddp,
                                                  shardrec_ddp_stats_t* out) {
  return Enter({Handle(ddp, "ddp"), NotNull(out, "out")}, [&] {
    const auto& s = ddp->impl->stats();
    out->steps = s.steps;
    out->buckets = static_cast<int64_t>(ddp->impl->buckets().size());
    out->comm_seconds = s.comm_seconds;
    out->exposed_seconds = s.exposed_seconds;
    out->bytes_reduced = s.bytes_reduced;
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_ddp_bucket(const shardrec_ddp_t* ddp, size_t bucket,
                                                   size_t* out, size_t capacity, size_t* size) {
  return Enter({Handle(ddp, "ddp")}, [&] {
    const auto& buckets = ddp->impl->buckets();
    if (bucket >= buckets.size()) {
      return Status::InvalidArgument("bucket ", bucket, " out of range (", buckets.size(),
                                     " buckets)");
    }
    const auto& b = buckets[bucket];
    if (size != nullptr) *size = b.size();
    if (out == nullptr && capacity == 0) return Status::Ok();
    SR_RETURN_IF_ERROR(CheckNotNull(out, "out"));
    if (capacity < b.size()) {
      return Status::InvalidArgument("bucket ", bucket, " holds ", b.size(),
                                     " tensors; capacity is ", capacity);
    }
    for (size_t i = 0; i < b.size(); ++i) out[i] = b[i];
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_fsdp_create(shardrec_fsdp_t** out, shardrec_comm_t* comm,
                                                    const int64_t* unit_counts,
                                                    const float* const* initial, size_t n,
                                                    const shardrec_optimizer_config_t* optimizer) {
  return Enter({}, [&] {
    if (out != nullptr) *out = nullptr;
    SR_RETURN_IF_ERROR(shardrec::capi::CheckComm(comm));
    // Creation is collective: a rank refusing its own arguments still meets its peers'
    // agreement (in Create), so they fail naming it rather than wait out their timeout.
    Status args = CheckNotNull(out, "out");
    if (args.ok()) args = CheckNotNull(optimizer, "optimizer");
    if (args.ok() && n > 0) args = CheckNotNull(unit_counts, "unit_counts");
    if (args.ok() && n > 0) args = CheckNotNull(initial, "initial");
    std::vector<int64_t> units;
    std::vector<const float*> init;
    if (args.ok()) {
      units.assign(unit_counts, unit_counts + n);
      init.assign(initial, initial + n);
    }
    for (size_t u = 0; args.ok() && u < n; ++u) {
      if (init[u] == nullptr) args = Status::InvalidArgument("initial[", u, "] is NULL");
    }
    shardrec::optim::OptimizerConfig oc;
    if (args.ok()) args = shardrec::capi::ToOptimizer(optimizer, &oc);
    auto h = std::make_unique<shardrec_fsdp>();
    SR_RETURN_IF_ERROR(shardrec::ddp::ShardedParams::Create(comm->impl, std::move(units), init, oc,
                                                            &h->impl, args));
    *out = h.release();
    return Status::Ok();
  });
}

SHARDREC_API void shardrec_fsdp_destroy(shardrec_fsdp_t* fsdp) { delete fsdp; }

SHARDREC_API shardrec_status_t shardrec_fsdp_gather(shardrec_fsdp_t* fsdp, size_t unit,
                                                    int64_t prefetch, float** full) {
  return Enter({Exclusive(fsdp, "fsdp", "sharded parameters"), NotNull(full, "full")},
               [&] { return fsdp->impl->Gather(unit, prefetch, full); });
}

SHARDREC_API shardrec_status_t shardrec_fsdp_release(shardrec_fsdp_t* fsdp, size_t unit) {
  return Enter({Exclusive(fsdp, "fsdp", "sharded parameters")},
               [&] { return fsdp->impl->Release(unit); });
}

SHARDREC_API shardrec_status_t shardrec_fsdp_grad(shardrec_fsdp_t* fsdp, size_t unit,
                                                  float** full) {
  return Enter({Exclusive(fsdp, "fsdp", "sharded parameters"), NotNull(full, "full")},
               [&] { return fsdp->impl->Grad(unit, full); });
}

SHARDREC_API shardrec_status_t shardrec_fsdp_reduce_grad(shardrec_fsdp_t* fsdp, size_t unit) {
  return Enter({Exclusive(fsdp, "fsdp", "sharded parameters")},
               [&] { return fsdp->impl->ReduceGrad(unit); });
}

SHARDREC_API shardrec_status_t shardrec_fsdp_step(shardrec_fsdp_t* fsdp) {
  return Enter({Exclusive(fsdp, "fsdp", "sharded parameters")}, [&] { return fsdp->impl->Step(); });
}

SHARDREC_API shardrec_status_t shardrec_fsdp_shard(shardrec_fsdp_t* fsdp, size_t unit, float** data,
                                                   int64_t* offset, int64_t* count) {
  return Enter({Handle(fsdp, "fsdp"), NotNull(data, "data")}, [&] {
    if (unit >= fsdp->impl->num_units()) {
      return Status::InvalidArgument("unit ", unit, " out of range (", fsdp->impl->num_units(),
                                     " units)");
    }
    *data = fsdp->impl->shard(unit);
    if (offset != nullptr) *offset = fsdp->impl->shard_offset(unit);
    if (count != nullptr) *count = fsdp->impl->shard_count(unit);
    return Status::Ok();
  });
}

SHARDREC_API shardrec_status_t shardrec_fsdp_memory(const shardrec_fsdp_t* fsdp, int64_t* current,
                                                    int64_t* peak) {
  return Enter({Handle(fsdp, "fsdp")}, [&] {
    if (current != nullptr) *current = fsdp->impl->memory_bytes();
    if (peak != nullptr) *peak = fsdp->impl->peak_memory_bytes();
    return Status::Ok();
  });
}

}  // extern "C"
