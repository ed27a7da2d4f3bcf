/* The MPI plugin's boundary: one versioned table of plain-C function pointers.
 *
 * libshardrec.so dlopens libshardrec_mpi.so (linked against the system's MPI) only when an MPI
 * communicator is asked for, so that libshardrec.so itself never depends on an MPI library.
 * As with the CUDA plugin (impl/core/plugin_abi.h), no C++ object, exception or MPI type
 * crosses: communicators are opaque handles, errors are a code (a shardrec::Code value) plus a
 * message copied into the caller's shardrec_plugin_status_t.
 *
 * The plugin is deliberately thin: it starts nonblocking MPI operations and tests them. The
 * waiting, the deadline (MPI has no per-operation timeout), chunking of large messages and every
 * reduction (rank-ordered, fp16/bf16 included, which MPI lacks) live on the libshardrec side
 * (impl/comm/mpi/mpi_communicator.cc), so a stalled peer never blocks inside the plugin.
 *
 * Threads. Every entry takes one process-wide mutex around its MPI calls, so the plugin needs
 * only MPI_THREAD_SERIALIZED from the MPI library even though libshardrec calls it from its
 * communication worker thread as well as from the host's threads. The one blocking MPI call,
 * MPI_Comm_split (MPI has no nonblocking split), runs on a thread of the plugin's own, so that
 * the caller can give up on it at its deadline or on an abort. Under MPI_THREAD_MULTIPLE that
 * thread does not hold the mutex, so other communicators keep making progress while a split
 * waits for its members: two threads of each process splitting two communicators would
 * otherwise wait for each other across the processes for ever. Under MPI_THREAD_SERIALIZED it
 * must hold it (docs/mpi.md, "Splits from several threads").
 *
 * Messages. Every message carries a tag naming the collective (and the part of it) it belongs
 * to; a receive accepts any tag from its peer (messages from one peer arrive in the order sent),
 * and test() compares the tag and size of what arrived with what the receive expected, so that
 * ranks in different collectives, or in one with different counts, fail with both named instead
 * of returning wrong data or leaving MPI to report a truncation.
 *
 * Versioning. abi_version changes whenever an entry changes meaning or signature; the loader
 * refuses any other value with a message naming both. New entries are appended only.
 */
#ifndef SHARDREC_IMPL_COMM_MPI_MPI_PLUGIN_ABI_H_
#define SHARDREC_IMPL_COMM_MPI_MPI_PLUGIN_ABI_H_

#include <stddef.h>
#include <stdint.h>

#include "impl/core/plugin_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SHARDREC_MPI_PLUGIN_ABI_VERSION 6u

/* The only two symbols the plugin exports. */
#define SHARDREC_MPI_PLUGIN_ABI_SYMBOL "shardrec_mpi_plugin_abi_version"
#define SHARDREC_MPI_PLUGIN_TABLE_SYMBOL "shardrec_mpi_plugin_table"

/* MPI thread levels, in MPI's order (the MPI_THREAD_* constants' values are the library's). */
enum {
  SHARDREC_MPI_THREAD_SINGLE = 0,
  SHARDREC_MPI_THREAD_FUNNELED = 1,
  SHARDREC_MPI_THREAD_SERIALIZED = 2,
  SHARDREC_MPI_THREAD_MULTIPLE = 3
};

/* A duplicate of a host communicator plus the requests started on it and not yet complete.
 * Opaque to libshardrec; used by one thread at a time. */
typedef struct shardrec_mpi_comm shardrec_mpi_comm_t;

/* What a created or split communicator is. */
typedef struct shardrec_mpi_comm_info {
  int32_t rank;
  int32_t size;
  int32_t thread_level;     /* SHARDREC_MPI_THREAD_* the MPI library provides */
  int32_t initialized_here; /* 1 when this plugin called MPI_Init_thread */
  char library[256];        /* MPI_Get_library_version's first line */
  int32_t world_size;       /* MPI_COMM_WORLD's size (version 6) */
} shardrec_mpi_comm_info_t;

/* What test() found wrong with a received message (version 5): a tag or a size other than the
 * receive's. */
typedef struct shardrec_mpi_mismatch {
  int32_t peer;           /* the sender's rank in the communicator; -1: no mismatch */
  int32_t expected_tag;   /* the tag recv() was given */
  int32_t tag;            /* the message's tag */
  int32_t truncated;      /* 1: the message was longer than expected_bytes (by how much unknown) */
  int64_t expected_bytes; /* the size recv() was given */
  int64_t bytes;          /* the message's size (expected_bytes when truncated) */
} shardrec_mpi_mismatch_t;

typedef struct shardrec_mpi_plugin_table {
  uint32_t abi_version; /* SHARDREC_MPI_PLUGIN_ABI_VERSION */
  uint32_t struct_size; /* sizeof(shardrec_mpi_plugin_table_t) of the plugin's build */

  /* Absolute path of the loaded plugin file, or "" when unknown. */
  const char* (*plugin_path)(void);

  /* Initialises MPI when nobody has (MPI_Init_thread asking for MPI_THREAD_MULTIPLE, on a thread
   * of the plugin's that also calls MPI_Finalize at process exit unless a communicator was left
   * with operations in flight; MPI_Init_thread waits for every process of the job, and create
   * waits for it at most timeout_ms, then fails with kTimeout, and a later create waits again),
   * and starts duplicating the communicator whose Fortran handle is fortran_comm (0:
   * MPI_COMM_WORLD) with MPI_Comm_idup. The duplicate is usable once test() reports done; its
   * errors are returned (MPI_ERRORS_RETURN), never fatal. (Version 2 had no timeout_ms.) */
  int32_t (*create)(int64_t fortran_comm, int64_t timeout_ms, shardrec_mpi_comm_t** out,
                    shardrec_mpi_comm_info_t* info, shardrec_plugin_status_t* status);
  /* Frees the duplicate (MPI_Comm_free) when nothing is in flight on it and MPI is not yet
   * finalized; otherwise only forgets it. NULL is a no-op. */
  void (*destroy)(shardrec_mpi_comm_t* comm);

  /* Nonblocking starts; each appends its request to the communicator's in-flight set. send tags
   * its message with `tag` (in [0, 32767], the range MPI guarantees); recv accepts a message of
   * any tag from `peer` into at most `bytes` bytes, and test() checks it against `tag` and
   * `bytes`. (Up to version 4 every message had one tag, a shorter message was accepted
   * unreported, and broadcast and barrier were entries of their own, MPI_Ibcast and
   * MPI_Ibarrier, whose failures Open MPI reports to MPI_COMM_WORLD's error handler; version 1
   * also had an MPI_Iallreduce entry.) */
  int32_t (*send)(shardrec_mpi_comm_t* comm, const void* buf, int32_t bytes, int32_t peer,
                  int32_t tag, shardrec_plugin_status_t* status);
  int32_t (*recv)(shardrec_mpi_comm_t* comm, void* buf, int32_t bytes, int32_t peer, int32_t tag,
                  shardrec_plugin_status_t* status);

  /* *done = 1 once every request in flight has completed (the set is then empty), else 0.
   * Never blocks. A failed request is a kRemote error naming MPI's message; a received message
   * whose tag or size differs from its receive's is a kRemote error with *mismatch filled
   * (mismatch->peer is -1 otherwise; mismatch may be NULL). Requests still in flight after an
   * error stay in the set. */
  int32_t (*test)(shardrec_mpi_comm_t* comm, int32_t* done, shardrec_mpi_mismatch_t* mismatch,
                  shardrec_plugin_status_t* status);

  /* Starts MPI_Comm_split of an idle communicator on a plugin thread and returns at once with
   * *out, the new communicator, usable once test(*out) reports done; describe() then gives its
   * rank and size (size 0 for a negative color: destroy it). Until the split returns, `comm`
   * counts as in flight, and destroying it or *out leaves both to the plugin thread (never
   * freed). MPI_Comm_split waits for every member, so callers first make sure that all are
   * present (a bounded exchange). (Version 3 blocked the caller, holding the plugin's mutex.) */
  int32_t (*split)(shardrec_mpi_comm_t* comm, int32_t color, int32_t key, shardrec_mpi_comm_t** out,
                   shardrec_plugin_status_t* status);
  /* Rank and size of a communicator whose split or duplicate completed (version 4). */
  int32_t (*describe)(shardrec_mpi_comm_t* comm, shardrec_mpi_comm_info_t* info,
                      shardrec_plugin_status_t* status);
  /* Starts MPI_Comm_idup of an idle communicator (version 4): a split in which every member has
   * one color and keeps its order needs no blocking call. *out is usable once test(*out)
   * reports done; until then `comm` counts as in flight, as for split. */
  int32_t (*dup)(shardrec_mpi_comm_t* comm, shardrec_mpi_comm_t** out,
                 shardrec_plugin_status_t* status);
} shardrec_mpi_plugin_table_t;

typedef uint32_t (*shardrec_mpi_plugin_abi_version_fn)(void);
typedef const shardrec_mpi_plugin_table_t* (*shardrec_mpi_plugin_table_fn)(uint32_t abi_version);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SHARDREC_IMPL_COMM_MPI_MPI_PLUGIN_ABI_H_ */
