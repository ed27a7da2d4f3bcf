#include "impl/ddp/reduce_avg.h"

#include <vector>

#include "impl/core/check.h"
#include "impl/ddp/buckets.h"

namespace shardrec::ddp {

Status AverageInPlace(comm::Communicator& comm, void* buf, size_t n, DType dtype, void* scratch) {
  if (n == 0) return Status::Ok();
  const std::vector<size_t> counts = SplitCounts(n, comm.Size());
  const size_t mine = counts[comm.Rank()];
  SR_RETURN_IF_ERROR(comm.ReduceScatterV(buf, scratch, counts, dtype, comm::ReduceOp::kAvg));
  return comm.AllGatherV(scratch, mine, buf, counts, dtype);
}

}  // namespace shardrec::ddp
