// shardrec_comm_create_tcp: the environment launch's rendezvous with rank 0's address handed in
// code (comm/tcp_launch.h) instead of read from launcher variables.
#include <memory>
#include <string>

#include "capi/src/comm_create.h"
#include "capi/src/entry.h"
#include "impl/comm/factory.h"
#include "impl/comm/rendezvous/tcp_launch.h"
#include "impl/core/check.h"
#include "shardrec/comm.h"

using shardrec::Status;
using shardrec::capi::CheckNotNull;
using shardrec::capi::Enter;
using shardrec::capi::NotNull;
namespace comm = shardrec::comm;

extern "C" {

SHARDREC_API shardrec_status_t shardrec_comm_create_tcp(shardrec_comm_t** out, const char* addr,
                                                        int32_t port, int32_t rank,
                                                        int32_t world_size,
                                                        const shardrec_comm_options_t* options) {
  return Enter({NotNull(out, "out")}, [&] {
    *out = nullptr;
    SR_RETURN_IF_ERROR(CheckNotNull(addr, "addr"));
    comm::CommOptions opts;
    SR_RETURN_IF_ERROR(shardrec::capi::ToOptions(options, &opts));
    comm::LaunchEnv launch;
    SR_RETURN_IF_ERROR(
        comm::ExplicitTcpLaunch(addr, port, rank, world_size, comm::ProcessEnv(), &launch));
    std::unique_ptr<comm::Communicator> impl;
    SR_RETURN_IF_ERROR(comm::CreateCommunicatorFromLaunch(std::move(launch), opts, &impl));
    return shardrec::capi::Wrap(std::move(impl), out);
  });
}

}  // extern "C"
