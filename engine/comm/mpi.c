/* The "mpi" backend: collectives as MPI's non-blocking ones on a duplicate of
 * MPI_COMM_WORLD, polled by comm.c; with every rank on one machine the
 * reductions and gathers go through shared memory instead (mpi_shm.c). MPI is initialised here unless the host did,
 * and finalised with the last communicator only in that case (then a rank
 * started by zlua's launcher leaves it a receipt, mpi_receipt.c). It also names
 * a rank whose process ended, to the waiting ranks and on SIGTERM (mpi_peers.c). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <mpi.h>
#include "mpi_peers.h"
#include "mpi_receipt.h"
#include "mpi_shm.h"

typedef struct mpi_state {
    MPI_Comm comm;
    zli_shm *shm;                /* NULL: every collective through MPI */
} mpi_state;

/* A started collective: MPI's request, or the shared-memory path's. A
 * coalesced all-gather is an MPI_Iallgather per run of pieces: a piece of at
 * least ALONE_BYTES as it lies (Open MPI moves it between processes with one
 * copy), smaller ones packed together up to RUN_BYTES and unpacked once every
 * run is done. With 294 pieces of 32 KiB on 2 ranks of one machine, one
 * MPI_Ialltoallw over datatypes naming the pieces in place took 2.5 times as
 * long as separate gathers, and packing them all 1.3 times; with 2 KiB pieces
 * packing takes 0.7 times. */
#define ALONE_BYTES ((size_t)16 << 10)
#define RUN_BYTES ((size_t)256 << 10)
typedef struct mpi_pending {
    MPI_Request req;
    zli_shm_op *shm;
    MPI_Request *runs;         /* nruns started */
    int nruns;
    char *packed;              /* per packed run: this rank's pieces, then every rank's */
    zli_coll coll;             /* the coalesced all-gather to unpack */
} mpi_pending;

static void pending_free(mpi_pending *p)
{
    free(p->runs);
    free(p->packed);
    free(p);
}

/* How many open communicators use MPI, and whether the first one initialised it. */
static int g_open_count;
static bool g_we_initialised;

zl_status zli_mpi_fail(int rc, const char *what, int rank)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) len = 0;
    msg[len] = '\0';
    return zl_error(ZL_EIO, "%s failed on rank %d: %s", what, rank, len ? msg : "MPI error");
}

static int local_rank_of(MPI_Comm comm, int rank)
{
    const char *env = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    if (env && *env) {
        char *end;
        long v = strtol(env, &end, 10);
        if (*end == '\0' && v >= 0 && v <= INT_MAX) return (int)v;
    }
    MPI_Comm node;
    int local = rank;
    if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
        MPI_Comm_rank(node, &local);
        MPI_Comm_free(&node);
    }
    return local;
}


/* A process that ends with a communicator still open never finalises MPI,
 * and mpirun then reports only that the rank "exited improperly". Say why on
 * the rank's own stderr. */
static void report_unclosed(void)
{
    if (g_we_initialised && g_open_count > 0 && !zli_peers_failed())
        fprintf(stderr, "zlua: rank %d is exiting with %d communicator(s) still open (not closed, or a collective "
                "still in flight): MPI is not finalised\n", zli_peers_self(), g_open_count);
}

static zl_status mpi_open(zl_comm *c)
{
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (finalized) return zl_error(ZL_ESTATE, "comm mpi: MPI was already finalised and cannot start again");
    if (!inited) {
        int provided = 0;
        int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
        if (rc != MPI_SUCCESS) return zli_mpi_fail(rc, "comm mpi: MPI_Init_thread", -1);
        g_we_initialised = true;
        atexit(report_unclosed);
    }
    mpi_state *s = malloc(sizeof *s);
    if (!s) return zl_error(ZL_ENOMEM, "comm mpi: out of memory");
    /* Errors come back as codes, so a failure is reported instead of aborting the job. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, &s->comm);
    if (rc != MPI_SUCCESS) {
        free(s);
        return zli_mpi_fail(rc, "comm mpi: MPI_Comm_dup", -1);
    }
    MPI_Comm_set_errhandler(s->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(s->comm, &c->rank);
    MPI_Comm_size(s->comm, &c->size);
    c->local_rank = local_rank_of(s->comm, c->rank);
    zl_status st = zli_peers_meet(s->comm, c->rank, c->size);
    if (!st) st = zli_shm_open(s->comm, &s->shm);
    if (st) {
        /* Not MPI_Comm_free: it is collective, and the ranks may disagree now. */
        free(s);
        return st;
    }
    c->state = s;
    g_open_count++;
    return ZL_OK;
}

static void mpi_close(zl_comm *c, bool clean)
{
    mpi_state *s = c->state;
    /* A collective still in flight may yet write into memory we own; freeing
     * the communicator or finalising could block on ranks that are gone. */
    if (!clean) {
        zli_shm_close(s->shm, false);
        free(s);
        if (--g_open_count == 0) zli_peers_drop();
        g_we_initialised = false;
        return;
    }
    zli_shm_close(s->shm, true);
    MPI_Comm_free(&s->comm);
    free(s);
    if (--g_open_count > 0) return;
    zli_peers_drop();
    if (g_we_initialised) {
        if (MPI_Finalize() == MPI_SUCCESS) zli_mpi_receipt_arm(zli_peers_self());
        g_we_initialised = false;
    }
}

static MPI_Op op_of(zl_comm_op op)
{
    switch (op) {
    case ZL_COMM_MAX: return MPI_MAX;
    case ZL_COMM_MIN: return MPI_MIN;
    case ZL_COMM_SUM:
    case ZL_COMM_AVG: return MPI_SUM;
    }
    return MPI_SUM;
}

/* The end of the run that starts at piece i, cut alike on every rank. */
static int run_end(const zli_coll *c, int i)
{
    if (c->counts[i] >= ALONE_BYTES) return i + 1;
    size_t bytes = c->counts[i];
    int j = i + 1;
    while (j < c->parts && c->counts[j] < ALONE_BYTES && bytes + c->counts[j] <= RUN_BYTES) bytes += c->counts[j++];
    return j;
}

static bool alone(const zli_coll *c, int i) { return c->counts[i] >= ALONE_BYTES; }

static int start_coalesced(mpi_state *s, int size, const zli_coll *coll, mpi_pending *p)
{
    size_t P = (size_t)size, packed = 0;
    int n = 0;
    for (int i = 0; i < coll->parts; i = run_end(coll, i)) n++;
    for (int i = 0; i < coll->parts; i++)
        if (!alone(coll, i)) packed += coll->counts[i];
    p->runs = malloc((size_t)n * sizeof *p->runs);
    p->packed = malloc((1 + P) * (packed ? packed : 1));
    if (!p->runs || !p->packed) return MPI_ERR_NO_MEM;
    p->coll = *coll;
    char *own = p->packed;
    for (int i = 0; i < coll->parts;) {
        int end = run_end(coll, i), rc;
        if (alone(coll, i)) {
            int count = (int)coll->counts[i];
            rc = MPI_Iallgather(coll->sends[i], count, MPI_BYTE, coll->recvs[i], count, MPI_BYTE, s->comm,
                                &p->runs[p->nruns]);
            i = end;
        } else {
            size_t len = 0;
            for (; i < end; i++) {
                memcpy(own + len, coll->sends[i], coll->counts[i]);
                len += coll->counts[i];
            }
            rc = MPI_Iallgather(own, (int)len, MPI_BYTE, own + len, (int)len, MPI_BYTE, s->comm, &p->runs[p->nruns]);
            own += (1 + P) * len;
        }
        if (rc != MPI_SUCCESS) return rc;
        p->nruns++;
    }
    return MPI_SUCCESS;
}

/* Every rank's pieces out of the packed runs' gathered copies into their places. */
static void unpack(const mpi_pending *p, int size)
{
    const zli_coll *c = &p->coll;
    const char *own = p->packed;
    for (int i = 0; i < c->parts;) {
        int end = run_end(c, i);
        if (alone(c, i)) {
            i = end;
            continue;
        }
        size_t len = 0;
        for (int j = i; j < end; j++) len += c->counts[j];
        const char *from = own + len;
        for (int q = 0; q < size; q++)
            for (int j = i; j < end; j++) {
                memcpy((char *)c->recvs[j] + (size_t)q * c->counts[j], from, c->counts[j]);
                from += c->counts[j];
            }
        own += (1 + (size_t)size) * len;
        i = end;
    }
}

static zl_status mpi_start(zl_comm *c, const zli_coll *coll, void **pending)
{
    static const char *names[] = {"MPI_Iallreduce", "MPI_Ireduce_scatter_block", "MPI_Iallgather",
                                  "MPI_Ibcast", "MPI_Ibarrier", "MPI_Iallgather (coalesced)"};
    mpi_state *s = c->state;
    if (s->shm && zli_shm_carries(coll)) {
        mpi_pending *p = calloc(1, sizeof *p);
        if (!p) return zl_error(ZL_ENOMEM, "comm mpi: out of memory");
        zl_status st = zli_shm_start(s->shm, coll, &p->shm);
        if (st) {
            free(p);
            return st;
        }
        *pending = p;
        return ZL_OK;
    }
    /* a coalesced all-gather's runs are its larger pieces and packs of a few hundred KiB */
    size_t count = coll->count;
    for (int i = 0; i < coll->parts; i++)
        if (coll->counts[i] > count) count = coll->counts[i];
    if (count > INT_MAX)
        return zl_error(ZL_EINVAL, "%s on rank %d: %zu elements exceed MPI's int count; split the buffer",
                        names[coll->kind], c->rank, count);
    mpi_pending *p = calloc(1, sizeof *p);
    if (!p) return zl_error(ZL_ENOMEM, "comm mpi: out of memory");
    MPI_Request *req = &p->req;
    int n = (int)coll->count, rc = MPI_SUCCESS;
    switch (coll->kind) {
    case ZLI_COLL_ALLREDUCE:
        rc = MPI_Iallreduce(MPI_IN_PLACE, coll->buf, n, MPI_FLOAT, op_of(coll->op), s->comm, req);
        break;
    case ZLI_COLL_REDUCE_SCATTER:
        rc = MPI_Ireduce_scatter_block(coll->send, coll->recv, n, MPI_FLOAT, op_of(coll->op), s->comm, req);
        break;
    case ZLI_COLL_ALLGATHER:
        rc = MPI_Iallgather(coll->send, n, MPI_BYTE, coll->recv, n, MPI_BYTE, s->comm, req);
        break;
    case ZLI_COLL_BROADCAST:
        rc = MPI_Ibcast(coll->buf, n, MPI_BYTE, coll->root, s->comm, req);
        break;
    case ZLI_COLL_BARRIER:
        rc = MPI_Ibarrier(s->comm, req);
        break;
    case ZLI_COLL_ALLGATHER_COALESCED:
        rc = start_coalesced(s, c->size, coll, p);
        break;
    }
    if (rc != MPI_SUCCESS) {
        /* runs already started may still write into p, which is then left */
        if (p->nruns == 0) pending_free(p);
        return zli_mpi_fail(rc, names[coll->kind], c->rank);
    }
    *pending = p;
    return ZL_OK;
}

static zl_status mpi_test(zl_comm *c, void *pending, bool *done)
{
    mpi_state *s = c->state;
    mpi_pending *p = pending;
    if (p->shm) {
        uint64_t before = zli_shm_completed();
        zl_status st = zli_shm_test(s->shm, p->shm, done);
        if (zli_shm_completed() != before) c->progress++;
        if (!st && *done) free(p);
        return st;
    }
    /* The shared-memory queue moves on too: a peer may wait there on this rank. */
    zl_status st = s->shm ? zli_shm_test(s->shm, NULL, NULL) : ZL_OK;
    if (st) return st;
    int flag = 0;
    int rc = p->runs ? MPI_Testall(p->nruns, p->runs, &flag, MPI_STATUSES_IGNORE)
                     : MPI_Test(&p->req, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
        *done = false;
        return zli_mpi_fail(rc, "MPI_Test", c->rank);
    }
    *done = flag != 0;
    if (flag && p->runs) unpack(p, c->size);
    if (flag) pending_free(p);
    return ZL_OK;
}

static int mpi_lost(zl_comm *c, char *why, size_t size)
{
    (void)c;
    return zli_peers_lost(why, size);
}

static void mpi_stopped(zl_comm *c, char *out, size_t size)
{
    (void)c;
    zli_peers_stopped(out, size);
}

const zli_comm_backend zli_comm_mpi = {
    .name = "mpi",
    .device = ZL_DEVICE_CPU,
    .open = mpi_open,
    .close = mpi_close,
    .start = mpi_start,
    .test = mpi_test,
    .lost = mpi_lost,
    .stopped = mpi_stopped,
};
