/* engine/comm: the public communicator. It checks every argument (naming the
 * collective, the rank, the shapes, dtypes and devices), widens f16/bf16 to f32
 * buffers charged to ZL_MEM_COMM for host backends, hands raw buffers to a
 * backend (backend.h), and waits by polling, so a timeout or Ctrl-C ends a
 * collective that would never finish. */
#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "backend.h"
#include "../core/backend.h"
#include "../core/memory_impl.h"

#define DEFAULT_TIMEOUT_S (30.0 * 60.0)

struct zl_comm_request {
    zl_comm *c;
    const char *what;          /* the collective's name, for messages */
    void *pending;             /* the backend's handle; NULL once complete */
    double deadline;           /* monotonic seconds */
    zl_tensor *keep[2];        /* retained until the request ends */
    zl_tensor **kept;          /* a coalesced collective's: nkept retained */
    int nkept;
    void *parts;               /* its pointer and count arrays, read by the backend until it completes */
    zl_tensor *dst;            /* receives the f32 result when it is widened */
    float *wide_in, *wide_out; /* f32 buffers of half types (ZL_MEM_COMM) */
    zl_context *ctx;           /* the caller's, which they are charged to */
    size_t in_bytes, out_bytes;
    float *result;             /* the f32 result of a reduction */
    size_t result_n;
    bool avg;                  /* divide it by the world size */
    struct zl_comm_request *next;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static zl_status parse_timeout(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end != '\0' || !(v > 0))
        return zl_error(ZL_EINVAL, "comm: ZLUA_COMM_TIMEOUT must be a positive number of seconds, got '%s'", s);
    *out = v;
    return ZL_OK;
}

#ifndef ZLUA_HAVE_NCCL
#define NCCL_MISSING "this zlua was built without NCCL (CMake found no CUDA toolkit with nccl.h and libnccl, " \
                     "or was told -DZLUA_CUDA=OFF); install them and rebuild, or use backend \"mpi\""
#endif

static bool is_nccl(const char *name) { return name && strcmp(name, "nccl") == 0; }

static const zli_comm_backend *backend_named(const char *name)
{
    if (name && strcmp(name, "self") == 0) return &zli_comm_self;
    if (name && strcmp(name, "mpi") == 0) return &zli_comm_mpi;
    return NULL;
}

/* The "nccl" backend lives in CUDA's module, opened with it; NULL with the
 * reason in zl_last_error() when it does not load or has none. */
static const zli_comm_backend *nccl_backend(void)
{
#ifdef ZLUA_HAVE_NCCL
    static const zli_comm_api api = {zl_comm_open, zl_comm_close, zl_comm_rank, zl_comm_size, zl_comm_set_timeout,
                                     zl_comm_broadcast};
    const zli_backend *b = zli_backend_of("comm_open", ZL_DEVICE_CUDA);
    if (b && !b->comm) zl_error(ZL_EDEVICE, "comm_open: the CUDA backend has no nccl communicator");
    return b && b->comm ? b->comm(&api) : NULL;
#else
    zl_error(ZL_EDEVICE, "comm_open: %s", NCCL_MISSING);
    return NULL;
#endif
}

const char *zl_comm_unavailable(const char *backend)
{
    if (is_nccl(backend)) {
#ifdef ZLUA_HAVE_NCCL
        return NULL;
#else
        return NCCL_MISSING;
#endif
    }
    const zli_comm_backend *be = backend_named(backend);
    return be ? be->missing : "unknown backend (expected \"self\", \"mpi\" or \"nccl\")";
}

zl_status zl_comm_open(const char *backend, zl_comm **out)
{
    if (!out) return zl_error(ZL_EINVAL, "comm_open: out is NULL");
    *out = NULL;
    const zli_comm_backend *be = is_nccl(backend) ? nccl_backend() : backend_named(backend);
    if (!be && is_nccl(backend)) return zli_last_code();
    if (!be)
        return zl_error(ZL_EINVAL, "comm_open: unknown backend '%s' (expected \"self\", \"mpi\" or \"nccl\")",
                        backend ? backend : "(null)");
    if (be->missing) return zl_error(ZL_EINVAL, "comm_open: backend \"%s\": %s", be->name, be->missing);
    double timeout = DEFAULT_TIMEOUT_S;
    const char *env = getenv("ZLUA_COMM_TIMEOUT");
    if (env && *env && parse_timeout(env, &timeout)) return ZL_EINVAL;
    zl_comm *c = calloc(1, sizeof *c);
    if (!c) return zl_error(ZL_ENOMEM, "comm_open: out of memory");
    c->be = be;
    c->timeout_s = timeout;
    zl_status st = be->open(c);
    if (st) {
        free(c);
        return st;
    }
    *out = c;
    return ZL_OK;
}

static void request_free(zl_comm_request *r)
{
    zli_mem_free(r->ctx, r->wide_in, r->in_bytes, false, ZL_MEM_COMM);
    zli_mem_free(r->ctx, r->wide_out, r->out_bytes, false, ZL_MEM_COMM);
    zl_tensor_release(r->keep[0]);
    zl_tensor_release(r->keep[1]);
    for (int i = 0; i < r->nkept; i++) zl_tensor_release(r->kept[i]);
    free(r->kept);
    free(r->parts);
    free(r);
}

/* Give abandoned collectives a moment to finish (the other ranks may have
 * arrived late); those that do not are leaked, as MPI may still write into them.
 * A lost rank never arrives, so then there is nothing to wait for. */
static bool settle_abandoned(zl_comm *c)
{
    if (c->peer_lost && c->abandoned) return false;
    double until = now_s() + 1.0;
    while (c->abandoned) {
        zl_comm_request *r = c->abandoned;
        bool done = false;
        if (c->be->test(c, r->pending, &done)) return false;
        if (done) {
            c->abandoned = r->next;
            request_free(r);
            continue;
        }
        if (now_s() > until) return false;
        sched_yield();
    }
    return true;
}

static void really_close(zl_comm *c)
{
    bool clean = settle_abandoned(c);
    c->be->close(c, clean);
    if (clean) free(c);
}

void zl_comm_close(zl_comm *c)
{
    if (!c || c->closing) return;
    c->closing = true;
    if (c->live_requests == 0) really_close(c);
}

int zl_comm_rank(const zl_comm *c) { return c ? c->rank : -1; }
int zl_comm_size(const zl_comm *c) { return c ? c->size : -1; }
int zl_comm_local_rank(const zl_comm *c) { return c ? c->local_rank : -1; }
const char *zl_comm_backend(const zl_comm *c) { return c ? c->be->name : ""; }

zl_device zl_comm_device(const zl_comm *c, int *index)
{
    bool dev = c && c->be->device != ZL_DEVICE_CPU;
    if (index) *index = dev ? c->device_index : 0;
    return dev ? c->be->device : ZL_DEVICE_CPU;
}
double zl_comm_timeout(const zl_comm *c) { return c ? c->timeout_s : 0.0; }

zl_status zl_comm_set_timeout(zl_comm *c, double seconds)
{
    if (!c) return zl_error(ZL_EINVAL, "comm_set_timeout: comm is NULL");
    if (!(seconds > 0))
        return zl_error(ZL_EINVAL, "comm_set_timeout: seconds must be > 0, got %g", seconds);
    c->timeout_s = seconds;
    return ZL_OK;
}

/* ---- argument checks ---- */

static zl_status check_comm(zl_comm *c, const char *what)
{
    if (!c) return zl_error(ZL_EINVAL, "%s: comm is NULL", what);
    if (c->closing) return zl_error(ZL_ESTATE, "%s on rank %d: the communicator is closed", what, c->rank);
    if (c->broken[0])
        return zl_error(ZL_ESTATE, "%s on rank %d: the communicator is unusable: %s", what, c->rank, c->broken);
    return ZL_OK;
}

static zl_status check_tensor(zl_comm *c, const char *what, const char *role, const zl_tensor *t, bool reduce)
{
    char buf[96];
    if (!t) return zl_error(ZL_EINVAL, "%s on rank %d: %s is NULL", what, c->rank, role);
    zl_dtype dt = zl_tensor_dtype(t);
    if (reduce && dt != ZL_DTYPE_F32 && dt != ZL_DTYPE_F16 && dt != ZL_DTYPE_BF16)
        return zl_error(ZL_EDTYPE, "%s on rank %d: %s has dtype %s; reductions take f32, f16 or bf16",
                        what, c->rank, role, zl_dtype_name(dt));
    if (c->be->device == ZL_DEVICE_CPU && zl_tensor_device(t) != ZL_DEVICE_CPU)
        return zl_error(ZL_EINVAL, "%s on rank %d: %s must be a CPU tensor for backend %s",
                        what, c->rank, role, c->be->name);
    if (c->be->device != ZL_DEVICE_CPU &&
        (zl_tensor_device(t) != c->be->device || zl_tensor_device_index(t) != c->device_index)) {
        char have[32], want[32];
        zl_device_str(zl_tensor_device(t), zl_tensor_device_index(t), have, sizeof have);
        zl_device_str(c->be->device, c->device_index, want, sizeof want);
        return zl_error(ZL_EINVAL, "%s on rank %d: %s is on %s, but backend %s takes tensors on %s",
                        what, c->rank, role, have, c->be->name, want);
    }
    if (!zl_tensor_is_contiguous(t))
        return zl_error(ZL_EINVAL, "%s on rank %d: %s %s is not contiguous", what, c->rank, role,
                        zl_shape_str(zl_tensor_ndim(t), zl_tensor_shape(t), buf, sizeof buf));
    return ZL_OK;
}

static bool check_op(zl_comm *c, const char *what, zl_comm_op op)
{
    if (op == ZL_COMM_SUM || op == ZL_COMM_MAX || op == ZL_COMM_MIN || op == ZL_COMM_AVG) return true;
    zl_error(ZL_EINVAL, "%s on rank %d: unknown reduction %d (expected SUM, MAX, MIN or AVG)", what,
             c->rank, (int)op);
    return false;
}

/* ---- requests ---- */

static zl_comm_request *request_new(zl_comm *c, const char *what)
{
    zl_comm_request *r = calloc(1, sizeof *r);
    if (!r) {
        zl_error(ZL_ENOMEM, "%s on rank %d: out of memory", what, c->rank);
        return NULL;
    }
    r->c = c;
    r->what = what;
    r->ctx = zl_context_current();
    return r;
}

static float *wide_copy(zl_context *ctx, const zl_tensor *t, size_t n, size_t *bytes)
{
    *bytes = (n ? n : 1) * sizeof(float);
    float *w = zli_mem_alloc(ctx, *bytes, 0, ZL_MEM_COMM);
    if (!w) return NULL;
    if (t) zl_convert(zl_tensor_data(t), zl_tensor_dtype(t), w, ZL_DTYPE_F32, n);
    return w;
}

/* Start the collective; on failure the request is freed and NULL returned. */
static zl_comm_request *request_start(zl_comm_request *r, const zli_coll *coll)
{
    zl_comm *c = r->c;
    zl_status st = c->be->start(c, coll, &r->pending);
    if (st) {
        request_free(r);
        return NULL;
    }
    r->deadline = now_s() + c->timeout_s;
    c->live_requests++;
    return r;
}

static void finish(zl_comm_request *r)
{
    if (r->avg) {
        float inv = 1.0f / (float)r->c->size;
        for (size_t i = 0; i < r->result_n; i++) r->result[i] *= inv;
    }
    if (r->dst) zl_convert(r->result, ZL_DTYPE_F32, zl_tensor_data(r->dst), zl_tensor_dtype(r->dst), r->result_n);
}

static void request_end(zl_comm_request *r)
{
    zl_comm *c = r->c;
    request_free(r);
    if (--c->live_requests == 0 && c->closing) really_close(c);
}

/* A rank whose process ended never joins, so the wait would last until the
 * timeout. The backend is asked every LOST_CHECK_S whether a peer is gone; as
 * the peer may have sent its part before it ended, the request is polled for
 * one more period before the loss is reported. */
#define LOST_CHECK_S 0.1

const char *volatile zli_comm_waiting;

static zl_status lost_error(const zl_comm_request *r, const char *why)
{
    return zl_error(ZL_EIO, "rank %d in %s: %s", r->c->rank, r->what, why);
}

/* A timeout names the peers known to be unable to take part (a rank stopped
 * by a signal), as the waiting rank cannot tell which rank did not arrive. */
static zl_status timeout_error(const zl_comm_request *r)
{
    zl_comm *c = r->c;
    char stopped[256] = "";
    if (c->be->stopped) c->be->stopped(c, stopped, sizeof stopped);
    return zl_error(ZL_EIO, "%s timed out after %g s on rank %d%s%s", r->what, c->timeout_s, c->rank,
                    stopped[0] ? "; " : "", stopped);
}

zl_status zl_comm_wait(zl_comm_request *r)
{
    if (!r) return zl_error(ZL_EINVAL, "comm_wait: request is NULL");
    zl_comm *c = r->c;
    zl_status st = ZL_OK;
    unsigned spins = 0;
    unsigned long seen = c->progress;
    double next_check = now_s() + LOST_CHECK_S;
    int lost = -1;
    char why[600] = "";
    zli_comm_waiting = r->what;
    while (r->pending) {
        bool done = false;
        st = c->be->test(c, r->pending, &done);
        if (st) {
            /* A transport that notices the loss reports it less plainly. */
            if (c->be->lost && (lost = c->be->lost(c, why, sizeof why)) >= 0) st = lost_error(r, why);
            break;
        }
        if (done) {
            r->pending = NULL;
            break;
        }
        if (zl_interrupt_pending()) {
            st = zl_error(ZL_EINTERRUPT, "%s interrupted on rank %d", r->what, c->rank);
            break;
        }
        double t = now_s();
        if (c->be->lost && t >= next_check) {
            next_check = t + LOST_CHECK_S;
            if (lost >= 0) {
                st = lost_error(r, why);
                break;
            }
            lost = c->be->lost(c, why, sizeof why);
        }
        if (t > r->deadline) {
            st = timeout_error(r);
            break;
        }
        /* Spin while the collective moves on, then sleep so a stalled one
         * costs no CPU. A collective in many steps (a coalesced all-gather's
         * runs) would otherwise sleep between its steps once the first
         * thousand polls had passed, as long as the whole takes. */
        if (c->progress != seen) {
            seen = c->progress;
            spins = 0;
        }
        if (++spins < 1000) {
            sched_yield();
        } else {
            struct timespec ts = {0, 200000};
            nanosleep(&ts, NULL);
        }
    }
    zli_comm_waiting = NULL;
    if (r->pending) {
        snprintf(c->broken, sizeof c->broken, "%s", zl_last_error());
        c->peer_lost = lost >= 0;
        c->live_requests--;
        r->next = c->abandoned;
        c->abandoned = r;
        if (c->live_requests == 0 && c->closing) really_close(c);
        return st;
    }
    finish(r);
    request_end(r);
    return ZL_OK;
}

/* ---- the collectives ---- */

zl_comm_request *zl_comm_allreduce_async(zl_comm *c, zl_tensor *t, zl_comm_op op)
{
    const char *what = "allreduce";
    if (check_comm(c, what) || check_tensor(c, what, "tensor", t, true) || !check_op(c, what, op)) return NULL;
    zl_comm_request *r = request_new(c, what);
    if (!r) return NULL;
    size_t n = (size_t)zl_tensor_numel(t);
    r->keep[0] = zl_tensor_retain(t);
    zli_coll coll = {.kind = ZLI_COLL_ALLREDUCE, .op = op, .dtype = zl_tensor_dtype(t), .count = n};
    if (zl_tensor_dtype(t) == ZL_DTYPE_F32 || c->be->device != ZL_DEVICE_CPU) {
        coll.buf = zl_tensor_data(t);
    } else {
        r->wide_in = wide_copy(r->ctx, t, n, &r->in_bytes);
        if (!r->wide_in) {
            request_free(r);
            return NULL;
        }
        coll.buf = r->wide_in;
        coll.dtype = ZL_DTYPE_F32;
        r->dst = t;
    }
    r->avg = op == ZL_COMM_AVG && c->size > 1 && c->be->device == ZL_DEVICE_CPU;
    r->result = coll.buf;
    r->result_n = n;
    return request_start(r, &coll);
}

/* The in/out pair of reduce_scatter (in is the large one) and allgather (out
 * is): the same dtype, the large one size times the other, no shared storage.
 * The messages call them in_name and out_name. */
static zl_status check_pair(zl_comm *c, const char *what, const zl_tensor *in, const zl_tensor *out, bool in_large,
                            const char *in_name, const char *out_name)
{
    char a[96], b[96];
    zl_shape_str(zl_tensor_ndim(in), zl_tensor_shape(in), a, sizeof a);
    zl_shape_str(zl_tensor_ndim(out), zl_tensor_shape(out), b, sizeof b);
    if (zl_tensor_dtype(in) != zl_tensor_dtype(out))
        return zl_error(ZL_EDTYPE, "%s on rank %d: %s is %s %s but %s is %s %s", what, c->rank, in_name,
                        zl_dtype_name(zl_tensor_dtype(in)), a, out_name, zl_dtype_name(zl_tensor_dtype(out)), b);
    const zl_tensor *large = in_large ? in : out, *small = in_large ? out : in;
    size_t n = (size_t)zl_tensor_numel(small);
    if ((size_t)zl_tensor_numel(large) != n * (size_t)c->size)
        return zl_error(ZL_ESHAPE, "%s on rank %d: %s %s has %lld elements, expected size %d x %s %s = %zu", what,
                        c->rank, in_large ? in_name : out_name, in_large ? a : b, (long long)zl_tensor_numel(large),
                        c->size, in_large ? out_name : in_name, in_large ? b : a, n * (size_t)c->size);
    if (zl_tensor_shares_storage(in, out))
        return zl_error(ZL_EINVAL, "%s on rank %d: %s and %s share storage", what, c->rank, in_name, out_name);
    return ZL_OK;
}

zl_comm_request *zl_comm_reduce_scatter_async(zl_comm *c, const zl_tensor *in, zl_tensor *out, zl_comm_op op)
{
    const char *what = "reduce_scatter";
    if (check_comm(c, what) || check_tensor(c, what, "in", in, true) || check_tensor(c, what, "out", out, true) ||
        !check_op(c, what, op))
        return NULL;
    if (check_pair(c, what, in, out, true, "in", "out")) return NULL;
    size_t n = (size_t)zl_tensor_numel(out);
    zl_comm_request *r = request_new(c, what);
    if (!r) return NULL;
    r->keep[0] = zl_tensor_retain((zl_tensor *)in);
    r->keep[1] = zl_tensor_retain(out);
    zli_coll coll = {.kind = ZLI_COLL_REDUCE_SCATTER, .op = op, .dtype = zl_tensor_dtype(out), .count = n};
    if (zl_tensor_dtype(out) == ZL_DTYPE_F32 || c->be->device != ZL_DEVICE_CPU) {
        coll.send = zl_tensor_data(in);
        coll.recv = zl_tensor_data(out);
    } else {
        r->wide_in = wide_copy(r->ctx, in, n * (size_t)c->size, &r->in_bytes);
        r->wide_out = r->wide_in ? wide_copy(r->ctx, NULL, n, &r->out_bytes) : NULL;
        if (!r->wide_out) {
            request_free(r);
            return NULL;
        }
        coll.send = r->wide_in;
        coll.recv = r->wide_out;
        coll.dtype = ZL_DTYPE_F32;
        r->dst = out;
    }
    r->avg = op == ZL_COMM_AVG && c->size > 1 && c->be->device == ZL_DEVICE_CPU;
    r->result = coll.recv;
    r->result_n = n;
    return request_start(r, &coll);
}

zl_comm_request *zl_comm_allgather_async(zl_comm *c, const zl_tensor *in, zl_tensor *out)
{
    const char *what = "allgather";
    if (check_comm(c, what) || check_tensor(c, what, "in", in, false) || check_tensor(c, what, "out", out, false))
        return NULL;
    if (check_pair(c, what, in, out, false, "in", "out")) return NULL;
    size_t n = (size_t)zl_tensor_numel(in);
    zl_comm_request *r = request_new(c, what);
    if (!r) return NULL;
    r->keep[0] = zl_tensor_retain((zl_tensor *)in);
    r->keep[1] = zl_tensor_retain(out);
    zli_coll coll = {.kind = ZLI_COLL_ALLGATHER, .count = n * zl_dtype_size(zl_tensor_dtype(in)),
                     .send = zl_tensor_data(in), .recv = zl_tensor_data(out)};
    return request_start(r, &coll);
}

/* A tensor of an allgather_coalesced call: its storage, which list, its index. */
typedef struct coalesced_arg {
    const void *storage;
    bool out;
    int i;
} coalesced_arg;

static int by_storage(const void *a, const void *b)
{
    const coalesced_arg *x = a, *y = b;
    if (x->storage != y->storage) return (uintptr_t)x->storage < (uintptr_t)y->storage ? -1 : 1;
    /* within one storage the outputs first, then by index, so a clash names the first */
    if (x->out != y->out) return x->out ? -1 : 1;
    return x->i - y->i;
}

/* Every pair as allgather's, and no out sharing storage with another tensor
 * of the call: sorted by storage, so that many tensors cost n log n. */
static zl_status check_coalesced(zl_comm *c, const char *what, int n, const zl_tensor *const *in,
                                 zl_tensor *const *out)
{
    for (int i = 0; i < n; i++) {
        char role[2][32];
        snprintf(role[0], sizeof role[0], "in[%d]", i);
        snprintf(role[1], sizeof role[1], "out[%d]", i);
        if (check_tensor(c, what, role[0], in[i], false) || check_tensor(c, what, role[1], out[i], false) ||
            check_pair(c, what, in[i], out[i], false, role[0], role[1]))
            return zli_last_code();
    }
    coalesced_arg *all = malloc(2 * (size_t)n * sizeof *all);
    if (!all) return zl_error(ZL_ENOMEM, "%s on rank %d: out of memory", what, c->rank);
    /* empty tensors hold no bytes to overlap */
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (zl_tensor_numel(in[i]) == 0) continue;
        all[m++] = (coalesced_arg){in[i]->storage, false, i};
        all[m++] = (coalesced_arg){out[i]->storage, true, i};
    }
    qsort(all, (size_t)m, sizeof *all, by_storage);
    zl_status st = ZL_OK;
    for (int j = 1; j < m && !st; j++)
        if (all[j].storage == all[j - 1].storage && all[j - 1].out)
            st = zl_error(ZL_EINVAL, "%s on rank %d: out[%d] and %s[%d] share storage", what, c->rank, all[j - 1].i,
                          all[j].out ? "out" : "in", all[j].i);
    free(all);
    return st;
}

zl_comm_request *zl_comm_allgather_coalesced_async(zl_comm *c, int n, const zl_tensor *const *in,
                                                   zl_tensor *const *out)
{
    const char *what = "allgather_coalesced";
    if (check_comm(c, what)) return NULL;
    if (n < 1 || !in || !out) {
        zl_error(ZL_EINVAL, "%s on rank %d: %s", what, c->rank,
                 n < 1 ? "n must be at least 1" : "in and out must not be NULL");
        return NULL;
    }
    if (check_coalesced(c, what, n, in, out)) return NULL;
    zl_comm_request *r = request_new(c, what);
    if (!r) return NULL;
    /* one allocation: sends, recvs, counts */
    size_t un = (size_t)n;
    r->parts = malloc(un * (2 * sizeof(void *) + sizeof(size_t)));
    r->kept = calloc(2 * un, sizeof *r->kept);
    if (!r->parts || !r->kept) {
        request_free(r);
        zl_error(ZL_ENOMEM, "%s on rank %d: out of memory", what, c->rank);
        return NULL;
    }
    const void **sends = r->parts;
    void **recvs = (void **)(sends + n);
    size_t *counts = (size_t *)(recvs + n);
    for (int i = 0; i < n; i++) {
        r->kept[r->nkept++] = zl_tensor_retain((zl_tensor *)in[i]);
        r->kept[r->nkept++] = zl_tensor_retain(out[i]);
        sends[i] = zl_tensor_data(in[i]);
        recvs[i] = zl_tensor_data(out[i]);
        counts[i] = (size_t)zl_tensor_numel(in[i]) * zl_dtype_size(zl_tensor_dtype(in[i]));
    }
    zli_coll coll = {.kind = ZLI_COLL_ALLGATHER_COALESCED, .parts = n, .sends = sends, .recvs = recvs,
                     .counts = counts};
    return request_start(r, &coll);
}

zl_comm_request *zl_comm_broadcast_async(zl_comm *c, zl_tensor *t, int root)
{
    const char *what = "broadcast";
    if (check_comm(c, what) || check_tensor(c, what, "tensor", t, false)) return NULL;
    if (root < 0 || root >= c->size) {
        zl_error(ZL_EINVAL, "%s on rank %d: root %d out of range [0, %d)", what, c->rank, root, c->size);
        return NULL;
    }
    zl_comm_request *r = request_new(c, what);
    if (!r) return NULL;
    r->keep[0] = zl_tensor_retain(t);
    zli_coll coll = {.kind = ZLI_COLL_BROADCAST, .root = root, .buf = zl_tensor_data(t),
                     .count = (size_t)zl_tensor_numel(t) * zl_dtype_size(zl_tensor_dtype(t))};
    return request_start(r, &coll);
}

zl_comm_request *zl_comm_barrier_async(zl_comm *c)
{
    if (check_comm(c, "barrier")) return NULL;
    zl_comm_request *r = request_new(c, "barrier");
    if (!r) return NULL;
    zli_coll coll = {.kind = ZLI_COLL_BARRIER};
    return request_start(r, &coll);
}

static zl_status wait_or_error(zl_comm_request *r)
{
    return r ? zl_comm_wait(r) : zli_last_code();
}

zl_status zl_comm_allreduce(zl_comm *c, zl_tensor *t, zl_comm_op op)
{
    return wait_or_error(zl_comm_allreduce_async(c, t, op));
}

zl_status zl_comm_reduce_scatter(zl_comm *c, const zl_tensor *in, zl_tensor *out, zl_comm_op op)
{
    return wait_or_error(zl_comm_reduce_scatter_async(c, in, out, op));
}

zl_status zl_comm_allgather(zl_comm *c, const zl_tensor *in, zl_tensor *out)
{
    return wait_or_error(zl_comm_allgather_async(c, in, out));
}

zl_status zl_comm_allgather_coalesced(zl_comm *c, int n, const zl_tensor *const *in, zl_tensor *const *out)
{
    return wait_or_error(zl_comm_allgather_coalesced_async(c, n, in, out));
}

zl_status zl_comm_broadcast(zl_comm *c, zl_tensor *t, int root)
{
    return wait_or_error(zl_comm_broadcast_async(c, t, root));
}

zl_status zl_comm_barrier(zl_comm *c)
{
    return wait_or_error(zl_comm_barrier_async(c));
}
