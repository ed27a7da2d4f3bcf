// ExplicitTcpLaunch (tcp_launch.h): the arguments spelled as torchrun's variables and read by
// the same parser, then named as the arguments they were in messages.
#include "impl/comm/rendezvous/tcp_launch.h"

#include "impl/core/check.h"

namespace shardrec::comm {

Status ExplicitTcpLaunch(const std::string& host, int64_t port, int64_t rank, int64_t world,
                         const EnvVars& env, LaunchEnv* out) {
  if (out == nullptr) return Status::InvalidArgument("out must not be null");
  if (host.empty()) return Status::InvalidArgument("addr (rank 0's host) must not be empty");
  if (port < 1 || port > 65535)
    return Status::InvalidArgument("port ", port, " is outside [1, 65535]");
  if (world < 1 || world > kMaxLaunchWorld)
    return Status::InvalidArgument("world_size ", world, " is outside [1, ", kMaxLaunchWorld, "]");
  if (rank < 0 || rank >= world)
    return Status::InvalidArgument("rank ", rank, " is outside [0, ", world, ")");
  EnvVars vars{{"RANK", StrCat(rank)},
               {"WORLD_SIZE", StrCat(world)},
               {"MASTER_ADDR", host},
               {"MASTER_PORT", StrCat(port)}};
  if (auto it = env.find("SHARDREC_RENDEZVOUS_TOKEN"); it != env.end()) vars.insert(*it);
  LaunchEnv e;
  SR_RETURN_IF_ERROR(ParseLaunchEnv(vars, &e));
  // Messages name what the caller passed, not variables it never set. The session nonce keeps
  // the parser's: every rank of one job derives it alike.
  e.convention = "explicit TCP";
  e.rank_var = "rank";
  e.world_var = "world_size";
  e.port_source = "the port argument";
  *out = std::move(e);
  return Status::Ok();
}

}  // namespace shardrec::comm
