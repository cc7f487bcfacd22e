/* The "mpi" backend: collectives as MPI's non-blocking ones on a duplicate of
 * MPI_COMM_WORLD, polled by comm.c. MPI is initialised here unless the host did,
 * and finalised with the last communicator only in that case. */
#include <limits.h>
#include <stdlib.h>
#include <mpi.h>
#include "backend.h"

typedef struct mpi_state {
    MPI_Comm comm;
} mpi_state;

/* How many open communicators use MPI, and whether the first one initialised it. */
static int g_open_count;
static bool g_we_initialised;

static zl_status mpi_fail(int rc, const char *what, int rank)
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

static zl_status mpi_open(zl_comm *c)
{
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (finalized) return zl_error(ZL_ESTATE, "comm mpi: MPI was already finalised and cannot start again");
    if (!inited) {
        int provided = 0;
        int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
        if (rc != MPI_SUCCESS) return mpi_fail(rc, "comm mpi: MPI_Init_thread", -1);
        g_we_initialised = true;
    }
    mpi_state *s = malloc(sizeof *s);
    if (!s) return zl_error(ZL_ENOMEM, "comm mpi: out of memory");
    /* Errors come back as codes, so a failure is reported instead of aborting the job. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, &s->comm);
    if (rc != MPI_SUCCESS) {
        free(s);
        return mpi_fail(rc, "comm mpi: MPI_Comm_dup", -1);
    }
    MPI_Comm_set_errhandler(s->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(s->comm, &c->rank);
    MPI_Comm_size(s->comm, &c->size);
    c->local_rank = local_rank_of(s->comm, c->rank);
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
        free(s);
        g_open_count--;
        g_we_initialised = false;
        return;
    }
    MPI_Comm_free(&s->comm);
    free(s);
    if (--g_open_count == 0 && g_we_initialised) {
        MPI_Finalize();
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

static zl_status mpi_start(zl_comm *c, const zli_coll *coll, void **pending)
{
    static const char *names[] = {"MPI_Iallreduce", "MPI_Ireduce_scatter_block", "MPI_Iallgather",
                                  "MPI_Ibcast", "MPI_Ibarrier"};
    mpi_state *s = c->state;
    if (coll->count > INT_MAX)
        return zl_error(ZL_EINVAL, "%s on rank %d: %zu elements exceed MPI's int count; split the buffer",
                        names[coll->kind], c->rank, coll->count);
    MPI_Request *req = malloc(sizeof *req);
    if (!req) return zl_error(ZL_ENOMEM, "comm mpi: out of memory");
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
    }
    if (rc != MPI_SUCCESS) {
        free(req);
        return mpi_fail(rc, names[coll->kind], c->rank);
    }
    *pending = req;
    return ZL_OK;
}

static zl_status mpi_test(zl_comm *c, void *pending, bool *done)
{
    MPI_Request *req = pending;
    int flag = 0;
    int rc = MPI_Test(req, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
        *done = false;
        return mpi_fail(rc, "MPI_Test", c->rank);
    }
    *done = flag != 0;
    if (flag) free(req);
    return ZL_OK;
}

const zli_comm_backend zli_comm_mpi = {
    .name = "mpi",
    .open = mpi_open,
    .close = mpi_close,
    .start = mpi_start,
    .test = mpi_test,
};
