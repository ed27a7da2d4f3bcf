// The process-wide plugin: found and loaded once, on the first GPU request, then served to
// every caller. Every failure is cached and reported as kNoDevice, never a crash.
#include "impl/core/cuda_plugin.h"

#include <dlfcn.h>

#include <cstddef>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "impl/core/config.h"

namespace shardrec::core {
namespace {

// What the one load attempt produced. Never destroyed: other threads' static destructors may
// still ask for the runtime during exit, and the plugin is never unloaded.
struct PluginState {
  LoadedPlugin plugin;
  Status status;  // OK exactly when plugin.table != nullptr
  CudaRuntime* runtime = nullptr;
  Status runtime_status;  // OK exactly when runtime != nullptr
};

constexpr const char* kPluginSoname = "libshardrec_cuda.so." SHARDREC_SOVERSION_STRING;

// The folder of the binary that contains this loader: libshardrec.so in production, so that a
// plugin installed or built next to it is found without any search path.
std::string DirOfThisBinary() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&GetCudaPlugin), &info) == 0 || info.dli_fname == nullptr) {
    return {};
  }
  std::string file = info.dli_fname;
  const size_t slash = file.rfind('/');
  return slash == std::string::npos ? std::string() : file.substr(0, slash);
}

std::string Join(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : "; ") + p;
  return out;
}

void Load(PluginState* st) {
  const char* env = std::getenv("SHARDREC_CUDA_PLUGIN");
  if (env != nullptr && *env != '\0') {
    // An explicit choice is honoured alone: silently falling back would hide a typo.
    st->status = LoadCudaPlugin(env, &st->plugin);
    if (!st->status.ok() && st->plugin.handle == nullptr) {
      st->status = Status::NoDevice(
          "the CUDA plugin named by SHARDREC_CUDA_PLUGIN could not be "
          "loaded (",
          st->status.message(), ")");
    }
    return;
  }
  std::vector<std::string> candidates;
  if (const std::string dir = DirOfThisBinary(); !dir.empty()) {
    candidates.push_back(dir + "/" + kPluginSoname);
  }
  candidates.push_back(kPluginSoname);
  std::vector<std::string> failures;
  for (const std::string& path : candidates) {
    st->status = LoadCudaPlugin(path, &st->plugin);
    // A file that opened but failed its checks is the answer; only "not found" moves on.
    if (st->status.ok() || st->plugin.handle != nullptr) return;
    failures.push_back(st->status.message());
  }
  st->status = Status::NoDevice("the CUDA plugin could not be loaded (", Join(failures),
                                "); set SHARDREC_CUDA_PLUGIN to its full path");
}

void Probe(PluginState* st) {
  if (!st->status.ok()) {
    st->runtime_status = st->status;
    return;
  }
  shardrec_plugin_status_t ps{};
  int32_t count = 0;
  const int32_t rc = st->plugin.table->device_count(&count, &ps);
  Status s = FromPlugin(rc, ps);
  if (s.ok() && count <= 0) s = Status::NoDevice("no CUDA device (the driver reports 0)");
  if (!s.ok()) {
    st->runtime_status =
        Status(s.code(), StrCat(s.message(), " [CUDA plugin loaded from ", st->plugin.path, "]"));
    return;
  }
  st->runtime = new CudaRuntime(st->plugin.table, count);
}

// A build without CUDA has no plugin of its own to look for; a plugin named explicitly (one
// built elsewhere against the same ABI, or the tests' fakes, which are CPU code) still loads.
bool PluginNamed() {
  const char* env = std::getenv("SHARDREC_CUDA_PLUGIN");
  return env != nullptr && *env != '\0';
}

const PluginState& State() {
  static std::once_flag once;
  static PluginState* state = nullptr;
  std::call_once(once, [] {
    auto* st = new PluginState();
    if (SHARDREC_HAVE_CUDA || PluginNamed()) {
      Load(st);
      Probe(st);
    } else {
      st->status = Status::Unsupported(
          "GPU support is not available: libshardrec was built without CUDA "
          "(SHARDREC_WITH_CUDA=OFF, or no CUDA toolkit and NCCL at build time)");
      st->runtime_status = st->status;
    }
    state = st;
  });
  return *state;
}

}  // namespace

Status GetCudaPlugin(const shardrec_cuda_plugin_table_t** out) {
  if (out == nullptr) return Status::InvalidArgument("out must not be NULL");
  *out = nullptr;
  const PluginState& st = State();
  if (!st.status.ok()) return st.status;
  *out = st.plugin.table;
  return Status::Ok();
}

Status GetCudaPluginPath(std::string* out) {
  if (out == nullptr) return Status::InvalidArgument("out must not be NULL");
  out->clear();
  const PluginState& st = State();
  if (!st.status.ok()) return st.status;
  *out = st.plugin.path;
  return Status::Ok();
}

Status GetCudaRuntime(const CudaRuntime** out) {
  if (out == nullptr) return Status::InvalidArgument("out must not be NULL");
  *out = nullptr;
  const PluginState& st = State();
  if (!st.runtime_status.ok()) return st.runtime_status;
  *out = st.runtime;
  return Status::Ok();
}

Status CudaRuntime::Malloc(int device, size_t bytes, void** out) const {
  shardrec_plugin_status_t ps{};
  return FromPlugin(t_->device_alloc(device, bytes, out, &ps), ps);
}

Status CudaRuntime::Free(int device, void* ptr) const {
  shardrec_plugin_status_t ps{};
  return FromPlugin(t_->device_free(device, ptr, &ps), ps);
}

Status CudaRuntime::MallocHost(size_t bytes, void** out) const {
  shardrec_plugin_status_t ps{};
  return FromPlugin(t_->host_alloc(bytes, out, &ps), ps);
}

Status CudaRuntime::MallocHostOn(int device, size_t bytes, void** out) const {
  shardrec_plugin_status_t ps{};
  return FromPlugin(t_->host_alloc_on(device, bytes, out, &ps), ps);
}

Status CudaRuntime::FreeHost(void* ptr) const {
  shardrec_plugin_status_t ps{};
  return FromPlugin(t_->host_free(ptr, &ps), ps);
}

Status CudaRuntime::MemcpyAsync(int device, void* dst, const void* src, size_t bytes, CopyKind kind,
                                Stream stream) const {
  shardrec_plugin_status_t ps{};
  return FromPlugin(
      t_->memcpy_async(device, dst, src, bytes, static_cast<int32_t>(kind), stream, &ps), ps);
}

Status CudaRuntime::MemsetAsync(int device, void* dst, int value, size_t bytes,
                                Stream stream) const {
  shardrec_plugin_status_t ps{};
  return FromPlugin(t_->memset_async(device, dst, value, bytes, stream, &ps), ps);
}

Status CudaRuntime::StreamWait(int device, Stream stream, int64_t timeout_ms) const {
  shardrec_plugin_status_t ps{};
  return FromPlugin(t_->stream_wait(device, stream, timeout_ms, &ps), ps);
}

Status CudaRuntime::StreamCreate(int device, Stream* out) const {
  *out = nullptr;
  shardrec_plugin_status_t ps{};
  return FromPlugin(t_->stream_create(device, out, &ps), ps);
}

Status CudaRuntime::StreamDestroy(int device, Stream stream) const {
  if (stream == nullptr) return Status::Ok();
  shardrec_plugin_status_t ps{};
  return FromPlugin(t_->stream_destroy(device, stream, &ps), ps);
}

Status CheckDevice(const Device& device) {
  if (device.is_host()) return Status::Ok();
  if (!device.is_cuda()) {
    return Status::InvalidArgument("unknown device kind ", static_cast<int32_t>(device.kind));
  }
  if (device.index < 0) {
    return Status::InvalidArgument("device index must be >= 0, got ", device.index);
  }
  const CudaRuntime* rt = nullptr;
  Status s = GetCudaRuntime(&rt);
  if (!s.ok()) {
    return Status(s.code(), StrCat("device ", device.ToString(), " requested but ", s.message()));
  }
  const int count = rt->DeviceCount();
  if (device.index >= count) {
    return Status::NoDevice("device ", device.ToString(), " requested but only ", count,
                            " CUDA device(s) are visible (CUDA_VISIBLE_DEVICES?)");
  }
  return Status::Ok();
}

}  // namespace shardrec::core
