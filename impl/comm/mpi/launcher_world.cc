// The MPI singleton check of launcher_world.h.
#include "impl/comm/mpi/launcher_world.h"

#include <cerrno>
#include <cstdlib>

#include "impl/core/check.h"

namespace shardrec::comm::mpi {

Status CheckWorldAgainstLauncher(const EnvVars& env, int mpi_world_size) {
  if (mpi_world_size != 1) return Status::Ok();
  static constexpr struct {
    const char* var;
    const char* launcher;
  } kSizes[] = {{"WORLD_SIZE", "torchrun"},
                {"OMPI_COMM_WORLD_SIZE", "Open MPI's mpirun"},
                {"PMI_SIZE", "MPICH's or Intel MPI's mpiexec"},
                {"SLURM_NTASKS", "Slurm"}};
  for (const auto& s : kSizes) {
    auto it = env.find(s.var);
    if (it == env.end() || it->second.empty()) continue;
    errno = 0;
    char* end = nullptr;
    const long long n = std::strtoll(it->second.c_str(), &end, 10);
    if (errno != 0 || end == it->second.c_str() || *end != '\0' || n <= 1) continue;
    return Status::InvalidArgument(
        "MPI's world has 1 process (an MPI singleton: this process was not started by an MPI "
        "launcher, or by one this MPI cannot connect to) but ",
        s.var, "=", it->second, " (", s.launcher, ") says the job has ", n,
        " processes: every process would make an MPI communicator of its own. Start the job "
        "with mpirun / mpiexec, or srun with MPI support (srun --mpi=pmix), or for a torchrun "
        "launch use shardrec_comm_create_from_env; unset ",
        s.var, " if this process is meant to run alone");
  }
  return Status::Ok();
}

}  // namespace shardrec::comm::mpi
