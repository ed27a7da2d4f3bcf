#include "impl/dense/blas_loader.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <string>

namespace shardrec::dense {
namespace {

struct Loaded {
  BlasApi api{};
  std::string error;  // empty when api is usable
};

Loaded Open() {
  Loaded l;
  const char* env = std::getenv("SHARDREC_BLAS_LIBRARY");
  const std::string name = env != nullptr && env[0] != '\0' ? env : "libopenblas.so.0";
  // RTLD_LOCAL: the host may load another BLAS under the same symbol names.
  void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* why = dlerror();
    l.error = "cannot open the BLAS library " + name + " (" + (why ? why : "unknown") +
              "); install OpenBLAS (Debian: libopenblas0) or point SHARDREC_BLAS_LIBRARY at a "
              "CBLAS library";
    return l;
  }
  l.api.sgemm = reinterpret_cast<decltype(l.api.sgemm)>(dlsym(h, "cblas_sgemm"));
  l.api.set_threads =
      reinterpret_cast<decltype(l.api.set_threads)>(dlsym(h, "openblas_set_num_threads"));
  l.api.get_threads =
      reinterpret_cast<decltype(l.api.get_threads)>(dlsym(h, "openblas_get_num_threads"));
  if (l.api.sgemm == nullptr) {
    l.error = "the BLAS library " + name + " has no cblas_sgemm";
    l.api = {};
  }
  // The handle is kept for the life of the process: the pointers above live in it.
  return l;
}

}  // namespace

Status LoadBlas(const BlasApi** out) {
  static const Loaded loaded = Open();
  if (!loaded.error.empty()) return Status::Unsupported(loaded.error);
  *out = &loaded.api;
  return Status::Ok();
}

}  // namespace shardrec::dense
