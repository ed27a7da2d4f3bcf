// Where a launcher says this process stands: rank, world size, local rank and rank 0's store
// address, read from the variables torchrun, Open MPI, MPICH / Intel MPI or Slurm set. Pure
// functions over a map of variables, so every convention is testable without launching.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "impl/comm/rendezvous/store_tcp.h"
#include "impl/core/status.h"

namespace shardrec::comm {

using EnvVars = std::map<std::string, std::string>;

// Port used when the launcher gives none: torchrun's default. Slurm and Open MPI derive one from
// their job id instead (kJobPortBase + id % kJobPortSpan), so two jobs sharing a host differ.
inline constexpr uint16_t kDefaultMasterPort = 29500;
inline constexpr uint16_t kJobPortBase = 20000;
inline constexpr uint16_t kJobPortSpan = 10000;
// The largest world size a launch may state.
inline constexpr int64_t kMaxLaunchWorld = 1 << 20;

struct LaunchEnv {
  std::string convention;  // "torchrun", "Open MPI", "MPICH", "Slurm", "Kubeflow Trainer"
  std::string rank_var;    // the variables rank and world size were read from, for messages
  std::string world_var;
  int rank = 0;
  int world = 1;
  int local_rank = -1;  // -1: the launcher did not say
  int local_size = -1;
  std::string master_host;  // rank 0's store: host name or numeric address
  uint16_t master_port = 0;
  std::string port_source;  // the variable (or rule) the port came from, for messages
  // From SHARDREC_RENDEZVOUS_TOKEN, else derived from public facts (convention, world size,
  // port), and from TORCHELASTIC_RESTART_COUNT when set; never from the master address's text.
  Nonce nonce{};
  std::string restart_count;  // TORCHELASTIC_RESTART_COUNT; empty when not set
  // restart_count + 1 when it is a decimal count, else 0: told to the store (TcpStore's
  // attempt), so a rank of an earlier attempt is refused at once.
  uint64_t attempt = 0;
  bool has_token = false;
  // Under torchrun's variables, the rank and size variables of mpirun or srun that are set too
  // and disagree ("OMPI_COMM_WORLD_RANK=1, OMPI_COMM_WORLD_SIZE=2"); empty when none. Only told
  // in errors, never refused: torchrun started by srun or mpirun (one launcher task per node)
  // sees both legitimately, with different meanings.
  std::string disagreeing;
};

// Reads the first convention present, in the order torchrun (RANK / WORLD_SIZE; MASTER_PORT + 1
// when TORCHELASTIC_USE_AGENT_STORE says torchrun's agent serves its own store on MASTER_PORT),
// Open MPI (OMPI_COMM_WORLD_RANK), MPICH / Intel MPI (PMI_RANK), Slurm (SLURM_PROCID),
// Kubeflow Trainer v2 (PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK, PET_MASTER_ADDR,
// PET_MASTER_PORT; LOCAL_RANK when PET_NPROC_PER_NODE > 1).
// Errors: kNotFound when no convention is present; kInvalidArgument naming the convention and
// the variable that is missing or malformed. Variables of a later convention are not checked
// against those read, only listed in `disagreeing`.
Status ParseLaunchEnv(const EnvVars& env, LaunchEnv* out);

// `s` with a note naming `e.disagreeing` when there is one: the likely cause of an error where
// stale torchrun variables overrode mpirun's or srun's.
Status WithDisagreement(const LaunchEnv& e, Status s);

// Why rank 0 could not listen on its port when the port was taken (EADDRINUSE), in the
// launcher's terms: most likely a second process started as rank 0 (stale variables), else
// another program or job on the port. kIo, with WithDisagreement's note.
Status RankZeroPortInUse(const LaunchEnv& e);

// Expands Slurm's compressed host list ("node[01-04,07],gpu5") in order, keeping zero padding;
// several bracket groups in one name multiply out. kInvalidArgument for a malformed list or more
// than `max_hosts` names.
Status ExpandSlurmHostList(const std::string& list, std::vector<std::string>* hosts,
                           size_t max_hosts = 1 << 20);

// The task count of node `node` in Slurm's SLURM_TASKS_PER_NODE form ("2(x3),1": three nodes of
// two tasks, then one of one). kInvalidArgument when malformed or `node` is out of range.
Status SlurmTasksOnNode(const std::string& tasks_per_node, int node, int* out);

// This process's environment as a map.
EnvVars ProcessEnv();

}  // namespace shardrec::comm
