/* Private to engine/zero: the ZeRO engine's state, shared by the files that
 * each own one path through it (layout, reduce, params, step, masters, init,
 * report). Never installed. */
#ifndef ZL_ZERO_IMPL_H
#define ZL_ZERO_IMPL_H

#include "zlua/zlua.h"
#include "../offload/swap.h"

#define ZZ_HIDDEN __attribute__((visibility("hidden")))

enum { ZZ_RELEASED = 0, ZZ_INFLIGHT = 1, ZZ_AVAILABLE = 2 };

/* A collective in flight (collect.c). */
typedef struct zz_req zz_req;
/* Stage 3: parameters gathered by one collective (params.c). */
typedef struct zz_fetch zz_fetch;

typedef struct zz_entry {
    struct zl_zero *z;         /* the engine, for the hooks */
    zl_tensor *p;              /* the parameter (retained) */
    char *name;
    int index, group, sub;     /* sub: the optimizer sub-group holding its chunk */
    int ndim;
    int64_t shape[ZL_MAX_DIMS];
    int64_t n, k, off;         /* numel, chunk length, offset of its chunk in the partition */
    int64_t lo, own;           /* this rank's real elements of the flattened parameter */
    int grad_hook, use_hook;   /* hook handles, 0 when none */
    bool seen;                 /* its gradient arrived in this backward */
    bool stale;                /* its gradient slot holds an earlier step's values, which count as zero */
    /* stage 3 */
    bool persistent;
    int status, active;
    zl_tensor *gathered;       /* [P*k] while gathered or in flight */
    zz_req *req;               /* the gather in flight */
    int pslot;                 /* offload_param: its slot in the parameter swap, -1 when in memory */
    bool slot_held;            /* the gather reads from the slot's buffer */
    bool reading;              /* a prefetch of its slot was started */
    zz_fetch *fetch;           /* the bucket gathering it, until its chunks are copied out */
} zz_entry;

/* Consecutive entries whose masters and moments move to and from NVMe
 * together (one sub-group, or the whole partition when nothing swaps). */
typedef struct zz_sub {
    int first, count;
    int64_t off, len;
    int slot;                  /* in the optimizer swap; -1 when resident */
} zz_sub;

typedef struct zz_item {
    zz_entry *e;
    zl_tensor *g;              /* its gradient until the bucket is laid out */
    int64_t boff;
} zz_item;

/* One of the two bucket buffers and the reduction that uses it. */
typedef struct zz_bucket {
    zl_tensor *data;           /* [P * cap] f32 */
    zl_tensor *out;            /* [cap] f32: the reduce-scatter's output */
    int64_t cap;
    zz_item *items;
    int nitems, icap;
    int64_t len;               /* L: elements per partition in this bucket */
    zl_tensor *host;           /* the reduced part copied to host memory, for a gradient buffer there */
    void *ready;               /* marks the compute that wrote the reduced part, for that copy (place.c) */
    zz_req *req;               /* in flight */
    bool busy;
} zz_bucket;

struct zl_zero {
    zl_comm *comm;
    /* Where buffers live: the parameters' device (NULL: host memory). The
     * masters, moments and gradient partition are there unless the optimizer
     * is offloaded; stage 3's working chunks unless the parameters are;
     * buckets, the working buffers of stages 0-2 and gathered parameters
     * always. comm_dev: the communicator takes device memory (nccl). */
    const zli_device_ops *dev;
    int dev_index;
    bool opt_on_dev, work_on_dev, comm_dev;
    zl_zero_config cfg;
    int rank, world, P, q, stage;
    zl_dtype wdtype, gdtype;
    bool half;
    int nent;
    zz_entry *ents;
    int ngroups;
    zl_zero_hparams *hp;
    int64_t *steps;            /* per group */
    int64_t S;                 /* partition elements */
    int nstates;
    const char *const *keys;

    /* buffers */
    zl_tensor *master;         /* [S] f32; NULL when the masters live on NVMe */
    zl_tensor *states[2];      /* [S] f32 each; likewise */
    zl_tensor *grads;          /* [S], or [P*S] at stage 1; NULL when gswap holds the gradients */
    int64_t gbase;             /* this rank's part of grads */
    zl_tensor *full;           /* stages 0-2: [P*S], each parameter padded to P*k; may be master */
    zl_tensor *work;           /* stage 3: working chunks in memory [resident]; NULL: the master is */

    /* optimizer sub-groups and NVMe */
    zz_sub *subs;
    int nsub;
    zl_aio *aio;
    zli_swap *oswap;            /* offload_optimizer nvme */
    zli_swap *pswap;            /* offload_param nvme */
    zli_swap *gswap;            /* the gradient partition by sub-group, instead of grads (grads.c) */
    int ahead;                 /* sub-groups read ahead for the next step */

    /* reduce */
    zz_bucket buckets[2];
    int turn;
    zz_item *pending;
    int npending, cap_pending;
    int64_t fill, bucket_cap;
    /* A gradient arrived since the last zl_zero_end_backward (so the buckets
     * may hold part of it), and a backward ended since the last step: a step
     * is refused unless the first is false and the second true. */
    bool grads_open, backward_ended;

    /* stages 1-2 all-gather */
    zl_tensor *gsend, *grecv;

    /* stage 3 */
    zl_tensor *empty;
    int *trace, ntrace, *rec, nrec, cap_rec, pos;
    bool recording;
    int64_t live, peak_live, steps_done;
    int64_t fetch_bytes;       /* the gather buckets' buffers */

    double comm_time, io_time;
    int64_t collectives;       /* started by zz_start and zz_start_gathers */
};

/* layout.c */
ZZ_HIDDEN int64_t zz_chunk(int64_t n, int P);
ZZ_HIDDEN void zz_owned(int64_t n, int64_t k, int q, int64_t *lo, int64_t *own);
ZZ_HIDDEN double zz_now(void);
/* Prefix the current error with what failed and on which parameter; its status. */
ZZ_HIDDEN zl_status zz_fail(const char *what, const char *name);
ZZ_HIDDEN int zz_find(const zl_zero *z, const zl_tensor *p);
/* dst[i] (+)= alpha * src[i] for n elements: dst in dt, src f32. With
 * first, dst's old values count as zero and are not read (0 + alpha * src,
 * the add's bits). */
ZZ_HIDDEN void zz_axpy(void *dst, zl_dtype dt, const float *src, int64_t n, float alpha, bool first);
/* A 1-d view of t's elements [off, off + n). */
ZZ_HIDDEN zl_tensor *zz_slice(zl_tensor *t, int64_t off, int64_t n);
ZZ_HIDDEN void *zz_at(zl_tensor *t, int64_t off);
ZZ_HIDDEN zl_tensor *zz_buffer(zl_dtype dt, int64_t n, zl_mem_category cat, bool zero);

/* budget.c: value, each unit of which takes `unit` bytes, cut (to no less
 * than `least`) to fit the memory limit; `asked` is what config key `key`
 * said, which may be more than can be used (value). */
ZZ_HIDDEN int64_t zz_fit(const zl_zero *z, const char *key, int64_t asked, int64_t value, int64_t least,
                         int64_t unit);

/* reduce.c */
ZZ_HIDDEN zl_status zz_reduce_add(zl_zero *z, zz_entry *e);
ZZ_HIDDEN zl_status zz_reduce_drain(zl_zero *z);
ZZ_HIDDEN void zz_reduce_free(zl_zero *z);
ZZ_HIDDEN int64_t zz_reduce_bytes(const zl_zero *z);

/* params.c (stage 3) */
ZZ_HIDDEN zl_status zz_params_setup(zl_zero *z);
ZZ_HIDDEN zl_status zz_params_begin_forward(zl_zero *z);
ZZ_HIDDEN zl_status zz_params_after_step(zl_zero *z);
ZZ_HIDDEN zl_status zz_params_complete(zl_zero *z, zz_entry *e);
/* Every gather in flight past reading its working chunk, before the step writes the chunks. */
ZZ_HIDDEN zl_status zz_params_settle(zl_zero *z);
ZZ_HIDDEN zl_status zz_params_release(zl_zero *z, zz_entry *e);
ZZ_HIDDEN void zz_params_free(zl_zero *z);
ZZ_HIDDEN int64_t zz_params_gathered_bytes(const zl_zero *z);

/* masters.c: the optimizer sub-groups, in memory or through the swap */
typedef struct zz_view {
    zl_tensor *t[3];           /* holding the master, then each state (borrowed) */
    int64_t at[3];             /* where the sub-group starts in each */
    int64_t off, len;          /* the sub-group's place in the partition */
    zl_tensor *buf;            /* the swap buffer holding it, or NULL */
    zl_tensor *g;              /* its gradients from element gat (zz_grads_view; the step's only) */
    int64_t gat;
} zz_view;
/* Host address of element i of the sub-group's master (j 0) or state j - 1; host memory only. */
static inline float *zz_vp(const zz_view *v, int j, int64_t i)
{
    return (float *)zl_tensor_data(v->t[j]) + v->at[j] + i;
}
ZZ_HIDDEN zl_status zz_masters_setup(zl_zero *z);
ZZ_HIDDEN zl_status zz_sub_acquire(zl_zero *z, int s, bool fresh, zz_view *v);
ZZ_HIDDEN zl_status zz_sub_release(zl_zero *z, int s, bool dirty);
ZZ_HIDDEN bool zz_sub_prefetch(zl_zero *z, int s);
ZZ_HIDDEN zl_status zz_masters_flush(zl_zero *z);

/* step.c: e's working chunk rounded from its master, at element at of master tensor mt */
ZZ_HIDDEN zl_status zz_store_working(zl_zero *z, zz_entry *e, zl_tensor *mt, int64_t at);
ZZ_HIDDEN zl_status zz_publish(zl_zero *z);
ZZ_HIDDEN zl_status zz_working_chunk(zl_zero *z, zz_entry *e, zl_tensor **out);
ZZ_HIDDEN void zz_working_done(zl_zero *z, zz_entry *e);

/* place.c: buffers in host memory or on the parameters' device, and moves
 * between any two places (flat contiguous tensors, element offsets) */
ZZ_HIDDEN bool zz_on_device(const zl_tensor *t);
/* n elements on the device when on_dev and the engine has one, else in host memory. */
ZZ_HIDDEN zl_tensor *zz_new(const zl_zero *z, bool on_dev, zl_dtype dt, int64_t n, zl_mem_category cat, bool zero);
/* n elements of host memory, page-locked for the engine's device when pin
 * (offload's pin_memory) and the device pins. */
ZZ_HIDDEN zl_tensor *zz_new_host(const zl_zero *z, bool pin, zl_dtype dt, int64_t n, zl_mem_category cat, bool zero);
/* dst[doff, doff + n) = src[soff, soff + n) in dst's dtype. */
ZZ_HIDDEN zl_status zz_copy(zl_tensor *dst, int64_t doff, const zl_tensor *src, int64_t soff, int64_t n);
ZZ_HIDDEN zl_status zz_zero(zl_tensor *t, int64_t off, int64_t n);
/* Copies on the device's copy stream (core/tensor_impl.h's zli_copy_stream),
 * beside the compute. zz_mark: *ev = an event marking the compute queued so
 * far (NULL without a copy stream). zz_copy_start: zz_copy between host
 * memory and the engine's device, same dtype, on the copy stream after
 * `after` (NULL: the compute queued so far), *done marking it; any other
 * copy, or one on a device without a copy stream, is zz_copy, done on
 * return (*done NULL). Neither buffer may be touched until *done was waited
 * for by the host. zz_event_wait: the host waits for *ev (and drops it), or
 * without host the compute queued from now on does; NULL is done already. */
ZZ_HIDDEN zl_status zz_mark(const zl_zero *z, void **ev);
ZZ_HIDDEN zl_status zz_copy_start(const zl_zero *z, void *after, zl_tensor *dst, int64_t doff, const zl_tensor *src,
                                  int64_t soff, int64_t n, void **done);
ZZ_HIDDEN zl_status zz_event_wait(const zl_zero *z, void **ev, bool host);
ZZ_HIDDEN void zz_event_drop(const zl_zero *z, void **ev);
/* dst[doff..] += alpha * src[soff..] (src f32), both in one place, as zz_axpy. */
ZZ_HIDDEN zl_status zz_add(zl_tensor *dst, int64_t doff, const zl_tensor *src, int64_t soff, int64_t n, float alpha);
/* dst[doff..] = 0 + alpha * src[soff..], both in host memory: zz_add's bits
 * over zeros, without reading dst. */
ZZ_HIDDEN void zz_put(zl_tensor *dst, int64_t doff, const zl_tensor *src, int64_t soff, int64_t n, float alpha);

/* grads.c: the gradient partition, in memory or by sub-group on NVMe, in
 * enough buffers for the sub-group being filled, the one before it being
 * written and one more, so that backward never waits for a write. */
#define ZZ_GRAD_BUFFERS 3
ZZ_HIDDEN zl_status zz_grads_setup(zl_zero *z);
ZZ_HIDDEN bool zz_grads_on_device(const zl_zero *z);
/* The gradient buffer's part of e += alpha * src: e's chunk at soff, and at
 * stages 0-1 partition q's chunk at soff + q * stride. */
ZZ_HIDDEN zl_status zz_grads_add(zl_zero *z, zz_entry *e, const zl_tensor *src, int64_t soff, int64_t stride,
                                 float alpha);
/* Every element counted as zero again (zero_grad). */
ZZ_HIDDEN zl_status zz_grads_clear(zl_zero *z);
/* Over this rank's share, in the order of the entries: *found (when check)
 * whether any element is inf or NaN, and *sumsq the sum of squares. */
ZZ_HIDDEN zl_status zz_grads_scan(zl_zero *z, bool check, bool *found, double *sumsq);
/* Sub-group s's gradients, from element *at of *t, until zz_grads_done. */
ZZ_HIDDEN zl_status zz_grads_view(zl_zero *z, int s, zl_tensor **t, int64_t *at);
ZZ_HIDDEN zl_status zz_grads_done(zl_zero *z, int s);
/* Bytes of gradient buffers in memory. */
ZZ_HIDDEN int64_t zz_grads_bytes(const zl_zero *z);

/* collect.c: collectives on buffers wherever they live. allreduce and
 * broadcast work in place on `in` (out unused). zz_start returns NULL with
 * the error; zz_wait frees the request (NULL: nothing to wait for). */
typedef enum zz_coll { ZZ_ALLREDUCE, ZZ_REDUCE_SCATTER, ZZ_ALLGATHER, ZZ_BROADCAST } zz_coll;
ZZ_HIDDEN zz_req *zz_start(zl_zero *z, zz_coll kind, zl_tensor *in, zl_tensor *out, zl_comm_op op, int root);
/* Whether t lies where the communicator's collectives run. */
ZZ_HIDDEN bool zz_in_comm_memory(const zl_zero *z, const zl_tensor *t);
/* out[i] = every rank's in[i] for i < n, as one collective; every tensor in
 * the communicator's memory (zz_start stages nothing here). */
ZZ_HIDDEN zz_req *zz_start_gathers(zl_zero *z, int n, zl_tensor *const *in, zl_tensor *const *out);
ZZ_HIDDEN zl_status zz_wait(zl_zero *z, zz_req *r);
/* The host waits until r no longer reads its input (a copy on the copy
 * stream), so that the input may be written; r stays in flight. */
ZZ_HIDDEN zl_status zz_req_settle(zl_zero *z, zz_req *r);
ZZ_HIDDEN zl_status zz_run(zl_zero *z, zz_coll kind, zl_tensor *in, zl_tensor *out, zl_comm_op op, int root);

/* init.c: zero.Init's chunks taken over by an engine */
ZZ_HIDDEN zl_zero_init *zz_init_owner(zl_zero_init *const *inits, int n, const zl_tensor *p);
ZZ_HIDDEN zl_status zz_init_take(zl_zero_init *in, const zl_tensor *p, float *dst, int64_t k,
                                 int64_t *numel, int *ndim, int64_t *shape);
ZZ_HIDDEN zl_status zz_init_shape(const zl_zero_init *in, const zl_tensor *p, int64_t *numel, int *ndim,
                                  int64_t *shape);

#endif
