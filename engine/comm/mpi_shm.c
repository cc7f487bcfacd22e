/* The mpi backend's path between ranks on one machine (mpi_shm.h): each rank's
 * staging buffer in an MPI-3 shared window every rank maps, a few counters per
 * rank in a second one, and the queue of started collectives they pace. */
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "mpi_shm.h"

/* Why: on one host Open MPI's reduce-scatter and all-reduce move a 64 MB
 * gradient bucket through its transport's small fragments; here a collective
 * costs one copy of the input into the rank's staging buffer and one pass
 * reading the peers' buffers (at the GPT anchor, 2 ranks, the wait in
 * collectives halved: scripts/bench/zero.lua --compare).
 *
 * Collective n (counted from 1 in start order, the same on every rank) passes
 * three marks, each a counter of the rank's own set to n by a release store
 * and read by the peers with acquire loads:
 *   arrived n  its input is in its staging buffer;
 *   reduced n  (all-reduce only) its share of the result is there too;
 *   left n     it has read all it needs from the peers' buffers.
 * Collective n is complete once every rank has left it; only then does n + 1
 * write into a staging buffer, so one buffer per rank serves every collective
 * and the marks never need resetting.
 *
 * Growing a staging buffer and closing are collective MPI calls, which block
 * until every rank makes them. So that a rank never blocks there while a peer
 * waits for it to move another path on, the ranks first meet through a mark
 * (grow: the collective's number; close: 1), moving every other path on while
 * they wait. */

enum { MARK_ARRIVED, MARK_REDUCED, MARK_LEFT, MARK_GROW, MARK_CLOSE, MARKS };
enum { STAGE_QUEUED, STAGE_ARRIVED, STAGE_REDUCED, STAGE_LEFT, STAGE_DONE };

/* A mark per 64-byte line, so a rank polling a peer's mark does not take the
 * line away from the peer writing its other marks. */
#define LINE_WORDS 8
/* Folds run over blocks this long, so that with more than two ranks the
 * partial result stays in cache between the ranks' turns. */
#define FOLD_BLOCK 8192
/* Bytes of each rank's staging buffer from the start. */
#define INITIAL_STAGING ((size_t)1 << 20)

/* A collective, or one run of a coalesced all-gather. The runs of one are
 * allocated together (block, of which the handle given out is the last). */
struct zli_shm_op {
    zli_coll coll;
    uint64_t seq;
    int stage;
    zli_shm_op *next;
    zli_shm_op *block;
    bool last;                     /* of its block */
};

struct zli_shm {
    MPI_Comm comm;                 /* every rank, all on this machine; rank order as the backend's */
    int rank, size;
    MPI_Win marks_win, data_win;
    _Atomic uint64_t **marks;      /* [size] each rank's MARKS lines */
    char **seg;                    /* [size] each rank's staging buffer, mapped here */
    size_t cap;                    /* bytes of each staging buffer */
    uint64_t started;
    zli_shm_op *head, *tail;       /* started and not complete, in start order */
    bool meeting;                  /* in meet(): the other paths must not move this one */
    struct zli_shm *next_open;
};

/* Every open path of this process. Each moves on whenever any collective is
 * polled, as MPI's progress engine moves all of its own: a rank waiting on
 * one communicator must not hold up peers waiting for it on another (a
 * collective abandoned after a timeout still completes once the others join). */
static zli_shm *g_open;
/* Collectives (or runs of one) completed by this process, on every path. */
static uint64_t g_completed;

static _Atomic uint64_t *mark(const zli_shm *s, int rank, int m) { return s->marks[rank] + m * LINE_WORDS; }

static void set_mark(zli_shm *s, int m, uint64_t seq)
{
    atomic_store_explicit(mark(s, s->rank, m), seq, memory_order_release);
}

static bool all_marked(const zli_shm *s, int m, uint64_t seq)
{
    for (int q = 0; q < s->size; q++)
        if (atomic_load_explicit(mark(s, q, m), memory_order_acquire) < seq) return false;
    return true;
}

static zl_status advance(zli_shm *s);

/* Sets this rank's mark m to v and waits until every rank's is, moving the
 * other paths on meanwhile. Gives up (false) after `limit_s` seconds, or
 * never when limit_s is 0. */
static bool meet(zli_shm *s, int m, uint64_t v, double limit_s)
{
    set_mark(s, m, v);
    s->meeting = true;
    double until = MPI_Wtime() + limit_s;
    while (!all_marked(s, m, v)) {
        for (zli_shm *o = g_open; o; o = o->next_open)
            if (!o->meeting) advance(o);
        if (limit_s > 0 && MPI_Wtime() > until) break;
        sched_yield();
    }
    s->meeting = false;
    return all_marked(s, m, v);
}

/* A shared window of `bytes` per rank; seg[q] receives rank q's part as mapped here. */
static zl_status map_window(zli_shm *s, size_t bytes, MPI_Win *win, void **seg)
{
    MPI_Info info;
    MPI_Info_create(&info);
    /* Each rank's part on its own pages, placed near the rank that writes it. */
    MPI_Info_set(info, "alloc_shared_noncontig", "true");
    void *base = NULL;
    int rc = MPI_Win_allocate_shared((MPI_Aint)bytes, 1, info, s->comm, &base, win);
    MPI_Info_free(&info);
    if (rc != MPI_SUCCESS) return zli_mpi_fail(rc, "comm mpi: MPI_Win_allocate_shared", s->rank);
    for (int q = 0; q < s->size; q++) {
        MPI_Aint sz;
        int unit;
        if ((rc = MPI_Win_shared_query(*win, q, &sz, &unit, &seg[q])) != MPI_SUCCESS) {
            MPI_Win_free(win);
            return zli_mpi_fail(rc, "comm mpi: MPI_Win_shared_query", s->rank);
        }
    }
    return ZL_OK;
}

zl_status zli_shm_open(MPI_Comm comm, zli_shm **out)
{
    *out = NULL;
    const char *env = getenv("ZLUA_COMM_SHM");
    if (env && strcmp(env, "0") == 0) return ZL_OK;
    int rank, size, local_size = 0;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    if (size < 2) return ZL_OK;
    /* key = rank keeps the backend's rank order. Every rank sees the same
     * answer: with ranks on several machines no machine holds them all. */
    MPI_Comm node;
    int rc = MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
    if (rc != MPI_SUCCESS) return zli_mpi_fail(rc, "comm mpi: MPI_Comm_split_type", rank);
    MPI_Comm_size(node, &local_size);
    if (local_size != size) {
        MPI_Comm_free(&node);
        return ZL_OK;
    }
    MPI_Comm_set_errhandler(node, MPI_ERRORS_RETURN);
    zli_shm *s = calloc(1, sizeof *s);
    if (s) {
        s->marks = calloc((size_t)size, sizeof *s->marks);
        s->seg = calloc((size_t)size, sizeof *s->seg);
    }
    if (!s || !s->marks || !s->seg) {
        if (s) free(s->marks), free(s->seg);
        free(s);
        MPI_Comm_free(&node);
        return zl_error(ZL_ENOMEM, "comm mpi: out of memory");
    }
    s->comm = node;
    s->rank = rank;
    s->size = size;
    zl_status st = map_window(s, MARKS * LINE_WORDS * sizeof(uint64_t), &s->marks_win, (void **)s->marks);
    if (st) {
        free(s->marks), free(s->seg), free(s);
        MPI_Comm_free(&node);
        return st;
    }
    /* Small collectives (a norm, a loss, a flag) never grow the staging
     * buffer, so they never block in a collective MPI call and a peer that
     * does not come is found by comm.c's timeout. */
    if ((st = map_window(s, INITIAL_STAGING, &s->data_win, (void **)s->seg))) {
        MPI_Win_free(&s->marks_win);
        free(s->marks), free(s->seg), free(s);
        MPI_Comm_free(&node);
        return st;
    }
    s->cap = INITIAL_STAGING;
    for (int m = 0; m < MARKS; m++) atomic_init(mark(s, rank, m), 0);
    /* No rank reads a peer's marks before the peer has zeroed them. */
    if ((rc = MPI_Barrier(node)) != MPI_SUCCESS) {
        zli_shm_close(s, false);
        return zli_mpi_fail(rc, "comm mpi: MPI_Barrier", rank);
    }
    s->next_open = g_open;
    g_open = s;
    *out = s;
    return ZL_OK;
}

void zli_shm_close(zli_shm *s, bool clean)
{
    if (!s) return;
    /* Freeing a window is collective: after a timeout the peers may never
     * come, and a peer that does not close within a minute is taken as gone. */
    if (clean && meet(s, MARK_CLOSE, 1, 60.0)) {
        MPI_Win_free(&s->data_win);
        MPI_Win_free(&s->marks_win);
        MPI_Comm_free(&s->comm);
    }
    for (zli_shm **at = &g_open; *at; at = &(*at)->next_open)
        if (*at == s) {
            *at = s->next_open;
            break;
        }
    while (s->head) {
        zli_shm_op *next = s->head->next;
        if (s->head->last) free(s->head->block);
        s->head = next;
    }
    free(s->marks);
    free(s->seg);
    free(s);
}

bool zli_shm_carries(const zli_coll *coll)
{
    return coll->kind == ZLI_COLL_ALLREDUCE || coll->kind == ZLI_COLL_REDUCE_SCATTER ||
           coll->kind == ZLI_COLL_ALLGATHER || coll->kind == ZLI_COLL_ALLGATHER_COALESCED;
}

/* First element of rank q's share of an n-element all-reduce. */
static size_t share_lo(size_t n, int q, int size) { return n / (size_t)size * (size_t)q + (n % (size_t)size) * (size_t)q / (size_t)size; }

/* Bytes of its staging buffer a rank needs for `c`. */
static size_t staging_bytes(const zli_coll *c, int size)
{
    switch (c->kind) {
    case ZLI_COLL_ALLREDUCE: return c->count * sizeof(float);
    case ZLI_COLL_REDUCE_SCATTER: return (size_t)size * c->count * sizeof(float);
    case ZLI_COLL_ALLGATHER_COALESCED: {
        size_t n = 0;
        for (int i = 0; i < c->parts; i++) n += c->counts[i];
        return n;
    }
    default: return c->count;
    }
}

/* A staging buffer of at least `bytes` on every rank. Called by every rank at
 * the same collective, the previous one complete everywhere, so the old
 * window is read by nobody. Growing is collective and blocks until the peers
 * come (no timeout: MPI has no non-blocking window allocation); it happens
 * at a model's first large collectives only. */
static zl_status reserve(zli_shm *s, size_t bytes, uint64_t seq)
{
    if (bytes <= s->cap) return ZL_OK;
    meet(s, MARK_GROW, seq, 0);
    const size_t mib = (size_t)1 << 20;
    size_t cap = (bytes + mib - 1) / mib * mib;
    if (s->cap) MPI_Win_free(&s->data_win);
    s->cap = 0;
    zl_status st = map_window(s, cap, &s->data_win, (void **)s->seg);
    if (st) return st;
    s->cap = cap;
    return ZL_OK;
}

/* Copies the input into this rank's staging buffer (all but the part this
 * rank reads from its own input) and marks it arrived. */
static zl_status arrive(zli_shm *s, zli_shm_op *op)
{
    const zli_coll *c = &op->coll;
    zl_status st = reserve(s, staging_bytes(c, s->size), op->seq);
    if (st) return st;
    char *mine = s->seg[s->rank];
    size_t me = (size_t)s->rank, P = (size_t)s->size;
    if (c->kind == ZLI_COLL_ALLREDUCE) {
        const float *buf = c->buf;
        size_t lo = share_lo(c->count, s->rank, s->size), hi = share_lo(c->count, s->rank + 1, s->size);
        memcpy(mine, buf, lo * sizeof(float));
        memcpy(mine + hi * sizeof(float), buf + hi, (c->count - hi) * sizeof(float));
    } else if (c->kind == ZLI_COLL_REDUCE_SCATTER) {
        const float *send = c->send;
        memcpy(mine, send, me * c->count * sizeof(float));
        memcpy(mine + (me + 1) * c->count * sizeof(float), send + (me + 1) * c->count,
               (P - me - 1) * c->count * sizeof(float));
    } else if (c->kind == ZLI_COLL_ALLGATHER_COALESCED) {
        /* the pieces one after another */
        for (int i = 0; i < c->parts; i++) {
            memcpy(mine, c->sends[i], c->counts[i]);
            mine += c->counts[i];
        }
    } else {
        memcpy(mine, c->send, c->count);
    }
    set_mark(s, MARK_ARRIVED, op->seq);
    op->stage = STAGE_ARRIVED;
    return ZL_OK;
}

/* out[i] = a[i] op b[i]; out may be a. */
static void combine(zl_comm_op op, size_t n, const float *a, const float *b, float *out)
{
    switch (op) {
    case ZL_COMM_MAX:
        for (size_t i = 0; i < n; i++) out[i] = b[i] > a[i] ? b[i] : a[i];
        break;
    case ZL_COMM_MIN:
        for (size_t i = 0; i < n; i++) out[i] = b[i] < a[i] ? b[i] : a[i];
        break;
    case ZL_COMM_SUM:
    case ZL_COMM_AVG:
        for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
        break;
    }
}

/* out[0:n] = src[0] op src[1] op ... op src[size-1], left to right. */
static void fold(const zli_shm *s, zl_comm_op op, const float *const *src, size_t n, float *out)
{
    for (size_t b = 0; b < n; b += FOLD_BLOCK) {
        size_t len = n - b < FOLD_BLOCK ? n - b : FOLD_BLOCK;
        combine(op, len, src[0] + b, src[1] + b, out + b);
        for (int q = 2; q < s->size; q++) combine(op, len, out + b, src[q] + b, out + b);
    }
}

/* Every rank has arrived: reduce this rank's share, or copy the peers' inputs out. */
static zl_status work(zli_shm *s, zli_shm_op *op)
{
    const zli_coll *c = &op->coll;
    int me = s->rank, P = s->size;
    const float *src[P];
    if (c->kind == ZLI_COLL_ALLREDUCE) {
        size_t lo = share_lo(c->count, me, P), hi = share_lo(c->count, me + 1, P);
        for (int q = 0; q < P; q++) src[q] = (q == me ? (const float *)c->buf : (const float *)s->seg[q]) + lo;
        fold(s, c->op, src, hi - lo, (float *)s->seg[me] + lo);
        set_mark(s, MARK_REDUCED, op->seq);
        op->stage = STAGE_REDUCED;
        return ZL_OK;
    }
    if (c->kind == ZLI_COLL_REDUCE_SCATTER) {
        for (int q = 0; q < P; q++)
            src[q] = (q == me ? (const float *)c->send : (const float *)s->seg[q]) + (size_t)me * c->count;
        fold(s, c->op, src, c->count, c->recv);
    } else if (c->kind == ZLI_COLL_ALLGATHER_COALESCED) {
        /* rank q's pieces straight into their places in the outputs */
        for (int q = 0; q < P; q++) {
            const char *from = s->seg[q];
            for (int i = 0; i < c->parts; i++) {
                char *to = (char *)c->recvs[i] + (size_t)q * c->counts[i];
                if (q != me) memcpy(to, from, c->counts[i]);
                else if (to != c->sends[i]) memmove(to, c->sends[i], c->counts[i]);
                from += c->counts[i];
            }
        }
    } else {
        for (int q = 0; q < P; q++) {
            char *to = (char *)c->recv + (size_t)q * c->count;
            if (q != me) memcpy(to, s->seg[q], c->count);
            else if (to != c->send) memmove(to, c->send, c->count);
        }
    }
    set_mark(s, MARK_LEFT, op->seq);
    op->stage = STAGE_LEFT;
    return ZL_OK;
}

/* All-reduce, every share reduced: copy them all into the buffer. */
static void collect(zli_shm *s, zli_shm_op *op)
{
    const zli_coll *c = &op->coll;
    for (int q = 0; q < s->size; q++) {
        size_t lo = share_lo(c->count, q, s->size), hi = share_lo(c->count, q + 1, s->size);
        memcpy((float *)c->buf + lo, (const float *)s->seg[q] + lo, (hi - lo) * sizeof(float));
    }
    set_mark(s, MARK_LEFT, op->seq);
    op->stage = STAGE_LEFT;
}

/* Moves the queue on until its head waits for a peer. */
static zl_status advance(zli_shm *s)
{
    while (s->head) {
        zli_shm_op *op = s->head;
        zl_status st;
        if (op->stage == STAGE_QUEUED && (st = arrive(s, op))) return st;
        if (op->stage == STAGE_ARRIVED) {
            if (!all_marked(s, MARK_ARRIVED, op->seq)) return ZL_OK;
            if ((st = work(s, op))) return st;
        }
        if (op->stage == STAGE_REDUCED) {
            if (!all_marked(s, MARK_REDUCED, op->seq)) return ZL_OK;
            collect(s, op);
        }
        if (!all_marked(s, MARK_LEFT, op->seq)) return ZL_OK;
        op->stage = STAGE_DONE;
        g_completed++;
        s->head = op->next;
        if (!s->head) s->tail = NULL;
    }
    return ZL_OK;
}

/* A coalesced all-gather runs as consecutive collectives over runs of its
 * pieces of about this many bytes: each run is still in cache when the peers
 * copy it out, as with separate small gathers, where one staging of a whole
 * bucket would go through memory (294 pieces of 32 KiB on 2 ranks: 7.3 ms as
 * one run, 5.4 ms as separate gathers). */
#define RUN_BYTES ((size_t)256 << 10)

/* The end of the run that starts at piece i: at most RUN_BYTES (a larger
 * piece alone), cut alike on every rank. */
static int run_end(const zli_coll *coll, int i)
{
    size_t bytes = coll->counts[i];
    int j = i + 1;
    while (j < coll->parts && bytes + coll->counts[j] <= RUN_BYTES) bytes += coll->counts[j++];
    return j;
}

zl_status zli_shm_start(zli_shm *s, const zli_coll *coll, zli_shm_op **out)
{
    bool coalesced = coll->kind == ZLI_COLL_ALLGATHER_COALESCED;
    int n = 1;
    if (coalesced)
        for (int i = run_end(coll, 0); i < coll->parts; i = run_end(coll, i)) n++;
    zli_shm_op *block = calloc((size_t)n, sizeof *block);
    if (!block) return zl_error(ZL_ENOMEM, "comm mpi: out of memory");
    for (int r = 0, i = 0; r < n; r++) {
        zli_shm_op *op = &block[r];
        op->coll = *coll;
        if (coalesced) {
            int end = run_end(coll, i);
            op->coll.parts = end - i;
            op->coll.sends = coll->sends + i;
            op->coll.recvs = coll->recvs + i;
            op->coll.counts = coll->counts + i;
            i = end;
        }
        op->seq = ++s->started;
        op->stage = STAGE_QUEUED;
        op->block = block;
        op->last = r == n - 1;
        if (s->tail) s->tail->next = op;
        else s->head = op;
        s->tail = op;
    }
    *out = &block[n - 1];
    return advance(s);
}

uint64_t zli_shm_completed(void) { return g_completed; }

zl_status zli_shm_test(zli_shm *s, zli_shm_op *op, bool *done)
{
    zl_status st = ZL_OK;
    for (zli_shm *o = g_open; o && !st; o = o->next_open)
        if (!o->meeting) st = advance(o);
    if (st || !op) return st;
    *done = op->stage == STAGE_DONE;
    if (*done) {
        free(op->block);
    } else {
        /* Drives MPI's progress engine for this rank's MPI collectives, which
         * a peer may be waiting on while this rank waits here. */
        int flag;
        MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, s->comm, &flag, MPI_STATUS_IGNORE);
    }
    return ZL_OK;
}
