/* Started without mpirun (an MPI singleton: a world of one process) while the environment says
 * WORLD_SIZE=2, as under torchrun: shardrec_comm_create_mpi must refuse with SHARDREC_EINVAL
 * naming both, not give each process a world of its own. CTest runs it directly with the
 * variable set. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shardrec/comm.h"

int main(void) {
  if (getenv("OMPI_COMM_WORLD_SIZE") != NULL || getenv("PMI_SIZE") != NULL) {
    printf("SKIPPED: started by an MPI launcher\n");
    return 77;
  }
  shardrec_comm_options_t o = SHARDREC_COMM_OPTIONS_INIT;
  o.timeout_ms = 30000;
  shardrec_comm_t* comm = NULL;
  const shardrec_status_t rc = shardrec_comm_create_mpi(&comm, 0, &o);
  if (rc == SHARDREC_EUNSUPPORTED) {
    printf("SKIPPED: %s\n", shardrec_last_error());
    return 77;
  }
  if (rc != SHARDREC_EINVAL || comm != NULL) {
    fprintf(stderr, "mpi_singleton_env_test: expected SHARDREC_EINVAL, got %d (%s)\n", rc,
            shardrec_last_error());
    shardrec_comm_destroy(comm);
    return 1;
  }
  const char* err = shardrec_last_error();
  if (strstr(err, "MPI's world has 1 process") == NULL || strstr(err, "WORLD_SIZE=2") == NULL) {
    fprintf(stderr, "mpi_singleton_env_test: the message must name both worlds: %s\n", err);
    return 1;
  }
  printf("mpi_singleton_env_test: ok (%s)\n", err);
  return 0;
}
