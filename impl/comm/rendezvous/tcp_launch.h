// A launch whose rank 0 address comes in code rather than in variables (Ray Train hands it to
// the training function; shardrec_comm_create_tcp). It is read into the same LaunchEnv as
// torchrun's variables, so it meets through the same rendezvous (CreateCommunicatorFromLaunch).
#pragma once

#include <cstdint>
#include <string>

#include "impl/comm/rendezvous/env_rendezvous.h"
#include "impl/core/status.h"

namespace shardrec::comm {

// The launch of rank `rank` of `world` whose store rank 0 hosts at `host`:`port` (a name or a
// numeric address; rank 0 listens on every interface). Of `env` only SHARDREC_RENDEZVOUS_TOKEN
// is read (the session's secret, as for the environment launch); no launcher variable is, so
// stale RANK / MASTER_ADDR cannot override the arguments, and the local rank and size are left
// to the host identity. kInvalidArgument naming the argument for an empty host, a port outside
// [1, 65535], a world outside [1, the largest world] or a rank outside [0, world).
Status ExplicitTcpLaunch(const std::string& host, int64_t port, int64_t rank, int64_t world,
                         const EnvVars& env, LaunchEnv* out);

}  // namespace shardrec::comm
