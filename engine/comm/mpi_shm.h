/* Private to engine/comm: the mpi backend's path between ranks on one
 * machine. Every rank maps the others' staging buffers (an MPI-3 shared
 * window), so a reduction reads its peers' memory directly instead of going
 * through MPI's transport. */
#ifndef ZL_COMM_MPI_SHM_H
#define ZL_COMM_MPI_SHM_H

#include <mpi.h>
#include "backend.h"

/* A status for MPI's error code rc from `what` on `rank` (mpi.c), the
 * message naming both and MPI's own words. */
ZLI_HIDDEN zl_status zli_mpi_fail(int rc, const char *what, int rank);

typedef struct zli_shm zli_shm;
typedef struct zli_shm_op zli_shm_op;

/* The shared path over `comm` (which it keeps using; the caller keeps it
 * open until zli_shm_close), or *out NULL when there is none: one rank, ranks
 * on several machines, or ZLUA_COMM_SHM=0 in the environment (MPI's own
 * collectives then run). Collective over `comm`. */
zl_status zli_shm_open(MPI_Comm comm, zli_shm **out);

/* Frees it; `clean` as the backend's close (false: the ranks may not all be
 * here, so no collective MPI call). NULL is a no-op. */
void zli_shm_close(zli_shm *s, bool clean);

/* Whether this path carries `coll` (allreduce, reduce-scatter, allgather, coalesced or not). */
bool zli_shm_carries(const zli_coll *coll);

/* Queues `coll` and starts it if nothing is ahead of it. Collectives complete
 * in the order they were started on every rank, as MPI requires of its own.
 * Reductions fold the ranks' values in rank order, r0 op r1 op r2 ..., so a
 * result does not depend on timing and an all-reduce equals the concatenated
 * reduce-scatters bit for bit. */
zl_status zli_shm_start(zli_shm *s, const zli_coll *coll, zli_shm_op **op);

/* Moves the queued collectives of every open path on as far as they go
 * without waiting; sets *done and frees `op` (one of s's) once it has
 * completed. op NULL only moves the queues on (the mpi backend does so while
 * it waits on MPI, so that a peer waiting here is never held up by this rank
 * waiting there). */
zl_status zli_shm_test(zli_shm *s, zli_shm_op *op, bool *done);

/* How many collectives, or runs of a coalesced one, this process has seen
 * complete on every path: a wait that sees it grow is making progress. */
uint64_t zli_shm_completed(void);

#endif
