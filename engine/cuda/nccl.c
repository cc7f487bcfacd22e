/* The "nccl" communicator backend, part of the CUDA module: collectives on
 * CUDA tensors through NCCL, queued on the communicator's own stream so they
 * overlap compute; a started collective is an event comm.c polls. Rank 0's
 * unique id reaches the others over MPI or a file, through the communicator
 * functions comm.c hands over. NCCL itself is opened with the first
 * communicator (nccl_lib.c). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cuda_runtime_api.h>
#include "../comm/backend.h"
#include "cuda_impl.h"
#include "nccl_lib.h"

/* NCCL's functions, set by the first nccl_open that loaded them; the
 * communicator's, set when comm.c asks for this backend. */
static const zli_nccl_api *N;
static const zli_comm_api *C;

typedef struct nccl_state {
    ncclComm_t comm;
    cudaStream_t stream;
    cudaEvent_t ready;    /* marks the default stream's work a collective must follow */
    zl_tensor *scratch;   /* one f32 on the device: NCCL has no barrier, so a barrier is an allreduce of it */
    zl_comm *mpi;         /* carried the unique id; kept open for its lost-rank watch. NULL without MPI */
} nccl_state;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void nap(void)
{
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
}

static zl_status nccl_fail(ncclComm_t comm, ncclResult_t r, const char *what, int rank)
{
    const char *detail = comm ? N->ncclGetLastError(comm) : NULL;
    return zl_error(ZL_EIO, "comm nccl: %s failed on rank %d: %s%s%s", what, rank, N->ncclGetErrorString(r),
                    detail && *detail ? ": " : "", detail && *detail ? detail : "");
}

static zl_status cuda_fail(cudaError_t e, const char *what, int rank)
{
    return zl_error(ZL_EDEVICE, "comm nccl: %s failed on rank %d: %s (%s)", what, rank, cudaGetErrorName(e),
                    cudaGetErrorString(e));
}

/* ---- rank and size from the launcher ---- */

static bool env_int(const char *name, int *out)
{
    const char *s = getenv(name);
    if (!s || !*s) return false;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end != '\0' || v < 0 || v > INT_MAX) return false;
    *out = (int)v;
    return true;
}

/* mpirun's variables first, then those of zlua's launcher (and torchrun's);
 * neither: rank 0 of 1. */
static zl_status launcher_place(zl_comm *c, const char **from)
{
    static const char *const names[][3] = {
        {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
        {"RANK", "WORLD_SIZE", "LOCAL_RANK"},
    };
    c->rank = 0;
    c->size = 1;
    c->local_rank = 0;
    *from = "no launcher";
    for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
        if (!getenv(names[k][0]) && !getenv(names[k][1])) continue;
        if (!env_int(names[k][0], &c->rank) || !env_int(names[k][1], &c->size) || c->rank >= c->size)
            return zl_error(ZL_EINVAL, "comm nccl: %s='%s' and %s='%s' are not a rank and a world size",
                            names[k][0], getenv(names[k][0]) ? getenv(names[k][0]) : "(unset)", names[k][1],
                            getenv(names[k][1]) ? getenv(names[k][1]) : "(unset)");
        if (!env_int(names[k][2], &c->local_rank)) c->local_rank = c->rank;
        *from = names[k][0];
        return ZL_OK;
    }
    return ZL_OK;
}

/* ---- the unique id ---- */

/* Over an internal mpi communicator: rank 0's id broadcast as 128 bytes. */
static zl_status id_over_mpi(zl_comm *c, nccl_state *s, ncclUniqueId *id, const char *from)
{
    if (C->open("mpi", &s->mpi)) return zli_last_code();
    if (C->rank(s->mpi) != c->rank || C->size(s->mpi) != c->size)
        return zl_error(ZL_EINVAL, "comm nccl: rank %d of %d (from %s), but MPI sees rank %d of %d: start the "
                        "job with mpirun (or zlua --nprocs), or name a file for the unique id in "
                        "ZLUA_NCCL_ID_FILE (one host)", c->rank, c->size, from, C->rank(s->mpi),
                        C->size(s->mpi));
    C->set_timeout(s->mpi, c->timeout_s);
    int64_t n = (int64_t)sizeof *id;
    zl_tensor *bytes = zl_tensor_new(ZL_DTYPE_U8, 1, &n, ZL_MEM_COMM);
    if (!bytes) return zli_last_code();
    if (c->rank == 0) memcpy(zl_tensor_data(bytes), id, sizeof *id);
    zl_status st = C->broadcast(s->mpi, bytes, 0);
    if (!st) memcpy(id, zl_tensor_data(bytes), sizeof *id);
    zl_tensor_release(bytes);
    return st;
}

/* Through the file at `path` (one host, no MPI): rank 0 writes it whole under
 * another name and renames it, so a reader never sees part of an id; the
 * others poll for it. A file left by an earlier job would hand out a stale id,
 * so rank 0 refuses one that exists, and removes its own once all have joined. */
static zl_status id_write(const char *path, const ncclUniqueId *id)
{
    if (access(path, F_OK) == 0)
        return zl_error(ZL_EINVAL, "comm nccl: ZLUA_NCCL_ID_FILE '%s' exists already (left by an earlier job?); "
                        "remove it, or name a new file", path);
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid()) >= (int)sizeof tmp)
        return zl_error(ZL_EINVAL, "comm nccl: ZLUA_NCCL_ID_FILE is too long");
    FILE *f = fopen(tmp, "wb");
    if (!f) return zl_error(ZL_EIO, "comm nccl: cannot create '%s': %s", tmp, strerror(errno));
    bool ok = fwrite(id, sizeof *id, 1, f) == 1;
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        int err = errno;
        remove(tmp);
        return zl_error(ZL_EIO, "comm nccl: cannot write the unique id to '%s': %s", path, strerror(err));
    }
    return ZL_OK;
}

static zl_status id_read(zl_comm *c, const char *path, ncclUniqueId *id)
{
    double deadline = now_s() + c->timeout_s;
    for (;;) {
        FILE *f = fopen(path, "rb");
        if (f) {
            bool ok = fread(id, sizeof *id, 1, f) == 1;
            fclose(f);
            if (ok) return ZL_OK;
        }
        if (zl_interrupt_pending())
            return zl_error(ZL_EINTERRUPT, "comm nccl: interrupted on rank %d waiting for '%s'", c->rank, path);
        if (now_s() > deadline)
            return zl_error(ZL_EIO, "comm nccl: rank %d waited %g s for rank 0's unique id in '%s' "
                            "(ZLUA_NCCL_ID_FILE); is rank 0 running on this host?", c->rank, c->timeout_s, path);
        nap();
    }
}

/* ---- waiting on the communicator's own state ---- */

/* A non-blocking communicator answers ncclInProgress until an operation has
 * been taken in; wait for it as comm.c waits, so a rank that never arrives
 * ends in a timeout and an abort rather than a hang. */
static zl_status settle(zl_comm *c, ncclComm_t comm, const char *what)
{
    double deadline = now_s() + c->timeout_s;
    for (;;) {
        ncclResult_t a = ncclSuccess;
        ncclResult_t r = N->ncclCommGetAsyncError(comm, &a);
        if (r != ncclSuccess) return nccl_fail(comm, r, "ncclCommGetAsyncError", c->rank);
        if (a == ncclSuccess) return ZL_OK;
        if (a != ncclInProgress) return nccl_fail(comm, a, what, c->rank);
        if (zl_interrupt_pending())
            return zl_error(ZL_EINTERRUPT, "comm nccl: %s interrupted on rank %d", what, c->rank);
        if (now_s() > deadline)
            return zl_error(ZL_EIO, "comm nccl: %s timed out after %g s on rank %d", what, c->timeout_s, c->rank);
        nap();
    }
}

/* ---- open and close ---- */

static void drop_mpi(nccl_state *s, bool clean)
{
    if (!s->mpi) return;
    if (clean) {
        C->close(s->mpi);
    } else {
        /* Its collective close could block on ranks that are gone. */
        s->mpi->be->close(s->mpi, false);
        free(s->mpi);
    }
    s->mpi = NULL;
}

static zl_status open_fail(zl_comm *c, nccl_state *s, zl_status st)
{
    if (s->comm) N->ncclCommAbort(s->comm);
    if (s->stream) cudaStreamDestroy(s->stream);
    if (s->ready) cudaEventDestroy(s->ready);
    zl_tensor_release(s->scratch);
    drop_mpi(s, st != ZL_EIO && st != ZL_EINTERRUPT);
    free(s);
    c->state = NULL;
    return st;
}

static zl_status nccl_open(zl_comm *c)
{
    const char *from;
    if (launcher_place(c, &from)) return zli_last_code();
    if (zli_cuda_use(0)) {
        char why[512];
        snprintf(why, sizeof why, "%s", zl_last_error());
        return zl_error(ZL_EDEVICE, "comm nccl: rank %d: %s", c->rank, why);
    }
    int visible = zli_cuda_count();
    if (c->local_rank >= visible) {
        const char *vis = getenv("CUDA_VISIBLE_DEVICES");
        return zl_error(ZL_EDEVICE, "comm nccl: rank %d (local rank %d) needs cuda:%d, but %d device%s visible "
                        "(CUDA_VISIBLE_DEVICES=%s): start at most %d rank%s per host", c->rank, c->local_rank,
                        c->local_rank, visible, visible == 1 ? " is" : "s are", vis ? vis : "(unset)", visible,
                        visible == 1 ? "" : "s");
    }
    c->device_index = c->local_rank;
    if (zli_cuda_use(c->device_index)) return zli_last_code();
    if (!N && !(N = zli_nccl_api_get())) {
        char why[800];
        snprintf(why, sizeof why, "%s", zl_last_error());
        return zl_error(ZL_EDEVICE, "comm nccl: rank %d: %s", c->rank, why);
    }
    nccl_state *s = calloc(1, sizeof *s);
    if (!s) return zl_error(ZL_ENOMEM, "comm nccl: out of memory");
    c->state = s;

    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    ncclResult_t r = ncclSuccess;
    if (c->rank == 0 && (r = N->ncclGetUniqueId(&id)) != ncclSuccess)
        return open_fail(c, s, nccl_fail(NULL, r, "ncclGetUniqueId", c->rank));
    const char *file = getenv("ZLUA_NCCL_ID_FILE");
    zl_status st = ZL_OK;
    if (c->size > 1 && file && *file) st = c->rank == 0 ? id_write(file, &id) : id_read(c, file, &id);
    else if (c->size > 1) st = id_over_mpi(c, s, &id, from);
    if (st) return open_fail(c, s, st);

    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    r = N->ncclCommInitRankConfig(&s->comm, c->size, id, c->rank, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
        s->comm = NULL;
        return open_fail(c, s, nccl_fail(NULL, r, "ncclCommInitRankConfig", c->rank));
    }
    if ((st = settle(c, s->comm, "ncclCommInitRankConfig"))) return open_fail(c, s, st);
    if (c->rank == 0 && c->size > 1 && file && *file) remove(file);

    cudaError_t e = cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        s->stream = NULL;
        return open_fail(c, s, cuda_fail(e, "cudaStreamCreateWithFlags", c->rank));
    }
    e = cudaEventCreateWithFlags(&s->ready, cudaEventDisableTiming);
    if (e != cudaSuccess) {
        s->ready = NULL;
        return open_fail(c, s, cuda_fail(e, "cudaEventCreateWithFlags", c->rank));
    }
    int64_t one = 1;
    s->scratch = zli_cuda_new(ZL_DTYPE_F32, 1, &one, ZL_MEM_OTHER, c->device_index);
    if (!s->scratch || zli_cuda_memset0(zl_tensor_data(s->scratch), sizeof(float), c->device_index))
        return open_fail(c, s, zli_last_code());
    return ZL_OK;
}

static void nccl_close(zl_comm *c, bool clean)
{
    nccl_state *s = c->state;
    bool flushed = false;
    if (clean) {
        ncclResult_t r = N->ncclCommFinalize(s->comm);
        flushed = (r == ncclSuccess || r == ncclInProgress) && !settle(c, s->comm, "ncclCommFinalize");
    }
    if (flushed) {
        ncclResult_t r = N->ncclCommDestroy(s->comm);
        if (r != ncclSuccess) fprintf(stderr, "zlua: warning: ncclCommDestroy failed: %s\n", N->ncclGetErrorString(r));
        zli_cuda_released("cudaStreamDestroy (the nccl stream)", (int)cudaStreamDestroy(s->stream));
        zli_cuda_released("cudaEventDestroy", (int)cudaEventDestroy(s->ready));
        zl_tensor_release(s->scratch);
        drop_mpi(s, true);
    } else {
        /* A collective was abandoned (or flushing failed): abort the kernels
         * rather than wait for ranks that may never come. The scratch value may
         * still be written by the aborted barrier, so it is leaked. */
        ncclResult_t r = N->ncclCommAbort(s->comm);
        if (r != ncclSuccess) fprintf(stderr, "zlua: warning: ncclCommAbort failed: %s\n", N->ncclGetErrorString(r));
        zli_cuda_released("cudaStreamDestroy (the nccl stream)", (int)cudaStreamDestroy(s->stream));
        zli_cuda_released("cudaEventDestroy", (int)cudaEventDestroy(s->ready));
        drop_mpi(s, false);
    }
    free(s);
    c->state = NULL;
}

/* ---- collectives ---- */

static ncclDataType_t dtype_of(zl_dtype dt)
{
    switch (dt) {
    case ZL_DTYPE_F16: return ncclHalf;
    case ZL_DTYPE_BF16: return ncclBfloat16;
    default: return ncclFloat;
    }
}

static ncclRedOp_t op_of(zl_comm_op op)
{
    switch (op) {
    case ZL_COMM_MAX: return ncclMax;
    case ZL_COMM_MIN: return ncclMin;
    case ZL_COMM_AVG: return ncclAvg;
    case ZL_COMM_SUM: return ncclSum;
    }
    return ncclSum;
}

/* Queue coll on the communicator's stream. */
static ncclResult_t enqueue(nccl_state *s, const zli_coll *coll)
{
    /* An empty tensor has nothing to move, and every rank's is empty alike. */
    if (coll->count == 0 && coll->kind != ZLI_COLL_BARRIER && coll->kind != ZLI_COLL_ALLGATHER_COALESCED)
        return ncclSuccess;
    switch (coll->kind) {
    case ZLI_COLL_ALLREDUCE:
        return N->ncclAllReduce(coll->buf, coll->buf, coll->count, dtype_of(coll->dtype), op_of(coll->op), s->comm,
                             s->stream);
    case ZLI_COLL_REDUCE_SCATTER:
        return N->ncclReduceScatter(coll->send, coll->recv, coll->count, dtype_of(coll->dtype), op_of(coll->op),
                                 s->comm, s->stream);
    case ZLI_COLL_ALLGATHER:
        return N->ncclAllGather(coll->send, coll->recv, coll->count, ncclUint8, s->comm, s->stream);
    case ZLI_COLL_BROADCAST:
        return N->ncclBroadcast(coll->buf, coll->buf, coll->count, ncclUint8, coll->root, s->comm, s->stream);
    case ZLI_COLL_BARRIER: {
        void *one = zl_tensor_data(s->scratch);
        return N->ncclAllReduce(one, one, 1, ncclFloat, ncclSum, s->comm, s->stream);
    }
    case ZLI_COLL_ALLGATHER_COALESCED: {
        /* NCCL fuses a group's collectives into one launch. The group is
         * ended even after a failed call, which is then the result. */
        ncclResult_t r = N->ncclGroupStart();
        if (r != ncclSuccess) return r;
        for (int i = 0; i < coll->parts && (r == ncclSuccess || r == ncclInProgress); i++)
            if (coll->counts[i])
                r = N->ncclAllGather(coll->sends[i], coll->recvs[i], coll->counts[i], ncclUint8, s->comm, s->stream);
        ncclResult_t end = N->ncclGroupEnd();
        return r == ncclSuccess || r == ncclInProgress ? end : r;
    }
    }
    return ncclInvalidArgument;
}

static zl_status nccl_start(zl_comm *c, const zli_coll *coll, void **pending)
{
    static const char *names[] = {"ncclAllReduce", "ncclReduceScatter", "ncclAllGather", "ncclBroadcast",
                                  "ncclAllReduce (barrier)", "ncclAllGather (grouped)"};
    nccl_state *s = c->state;
    *pending = NULL;
    cudaError_t e = cudaSetDevice(c->device_index);
    if (e != cudaSuccess) return cuda_fail(e, "cudaSetDevice", c->rank);
    /* The own stream does not wait for the default one by itself; the tensors
     * may have been written there, so it waits for what is queued so far, and
     * no longer: later compute overlaps the collective. */
    if ((e = cudaEventRecord(s->ready, 0)) != cudaSuccess || (e = cudaStreamWaitEvent(s->stream, s->ready, 0)))
        return cuda_fail(e, "ordering after the default stream", c->rank);
    cudaEvent_t ev;
    e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    if (e != cudaSuccess) return cuda_fail(e, "cudaEventCreateWithFlags", c->rank);
    ncclResult_t r = enqueue(s, coll);
    zl_status st = ZL_OK;
    if (r == ncclInProgress) st = settle(c, s->comm, names[coll->kind]);
    else if (r != ncclSuccess) st = nccl_fail(s->comm, r, names[coll->kind], c->rank);
    if (!st && (e = cudaEventRecord(ev, s->stream)) != cudaSuccess) st = cuda_fail(e, "cudaEventRecord", c->rank);
    if (st) {
        cudaEventDestroy(ev);
        return st;
    }
    *pending = ev;
    return ZL_OK;
}

static zl_status nccl_test(zl_comm *c, void *pending, bool *done)
{
    nccl_state *s = c->state;
    cudaEvent_t ev = pending;
    *done = false;
    cudaError_t e = cudaEventQuery(ev);
    if (e == cudaSuccess) {
        cudaEventDestroy(ev);
        *done = true;
        return ZL_OK;
    }
    if (e != cudaErrorNotReady) return cuda_fail(e, "cudaEventQuery", c->rank);
    /* A failed peer or network shows here, not on the event. */
    ncclResult_t a = ncclSuccess;
    ncclResult_t r = N->ncclCommGetAsyncError(s->comm, &a);
    if (r != ncclSuccess) return nccl_fail(s->comm, r, "ncclCommGetAsyncError", c->rank);
    if (a != ncclSuccess && a != ncclInProgress) return nccl_fail(s->comm, a, "a collective", c->rank);
    return ZL_OK;
}

/* Peers on this host found ended by the internal mpi communicator's watch. */
static int nccl_lost(zl_comm *c, char *why, size_t size)
{
    nccl_state *s = c->state;
    return s->mpi && s->mpi->be->lost ? s->mpi->be->lost(s->mpi, why, size) : -1;
}

static void nccl_stopped(zl_comm *c, char *out, size_t size)
{
    nccl_state *s = c->state;
    out[0] = '\0';
    if (s->mpi && s->mpi->be->stopped) s->mpi->be->stopped(s->mpi, out, size);
}

static const zli_comm_backend nccl_backend = {
    .name = "nccl",
    .device = ZL_DEVICE_CUDA,
    .open = nccl_open,
    .close = nccl_close,
    .start = nccl_start,
    .test = nccl_test,
    .lost = nccl_lost,
    .stopped = nccl_stopped,
};

const void *zli_cuda_comm(const void *comm_api)
{
    C = comm_api;
    return &nccl_backend;
}
