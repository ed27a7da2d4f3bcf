// Loads the CUDA plugin (libshardrec_cuda.so) once, on the first GPU request, and hands out its
// runtime and entry points. Every failure is cached and reported as kNoDevice, never a crash.
#include "impl/core/cuda_plugin.h"

#include "impl/core/config.h"

#if SHARDREC_HAVE_CUDA
#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "impl/cuda_plugin/plugin_abi.h"
#endif

namespace shardrec::core {

#if SHARDREC_HAVE_CUDA
namespace {

constexpr const char* kPluginSoname = "libshardrec_cuda.so." SHARDREC_SOVERSION_STRING;

// What the one load attempt produced. Never destroyed: other threads' static destructors may
// still ask for the runtime during exit, and the plugin is never unloaded.
struct PluginState {
  void* handle = nullptr;
  std::string path;  // the file that was loaded
  CudaRuntime* runtime = nullptr;
  Status status;  // OK exactly when runtime != nullptr
};

// The folder of the binary that contains this loader: libshardrec.so in production, so that a
// plugin installed or built next to it is found without any search path.
std::string DirOfThisBinary() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&GetCudaRuntime), &info) == 0 || info.dli_fname == nullptr) {
    return {};
  }
  std::string file = info.dli_fname;
  const size_t slash = file.rfind('/');
  return slash == std::string::npos ? std::string() : file.substr(0, slash);
}

void* TryOpen(const std::string& path, std::vector<std::string>* failures) {
  dlerror();
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* err = dlerror();
    failures->push_back(err != nullptr ? std::string(err) : path + ": unknown dlopen error");
  }
  return handle;
}

std::string Join(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : "; ") + p;
  return out;
}

void Load(PluginState* st) {
  std::vector<std::string> failures;
  const char* env = std::getenv("SHARDREC_CUDA_PLUGIN");
  if (env != nullptr && *env != '\0') {
    // An explicit choice is honoured alone: silently falling back would hide a typo.
    st->path = env;
    st->handle = TryOpen(st->path, &failures);
  } else {
    const std::string dir = DirOfThisBinary();
    if (!dir.empty()) {
      st->path = dir + "/" + kPluginSoname;
      st->handle = TryOpen(st->path, &failures);
    }
    if (st->handle == nullptr) {
      st->path = kPluginSoname;
      st->handle = TryOpen(st->path, &failures);
    }
  }
  if (st->handle == nullptr) {
    st->status = (env != nullptr && *env != '\0')
                     ? Status::NoDevice(
                           "the CUDA plugin named by SHARDREC_CUDA_PLUGIN could not "
                           "be loaded (",
                           Join(failures), ")")
                     : Status::NoDevice("the CUDA plugin could not be loaded (", Join(failures),
                                        "); set SHARDREC_CUDA_PLUGIN to its full path");
    return;
  }
  auto abi = reinterpret_cast<cuda_plugin::AbiVersionFn>(
      dlsym(st->handle, cuda_plugin::kAbiVersionSymbol));
  if (abi == nullptr) {
    st->status = Status::NoDevice(st->path, " is not a libshardrec CUDA plugin (no ",
                                  cuda_plugin::kAbiVersionSymbol, ")");
    return;
  }
  if (const int32_t v = abi(); v != cuda_plugin::kAbiVersion) {
    st->status = Status::NoDevice("the CUDA plugin ", st->path, " has ABI version ", v,
                                  " but this libshardrec needs ", cuda_plugin::kAbiVersion,
                                  " (a plugin from another build?)");
    return;
  }
  if (auto where = reinterpret_cast<cuda_plugin::PluginPathFn>(
          dlsym(st->handle, cuda_plugin::kPluginPathSymbol))) {
    if (const char* p = where(); p != nullptr && *p != '\0') st->path = p;
  }
  auto runtime =
      reinterpret_cast<cuda_plugin::RuntimeFn>(dlsym(st->handle, cuda_plugin::kRuntimeSymbol));
  if (runtime == nullptr) {
    st->status = Status::NoDevice(st->path, " lacks ", cuda_plugin::kRuntimeSymbol);
    return;
  }
  Status status;
  runtime(cuda_plugin::kAbiVersion, &st->runtime, &status);
  if (!status.ok() || st->runtime == nullptr) {
    st->runtime = nullptr;
    st->status =
        Status(status.ok() ? Code::kNoDevice : status.code(),
               StrCat(status.ok() ? "the CUDA plugin returned no runtime" : status.message(),
                      " [CUDA plugin loaded from ", st->path, "]"));
  }
}

const PluginState& State() {
  static std::once_flag once;
  static PluginState* state = nullptr;
  std::call_once(once, [] {
    auto* st = new PluginState();
    Load(st);
    state = st;
  });
  return *state;
}

}  // namespace

Status GetCudaRuntime(CudaRuntime** out) {
  if (out == nullptr) return Status::InvalidArgument("out must not be NULL");
  *out = nullptr;
  const PluginState& st = State();
  if (!st.status.ok()) return st.status;
  *out = st.runtime;
  return Status::Ok();
}

Status GetCudaPluginSymbol(const char* name, void** out) {
  if (out == nullptr) return Status::InvalidArgument("out must not be NULL");
  *out = nullptr;
  if (name == nullptr || *name == '\0') {
    return Status::InvalidArgument("symbol name must not be empty");
  }
  const PluginState& st = State();
  if (!st.status.ok()) return st.status;
  dlerror();
  void* sym = dlsym(st.handle, name);
  if (sym == nullptr) {
    return Status::NotFound("the CUDA plugin ", st.path, " has no symbol ", name);
  }
  *out = sym;
  return Status::Ok();
}

#else  // !SHARDREC_HAVE_CUDA

namespace {
Status BuiltWithoutCuda() {
  return Status::Unsupported(
      "GPU support is not available: libshardrec was built without CUDA "
      "(SHARDREC_WITH_CUDA=OFF, or no CUDA toolkit and NCCL at build time)");
}
}  // namespace

Status GetCudaRuntime(CudaRuntime** out) {
  if (out == nullptr) return Status::InvalidArgument("out must not be NULL");
  *out = nullptr;
  return BuiltWithoutCuda();
}

Status GetCudaPluginSymbol(const char* name, void** out) {
  if (out == nullptr) return Status::InvalidArgument("out must not be NULL");
  *out = nullptr;
  if (name == nullptr || *name == '\0') {
    return Status::InvalidArgument("symbol name must not be empty");
  }
  return BuiltWithoutCuda();
}

#endif  // SHARDREC_HAVE_CUDA

Status CheckDevice(const Device& device) {
  if (device.is_host()) return Status::Ok();
  if (!device.is_cuda()) {
    return Status::InvalidArgument("unknown device kind ", static_cast<int32_t>(device.kind));
  }
  if (device.index < 0) {
    return Status::InvalidArgument("device index must be >= 0, got ", device.index);
  }
  CudaRuntime* rt = nullptr;
  Status s = GetCudaRuntime(&rt);
  if (!s.ok() || rt == nullptr) {
    if (s.ok()) s = Status::Internal("the CUDA plugin returned no runtime");
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
