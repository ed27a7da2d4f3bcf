// Placeholder until the plugin bridge lands: NCCL is reported as unsupported.
#include "impl/comm/nccl/nccl_backend.h"

namespace shardrec::comm::nccl {

Status CreateNcclCommunicator(Store*, const std::string&, int, int, int, std::chrono::milliseconds,
                              std::unique_ptr<Communicator>*) {
  return Status::Unsupported("the NCCL backend is not available in this build");
}

}  // namespace shardrec::comm::nccl
