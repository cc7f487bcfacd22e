/* Stage 3's parameters. Each rank keeps only its chunk of every parameter; a
 * parameter's data is empty until an op is about to read it (the use hook, in
 * forward and in backward), when its P chunks are all-gathered into a whole
 * tensor. The first micro-step records the order in which parameters are
 * read; later ones follow it and gather the next parameters ahead
 * (stage3_prefetch_bucket_size elements, asynchronously) while at most
 * stage3_max_live_parameters elements are gathered. After an op a parameter
 * is released unless it is persistent (at most
 * stage3_param_persistence_threshold elements: gathered once per step and
 * kept) or read again within stage3_max_reuse_distance elements of the
 * trace. A trace that no longer matches is dropped and recorded again.
 *
 * On several ranks the parameters gathered together go in a bucket with one
 * collective, as DeepSpeed's coalesced all-gather and FSDP2 do: those one
 * prefetch starts, and the persistent ones in runs of at most
 * stage3_prefetch_bucket_size elements. The collective reads each member's
 * working chunk where it lies and writes its P chunks straight into the
 * member's own whole tensor (zl_comm_allgather_coalesced), so a bucket costs
 * the copies of a lone gather. Where the chunks or the whole tensors would
 * have to be staged (the parameters on a device, the communicator on the
 * host), for chunks on NVMe, and with use_all_reduce_for_fetch_params, the
 * chunks are instead copied one after another into a send buffer (when
 * summing, into this rank's place of a zeroed receive buffer that is then
 * summed) and gathered into a receive buffer; when the first of them is
 * needed each one's P chunks are copied out into its own whole tensor. While
 * in flight those buffers stand in for the parameters' tensors (charged to
 * params, and counted live through the parameters); the copy-out briefly
 * holds both, about twice the bucket. A parameter needed and not prefetched
 * is gathered alone. A chunk on NVMe is only read ahead when prefetched: the
 * NVMe chunks of one prefetch form a bucket of their own, started when its
 * first parameter is needed, so that every rank starts the same collectives
 * in the same order (where the reads ahead stop depends on which swap buffers
 * are free, the same on every rank: each runs the same acquires, releases
 * and reads ahead on slots of the same sizes, and writes are waited for at
 * the same calls); each chunk's swap buffer is given back once copied into
 * the bucket, so that a bucket holds one at a time. On one rank nothing is
 * bucketed: a gather is a copy. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "zero_impl.h"

typedef struct zz_member {
    zz_entry *e;               /* NULL once released out of the bucket */
    int64_t at;                /* its chunk's place in each rank's part */
} zz_member;

struct zz_fetch {
    zl_tensor *send;           /* [len]: this rank's chunks; NULL when summing */
    zl_tensor *recv;           /* [P * len]: rank r's chunks from r * len */
    zz_req *req;
    bool issued;               /* its collective was started */
    bool direct;               /* into the members' own tensors, without send and recv */
    int64_t len, bytes;
    int n, left;               /* members, and those still in it */
    zz_member m[];
};

static zl_status set_data(zz_entry *e, zl_tensor *src)
{
    bool was = zl_grad_set_enabled(false);
    zl_status st = zl_tensor_set_data(e->p, src);
    zl_grad_set_enabled(was);
    return st;
}

static void count_live(zl_zero *z, zz_entry *e, int64_t d)
{
    if (e->persistent) return;
    z->live += d;
    if (z->live > z->peak_live) z->peak_live = z->live;
}

static zl_status alloc_gathered(zl_zero *z, zz_entry *e)
{
    if (!(e->gathered = zz_new(z, true, z->wdtype, z->P * e->k, ZL_MEM_PARAMS, false)))
        return zl_error(ZL_ENOMEM, "ZeRO-3: out of memory gathering %s", e->name);
    return ZL_OK;
}

/* The collective of e's gather from its working chunk. */
static zl_status gather_from(zl_zero *z, zz_entry *e, bool async)
{
    zl_tensor *src;
    zl_status st = zz_working_chunk(z, e, &src);
    if (st) return st;
    bool by_sum = z->cfg.use_all_reduce_for_fetch_params;
    if (by_sum) {
        /* every rank's chunk in its place of a zeroed whole, summed */
        st = zz_zero(e->gathered, 0, z->P * e->k);
        if (!st) st = zz_copy(e->gathered, (int64_t)z->q * e->k, src, 0, e->k);
    }
    if (!st) {
        e->req = by_sum ? zz_start(z, ZZ_ALLREDUCE, e->gathered, NULL, ZL_COMM_SUM, 0)
                        : zz_start(z, ZZ_ALLGATHER, src, e->gathered, ZL_COMM_SUM, 0);
        if (!e->req) st = zli_last_code();
    }
    if (!st && !async) {
        st = zz_wait(z, e->req);
        e->req = NULL;
    }
    zl_tensor_release(src);
    /* An NVMe chunk's buffer is given back once no gather reads it. */
    if (!async || st) zz_working_done(z, e);
    return st;
}

/* Start gathering e alone (asynchronously when prefetching on one rank). A
 * chunk on NVMe prefetched is only read ahead here; its gather follows in
 * complete(). */
static zl_status start(zl_zero *z, zz_entry *e, bool async)
{
    zl_status st = alloc_gathered(z, e);
    if (st) return st;
    e->status = ZZ_INFLIGHT;
    count_live(z, e, e->n);
    if (e->pslot >= 0 && async) {
        e->reading = true;
        return ZL_OK;
    }
    return gather_from(z, e, async);
}

/* e in flight in bucket *f, which is made with room for cap members when NULL. */
static zl_status join(zl_zero *z, zz_entry *e, zz_fetch **f, int cap)
{
    if (!*f && !(*f = calloc(1, sizeof **f + (size_t)cap * sizeof(zz_member))))
        return zl_error(ZL_ENOMEM, "ZeRO-3: out of memory for the gather bucket of %s", e->name);
    (*f)->m[(*f)->n++].e = e;
    (*f)->left++;
    e->fetch = *f;
    e->status = ZZ_INFLIGHT;
    count_live(z, e, e->n);
    return ZL_OK;
}

static void fetch_free(zl_zero *z, zz_fetch *f)
{
    zl_tensor_release(f->send);
    zl_tensor_release(f->recv);
    z->fetch_bytes -= f->bytes;
    free(f);
}

/* The bucket's collective through bucket buffers: the members' chunks
 * copied one after another into a send buffer (when summing, into this
 * rank's place of a zeroed receive buffer), gathered into a receive buffer,
 * and copied out in fetch_finish. in[i]: member i's working chunk in memory,
 * or NULL for one on NVMe, whose swap buffer is taken and given back in turn. */
static zl_status issue_copied(zl_zero *z, zz_fetch *f, int m, zl_tensor *const *in, const zz_member *const *mem)
{
    bool by_sum = z->cfg.use_all_reduce_for_fetch_params;
    int64_t len = f->len;
    if (!(f->recv = zz_new(z, true, z->wdtype, z->P * len, ZL_MEM_PARAMS, by_sum)) ||
        (!by_sum && !(f->send = zz_new(z, true, z->wdtype, len, ZL_MEM_PARAMS, false))))
        return zl_error(ZL_ENOMEM, "ZeRO-3: out of memory for the gather bucket of %s (%lld elements)",
                        mem[0]->e->name, (long long)len);
    f->bytes = (by_sum ? z->P : z->P + 1) * len * (int64_t)zl_dtype_size(z->wdtype);
    z->fetch_bytes += f->bytes;
    zl_tensor *dst = by_sum ? f->recv : f->send;
    int64_t base = by_sum ? (int64_t)z->q * len : 0;
    zl_status st = ZL_OK;
    for (int i = 0; i < m && !st; i++) {
        zz_entry *e = mem[i]->e;
        zl_tensor *src = in[i];
        if (!src && (st = zz_working_chunk(z, e, &src))) break;
        st = zz_copy(dst, base + mem[i]->at, src, 0, e->k);
        if (!in[i]) {
            zl_tensor_release(src);
            zz_working_done(z, e);
        }
    }
    if (st) return st;
    f->req = by_sum ? zz_start(z, ZZ_ALLREDUCE, f->recv, NULL, ZL_COMM_SUM, 0)
                    : zz_start(z, ZZ_ALLGATHER, f->send, f->recv, ZL_COMM_SUM, 0);
    return f->req ? ZL_OK : zli_last_code();
}

/* Start the bucket's collective: straight from each member's working chunk
 * into its own whole tensor when every chunk is in memory and both lie where
 * the communicator works; else through bucket buffers (issue_copied), so
 * that chunks on NVMe hold one swap buffer at a time. */
static zl_status fetch_issue(zl_zero *z, zz_fetch *f)
{
    f->issued = true;
    zl_tensor **in = calloc(2 * (size_t)f->n, sizeof *in);
    const zz_member **mem = calloc((size_t)f->n, sizeof *mem);
    if (!in || !mem) {
        free(in);
        free(mem);
        return zl_error(ZL_ENOMEM, "ZeRO-3: out of memory for a gather bucket");
    }
    zl_tensor **out = in + f->n;
    /* gathered tensors are made on the engine's device, if it has one */
    bool direct = !z->cfg.use_all_reduce_for_fetch_params && (z->dev != NULL) == z->comm_dev;
    int m = 0;
    int64_t len = 0;
    zl_status st = ZL_OK;
    for (int i = 0; i < f->n && !st; i++) {
        zz_entry *e = f->m[i].e;
        if (!e) continue;
        f->m[i].at = len;
        len += e->k;
        mem[m] = &f->m[i];
        if (e->pslot >= 0) direct = false;
        else if (!(st = zz_working_chunk(z, e, &in[m]))) direct = direct && zz_in_comm_memory(z, in[m]);
        m++;
    }
    f->len = len;
    f->direct = direct;
    for (int i = 0; i < m && direct && !st; i++)
        if (!(st = alloc_gathered(z, mem[i]->e))) out[i] = mem[i]->e->gathered;
    if (!st && direct) {
        f->req = zz_start_gathers(z, m, in, out);
        if (!f->req) st = zli_last_code();
    } else if (!st) {
        st = issue_copied(z, f, m, in, mem);
    }
    for (int i = 0; i < m; i++) zl_tensor_release(in[i]);
    free(in);
    free(mem);
    return st;
}

/* After a failure st: the bucket's members released and the bucket dropped. */
static zl_status fetch_fail(zl_zero *z, zz_fetch *f, zl_status st)
{
    zz_wait(z, f->req);
    f->req = NULL;
    for (int i = 0; i < f->n; i++) {
        zz_entry *e = f->m[i].e;
        if (!e) continue;
        e->fetch = NULL;
        zz_params_release(z, e);
    }
    fetch_free(z, f);
    return st;
}

/* The bucket's collective done (started first if it was not), each member's
 * P chunks in its own tensor (copied out of the bucket unless received
 * there), and the bucket dropped. */
static zl_status fetch_finish(zl_zero *z, zz_fetch *f)
{
    zl_status st = f->issued ? ZL_OK : fetch_issue(z, f);
    if (!st) {
        st = zz_wait(z, f->req);
        f->req = NULL;
    }
    for (int i = 0; i < f->n && !st; i++) {
        zz_entry *e = f->m[i].e;
        if (!e || f->direct) continue;
        if ((st = alloc_gathered(z, e))) continue;
        for (int r = 0; r < z->P && !st; r++)
            st = zz_copy(e->gathered, (int64_t)r * e->k, f->recv, (int64_t)r * f->len + f->m[i].at, e->k);
    }
    if (st) return fetch_fail(z, f, st);
    for (int i = 0; i < f->n; i++)
        if (f->m[i].e) f->m[i].e->fetch = NULL;
    fetch_free(z, f);
    return ZL_OK;
}

/* e out of its bucket; the last member out drops it, once its collective is done. */
static zl_status leave(zl_zero *z, zz_entry *e)
{
    zz_fetch *f = e->fetch;
    e->fetch = NULL;
    for (int i = 0; i < f->n; i++)
        if (f->m[i].e == e) f->m[i].e = NULL;
    if (--f->left > 0) return ZL_OK;
    zl_status st = zz_wait(z, f->req);
    fetch_free(z, f);
    return st;
}

zl_status zz_params_complete(zl_zero *z, zz_entry *e)
{
    zl_status st = ZL_OK;
    if (e->status == ZZ_AVAILABLE) return ZL_OK;
    if (e->status == ZZ_RELEASED && (st = start(z, e, false))) return st;
    if (e->fetch && (st = fetch_finish(z, e->fetch))) return st;
    if (e->reading) {
        e->reading = false;
        if ((st = gather_from(z, e, false))) return st;
    }
    if (e->req) {
        st = zz_wait(z, e->req);
        e->req = NULL;
        zz_working_done(z, e);
        if (st) return st;
    }
    zl_tensor *part = zz_slice(e->gathered, 0, e->n);
    zl_tensor *data = part ? zl_tensor_view(part, e->ndim, e->shape) : NULL;
    st = data ? set_data(e, data) : ZL_ENOMEM;
    zl_tensor_release(part);
    zl_tensor_release(data);
    if (!st) e->status = ZZ_AVAILABLE;
    return st;
}

zl_status zz_params_settle(zl_zero *z)
{
    zl_status st = ZL_OK;
    for (int i = 0; i < z->nent && !st; i++) {
        zz_entry *e = &z->ents[i];
        st = zz_req_settle(z, e->req);
        /* a bucket gathering straight from the working chunks reads them until it is done */
        if (!st && e->fetch && e->fetch->direct) {
            st = zz_wait(z, e->fetch->req);
            e->fetch->req = NULL;
        }
    }
    return st;
}

zl_status zz_params_release(zl_zero *z, zz_entry *e)
{
    if (e->status == ZZ_RELEASED) return ZL_OK;
    zl_status st = e->fetch ? leave(z, e) : ZL_OK;
    zl_status s2 = zz_wait(z, e->req);
    e->req = NULL;
    zz_working_done(z, e);
    e->reading = false;
    if (!st) st = s2;
    s2 = set_data(e, z->empty);
    zl_tensor_release(e->gathered);
    e->gathered = NULL;
    e->status = ZZ_RELEASED;
    count_live(z, e, -e->n);
    return st ? st : s2;
}

/* Every persistent parameter gathered afresh: on several ranks in buckets of
 * consecutive ones, at most stage3_prefetch_bucket_size elements (one
 * parameter at least). */
static zl_status gather_persistent(zl_zero *z)
{
    zl_status st = ZL_OK;
    for (int i = 0; i < z->nent && !st; i++)
        if (z->ents[i].persistent) st = zz_params_release(z, &z->ents[i]);
    for (int a = 0; a < z->nent && !st;) {
        zz_fetch *f = NULL;
        int64_t fill = 0;
        int b = a;
        for (; b < z->nent && !st; b++) {
            zz_entry *e = &z->ents[b];
            if (!e->persistent) continue;
            if (f && fill + e->n > z->cfg.prefetch_bucket_size) break;
            fill += e->n;
            if (z->P > 1) st = join(z, e, &f, z->nent - b);
        }
        for (int i = a; i < b && !st; i++)
            if (z->ents[i].persistent) st = zz_params_complete(z, &z->ents[i]);
        a = b;
    }
    return st;
}

/* Gather what the trace says comes next, within the prefetch and live limits. */
static zl_status prefetch_from(zl_zero *z, int pos)
{
    int64_t budget = z->cfg.prefetch_bucket_size;
    /* on several ranks, the chunks in memory ([0], started now) and those on NVMe ([1], started when first needed) */
    zz_fetch *f[2] = {NULL, NULL};
    zl_status st = ZL_OK;
    for (int j = pos; j < z->ntrace && !st; j++) {
        zz_entry *e = &z->ents[z->trace[j]];
        if (e->status != ZZ_RELEASED) continue;
        if (e->n > budget || z->live + e->n > z->cfg.max_live_parameters) break;
        /* a chunk on NVMe goes ahead only as far as free swap buffers allow */
        bool started = true;
        if (e->pslot >= 0 && (zli_swap_prefetch(z->pswap, e->pslot, false, &started) || !started)) break;
        budget -= e->n;
        st = z->P > 1 ? join(z, e, &f[e->pslot >= 0], z->ntrace - j) : start(z, e, true);
    }
    if (!st && f[0] && (st = fetch_issue(z, f[0]))) st = fetch_fail(z, f[0], st);
    return st;
}

/* Keep e after its use when the trace reads it again soon. */
static bool reused_soon(const zl_zero *z, const zz_entry *e)
{
    if (!z->trace) return false;
    int64_t dist = 0;
    for (int j = z->pos; j < z->ntrace; j++) {
        const zz_entry *x = &z->ents[z->trace[j]];
        if (x == e) return dist <= z->cfg.max_reuse_distance && z->live <= z->cfg.max_live_parameters;
        dist += x->n;
        if (dist > z->cfg.max_reuse_distance) return false;
    }
    return false;
}

static zl_status record(zl_zero *z, int idx)
{
    if (z->nrec == z->cap_rec) {
        int nc = z->cap_rec ? 2 * z->cap_rec : 64;
        int *nr = realloc(z->rec, (size_t)nc * sizeof *nr);
        if (!nr) return zl_error(ZL_ENOMEM, "ZeRO-3: out of memory recording the parameter trace");
        z->rec = nr;
        z->cap_rec = nc;
    }
    z->rec[z->nrec++] = idx;
    return ZL_OK;
}

static zl_status on_use(zl_tensor *t, zl_use_event ev, const char *op, void *user)
{
    (void)t;
    (void)op;
    zz_entry *e = user;
    zl_zero *z = e->z;
    zl_status st = ZL_OK;
    if (ev == ZL_USE_BEFORE_FORWARD || ev == ZL_USE_BEFORE_BACKWARD) {
        if (z->trace) {
            if (z->pos >= z->ntrace || z->trace[z->pos] != e->index) {
                /* The model read parameters in another order: record afresh. */
                if (z->cfg.log_trace_cache_warnings)
                    fprintf(stderr, "zlua: ZeRO-3: invalidate trace cache @ step %lld: expected parameter %s, got %s\n",
                            (long long)z->steps_done,
                            z->pos < z->ntrace ? z->ents[z->trace[z->pos]].name : "(end of trace)", e->name);
                z->nrec = 0;
                for (int j = 0; j < z->pos && !st; j++) st = record(z, z->trace[j]);
                free(z->trace);
                z->trace = NULL;
                z->ntrace = 0;
                z->recording = true;
            } else {
                z->pos++;
            }
        }
        if (!st && z->recording) st = record(z, e->index);
        if (!st) st = zz_params_complete(z, e);
        if (!st) e->active++;
        if (!st && z->trace) st = prefetch_from(z, z->pos);
    } else {
        e->active--;
        if (e->active == 0 && !e->persistent && !reused_soon(z, e)) st = zz_params_release(z, e);
    }
    return st;
}

zl_status zz_params_setup(zl_zero *z)
{
    if (!(z->empty = zz_new(z, true, z->wdtype, 0, ZL_MEM_PARAMS, false))) return ZL_ENOMEM;
    z->recording = true;
    int64_t persisted = 0;
    for (int i = 0; i < z->nent; i++) {
        zz_entry *e = &z->ents[i];
        /* Small parameters stay whole, up to stage3_model_persistence_threshold elements in all. */
        e->persistent = e->n <= z->cfg.param_persistence_threshold &&
                        persisted + e->n <= z->cfg.model_persistence_threshold;
        if (e->persistent) persisted += e->n;
        e->status = ZZ_RELEASED;
        zl_status st = set_data(e, z->empty);
        if (st) return st;
        zl_tensor_set_category(e->p, ZL_MEM_PARAMS);
        e->use_hook = zl_tensor_add_use_hook(e->p, on_use, e, NULL);
        if (!e->use_hook) return zz_fail("the use hook of", e->name);
    }
    return gather_persistent(z);
}

zl_status zz_params_begin_forward(zl_zero *z)
{
    if (z->recording && z->nrec > 0) {
        free(z->trace);
        z->trace = z->rec;
        z->ntrace = z->nrec;
        z->rec = NULL;
        z->nrec = z->cap_rec = 0;
        z->recording = false;
    }
    z->pos = 0;
    return z->trace ? prefetch_from(z, 0) : ZL_OK;
}

zl_status zz_params_after_step(zl_zero *z)
{
    z->steps_done++;
    zl_status st = ZL_OK;
    for (int i = 0; i < z->nent; i++) {
        zz_entry *e = &z->ents[i];
        zl_status s2 = e->persistent ? ZL_OK : zz_params_release(z, e);
        if (!st) st = s2;
    }
    return st ? st : gather_persistent(z);
}

void zz_params_free(zl_zero *z)
{
    for (int i = 0; i < z->nent; i++) {
        zz_entry *e = &z->ents[i];
        if (e->fetch) leave(z, e);
        zz_wait(z, e->req);
        e->req = NULL;
        zz_working_done(z, e);
        zl_tensor_release(e->gathered);
        e->gathered = NULL;
    }
    zl_tensor_release(z->empty);
    free(z->trace);
    free(z->rec);
}

int64_t zz_params_gathered_bytes(const zl_zero *z)
{
    int64_t b = z->fetch_bytes;
    for (int i = 0; i < z->nent; i++)
        if (z->ents[i].gathered) b += zl_tensor_numel(z->ents[i].gathered) * (int64_t)zl_dtype_size(z->wdtype);
    return b;
}
