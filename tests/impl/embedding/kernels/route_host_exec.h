// The host executor of the routing steps (impl/embedding/kernels/simt/route_body.h): items run
// one after another on the calling thread, the scan is a loop. With it the tests run the very
// bodies the CUDA executor launches (kernels/cuda/route.cu); only the launch and CUB's scan differ.
#pragma once

#include <cstdint>
#include <cstring>

#include "impl/embedding/kernels/simt/route_body.h"

namespace shardrec::embedding::kernels::simt_body {

class HostRouteExec {
 public:
  template <class Op>
  void Threads(int64_t count, const Op& op) {
    for (int64_t i = 0; i < count; ++i) op(i);
  }
  void ExclusiveSum(const int64_t* in, int64_t* out, int64_t n) {
    int64_t s = 0;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t v = in[i];
      out[i] = s;
      s += v;
    }
  }
  void Zero(void* p, size_t bytes) {
    if (bytes != 0) std::memset(p, 0, bytes);
  }
};

}  // namespace shardrec::embedding::kernels::simt_body
