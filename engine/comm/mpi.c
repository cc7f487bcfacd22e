/* The "mpi" backend: collectives as MPI's non-blocking ones on a duplicate of
 * MPI_COMM_WORLD, polled by comm.c; with every rank on one machine the
 * reductions and gathers go through shared memory instead (mpi_shm.c). MPI is initialised here unless the host did,
 * and finalised with the last communicator only in that case (then a rank
 * started by zlua's launcher leaves it a receipt, mpi_receipt.c). It also names
 * a rank whose process ended, to the waiting ranks and on SIGTERM. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <mpi.h>
#include "mpi_receipt.h"
#include "mpi_shm.h"

typedef struct mpi_state {
    MPI_Comm comm;
    zli_shm *shm;                /* NULL: every collective through MPI */
} mpi_state;

/* A started collective: MPI's request, or the shared-memory path's. */
typedef struct mpi_pending {
    MPI_Request req;
    zli_shm_op *shm;
} mpi_pending;

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

/* ---- lost ranks ----
 * When a rank's process dies, Open MPI's shared-memory transport reports
 * nothing: the others wait for it until the timeout, unless mpirun first stops
 * them with SIGTERM (it does a second after it notices), which says nothing
 * on their side. So at open the ranks exchange where they run (the kernel's
 * boot id and the pid namespace) and their pid with its start time; a rank can
 * then tell that a peer on the same machine has ended, both while it waits
 * (`lost`, polled by comm.c) and when SIGTERM comes. Peers elsewhere are found
 * out only by the timeout. */

typedef struct peer_card {
    char place[120];             /* boot id and pid namespace; "" when unknown */
    int64_t pid;
    uint64_t start;              /* clock ticks after boot (/proc/<pid>/stat field 22) */
} peer_card;

/* The other ranks on this machine, built by the first open and dropped with the
 * last close. The SIGTERM handler reads them, so they are set before it is
 * installed and cleared after it is removed. */
static int g_self_rank;
static volatile int g_nlocal;
static int *g_local_rank;
static pid_t *g_local_pid;
static uint64_t *g_local_start;
static bool g_on_sigterm;        /* our handler is installed */

/* Reads /proc/<pid>/stat (pid 0: this process): its state letter and start
 * time. System calls only, no stdio: the SIGTERM handler calls it. Returns 0,
 * or -1 with errno. */
static int read_stat(pid_t pid, char *state, uint64_t *start)
{
    char path[40] = "/proc/self/stat", buf[1024];
    if (pid > 0) {
        char digits[24];
        int n = 0;
        for (uint64_t v = (uint64_t)pid; v; v /= 10) digits[n++] = (char)('0' + v % 10);
        char *p = path + 6;
        while (n) *p++ = digits[--n];
        memcpy(p, "/stat", 6);
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t len = read(fd, buf, sizeof buf - 1);
    int err = errno;
    close(fd);
    if (len <= 0) {
        errno = len < 0 ? err : EIO;
        return -1;
    }
    buf[len] = '\0';
    /* The name (field 2) may hold anything, so fields count from its last ')'. */
    char *p = NULL;
    for (char *q = buf; *q; q++)
        if (*q == ')') p = q;
    if (!p || p[1] != ' ') return errno = EIO, -1;
    p += 2;
    *state = *p;
    for (int field = 3; field < 22; field++) {
        while (*p && *p != ' ') p++;
        if (*p) p++;
    }
    uint64_t v = 0;
    for (; *p >= '0' && *p <= '9'; p++) v = v * 10 + (uint64_t)(*p - '0');
    *start = v;
    return 0;
}

/* Whether the process `pid` that started at `start` has ended: it is gone, a
 * zombie, or its pid now belongs to a newer process. */
static bool process_ended(pid_t pid, uint64_t start)
{
    if (kill(pid, 0) < 0 && errno == ESRCH) return true;
    char state;
    uint64_t now_start;
    if (read_stat(pid, &state, &now_start) < 0) return errno == ENOENT || errno == ESRCH;
    return state == 'Z' || state == 'X' || now_start != start;
}

/* The first peer on this machine whose process ended; -1 when none. */
static int first_ended(void)
{
    int n = g_nlocal;
    for (int k = 0; k < n; k++)
        if (process_ended(g_local_pid[k], g_local_start[k])) return k;
    return -1;
}

static int mpi_lost(zl_comm *c, char *why, size_t size)
{
    (void)c;
    int k = first_ended();
    if (k < 0) return -1;
    snprintf(why, size, "process %lld ended", (long long)g_local_pid[k]);
    return g_local_rank[k];
}

static char *put_str(char *p, const char *end, const char *s)
{
    while (*s && p < end) *p++ = *s++;
    return p;
}

static char *put_int(char *p, const char *end, long long v)
{
    char digits[24];
    int n = 0;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do digits[n++] = (char)('0' + u % 10); while (u /= 10);
    if (v < 0 && p < end) *p++ = '-';
    while (n && p < end) *p++ = digits[--n];
    return p;
}

/* mpirun stops every rank with SIGTERM once one has died. When peers on this
 * machine have ended, name them all (a rank that saw the loss first may have
 * stopped already) and exit with status 1; otherwise SIGTERM does what it would
 * have done (SA_RESETHAND restored the default). Async-signal-safe: system
 * calls and the tables above only. */
static void on_sigterm(int sig)
{
    int saved = errno, n = g_nlocal, lost = 0;
    char msg[1024], *p = msg, *end = msg + sizeof msg - 16;
    p = put_str(p, end, "zlua: rank ");
    p = put_int(p, end, g_self_rank);
    p = put_str(p, end, ": lost");
    for (int k = 0; k < n; k++) {
        if (!process_ended(g_local_pid[k], g_local_start[k])) continue;
        p = put_str(p, end, lost++ ? ", rank " : " rank ");
        p = put_int(p, end, g_local_rank[k]);
        p = put_str(p, end, " (process ");
        p = put_int(p, end, g_local_pid[k]);
        p = put_str(p, end, " ended)");
    }
    if (lost) {
        const char *what = zli_comm_waiting;
        if (what) p = put_str(put_str(p, end, " during "), end, what);
        p = put_str(p, msg + sizeof msg, "; stopping\n");
        ssize_t unused = write(STDERR_FILENO, msg, (size_t)(p - msg));
        (void)unused;
        _exit(1);
    }
    errno = saved;
    raise(sig);
}

/* This process's card: "" as its place when /proc cannot tell. */
static void own_card(peer_card *card)
{
    memset(card, 0, sizeof *card);
    card->pid = (int64_t)getpid();
    char state, ns[64];
    uint64_t start;
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    char boot[64] = "";
    bool ok = f && fgets(boot, sizeof boot, f);
    if (f) fclose(f);
    ssize_t n = readlink("/proc/self/ns/pid", ns, sizeof ns - 1);
    if (!ok || n <= 0 || read_stat(0, &state, &start) < 0) return;
    ns[n] = '\0';
    boot[strcspn(boot, "\n")] = '\0';
    snprintf(card->place, sizeof card->place, "%s %s", boot, ns);
    card->start = start;
}

static void drop_peers(void)
{
    if (g_on_sigterm) {
        struct sigaction cur;
        if (sigaction(SIGTERM, NULL, &cur) == 0 && cur.sa_handler == on_sigterm) signal(SIGTERM, SIG_DFL);
        g_on_sigterm = false;
    }
    g_nlocal = 0;
    free(g_local_rank);
    free(g_local_pid);
    free(g_local_start);
    g_local_rank = NULL;
    g_local_pid = NULL;
    g_local_start = NULL;
}

/* Collective: every open exchanges the cards (so the ranks' calls match), the
 * first one keeps the peers on this machine and takes SIGTERM unless the host
 * handles it itself. */
static zl_status meet_peers(MPI_Comm comm, int rank, int size)
{
    peer_card mine, *all = malloc((size_t)size * sizeof *all);
    if (!all) return zl_error(ZL_ENOMEM, "comm mpi: out of memory");
    own_card(&mine);
    int rc = MPI_Allgather(&mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine, MPI_BYTE, comm);
    if (rc != MPI_SUCCESS) {
        free(all);
        return zli_mpi_fail(rc, "comm mpi: MPI_Allgather", rank);
    }
    if (g_local_rank || !mine.place[0]) {
        free(all);
        return ZL_OK;
    }
    int n = 0;
    for (int r = 0; r < size; r++) n += r != rank && strcmp(all[r].place, mine.place) == 0;
    g_local_rank = malloc((size_t)(n ? n : 1) * sizeof *g_local_rank);
    g_local_pid = malloc((size_t)(n ? n : 1) * sizeof *g_local_pid);
    g_local_start = malloc((size_t)(n ? n : 1) * sizeof *g_local_start);
    if (!g_local_rank || !g_local_pid || !g_local_start) {
        free(all);
        drop_peers();
        return zl_error(ZL_ENOMEM, "comm mpi: out of memory");
    }
    int k = 0;
    for (int r = 0; r < size; r++)
        if (r != rank && strcmp(all[r].place, mine.place) == 0) {
            g_local_rank[k] = r;
            g_local_pid[k] = (pid_t)all[r].pid;
            g_local_start[k] = all[r].start;
            k++;
        }
    free(all);
    g_self_rank = rank;
    g_nlocal = n;
    struct sigaction old;
    if (n > 0 && sigaction(SIGTERM, NULL, &old) == 0 && !(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_DFL) {
        struct sigaction act = {.sa_handler = on_sigterm, .sa_flags = SA_RESETHAND | SA_RESTART};
        sigemptyset(&act.sa_mask);
        g_on_sigterm = sigaction(SIGTERM, &act, NULL) == 0;
    }
    return ZL_OK;
}

/* A process that ends with a communicator still open never finalises MPI,
 * and mpirun then reports only that the rank "exited improperly". Say why on
 * the rank's own stderr. */
static void report_unclosed(void)
{
    if (g_we_initialised && g_open_count > 0)
        fprintf(stderr, "zlua: rank %d is exiting with %d communicator(s) still open (not closed, or a collective "
                "still in flight): MPI is not finalised\n", g_self_rank, g_open_count);
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
    zl_status st = meet_peers(s->comm, c->rank, c->size);
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
        if (--g_open_count == 0) drop_peers();
        g_we_initialised = false;
        return;
    }
    zli_shm_close(s->shm, true);
    MPI_Comm_free(&s->comm);
    free(s);
    if (--g_open_count > 0) return;
    drop_peers();
    if (g_we_initialised) {
        if (MPI_Finalize() == MPI_SUCCESS) zli_mpi_receipt_arm(g_self_rank);
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
    if (coll->count > INT_MAX)
        return zl_error(ZL_EINVAL, "%s on rank %d: %zu elements exceed MPI's int count; split the buffer",
                        names[coll->kind], c->rank, coll->count);
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
    }
    if (rc != MPI_SUCCESS) {
        free(p);
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
        zl_status st = zli_shm_test(s->shm, p->shm, done);
        if (!st && *done) free(p);
        return st;
    }
    /* The shared-memory queue moves on too: a peer may wait there on this rank. */
    zl_status st = s->shm ? zli_shm_test(s->shm, NULL, NULL) : ZL_OK;
    if (st) return st;
    int flag = 0;
    int rc = MPI_Test(&p->req, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
        *done = false;
        return zli_mpi_fail(rc, "MPI_Test", c->rank);
    }
    *done = flag != 0;
    if (flag) free(p);
    return ZL_OK;
}

const zli_comm_backend zli_comm_mpi = {
    .name = "mpi",
    .device = ZL_DEVICE_CPU,
    .open = mpi_open,
    .close = mpi_close,
    .start = mpi_start,
    .test = mpi_test,
    .lost = mpi_lost,
};
