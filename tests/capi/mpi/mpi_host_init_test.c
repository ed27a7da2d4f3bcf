/* The host program owns MPI: it calls MPI_Init_thread and MPI_Finalize itself and hands
 * libshardrec a communicator of its own (a split of MPI_COMM_WORLD) as a Fortran handle.
 * "multiple": MPI_THREAD_MULTIPLE, collectives on the host's sub-communicator must work, and
 *             two threads creating from communicators of their own must each meet their own.
 * "funneled": MPI_THREAD_FUNNELED, creation must be refused with SHARDREC_EUSAGE. */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "shardrec/comm.h"

static int fail(const char* what) {
  fprintf(stderr, "mpi_host_init_test: %s (%s)\n", what, shardrec_last_error());
  return 1;
}

static int run_multiple(void) {
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  /* Even and odd world ranks: libshardrec works on the host's group, not on the world. */
  MPI_Comm half;
  MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
  shardrec_comm_t* comm = NULL;
  shardrec_comm_options_t o = SHARDREC_COMM_OPTIONS_INIT;
  o.backend = SHARDREC_BACKEND_MPI;
  o.timeout_ms = 60000;
  if (shardrec_comm_create_mpi(&comm, (int64_t)MPI_Comm_c2f(half), &o) != SHARDREC_OK)
    return fail("create on the host's communicator");
  int32_t srank = -1, ssize = -1;
  shardrec_comm_rank(&srank, comm);
  shardrec_comm_size(&ssize, comm);
  int hrank = 0, hsize = 0;
  MPI_Comm_rank(half, &hrank);
  MPI_Comm_size(half, &hsize);
  if (srank != hrank || ssize != hsize) return fail("rank or size differ from the host's");
  int64_t mine = rank, sum = 0, expect = 0;
  for (int q = rank % 2; q < size; q += 2) expect += q;
  if (shardrec_comm_allreduce(comm, &mine, &sum, 1, SHARDREC_DTYPE_INT64, SHARDREC_REDUCE_SUM,
                              NULL) != SHARDREC_OK)
    return fail("allreduce");
  if (sum != expect) return fail("allreduce gave a wrong sum");
  /* The host keeps using its own communicator between libshardrec calls. */
  int64_t host_sum = 0;
  MPI_Allreduce(&mine, &host_sum, 1, MPI_INT64_T, MPI_SUM, half);
  if (host_sum != expect) return fail("the host's own allreduce broke");
  if (shardrec_comm_barrier(comm) != SHARDREC_OK) return fail("barrier");
  shardrec_comm_destroy(comm);
  MPI_Comm_free(&half);
  return 0;
}

/* Two threads creating communicators at once, each from an MPI communicator of its own made
 * beforehand in the same order on every rank: MPI pairs duplicates of one communicator up in
 * the order each process makes them, so this (or creating from one thread) is what keeps thread
 * A of every rank together (comm.h, shardrec_comm_create_mpi, "Threads"). */
struct thread_arg {
  MPI_Comm host;
  int64_t value;
  int64_t sum;
  shardrec_status_t rc;
};

static void* create_and_sum(void* p) {
  struct thread_arg* a = (struct thread_arg*)p;
  shardrec_comm_t* comm = NULL;
  shardrec_comm_options_t o = SHARDREC_COMM_OPTIONS_INIT;
  o.timeout_ms = 60000;
  a->rc = shardrec_comm_create_mpi(&comm, (int64_t)MPI_Comm_c2f(a->host), &o);
  if (a->rc == SHARDREC_OK) {
    a->rc = shardrec_comm_allreduce(comm, &a->value, &a->sum, 1, SHARDREC_DTYPE_INT64,
                                    SHARDREC_REDUCE_SUM, NULL);
  }
  shardrec_comm_destroy(comm);
  return NULL;
}

static int run_threads(void) {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  struct thread_arg args[2];
  pthread_t threads[2];
  for (int i = 0; i < 2; ++i) {
    MPI_Comm_dup(MPI_COMM_WORLD, &args[i].host);
    args[i].value = i == 0 ? 1 : 1000;
    args[i].sum = 0;
  }
  for (int i = 0; i < 2; ++i) pthread_create(&threads[i], NULL, create_and_sum, &args[i]);
  for (int i = 0; i < 2; ++i) pthread_join(threads[i], NULL);
  for (int i = 0; i < 2; ++i) {
    MPI_Comm_free(&args[i].host);
    if (args[i].rc != SHARDREC_OK) return fail("a thread's create or allreduce");
    if (args[i].sum != args[i].value * size) return fail("a thread's allreduce met another's");
  }
  return 0;
}

static int run_funneled(void) {
  shardrec_comm_t* comm = NULL;
  if (shardrec_comm_create_mpi(&comm, 0, NULL) != SHARDREC_EUSAGE || comm != NULL)
    return fail("FUNNELED must be refused with SHARDREC_EUSAGE");
  if (strstr(shardrec_last_error(), "MPI_THREAD_SERIALIZED") == NULL)
    return fail("the message must name the thread level needed");
  return 0;
}

int main(int argc, char** argv) {
  const int funneled = argc > 1 && strcmp(argv[1], "funneled") == 0;
  int provided = 0;
  MPI_Init_thread(&argc, &argv, funneled ? MPI_THREAD_FUNNELED : MPI_THREAD_MULTIPLE, &provided);
  int rc = funneled ? run_funneled() : run_multiple();
  if (rc == 0 && !funneled) rc = run_threads();
  MPI_Finalize();
  if (rc == 0) printf("mpi_host_init_test %s: ok\n", funneled ? "funneled" : "multiple");
  return rc;
}
