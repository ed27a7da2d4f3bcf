// Opening and vetting one plugin file. Everything a stale, foreign or mismatched file could get
// wrong is caught here, before any of its functions runs on real work.
#include <dlfcn.h>

#include <cstring>
#include <span>

#include "impl/core/cuda_plugin.h"

namespace shardrec::core {
namespace {

std::string CudaVersionText(int32_t v) {
  if (v <= 0) return "none";
  return StrCat(v / 1000, ".", (v % 1000) / 10);
}

std::string NcclVersionText(int32_t v) {
  if (v <= 0) return "none";
  // NCCL >= 2.9 encodes 10000 * major + 100 * minor + patch.
  return StrCat(v / 10000, ".", (v % 10000) / 100, ".", v % 100);
}

struct Entry {
  const char* name;
  const void* fn;
};

#define SR_ENTRY(t, e) \
  Entry { #e, reinterpret_cast < const void*>((t).e) }

// The first NULL of `entries`, as kUnsupported naming it and the plugin; kOk when none is.
Status FirstHole(std::span<const Entry> entries, const std::string& path, const char* side) {
  for (const Entry& e : entries) {
    if (e.fn == nullptr)
      return Status::Unsupported("the CUDA plugin ", path, " serves no ", side, " (its '", e.name,
                                 "' entry is NULL); use the plugin built with this libshardrec");
  }
  return Status::Ok();
}

// The runtime entries every plugin must fill, by name, so a hole is reported by name.
Status CheckEntries(const shardrec_cuda_plugin_table_t& t) {
  const Entry entries[] = {
      SR_ENTRY(t, plugin_path),       SR_ENTRY(t, versions),
      SR_ENTRY(t, device_count),      SR_ENTRY(t, device_alloc),
      SR_ENTRY(t, device_free),       SR_ENTRY(t, host_alloc),
      SR_ENTRY(t, host_free),         SR_ENTRY(t, memcpy_async),
      SR_ENTRY(t, memset_async),      SR_ENTRY(t, stream_wait),
      SR_ENTRY(t, nccl_unique_id),    SR_ENTRY(t, nccl_create),
      SR_ENTRY(t, nccl_destroy),      SR_ENTRY(t, nccl_set_timeout),
      SR_ENTRY(t, nccl_all_reduce),   SR_ENTRY(t, nccl_all_to_all_v),
      SR_ENTRY(t, nccl_all_gather_v), SR_ENTRY(t, nccl_reduce_scatter_v),
      SR_ENTRY(t, nccl_broadcast),    SR_ENTRY(t, nccl_barrier),
      SR_ENTRY(t, nccl_split),        SR_ENTRY(t, nccl_abort),
      SR_ENTRY(t, nccl_async_error),  SR_ENTRY(t, stream_create),
      SR_ENTRY(t, stream_destroy),    SR_ENTRY(t, stream_wait_stream),
      SR_ENTRY(t, host_alloc_on),
  };
  for (const Entry& e : entries) {
    if (e.fn == nullptr) return Status::NoDevice("its table has no '", e.name, "' entry");
  }
  return Status::Ok();
}

}  // namespace

Status HasDenseEntries(const shardrec_cuda_plugin_table_t& t, const std::string& path) {
  const Entry entries[] = {SR_ENTRY(t, linear_forward), SR_ENTRY(t, linear_backward)};
  return FirstHole(entries, path, "dense GPU layers");
}

Status HasEmbeddingEntries(const shardrec_cuda_plugin_table_t& t, const std::string& path) {
  const Entry entries[] = {
      SR_ENTRY(t, emb_status_bytes),
      SR_ENTRY(t, emb_read_status),
      SR_ENTRY(t, emb_lookup),
      SR_ENTRY(t, emb_backward_workspace_bytes),
      SR_ENTRY(t, emb_group_rows),
      SR_ENTRY(t, emb_aggregate_grads),
      SR_ENTRY(t, emb_fused_backward),
      SR_ENTRY(t, emb_partial_row_stats),
      SR_ENTRY(t, emb_apply),
      SR_ENTRY(t, emb_route_temp_bytes),
      SR_ENTRY(t, emb_route),
      SR_ENTRY(t, emb_divide_means),
      SR_ENTRY(t, emb_unpack),
      SR_ENTRY(t, emb_check_finite),
      SR_ENTRY(t, emb_pack_grads),
      SR_ENTRY(t, emb_dp_workspace_bytes),
      SR_ENTRY(t, emb_dp_step),
      SR_ENTRY(t, emb_row_phase_counted),
      SR_ENTRY(t, emb_group_rows_gated),
      SR_ENTRY(t, emb_sum_sources),
  };
  return FirstHole(entries, path, "embedding GPU kernels");
}

#undef SR_ENTRY

Status FromPlugin(int32_t rc, const shardrec_plugin_status_t& status) {
  if (rc == 0) return Status::Ok();
  const size_t len = strnlen(status.message, sizeof(status.message));
  std::string message(status.message, len);
  if (message.empty()) message = "the CUDA plugin reported an error without a message";
  return Status(static_cast<Code>(rc), std::move(message));
}

Status CheckPluginVersions(const shardrec_plugin_versions_t& v) {
  if (v.cuda_driver > 0 && v.cuda_driver < v.built_cuda_runtime) {
    return Status::NoDevice("the NVIDIA driver supports CUDA up to ",
                            CudaVersionText(v.cuda_driver), " but the plugin was built with CUDA ",
                            CudaVersionText(v.built_cuda_runtime),
                            " (CUDA 13 needs driver 580 or newer); update the driver");
  }
  if (v.cuda_runtime > 0 && v.cuda_runtime / 1000 != v.built_cuda_runtime / 1000) {
    return Status::NoDevice("the CUDA runtime library loaded is ", CudaVersionText(v.cuda_runtime),
                            " but the plugin was built with CUDA ",
                            CudaVersionText(v.built_cuda_runtime));
  }
  if (v.nccl <= 0) {
    return Status::NoDevice("the NCCL library did not report a version (built with NCCL ",
                            NcclVersionText(v.built_nccl), ")");
  }
  if (v.nccl / 10000 != v.built_nccl / 10000 || v.nccl < v.built_nccl) {
    return Status::NoDevice("the NCCL library loaded is ", NcclVersionText(v.nccl),
                            " but the plugin was built with NCCL ", NcclVersionText(v.built_nccl),
                            " (needs the same major version, at least as new)");
  }
  return Status::Ok();
}

Status LoadCudaPlugin(const std::string& path, LoadedPlugin* out) {
  *out = LoadedPlugin{};
  dlerror();
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* err = dlerror();
    return Status::NoDevice(err != nullptr ? std::string(err) : path + ": dlopen failed");
  }
  // Never dlclose'd: a plugin's threads (NCCL's, the watchdog) may outlive any one request.
  out->handle = handle;
  out->path = path;
  const auto abi = reinterpret_cast<shardrec_cuda_plugin_abi_version_fn>(
      dlsym(handle, SHARDREC_CUDA_PLUGIN_ABI_SYMBOL));
  if (abi == nullptr) {
    return Status::NoDevice(path, " is not a libshardrec CUDA plugin (no ",
                            SHARDREC_CUDA_PLUGIN_ABI_SYMBOL, ")");
  }
  if (const uint32_t v = abi(); v != SHARDREC_CUDA_PLUGIN_ABI_VERSION) {
    return Status::NoDevice("the CUDA plugin ", path, " speaks plugin ABI ", v,
                            " but this libshardrec needs ", SHARDREC_CUDA_PLUGIN_ABI_VERSION,
                            " (a plugin from another build or release; use the plugin built with "
                            "this libshardrec)");
  }
  const auto get = reinterpret_cast<shardrec_cuda_plugin_table_fn>(
      dlsym(handle, SHARDREC_CUDA_PLUGIN_TABLE_SYMBOL));
  const shardrec_cuda_plugin_table_t* table =
      get != nullptr ? get(SHARDREC_CUDA_PLUGIN_ABI_VERSION) : nullptr;
  if (table == nullptr) {
    return Status::NoDevice("the CUDA plugin ", path, " gave no function table for ABI ",
                            SHARDREC_CUDA_PLUGIN_ABI_VERSION);
  }
  // One version, one layout: a table of another size is another build's, whatever it says.
  if (table->abi_version != SHARDREC_CUDA_PLUGIN_ABI_VERSION ||
      table->struct_size != sizeof(shardrec_cuda_plugin_table_t)) {
    return Status::NoDevice("the CUDA plugin ", path, " has a table of ABI ", table->abi_version,
                            " and ", table->struct_size, " bytes; this libshardrec needs ABI ",
                            SHARDREC_CUDA_PLUGIN_ABI_VERSION, " and ",
                            sizeof(shardrec_cuda_plugin_table_t),
                            " bytes (use the plugin built with this libshardrec)");
  }
  if (Status s = CheckEntries(*table); !s.ok()) {
    return Status::NoDevice("the CUDA plugin ", path, " is incomplete: ", s.message());
  }
  shardrec_plugin_versions_t versions{};
  table->versions(&versions);
  if (Status s = CheckPluginVersions(versions); !s.ok()) {
    return Status::NoDevice(s.message(), " [CUDA plugin ", path, "]");
  }
  if (const char* p = table->plugin_path(); p != nullptr && *p != '\0') out->path = p;
  out->table = table;
  return Status::Ok();
}

}  // namespace shardrec::core
