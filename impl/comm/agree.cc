#include "impl/comm/agree.h"

#include <cstdint>

#include "impl/core/check.h"

namespace shardrec::comm {

Status AgreeToCreate(Communicator& comm, const Status& local, std::string_view what) {
  if (!comm.device().is_host()) return local;
  // Under kMin over (refusing rank, else Size()): the lowest refusing rank, or Size().
  int64_t first = local.ok() ? comm.Size() : comm.Rank();
  const Status exchanged = comm.AllReduce(&first, &first, 1, DType::kInt64, ReduceOp::kMin);
  if (!local.ok()) return local;
  SR_RETURN_IF_ERROR(exchanged);
  if (first < comm.Size()) {
    return Status::InvalidArgument("rank ", first, " refused to create the ", what,
                                   " (its error says why)");
  }
  return Status::Ok();
}

}  // namespace shardrec::comm
