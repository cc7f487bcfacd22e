/* Private to engine/comm: what the mpi backend knows of the other ranks on
 * this machine (mpi_peers.c): which have ended or are stopped, and what a
 * failed one said. */
#ifndef ZL_COMM_MPI_PEERS_H
#define ZL_COMM_MPI_PEERS_H

#include <mpi.h>
#include "backend.h"

/* Collective over comm: the ranks exchange where they run. The first call
 * keeps the peers on this machine and takes SIGTERM (see comm.h); later calls
 * only match the others' exchange. */
ZLI_HIDDEN zl_status zli_peers_meet(MPI_Comm comm, int rank, int size);
/* Forgets the peers and gives SIGTERM back; with the last communicator. */
ZLI_HIDDEN void zli_peers_drop(void);
/* This rank in the first communicator; -1 before one opened. */
ZLI_HIDDEN int zli_peers_self(void);
/* The rank of a peer known to have ended, with the phrase to report in why
 * ("lost rank 1 (process 1234 ended)", or the note it left: "rank 1 failed:
 * ..."); -1 while none has. */
ZLI_HIDDEN int zli_peers_lost(char *why, size_t size);
/* "rank 1 (process 1234) is stopped[, ...]" for the peers stopped by a signal
 * (SIGSTOP, a debugger); "" when none is. */
ZLI_HIDDEN void zli_peers_stopped(char *out, size_t size);
/* Whether this process called zl_comm_note_failure. */
ZLI_HIDDEN bool zli_peers_failed(void);

#endif
