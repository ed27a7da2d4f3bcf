// OpenBLAS is opened on first use instead of being linked: its pthread build starts a worker
// per core when it is loaded, and a host that never touches a dense layer (or forks its ranks,
// or runs in a JVM with its own thread budget) should not pay for or inherit those threads.
#pragma once

#include "impl/core/status.h"

namespace shardrec::dense {

// The CBLAS entry points the dense layers call. set_threads/get_threads are null for a BLAS
// without OpenBLAS's thread control.
struct BlasApi {
  void (*sgemm)(int order, int trans_a, int trans_b, int m, int n, int k, float alpha,
                const float* a, int lda, const float* b, int ldb, float beta, float* c, int ldc);
  void (*set_threads)(int n);
  int (*get_threads)();
};

// Opens the BLAS once per process: $SHARDREC_BLAS_LIBRARY when set (any CBLAS library), else
// libopenblas.so.0. Thread-safe. On failure every call returns the same error naming the
// library and the loader's message; `out` is set only on success.
Status LoadBlas(const BlasApi** out);

}  // namespace shardrec::dense
