/* zlua/comm.h — collectives between ranks: allreduce, reduce_scatter, allgather,
 * broadcast and barrier on contiguous tensors, blocking or as a request to wait
 * on. Backends: "self" (one process) and "mpi" (OpenMPI) on CPU tensors, "nccl"
 * on CUDA tensors. */
#ifndef ZLUA_COMM_H
#define ZLUA_COMM_H

#include "base.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zl_comm zl_comm;
typedef struct zl_comm_request zl_comm_request;

/* Reductions. On "self" and "mpi", f16 and bf16 are reduced in f32 and
 * rounded once at the end, and AVG is the f32 sum divided by the world size.
 * On "nccl" each dtype is reduced in its own type, as NCCL does (a bf16 sum
 * rounds at every step, so it may differ from mpi's in the last bits), and AVG
 * is NCCL's. Values are stable for a given backend and world size. */
typedef enum zl_comm_op {
    ZL_COMM_SUM = 0,
    ZL_COMM_MAX = 1,
    ZL_COMM_MIN = 2,
    ZL_COMM_AVG = 3,
} zl_comm_op;

/* Open a communicator over every rank of the job. backend is "self" (rank 0 of 1)
 * or "mpi" (initialises MPI unless the host already did; collective: every rank
 * must call it), or "nccl" (collective too): rank and world size from the
 * launcher (OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK under mpirun, else
 * RANK/WORLD_SIZE/LOCAL_RANK; neither: rank 0 of 1), each rank on device
 * cuda:<local rank>. Rank 0's NCCL id reaches the others through the file named
 * by $ZLUA_NCCL_ID_FILE when set (one host; the file must not exist yet, and is
 * removed once all have joined), else over MPI, which then stays initialised
 * while the communicator is open and also watches for lost ranks as "mpi" does.
 * The timeout starts at 30 minutes, or at $ZLUA_COMM_TIMEOUT seconds when set;
 * "nccl" applies it to joining as well. *out receives a new handle; ZL_EINVAL for
 * an unknown backend, one this build lacks (zl_comm_unavailable) or a bad
 * $ZLUA_COMM_TIMEOUT, ZL_EIO when MPI or NCCL cannot start, ZL_EDEVICE for
 * "nccl" in a build without NCCL ("this zlua was built without NCCL ..."),
 * without a GPU ("no CUDA device: ...") or with fewer devices than ranks on the
 * host. */
ZL_API zl_status zl_comm_open(const char *backend, zl_comm **out);
/* NULL when this build has `backend`; otherwise why not and how to get it
 * (borrowed, static): "mpi" is absent from a build configured without MPI
 * (-DZLUA_MPI=OFF, or none found), and zl_comm_open("mpi") then fails with
 * ZL_EINVAL and this message. Never opens anything. */
ZL_API const char *zl_comm_unavailable(const char *backend);
/* Close (collective for "mpi"). NULL is a no-op. Requests not yet waited on keep
 * the communicator alive until they are; MPI is finalised with the last mpi
 * communicator only when zl_comm_open initialised it. */
ZL_API void zl_comm_close(zl_comm *c);

ZL_API int zl_comm_rank(const zl_comm *c);
ZL_API int zl_comm_size(const zl_comm *c);
/* Rank among the processes of this host. */
ZL_API int zl_comm_local_rank(const zl_comm *c);
/* "self", "mpi" or "nccl"; borrowed. */
ZL_API const char *zl_comm_backend(const zl_comm *c);
/* Where the tensors of c's collectives live: ZL_DEVICE_CPU for "self" and
 * "mpi" (host memory), ZL_DEVICE_CUDA for "nccl" with *index (may be NULL)
 * its device; *index is 0 for the host. */
ZL_API zl_device zl_comm_device(const zl_comm *c, int *index);

/* A collective that has not completed after `seconds` (> 0) fails with ZL_EIO
 * naming the collective and the rank, and any peer on this machine stopped by
 * a signal ("allreduce timed out after 10 s on rank 0; rank 1 (process 1234)
 * is stopped"); the communicator is then unusable (ZL_ESTATE), as the other
 * ranks can no longer be matched. Ctrl-C (zl_interrupt_pending) ends the wait
 * the same way with ZL_EINTERRUPT.
 *
 * Lost ranks ("mpi"): a rank whose process ends on this machine (killed,
 * crashed, exited) is noticed by the ranks waiting on it within a fraction of
 * a second; their collective fails with ZL_EIO "rank 0 in allreduce: lost
 * rank 1 (process 1234 ended)", or, when the rank left a note
 * (zl_comm_note_failure), "rank 0 in allreduce: rank 1 failed: <its
 * message>"; the communicator is then unusable as after a timeout. A rank on
 * another machine is noticed only by the timeout. mpirun sends SIGTERM to
 * every rank once one has died: while an mpi communicator is open and unless
 * the host set its own SIGTERM handler first, a rank that then finds peers on
 * its machine ended prints "zlua: rank 2[ in allreduce]: lost rank 1 (process
 * 1234 ended); stopping" (or "...: rank 1 failed: <its message>; stopping")
 * to stderr and exits with status 1; any other SIGTERM ends the process as it
 * would have. */
ZL_API zl_status zl_comm_set_timeout(zl_comm *c, double seconds);
ZL_API double zl_comm_timeout(const zl_comm *c);

/* For a rank about to end on an error, before it exits: leaves `message` (its
 * first line) where the ranks on this machine look when they find this
 * process ended, so they report "rank 1 failed: <message>" rather than only
 * the loss. A rank that fails because it found a peer lost passes that
 * peer's report on instead, so every rank names the rank the failure began
 * with. Do not close the communicators afterwards (closing is collective and
 * the peers are elsewhere): exit. Works under Open MPI's mpirun (the note goes
 * into the job's session folder, removed when the job ends); elsewhere, and
 * in a build without MPI, it does nothing. */
ZL_API void zl_comm_note_failure(const char *message);

/* Every rank passes tensors of the same dtype and numel, contiguous, on the CPU
 * for "self" and "mpi", on cuda:<local rank> for "nccl" (which runs them on its
 * own stream, after the work queued on the default stream so far; a host that
 * wrote them on a stream of its own synchronises it first). Reductions accept f32, f16 and bf16; allgather and
 * broadcast any dtype.
 *  allreduce:      t = op over ranks of t, in place.
 *  reduce_scatter: in holds size * numel(out) elements; out receives this rank's
 *                  slice (elements [rank*n, (rank+1)*n)) of the reduction of in.
 *  allgather:      out (size * numel(in) elements, same dtype) receives every
 *                  rank's in, in rank order.
 *  allgather_coalesced: for i < n, out[i] receives every rank's in[i] as
 *                  allgather does, in one collective, so that many small
 *                  tensors pay its latency once; pairs may differ in dtype
 *                  and size, and no out may share storage with another
 *                  tensor of the call.
 *  broadcast:      t on every rank receives root's t.
 * Tensors are borrowed by the blocking forms; the _async forms retain them until
 * the request is waited on, and the caller must not touch them before. */
ZL_API zl_status zl_comm_allreduce(zl_comm *c, zl_tensor *t, zl_comm_op op);
ZL_API zl_status zl_comm_reduce_scatter(zl_comm *c, const zl_tensor *in, zl_tensor *out, zl_comm_op op);
ZL_API zl_status zl_comm_allgather(zl_comm *c, const zl_tensor *in, zl_tensor *out);
ZL_API zl_status zl_comm_allgather_coalesced(zl_comm *c, int n, const zl_tensor *const *in, zl_tensor *const *out);
ZL_API zl_status zl_comm_broadcast(zl_comm *c, zl_tensor *t, int root);
ZL_API zl_status zl_comm_barrier(zl_comm *c);

/* Non-blocking forms: a new request (NULL with zl_last_error() when the
 * arguments are wrong), to be passed exactly once to zl_comm_wait. */
ZL_API zl_comm_request *zl_comm_allreduce_async(zl_comm *c, zl_tensor *t, zl_comm_op op);
ZL_API zl_comm_request *zl_comm_reduce_scatter_async(zl_comm *c, const zl_tensor *in, zl_tensor *out,
                                                     zl_comm_op op);
ZL_API zl_comm_request *zl_comm_allgather_async(zl_comm *c, const zl_tensor *in, zl_tensor *out);
ZL_API zl_comm_request *zl_comm_allgather_coalesced_async(zl_comm *c, int n, const zl_tensor *const *in,
                                                          zl_tensor *const *out);
ZL_API zl_comm_request *zl_comm_broadcast_async(zl_comm *c, zl_tensor *t, int root);
ZL_API zl_comm_request *zl_comm_barrier_async(zl_comm *c);
/* Wait for the request to complete and free it; its status is the collective's.
 * NULL returns ZL_EINVAL. */
ZL_API zl_status zl_comm_wait(zl_comm_request *req);

#ifdef __cplusplus
}
#endif
#endif
