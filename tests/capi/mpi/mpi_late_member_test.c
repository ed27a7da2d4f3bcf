/* A member of the MPI job that arrives late while libshardrec initialises MPI for the program:
 * MPI_Init_thread waits for every process, and shardrec_comm_create_mpi must still return at
 * its timeout (SHARDREC_ETIMEOUT) rather than wait with it; a later call, with time enough, then
 * creates the communicator and it works. Run under mpirun -np 2; rank 1 arrives after 3 s.
 * The program never calls MPI itself (its rank comes from Open MPI's variables). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "shardrec/comm.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int fail(int rank, const char* what) {
  fprintf(stderr, "mpi_late_member_test rank %d: %s (%s)\n", rank, what, shardrec_last_error());
  return 1;
}

int main(void) {
  const char* r = getenv("OMPI_COMM_WORLD_RANK");
  if (r == NULL) {
    printf("SKIPPED: not started by Open MPI's mpirun\n");
    return 77;
  }
  const int rank = atoi(r);
  shardrec_comm_options_t o = SHARDREC_COMM_OPTIONS_INIT;
  o.backend = SHARDREC_BACKEND_MPI;
  shardrec_comm_t* comm = NULL;
  if (rank == 0) {
    o.timeout_ms = 500;
    const double t0 = now_s();
    const shardrec_status_t rc = shardrec_comm_create_mpi(&comm, 0, &o);
    const double waited = now_s() - t0;
    if (rc != SHARDREC_ETIMEOUT) return fail(rank, "a late member did not give ETIMEOUT");
    if (comm != NULL) return fail(rank, "a failed creation returned a handle");
    if (strstr(shardrec_last_error(), "MPI_Init_thread") == NULL)
      return fail(rank, "the timeout does not name MPI_Init_thread");
    /* The rank that is late sleeps 3 s: the call must have returned long before. */
    if (waited > 2.0) return fail(rank, "creation waited past its timeout");
    printf("rank 0: ETIMEOUT after %.2f s: %s\n", waited, shardrec_last_error());
  } else {
    sleep(3);
  }
  o.timeout_ms = 60000;
  if (shardrec_comm_create_mpi(&comm, 0, &o) != SHARDREC_OK)
    return fail(rank, "creation once every member is there");
  int32_t size = 0;
  shardrec_comm_size(&size, comm);
  int64_t mine = rank + 1, sum = 0;
  if (shardrec_comm_allreduce(comm, &mine, &sum, 1, SHARDREC_DTYPE_INT64, SHARDREC_REDUCE_SUM,
                              NULL) != SHARDREC_OK)
    return fail(rank, "allreduce");
  if (sum != (int64_t)size * (size + 1) / 2) return fail(rank, "wrong all-reduce sum");
  shardrec_comm_destroy(comm);
  printf("rank %d: created after the late member arrived, all-reduce %lld\n", rank, (long long)sum);
  return 0;
}
