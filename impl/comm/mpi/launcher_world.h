// Whether MPI's world agrees with the launcher that started this process. A program started
// without an MPI launcher (by hand, by torchrun, or by srun without MPI support) becomes an MPI
// singleton, a world of one process, and every process of the job would create a communicator
// of its own and train alone; the launcher's variables say how many processes there are.
#pragma once

#include "impl/comm/rendezvous/env_rendezvous.h"
#include "impl/core/status.h"

namespace shardrec::comm::mpi {

// kInvalidArgument naming both when `mpi_world_size` is 1 but one of WORLD_SIZE (torchrun),
// OMPI_COMM_WORLD_SIZE (Open MPI), PMI_SIZE (MPICH / Intel MPI) or SLURM_NTASKS (Slurm), read
// in that order, is an integer above 1. A larger MPI world is never refused: a variable left
// over from another launch must not stop a job mpirun started correctly.
Status CheckWorldAgainstLauncher(const EnvVars& env, int mpi_world_size);

}  // namespace shardrec::comm::mpi
