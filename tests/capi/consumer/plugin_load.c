/* Loads one plugin of the installed libshardrec the way a user's program does, so the install
 * check can see which file the loader opened: "mpi" creates an MPI communicator (a world of
 * one, no mpirun) and "cuda" asks for the CUDA plugin's path. Prints "loaded <path or name>"
 * and exits 0, or prints the library's message and exits 1. The caller chooses the file with
 * SHARDREC_MPI_PLUGIN / SHARDREC_CUDA_PLUGIN, or leaves them unset for the default search. */
#include <stdio.h>
#include <string.h>

#include "shardrec/shardrec.h"

static int load_mpi(void) {
  shardrec_comm_options_t o = SHARDREC_COMM_OPTIONS_INIT;
  o.timeout_ms = 30000;
  shardrec_comm_t* comm = NULL;
  if (shardrec_comm_create_mpi(&comm, 0, &o) != SHARDREC_OK) {
    printf("not loaded: %s\n", shardrec_last_error());
    return 1;
  }
  shardrec_comm_destroy(comm);
  printf("loaded the MPI plugin\n");
  return 0;
}

static int load_cuda(void) {
  char path[4096];
  size_t len = 0;
  const shardrec_status_t rc = shardrec_device_plugin_path(&len, path, sizeof path);
  if (rc == SHARDREC_OK) {
    printf("loaded %s\n", path);
    return 0;
  }
  /* Without a GPU the plugin still loads; the message names the file it was loaded from. */
  const char* err = shardrec_last_error();
  const char* at = strstr(err, "[CUDA plugin loaded from ");
  if (rc == SHARDREC_ENODEVICE && at != NULL) {
    const char* file = at + strlen("[CUDA plugin loaded from ");
    printf("loaded %.*s (%s)\n", (int)strcspn(file, "]"), file, err);
    return 0;
  }
  printf("not loaded: %s\n", err);
  return 1;
}

int main(int argc, char** argv) {
  if (argc == 2 && strcmp(argv[1], "mpi") == 0) return load_mpi();
  if (argc == 2 && strcmp(argv[1], "cuda") == 0) return load_cuda();
  fprintf(stderr, "usage: plugin_load mpi|cuda\n");
  return 2;
}
