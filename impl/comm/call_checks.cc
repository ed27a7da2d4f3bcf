// Argument checks shared by the host communicator backends.
#include "impl/comm/call_checks.h"

namespace shardrec::comm {

Status CheckCallDType(DType dtype) {
  if (!IsValidDType(static_cast<int32_t>(dtype))) {
    return Status::InvalidArgument("dtype ", static_cast<int32_t>(dtype),
                                   " is not a valid element type");
  }
  return Status::Ok();
}

Status CheckCallOp(ReduceOp op) {
  const auto v = static_cast<int32_t>(op);
  if (v < 0 || v > 3)
    return Status::InvalidArgument("reduce op ", v, " is not one of sum, avg, max, min");
  return Status::Ok();
}

Status CheckCallCounts(std::span<const size_t> counts, int size, const char* name, size_t* total) {
  if (counts.size() != static_cast<size_t>(size)) {
    return Status::InvalidArgument(name, " has ", counts.size(),
                                   " entries, expected one per rank (", size, ")");
  }
  *total = 0;
  for (size_t c : counts) *total += c;
  return Status::Ok();
}

Status CheckCallBuffer(const void* p, size_t count, const char* name) {
  if (p == nullptr && count > 0)
    return Status::InvalidArgument(name, " must not be null for ", count, " elements");
  return Status::Ok();
}

}  // namespace shardrec::comm
