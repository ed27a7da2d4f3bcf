// Opening libshardrec_mpi.so: one dlopen, one ABI version check with a clear message on mismatch,
// and a complete table, before any of its functions runs.
#include "impl/comm/mpi/mpi_plugin_loader.h"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "impl/comm/mpi/chunking.h"
#include "impl/core/config.h"

namespace shardrec::comm::mpi {
namespace {

constexpr const char* kPluginSoname = "libshardrec_mpi.so." SHARDREC_SOVERSION_STRING;

std::string DirOfThisBinary() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&GetMpiPlugin), &info) == 0 || info.dli_fname == nullptr) {
    return {};
  }
  std::string file = info.dli_fname;
  const size_t slash = file.rfind('/');
  return slash == std::string::npos ? std::string() : file.substr(0, slash);
}

struct LoadState {
  const shardrec_mpi_plugin_table_t* table = nullptr;
  Status status;
};

void Load(LoadState* st) {
  const char* env = std::getenv("SHARDREC_MPI_PLUGIN");
  if (env != nullptr && *env != '\0') {
    // An explicit choice is honoured alone: silently falling back would hide a typo.
    st->status = LoadMpiPlugin(env, &st->table);
    if (!st->status.ok())
      st->status = st->status.WithContext("the MPI plugin named by SHARDREC_MPI_PLUGIN");
    return;
  }
  std::vector<std::string> candidates;
  if (const std::string dir = DirOfThisBinary(); !dir.empty())
    candidates.push_back(dir + "/" + kPluginSoname);
  candidates.push_back(kPluginSoname);
  std::string tried;
  for (const std::string& path : candidates) {
    st->status = LoadMpiPlugin(path, &st->table);
    if (st->status.ok()) return;
    tried += (tried.empty() ? "" : "; ") + st->status.message();
  }
  st->status = Status::Unsupported(
      "the MPI backend is not available: its plugin ", kPluginSoname, " could not be loaded (",
      tried,
      "). libshardrec builds it when CMake finds an MPI (Debian: libopenmpi-dev); "
      "SHARDREC_MPI_PLUGIN may name the file");
}

}  // namespace

Status FromMpiPlugin(int32_t rc, const shardrec_plugin_status_t& status) {
  if (rc == 0) return Status::Ok();
  std::string message(status.message, strnlen(status.message, sizeof(status.message)));
  if (message.empty()) message = "the MPI plugin reported an error without a message";
  return Status(static_cast<Code>(rc), std::move(message));
}

Status LoadMpiPlugin(const std::string& path, const shardrec_mpi_plugin_table_t** out) {
  *out = nullptr;
  dlerror();
  // RTLD_GLOBAL: MPI libraries load components of their own that expect the MPI library's
  // symbols to be globally visible (Open MPI's MCA components, mpi4py's known pitfall). The
  // plugin itself exports only its two entry points.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (handle == nullptr) {
    const char* err = dlerror();
    return Status::Unsupported(err != nullptr ? std::string(err) : path + ": dlopen failed");
  }
  // Never dlclose'd: MPI cannot be initialised twice in one process.
  const auto abi = reinterpret_cast<shardrec_mpi_plugin_abi_version_fn>(
      dlsym(handle, SHARDREC_MPI_PLUGIN_ABI_SYMBOL));
  if (abi == nullptr) {
    return Status::Unsupported(path, " is not a libshardrec MPI plugin (no ",
                               SHARDREC_MPI_PLUGIN_ABI_SYMBOL, ")");
  }
  if (const uint32_t v = abi(); v != SHARDREC_MPI_PLUGIN_ABI_VERSION) {
    return Status::Unsupported("the MPI plugin ", path, " speaks plugin ABI ", v,
                               " but this libshardrec needs ", SHARDREC_MPI_PLUGIN_ABI_VERSION,
                               " (a plugin from another build or release?)");
  }
  const auto get = reinterpret_cast<shardrec_mpi_plugin_table_fn>(
      dlsym(handle, SHARDREC_MPI_PLUGIN_TABLE_SYMBOL));
  const shardrec_mpi_plugin_table_t* t =
      get != nullptr ? get(SHARDREC_MPI_PLUGIN_ABI_VERSION) : nullptr;
  if (t == nullptr || t->abi_version != SHARDREC_MPI_PLUGIN_ABI_VERSION ||
      t->struct_size < sizeof(shardrec_mpi_plugin_table_t)) {
    return Status::Unsupported("the MPI plugin ", path, " gave no complete function table for ABI ",
                               SHARDREC_MPI_PLUGIN_ABI_VERSION);
  }
  const void* entries[] = {
      reinterpret_cast<const void*>(t->plugin_path), reinterpret_cast<const void*>(t->create),
      reinterpret_cast<const void*>(t->destroy),     reinterpret_cast<const void*>(t->send),
      reinterpret_cast<const void*>(t->recv),        reinterpret_cast<const void*>(t->test),
      reinterpret_cast<const void*>(t->split),       reinterpret_cast<const void*>(t->describe),
      reinterpret_cast<const void*>(t->dup)};
  for (const void* e : entries) {
    if (e == nullptr) return Status::Unsupported("the MPI plugin ", path, " has an empty entry");
  }
  *out = t;
  return Status::Ok();
}

Status GetMpiPlugin(const shardrec_mpi_plugin_table_t** out) {
  static std::once_flag once;
  static LoadState* state = nullptr;
  std::call_once(once, [] {
    auto* st = new LoadState();  // never destroyed: the plugin stays for the process
    Load(st);
    state = st;
  });
  *out = state->table;
  return state->status;
}

size_t MaxMessageBytesFromEnv() {
  const char* env = std::getenv("SHARDREC_MPI_MAX_MESSAGE_BYTES");
  if (env == nullptr || *env == '\0') return kDefaultMaxMessageBytes;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(env, &end, 10);
  if (end == env || *end != '\0' || v == 0) return kDefaultMaxMessageBytes;
  return static_cast<size_t>(std::min<unsigned long long>(v, kDefaultMaxMessageBytes));
}

}  // namespace shardrec::comm::mpi
