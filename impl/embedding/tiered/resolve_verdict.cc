// The row resolution's verdict (resolve_verdict.h).
#include "impl/embedding/tiered/resolve_verdict.h"

#include <string>

#include "impl/comm/agree.h"
#include "impl/core/check.h"

namespace shardrec::embedding::tiered {

Status AgreeResolution(comm::Communicator& comm, const Status& local) {
  if (comm.Size() == 1) return local;
  int64_t refusing = -1;
  SR_RETURN_IF_ERROR(comm::FindRefusingRank(comm, !local.ok(), &refusing));
  if (refusing < 0) return Status::Ok();
  const int root = static_cast<int>(refusing);
  const bool mine = comm.Rank() == root;
  // The failing rank's code and message length, then the message.
  int64_t head[2] = {mine ? static_cast<int64_t>(local.code()) : 0,
                     mine ? static_cast<int64_t>(local.message().size()) : 0};
  SR_RETURN_IF_ERROR(comm.Broadcast(head, 2, DType::kInt64, root));
  std::string message(static_cast<size_t>(head[1]), '\0');
  if (mine) message = local.message();
  if (head[1] > 0)
    SR_RETURN_IF_ERROR(comm.Broadcast(message.data(), message.size(), DType::kUInt8, root));
  if (!local.ok()) return Status(local.code(), StrCat("rank ", comm.Rank(), ": ", local.message()));
  return Status(static_cast<Code>(head[0]),
                StrCat("rank ", root, ": ", message, " (every rank's forward fails with it)"));
}

}  // namespace shardrec::embedding::tiered
