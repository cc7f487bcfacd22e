/* The libaio engine behind zlua/aio.h: intra_op_parallelism worker threads,
 * each with its own io_context and request queue, files opened with O_DIRECT
 * (buffered where refused), and aligned bounce blocks for what cannot go direct. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <libaio.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "../core/tensor_impl.h"
#include "../core/memory_impl.h"

/* O_DIRECT's unit: file offsets, lengths and memory addresses are multiples of it. */
#define AIO_ALIGN 4096
#define AIO_MAX_QUEUE_DEPTH 65536      /* Linux's default fs.aio-max-nr */
#define AIO_MAX_THREADS 1024
#define AIO_MAX_BLOCK ((int64_t)1 << 30)

/* Design: a request (one tensor, one file range) is cut into one contiguous
 * share per worker, so thread i always moves the i-th share of every request,
 * in the order they were started. A worker moves its shares in block_size
 * pieces, at most queue_depth of them in flight in its io_context, the next
 * share's pieces submitted as soon as the last of the current one's are (a
 * queue that drained at the end of each request would leave the disk idle
 * between requests, and a small request could never fill it). The
 * request's bytes are its tensor's, rounded up to a whole AIO_ALIGN block
 * (zeros on write); a piece goes straight between the tensor and the file when
 * the memory is aligned and the piece lies within the tensor, otherwise
 * through a bounce block of the worker's. The file is opened on the caller's
 * thread and closed by the worker that finishes the last share. */

typedef struct aio_share {
    zl_aio_request *r;
    int64_t begin, end;           /* bytes of the rounded request, [begin, end) */
    struct aio_share *next;       /* in its worker's queue, then in its list of shares moving */
    int64_t pos;                  /* the worker's: the next byte to submit */
    int inflight;                 /* the worker's: pieces submitted and not yet reaped */
} aio_share;

struct zl_aio_request {
    zl_aio *a;
    zl_tensor *t;                 /* retained until waited on */
    char *path;
    int fd;
    bool write, direct;
    char *data;
    int64_t offset;               /* in the file */
    int64_t len;                  /* the tensor's bytes */
    atomic_bool stop;             /* a share failed: the others stop submitting */
    /* guarded by a->mu */
    int pending;                  /* shares not finished */
    bool done;
    zl_status status;             /* the first failure */
    char msg[640];
    aio_share shares[];
};

typedef struct aio_slot {
    struct iocb cb;               /* first, so an event's iocb pointer is its slot */
    char *bounce;                 /* block_size bytes, allocated on first need */
    aio_share *s;                 /* the share the piece belongs to */
    int64_t pos, len;             /* the piece: bytes [pos, pos + len) of the request */
    bool bounced;
} aio_slot;

typedef struct aio_worker {
    zl_aio *a;
    pthread_t thread;
    bool running;
    io_context_t ctx;
    aio_slot *slots;              /* queue_depth of each below */
    aio_slot **free_slots;
    int nfree;
    struct iocb **batch;
    struct io_event *events;
    aio_share *head, *tail;       /* guarded by a->mu */
} aio_worker;

struct zl_aio {
    zl_aio_config cfg;
    zl_context *ctx;              /* the opener's: bounce blocks are charged to it (held) */
    bool force_buffered;          /* ZLUA_AIO_BUFFERED=1 */
    pthread_mutex_t mu;
    pthread_cond_t work;          /* a share was queued, or closing */
    pthread_cond_t done;          /* a request completed */
    int refs;                     /* the handle, plus one per request not yet waited on */
    bool closing;
    bool warned;
    atomic_bool direct;
    int nworkers;
    aio_worker *workers;
    /* guarded by mu: requests queued or moving, since when, and the seconds
     * with at least one (zl_aio_busy_seconds) */
    int busy;
    double busy_since, busy_seconds;
};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

static const char *errstr(int err, char *buf, size_t n) { return strerror_r(err, buf, n); }

const char *zl_aio_unavailable(void) { return NULL; }

/* ---- request failures (any thread) ---- */

static void fail(zl_aio_request *r, zl_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(zl_aio_request *r, zl_status st, const char *fmt, ...)
{
    char buf[sizeof r->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    atomic_store(&r->stop, true);
    pthread_mutex_lock(&r->a->mu);
    if (!r->status) {
        r->status = st;
        memcpy(r->msg, buf, sizeof buf);
    }
    pthread_mutex_unlock(&r->a->mu);
}

static void fail_errno(zl_aio_request *r, int err, int64_t pos)
{
    char e[128];
    fail(r, ZL_EIO, "%s: %s failed at offset %lld: %s", r->path, r->write ? "write" : "read",
         (long long)(r->offset + pos), errstr(err, e, sizeof e));
}

/* The kernel stops a write short when the device fills up; writing the
 * rest synchronously brings out the errno (ENOSPC, EDQUOT, EFBIG, ...). */
static void fail_short_write(zl_aio_request *r, const aio_slot *sl, long done)
{
    const char *src = sl->bounced ? sl->bounce : r->data + sl->pos;
    ssize_t k = pwrite(r->fd, src + done, (size_t)(sl->len - done), r->offset + sl->pos + done);
    if (k < 0) {
        fail_errno(r, errno, sl->pos + done);
        return;
    }
    fail(r, ZL_EIO, "%s: wrote %ld of %lld bytes at offset %lld (the device may be full)", r->path, done,
         (long long)sl->len, (long long)(r->offset + sl->pos));
}

/* Counted from the file's size, since shares finish in any order. */
static void fail_short_read(zl_aio_request *r)
{
    struct stat st;
    int64_t got = 0;
    if (fstat(r->fd, &st) == 0) got = st.st_size - r->offset;
    got = got < 0 ? 0 : min64(got, r->len);
    fail(r, ZL_EIO, "%s: read %lld of %lld bytes at offset %lld (file too short)", r->path, (long long)got,
         (long long)r->len, (long long)r->offset);
}

/* ---- the buffered path: pread/pwrite, no alignment needed ---- */

static void run_buffered(zl_aio_request *r, const aio_share *s)
{
    static const char zeros[AIO_ALIGN];
    int64_t pos = s->begin;
    int64_t end = r->write ? s->end : min64(s->end, r->len);
    while (pos < end && !atomic_load(&r->stop)) {
        /* The write's rounding past the tensor is zeros. */
        bool tail = pos >= r->len;
        int64_t n = tail ? min64(end - pos, AIO_ALIGN) : min64(end, r->len) - pos;
        ssize_t k = r->write ? pwrite(r->fd, tail ? zeros : r->data + pos, (size_t)n, r->offset + pos)
                             : pread(r->fd, r->data + pos, (size_t)n, r->offset + pos);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) { fail_errno(r, errno, pos); return; }
        if (k == 0) {
            if (r->write) fail_errno(r, ENOSPC, pos);
            else fail_short_read(r);
            return;
        }
        pos += k;
    }
}

/* ---- the direct path: libaio ---- */

/* Submit w->batch[0..nb), pieces of r: all at once, or one io_submit each
 * with single_submit. Slots not submitted go back to the free list. */
static int submit(aio_worker *w, zl_aio_request *r, int nb)
{
    int done = 0;
    while (done < nb) {
        int k = w->a->cfg.single_submit ? 1 : nb - done;
        int rc = io_submit(w->ctx, k, w->batch + done);
        if (rc == -EINTR) continue;
        if (rc <= 0) {
            fail_errno(r, rc < 0 ? -rc : EAGAIN, ((aio_slot *)w->batch[done])->pos);
            break;
        }
        done += rc;
    }
    for (int i = done; i < nb; i++) w->free_slots[w->nfree++] = (aio_slot *)w->batch[i];
    return done;
}

/* The slots all come back; pieces that cannot be accounted for make their requests fail. */
static void reset_context(aio_worker *w, aio_share *moving)
{
    /* io_destroy waits for every piece still in flight: their memory is ours again. */
    io_destroy(w->ctx);
    w->ctx = 0;
    if (io_setup(w->a->cfg.queue_depth, &w->ctx) < 0) w->ctx = 0;
    w->nfree = 0;
    for (int i = 0; i < w->a->cfg.queue_depth; i++) w->free_slots[w->nfree++] = &w->slots[i];
    for (aio_share *s = moving; s; s = s->next) s->inflight = 0;
}

/* Reap at least min_nr completions; check each and copy bounced reads out. */
static void reap(aio_worker *w, aio_share *moving, int min_nr)
{
    int n;
    do n = io_getevents(w->ctx, min_nr, w->a->cfg.queue_depth, w->events, NULL);
    while (n == -EINTR);
    if (n < 0) {
        char e[128];
        for (aio_share *s = moving; s; s = s->next)
            if (s->inflight)
                fail(s->r, ZL_EIO, "%s: waiting for %s completions failed: %s", s->r->path,
                     s->r->write ? "write" : "read", errstr(-n, e, sizeof e));
        reset_context(w, moving);
        return;
    }
    for (int i = 0; i < n; i++) {
        aio_slot *sl = (aio_slot *)w->events[i].obj;
        zl_aio_request *r = sl->s->r;
        long res = (long)w->events[i].res;
        sl->s->inflight--;
        w->free_slots[w->nfree++] = sl;
        if (res < 0) { fail_errno(r, (int)-res, sl->pos); continue; }
        if (r->write) {
            if (res < sl->len) fail_short_write(r, sl, res);
            continue;
        }
        int64_t want = sl->pos < r->len ? min64(sl->len, r->len - sl->pos) : 0;
        if (res < want) { fail_short_read(r); continue; }
        if (sl->bounced && want) memcpy(r->data + sl->pos, sl->bounce, (size_t)want);
    }
}

/* Submit share s's next pieces, as many as free slots allow. A share whose
 * request failed (here or in another share) submits nothing more: its
 * position jumps to its end. */
static void fill(aio_worker *w, aio_share *s)
{
    const zl_aio_config *cfg = &w->a->cfg;
    zl_aio_request *r = s->r;
    const int64_t whole = r->len / AIO_ALIGN * AIO_ALIGN;   /* below it, aligned memory goes direct */
    const bool aligned = (uintptr_t)r->data % AIO_ALIGN == 0;
    if (!w->ctx) {
        fail(r, ZL_EIO, "%s: the engine's I/O context could not be recreated after an error", r->path);
        s->pos = s->end;
        return;
    }
    int nb = 0;
    while (s->pos < s->end && w->nfree > 0 && !atomic_load(&r->stop)) {
        int64_t pos = s->pos;
        aio_slot *sl = w->free_slots[--w->nfree];
        int64_t end = min64(pos + cfg->block_size, s->end);
        bool direct = aligned && pos < whole;
        if (direct) end = min64(end, whole);
        char *buf = r->data + pos;
        if (!direct) {
            /* On this thread the Lua binding's pressure handler collects nothing. */
            if (!sl->bounce) sl->bounce = zli_mem_alloc(w->a->ctx, (size_t)cfg->block_size, AIO_ALIGN, ZL_MEM_OTHER);
            if (!sl->bounce) {
                w->free_slots[w->nfree++] = sl;
                fail(r, ZL_ENOMEM, "%s: out of memory for a %lld-byte bounce block", r->path,
                     (long long)cfg->block_size);
                break;
            }
            buf = sl->bounce;
            if (r->write) {
                int64_t have = pos < r->len ? min64(end, r->len) - pos : 0;
                memcpy(buf, r->data + pos, (size_t)have);
                memset(buf + have, 0, (size_t)(end - pos - have));
            }
        }
        sl->s = s;
        sl->pos = pos;
        sl->len = end - pos;
        sl->bounced = !direct;
        if (r->write) io_prep_pwrite(&sl->cb, r->fd, buf, (size_t)sl->len, r->offset + pos);
        else io_prep_pread(&sl->cb, r->fd, buf, (size_t)sl->len, r->offset + pos);
        w->batch[nb++] = &sl->cb;
        s->pos = end;
    }
    s->inflight += submit(w, r, nb);
    if (atomic_load(&r->stop)) s->pos = s->end;
}

/* ---- workers ---- */

/* With a->mu held. */
static void complete(zl_aio_request *r)
{
    if (r->fd >= 0 && close(r->fd) != 0 && !r->status) {
        char e[128];
        r->status = ZL_EIO;
        snprintf(r->msg, sizeof r->msg, "%s: close failed: %s", r->path, errstr(errno, e, sizeof e));
    }
    r->fd = -1;
    r->done = true;
    pthread_cond_broadcast(&r->a->done);
}

/* With a->mu held: a share moved, its request complete with its last one. */
static void share_done(zl_aio *a, aio_share *s)
{
    if (--s->r->pending > 0) return;
    if (--a->busy == 0) a->busy_seconds += now() - a->busy_since;
    complete(s->r);
}

/* The shares being moved direct (moving, in the order taken) run together:
 * another is taken from the queue once the last one taken has submitted all
 * its pieces, while slots are free; a buffered one is moved alone. */
static void *worker_main(void *arg)
{
    aio_worker *w = arg;
    zl_aio *a = w->a;
    aio_share *moving = NULL, *last = NULL;
    pthread_mutex_lock(&a->mu);
    for (;;) {
        while (w->head && (!moving || (last->pos >= last->end && w->nfree > 0 && w->head->r->direct))) {
            aio_share *s = w->head;
            w->head = s->next;
            if (!w->head) w->tail = NULL;
            s->next = NULL;
            s->pos = s->begin;
            s->inflight = 0;
            if (!s->r->direct) {
                pthread_mutex_unlock(&a->mu);
                if (!atomic_load(&s->r->stop)) run_buffered(s->r, s);
                pthread_mutex_lock(&a->mu);
                share_done(a, s);
                continue;
            }
            if (last) last->next = s;
            else moving = s;
            last = s;
        }
        if (!moving) {
            if (a->closing) break;
            pthread_cond_wait(&a->work, &a->mu);
            continue;
        }
        pthread_mutex_unlock(&a->mu);
        if (last->pos < last->end) fill(w, last);
        int inflight = 0;
        for (aio_share *s = moving; s; s = s->next) inflight += s->inflight;
        /* overlap_events: refill as soon as one piece completes; otherwise reap the whole batch. */
        if (inflight > 0) reap(w, moving, a->cfg.overlap_events ? 1 : inflight);
        pthread_mutex_lock(&a->mu);
        for (aio_share **pp = &moving, *s; (s = *pp);) {
            if (s->pos < s->end || s->inflight > 0) {
                pp = &s->next;
                continue;
            }
            *pp = s->next;
            if (last == s) last = NULL;
            share_done(a, s);
        }
        if (!last)
            for (last = moving; last && last->next; last = last->next) continue;
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

static void engine_free(zl_aio *a)
{
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->work);
    pthread_cond_destroy(&a->done);
    zli_context_release(a->ctx);
    free(a->workers);
    free(a);
}

/* Stop and join the workers (after the queued shares), free their resources,
 * and drop the handle's reference. */
static void shut_down(zl_aio *a)
{
    pthread_mutex_lock(&a->mu);
    a->closing = true;
    pthread_cond_broadcast(&a->work);
    pthread_mutex_unlock(&a->mu);
    for (int i = 0; i < a->nworkers; i++) {
        aio_worker *w = &a->workers[i];
        if (w->running) pthread_join(w->thread, NULL);
        if (w->ctx) io_destroy(w->ctx);
        for (int k = 0; w->slots && k < a->cfg.queue_depth; k++)
            zli_mem_free(a->ctx, w->slots[k].bounce, (size_t)a->cfg.block_size, true, ZL_MEM_OTHER);
        free(w->slots);
        free(w->free_slots);
        free(w->batch);
        free(w->events);
        w->slots = NULL;
    }
    pthread_mutex_lock(&a->mu);
    bool last = --a->refs == 0;
    pthread_mutex_unlock(&a->mu);
    if (last) engine_free(a);
}

static zl_status check_config(const zl_aio_config *c)
{
    if (c->block_size <= 0 || c->block_size % AIO_ALIGN || c->block_size > AIO_MAX_BLOCK)
        return zl_error(ZL_EINVAL, "aio: block_size must be a positive multiple of 4096 up to %lld, got %lld",
                        (long long)AIO_MAX_BLOCK, (long long)c->block_size);
    if (c->queue_depth < 1 || c->queue_depth > AIO_MAX_QUEUE_DEPTH)
        return zl_error(ZL_EINVAL, "aio: queue_depth must be between 1 and %d, got %d", AIO_MAX_QUEUE_DEPTH,
                        c->queue_depth);
    if (c->intra_op_parallelism < 1 || c->intra_op_parallelism > AIO_MAX_THREADS)
        return zl_error(ZL_EINVAL, "aio: intra_op_parallelism must be between 1 and %d, got %d", AIO_MAX_THREADS,
                        c->intra_op_parallelism);
    return ZL_OK;
}

static zl_status worker_init(aio_worker *w, zl_aio *a)
{
    int qd = a->cfg.queue_depth;
    w->a = a;
    w->slots = calloc((size_t)qd, sizeof *w->slots);
    w->free_slots = calloc((size_t)qd, sizeof *w->free_slots);
    w->batch = calloc((size_t)qd, sizeof *w->batch);
    w->events = calloc((size_t)qd, sizeof *w->events);
    if (!w->slots || !w->free_slots || !w->batch || !w->events)
        return zl_error(ZL_ENOMEM, "aio: out of memory for %d queue slots", qd);
    for (int i = 0; i < qd; i++) w->free_slots[w->nfree++] = &w->slots[i];
    int rc = io_setup(qd, &w->ctx);
    if (rc < 0) {
        char e[128];
        w->ctx = 0;
        return zl_error(ZL_EIO, "aio: io_setup for queue_depth %d failed: %s%s", qd, errstr(-rc, e, sizeof e),
                        rc == -EAGAIN ? " (queue_depth x intra_op_parallelism over all engines exceeds "
                                        "/proc/sys/fs/aio-max-nr)" : "");
    }
    /* Workers take no signals: Ctrl-C and friends belong to the caller's thread. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(&w->thread, NULL, worker_main, w);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc) {
        char e[128];
        return zl_error(ZL_ENOMEM, "aio: cannot start a worker thread: %s", errstr(rc, e, sizeof e));
    }
    w->running = true;
    return ZL_OK;
}

zl_status zl_aio_open(const zl_aio_config *cfg, zl_aio **out)
{
    if (!out) return zl_error(ZL_EINVAL, "aio: the output pointer is NULL");
    *out = NULL;
    zl_aio_config c = cfg ? *cfg : zl_aio_defaults();
    if (check_config(&c)) return ZL_EINVAL;
    zl_aio *a = calloc(1, sizeof *a);
    if (!a) return zl_error(ZL_ENOMEM, "aio: out of memory");
    a->workers = calloc((size_t)c.intra_op_parallelism, sizeof *a->workers);
    if (!a->workers) { free(a); return zl_error(ZL_ENOMEM, "aio: out of memory"); }
    a->cfg = c;
    a->ctx = zl_context_current();
    zli_context_retain(a->ctx);
    const char *env = getenv("ZLUA_AIO_BUFFERED");
    a->force_buffered = env && *env && strcmp(env, "0") != 0;
    atomic_init(&a->direct, !a->force_buffered);
    a->refs = 1;
    a->nworkers = c.intra_op_parallelism;
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->work, NULL);
    pthread_cond_init(&a->done, NULL);
    for (int i = 0; i < a->nworkers; i++) {
        if (worker_init(&a->workers[i], a)) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", zl_last_error());
            zl_status st = zli_last_code();
            shut_down(a);
            return zl_error(st, "%s", msg);
        }
    }
    *out = a;
    return ZL_OK;
}

void zl_aio_close(zl_aio *a)
{
    if (a) shut_down(a);
}

bool zl_aio_is_direct(const zl_aio *a) { return a && atomic_load(&((zl_aio *)a)->direct); }

/* ---- requests ---- */

/* "<dir> does not support O_DIRECT", once per engine. */
static void warn_buffered(zl_aio *a, const char *path)
{
    pthread_mutex_lock(&a->mu);
    bool first = !a->warned;
    a->warned = true;
    pthread_mutex_unlock(&a->mu);
    atomic_store(&a->direct, false);
    if (!first) return;
    const char *slash = strrchr(path, '/');
    int n = slash ? (slash == path ? 1 : (int)(slash - path)) : 1;
    fprintf(stderr, "zlua: aio: %.*s does not support O_DIRECT; using buffered I/O\n", n, slash ? path : ".");
}

/* Open the request's file on the caller's thread; a failure becomes the request's status. */
static void open_file(zl_aio *a, zl_aio_request *r)
{
    int flags = (r->write ? O_WRONLY | O_CREAT : O_RDONLY) | O_CLOEXEC;
    r->direct = !a->force_buffered;
    r->fd = -1;
    if (r->direct) {
        r->fd = open(r->path, flags | O_DIRECT, 0644);
        if (r->fd < 0 && errno == EINVAL) {
            r->direct = false;
            warn_buffered(a, r->path);
        }
    }
    if (!r->direct) r->fd = open(r->path, flags, 0644);
    if (r->fd < 0) {
        char e[128];
        r->status = ZL_EIO;
        snprintf(r->msg, sizeof r->msg, "%s: cannot open for %s: %s", r->path, r->write ? "writing" : "reading",
                 errstr(errno, e, sizeof e));
    }
}

static zl_aio_request *start(zl_aio *a, const char *path, zl_tensor *t, int64_t offset, bool write)
{
    const char *op = write ? "aio write" : "aio read";
    if (!a) { zl_error(ZL_EINVAL, "%s: the engine is NULL", op); return NULL; }
    if (!path || !*path) { zl_error(ZL_EINVAL, "%s: the path is empty", op); return NULL; }
    if (zli_check_arg(op, "tensor", t)) return NULL;
    if (zl_tensor_device(t) != ZL_DEVICE_CPU) {
        zl_error(ZL_EINVAL, "%s: the tensor for %s is not in host memory", op, path);
        return NULL;
    }
    if (!zl_tensor_is_contiguous(t)) {
        zl_error(ZL_EINVAL, "%s: the tensor for %s is not contiguous", op, path);
        return NULL;
    }
    if (offset < 0 || offset % AIO_ALIGN) {
        zl_error(ZL_EINVAL, "%s: offset %lld into %s is not a non-negative multiple of %d", op, (long long)offset,
                 path, AIO_ALIGN);
        return NULL;
    }
    int64_t len = zl_tensor_numel(t) * (int64_t)zl_dtype_size(zl_tensor_dtype(t));
    int64_t rounded = round_up(len, AIO_ALIGN);
    /* Even shares of whole AIO_ALIGN blocks; a small request leaves some workers out. */
    int64_t per = round_up((rounded + a->nworkers - 1) / a->nworkers, AIO_ALIGN);
    int nshares = per ? (int)((rounded + per - 1) / per) : 0;
    zl_aio_request *r = calloc(1, sizeof *r + (size_t)nshares * sizeof(aio_share));
    char *p = strdup(path);
    if (!r || !p) {
        free(r);
        free(p);
        zl_error(ZL_ENOMEM, "%s: out of memory for a request", op);
        return NULL;
    }
    pthread_mutex_lock(&a->mu);
    bool closed = a->closing;
    pthread_mutex_unlock(&a->mu);
    if (closed) {
        free(r);
        free(p);
        zl_error(ZL_ESTATE, "%s: the engine was closed", op);
        return NULL;
    }
    r->a = a;
    r->t = zl_tensor_retain(t);
    r->path = p;
    r->write = write;
    r->data = zl_tensor_data(t);
    r->offset = offset;
    r->len = len;
    atomic_init(&r->stop, false);
    open_file(a, r);
    pthread_mutex_lock(&a->mu);
    a->refs++;
    if (r->fd < 0 || nshares == 0) {
        complete(r);
    } else {
        r->pending = nshares;
        if (a->busy++ == 0) a->busy_since = now();
        for (int i = 0; i < nshares; i++) {
            aio_share *s = &r->shares[i];
            aio_worker *w = &a->workers[i];
            s->r = r;
            s->begin = i * per;
            s->end = min64(s->begin + per, rounded);
            if (w->tail) w->tail->next = s;
            else w->head = s;
            w->tail = s;
        }
        pthread_cond_broadcast(&a->work);
    }
    pthread_mutex_unlock(&a->mu);
    return r;
}

zl_aio_request *zl_aio_write(zl_aio *a, const char *path, zl_tensor *t, int64_t offset)
{
    return start(a, path, t, offset, true);
}

zl_aio_request *zl_aio_read(zl_aio *a, const char *path, zl_tensor *t, int64_t offset)
{
    return start(a, path, t, offset, false);
}

double zl_aio_busy_seconds(zl_aio *a)
{
    if (!a) return 0;
    pthread_mutex_lock(&a->mu);
    double s = a->busy_seconds + (a->busy ? now() - a->busy_since : 0);
    pthread_mutex_unlock(&a->mu);
    return s;
}

zl_status zl_aio_wait(zl_aio_request *r)
{
    if (!r) return zl_error(ZL_EINVAL, "aio wait: the request is NULL");
    zl_aio *a = r->a;
    pthread_mutex_lock(&a->mu);
    while (!r->done) pthread_cond_wait(&a->done, &a->mu);
    bool last = --a->refs == 0;
    pthread_mutex_unlock(&a->mu);
    zl_status st = r->status;
    if (st) zl_error(st, "%s", r->msg);
    zl_tensor_release(r->t);
    free(r->path);
    free(r);
    if (last) engine_free(a);
    return st;
}
