// The choice of the codec level this CPU runs (codec.h Best).
#include "impl/core/codec/codec.h"
#include "impl/core/cpu_features.h"

namespace shardrec::codec {

const Passes& Best() {
  static const Passes& p = []() -> const Passes& {
#if SHARDREC_HAVE_X86_CODEC_LEVELS
    if (HostCpu().avx2 && HostCpu().f16c) return Avx2();
#endif
    return Baseline();
  }();
  return p;
}

}  // namespace shardrec::codec
