// All-gather of byte buffers of per-rank lengths (gather_bytes.h).
#include "impl/comm/gather_bytes.h"

#include "impl/core/check.h"

namespace shardrec::comm {

Status AllGatherBytes(Communicator& comm, const void* mine, size_t len, std::vector<uint8_t>* all,
                      std::vector<size_t>* sizes) {
  const auto n = static_cast<size_t>(comm.Size());
  const uint64_t my_size = len;
  std::vector<uint64_t> sizes64(n);
  const std::vector<size_t> ones(n, 1);
  SR_RETURN_IF_ERROR(comm.AllGatherV(&my_size, 1, sizes64.data(), ones, DType::kInt64));
  sizes->assign(sizes64.begin(), sizes64.end());
  size_t total = 0;
  for (size_t x : *sizes) total += x;
  all->resize(total);
  return comm.AllGatherV(mine, len, all->data(), *sizes, DType::kUInt8);
}

}  // namespace shardrec::comm
