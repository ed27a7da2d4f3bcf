/*
 * @file dlrm_rendezvous.h
 * @brief How the DLRM example's separate processes (one rank each, on one machine or several)
 *        meet: rank 0 creates a unique id, whose rendezvous store lives in its process, and
 *        hands it to the others as text: printed, or written to a file they wait for.
 */
#ifndef DLRM_RENDEZVOUS_H_
#define DLRM_RENDEZVOUS_H_

#include "shardrec/shardrec.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Creates this process's world communicator as rank @p rank of @p world (collective: every
 * process calls it). Rank 0 creates the id and prints it as 256 hex digits, or, when @p id_file
 * is not NULL, writes it there instead (owner-only permissions, renamed into place so it is
 * never read half-written; the id is a bearer secret, comm.h). Another rank takes the id from
 * @p id_hex when not NULL, else waits up to a minute for @p id_file to appear; a stale file from
 * an earlier run would send it to a store that is gone, so use a fresh path per run.
 * Returns 0 with *comm set (the caller destroys it), or -1 with the reason on stderr.
 */
int dlrm_rendezvous(shardrec_comm_t** comm, int rank, int world, const char* id_hex,
                    const char* id_file);

#ifdef __cplusplus
}
#endif

#endif /* DLRM_RENDEZVOUS_H_ */
