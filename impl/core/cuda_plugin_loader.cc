// Opening and vetting one plugin file. Everything a stale, foreign or mismatched file could get
// wrong is caught here, before any of its functions runs on real work.
#include <dlfcn.h>

#include <cstring>

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

// Every entry of the table this build knows, by name, so a hole is reported by name.
Status CheckEntries(const shardrec_cuda_plugin_table_t& t) {
  struct Entry {
    const char* name;
    const void* fn;
  };
  const Entry entries[] = {
      {"plugin_path", reinterpret_cast<const void*>(t.plugin_path)},
      {"versions", reinterpret_cast<const void*>(t.versions)},
      {"device_count", reinterpret_cast<const void*>(t.device_count)},
      {"device_alloc", reinterpret_cast<const void*>(t.device_alloc)},
      {"device_free", reinterpret_cast<const void*>(t.device_free)},
      {"host_alloc", reinterpret_cast<const void*>(t.host_alloc)},
      {"host_free", reinterpret_cast<const void*>(t.host_free)},
      {"memcpy_async", reinterpret_cast<const void*>(t.memcpy_async)},
      {"memset_async", reinterpret_cast<const void*>(t.memset_async)},
      {"stream_wait", reinterpret_cast<const void*>(t.stream_wait)},
      {"nccl_unique_id", reinterpret_cast<const void*>(t.nccl_unique_id)},
      {"nccl_create", reinterpret_cast<const void*>(t.nccl_create)},
      {"nccl_destroy", reinterpret_cast<const void*>(t.nccl_destroy)},
      {"nccl_set_timeout", reinterpret_cast<const void*>(t.nccl_set_timeout)},
      {"nccl_all_reduce", reinterpret_cast<const void*>(t.nccl_all_reduce)},
      {"nccl_all_to_all_v", reinterpret_cast<const void*>(t.nccl_all_to_all_v)},
      {"nccl_all_gather_v", reinterpret_cast<const void*>(t.nccl_all_gather_v)},
      {"nccl_reduce_scatter_v", reinterpret_cast<const void*>(t.nccl_reduce_scatter_v)},
      {"nccl_broadcast", reinterpret_cast<const void*>(t.nccl_broadcast)},
      {"nccl_barrier", reinterpret_cast<const void*>(t.nccl_barrier)},
      {"nccl_split", reinterpret_cast<const void*>(t.nccl_split)},
      {"nccl_abort", reinterpret_cast<const void*>(t.nccl_abort)},
      {"nccl_async_error", reinterpret_cast<const void*>(t.nccl_async_error)},
  };
  for (const Entry& e : entries) {
    if (e.fn == nullptr) return Status::NoDevice("its table has no '", e.name, "' entry");
  }
  // Appended entries are checked where they are used (HasDenseEntries): an older plugin still
  // serves everything else.
  return Status::Ok();
}

}  // namespace

Status HasDenseEntries(const shardrec_cuda_plugin_table_t& t, const std::string& path) {
  const size_t need =
      offsetof(shardrec_cuda_plugin_table_t, linear_backward) + sizeof(t.linear_backward);
  if (t.struct_size < need || t.linear_forward == nullptr || t.linear_backward == nullptr) {
    return Status::Unsupported("the CUDA plugin ", path,
                               " predates the dense GPU entries (linear_forward / "
                               "linear_backward); use the plugin built with this libshardrec");
  }
  return Status::Ok();
}

Status HasEmbeddingEntries(const shardrec_cuda_plugin_table_t& t, const std::string& path) {
  const Status stale = Status::Unsupported(
      "the CUDA plugin ", path,
      " predates the embedding GPU entries (emb_status_bytes .. emb_apply); use the plugin "
      "built with this libshardrec");
  // Entries past struct_size are not the plugin's: never read them.
  const size_t need = offsetof(shardrec_cuda_plugin_table_t, emb_apply) + sizeof(t.emb_apply);
  if (t.struct_size < need) return stale;
  const void* entries[] = {
      reinterpret_cast<const void*>(t.emb_status_bytes),
      reinterpret_cast<const void*>(t.emb_read_status),
      reinterpret_cast<const void*>(t.emb_lookup),
      reinterpret_cast<const void*>(t.emb_backward_workspace_bytes),
      reinterpret_cast<const void*>(t.emb_group_rows),
      reinterpret_cast<const void*>(t.emb_aggregate_grads),
      reinterpret_cast<const void*>(t.emb_fused_backward),
      reinterpret_cast<const void*>(t.emb_partial_row_stats),
      reinterpret_cast<const void*>(t.emb_apply),
  };
  for (const void* e : entries) {
    if (e == nullptr) return stale;
  }
  return Status::Ok();
}

Status HasRouteEntries(const shardrec_cuda_plugin_table_t& t, const std::string& path) {
  // Entries past struct_size are not the plugin's: never read them.
  const size_t need = offsetof(shardrec_cuda_plugin_table_t, emb_route) + sizeof(t.emb_route);
  if (t.struct_size < need || t.emb_route_temp_bytes == nullptr || t.emb_route == nullptr) {
    return Status::Unsupported("the CUDA plugin ", path,
                               " predates the device input distribution (emb_route_temp_bytes, "
                               "emb_route); use the plugin built with this libshardrec");
  }
  return Status::Ok();
}

Status HasMeanEntries(const shardrec_cuda_plugin_table_t& t, const std::string& path) {
  const size_t need =
      offsetof(shardrec_cuda_plugin_table_t, emb_divide_means) + sizeof(t.emb_divide_means);
  if (t.struct_size < need || t.emb_divide_means == nullptr)
    return Status::Unsupported("the CUDA plugin ", path,
                               " predates the device MEAN divide (emb_divide_means)");
  return Status::Ok();
}

Status HasUnpackEntries(const shardrec_cuda_plugin_table_t& t, const std::string& path) {
  const size_t need = offsetof(shardrec_cuda_plugin_table_t, emb_unpack) + sizeof(t.emb_unpack);
  if (t.struct_size < need || t.emb_unpack == nullptr)
    return Status::Unsupported("the CUDA plugin ", path,
                               " predates the device id exchange (emb_unpack)");
  return Status::Ok();
}

Status HasGradEntries(const shardrec_cuda_plugin_table_t& t, const std::string& path) {
  const size_t need =
      offsetof(shardrec_cuda_plugin_table_t, emb_pack_grads) + sizeof(t.emb_pack_grads);
  if (t.struct_size < need || t.stream_wait_stream == nullptr || t.emb_check_finite == nullptr ||
      t.emb_pack_grads == nullptr)
    return Status::Unsupported("the CUDA plugin ", path,
                               " predates device gradients (stream_wait_stream, emb_check_finite, "
                               "emb_pack_grads)");
  return Status::Ok();
}

Status HasDpEntries(const shardrec_cuda_plugin_table_t& t, const std::string& path) {
  const size_t need = offsetof(shardrec_cuda_plugin_table_t, emb_row_phase_counted) +
                      sizeof(t.emb_row_phase_counted);
  if (t.struct_size < need || t.emb_dp_workspace_bytes == nullptr || t.emb_dp_step == nullptr ||
      t.emb_row_phase_counted == nullptr)
    return Status::Unsupported("the CUDA plugin ", path,
                               " predates data-parallel tables on the device (emb_dp_step, "
                               "emb_row_phase_counted)");
  return Status::Ok();
}

Status HasGateEntries(const shardrec_cuda_plugin_table_t& t, const std::string& path) {
  const size_t need =
      offsetof(shardrec_cuda_plugin_table_t, emb_sum_sources) + sizeof(t.emb_sum_sources);
  if (t.struct_size < need || t.emb_group_rows_gated == nullptr || t.emb_sum_sources == nullptr)
    return Status::Unsupported("the CUDA plugin ", path,
                               " predates the gated backward (emb_group_rows_gated, "
                               "emb_sum_sources)");
  return Status::Ok();
}

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
                            " (a plugin from another build or release?)");
  }
  const auto get = reinterpret_cast<shardrec_cuda_plugin_table_fn>(
      dlsym(handle, SHARDREC_CUDA_PLUGIN_TABLE_SYMBOL));
  const shardrec_cuda_plugin_table_t* table =
      get != nullptr ? get(SHARDREC_CUDA_PLUGIN_ABI_VERSION) : nullptr;
  if (table == nullptr) {
    return Status::NoDevice("the CUDA plugin ", path, " gave no function table for ABI ",
                            SHARDREC_CUDA_PLUGIN_ABI_VERSION);
  }
  if (table->abi_version != SHARDREC_CUDA_PLUGIN_ABI_VERSION ||
      table->struct_size < SHARDREC_CUDA_PLUGIN_TABLE_BASE_SIZE) {
    return Status::NoDevice("the CUDA plugin ", path, " has a table of ABI ", table->abi_version,
                            " and ", table->struct_size, " bytes; this libshardrec needs ABI ",
                            SHARDREC_CUDA_PLUGIN_ABI_VERSION, " and at least ",
                            SHARDREC_CUDA_PLUGIN_TABLE_BASE_SIZE, " bytes");
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
