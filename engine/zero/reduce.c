/* The gradient path of every stage. A parameter's gradient-ready hook hands
 * its finished gradient to the bucket (and drops it from the parameter, so no
 * rank keeps a full gradient past its bucket); a bucket of reduce_bucket_size
 * elements is laid out chunk by chunk (partition q's chunks of every gradient
 * together, in f32) and reduced: all-reduced at stages 0-1 (every rank keeps
 * the whole gradient), reduce-scattered at stages 2-3 (each rank receives its
 * partition only; with reduce_scatter off all-reduced, each keeping its
 * part). With overlap_comm the collective runs while backward goes on, over
 * two buffers used in turn. The sum, divided by the world size, is added into
 * the gradient partition (grads.c), so micro-steps accumulate there;
 * DeepSpeed's prescale_gradients and gradient_predivide_factor move part or
 * all of that division before the sum (the same mean, other roundings and
 * range). */
#include <stdlib.h>
#include <string.h>
#include "zero_impl.h"

static bool partitioned(const zl_zero *z) { return z->stage >= 2; }
static bool scatter(const zl_zero *z) { return partitioned(z) && z->cfg.reduce_scatter; }

/* The factor each rank's gradient is multiplied by before the sum, and the
 * one the sum is multiplied by after: 1/world before with prescale_gradients,
 * else 1/f before and f/world after (f the predivide factor; the default f = 1
 * is the plain sum divided by the world size). */
static float pre_scale(const zl_zero *z)
{
    return (float)(z->cfg.prescale_gradients ? 1.0 / z->world : 1.0 / z->cfg.gradient_predivide_factor);
}
static float post_scale(const zl_zero *z)
{
    return z->cfg.prescale_gradients ? 1.0f : (float)(z->cfg.gradient_predivide_factor / z->world);
}

/* Whether the bucket's reduced part goes to host memory before its add
 * (the buckets on the device, the gradient buffer offloaded with the optimizer). */
static bool to_host(const zl_zero *z, const zz_bucket *b) { return zz_on_device(b->data) && !zz_grads_on_device(z); }

/* Wait for a bucket's collective and add its result into the gradient
 * buffer. A gradient buffer in host memory (the optimizer offloaded) takes
 * the part this rank keeps in one copy from the device first, on the copy
 * stream: it waits for the compute that wrote that part, not for the
 * backward queued since. */
static zl_status finish(zl_zero *z, zz_bucket *b)
{
    if (!b->busy) return ZL_OK;
    b->busy = false;
    zl_status st = zz_wait(z, b->req);
    b->req = NULL;
    if (st) {
        zz_event_drop(z, &b->ready);
        return st;
    }
    float inv = post_scale(z);
    /* src holds the reduced elements; element i of partition q's part is at base + q * L + i */
    zl_tensor *src = scatter(z) ? b->out : b->data;
    int64_t base = scatter(z) ? 0 : partitioned(z) ? (int64_t)z->rank * b->len : 0, L = b->len;
    int64_t span = partitioned(z) ? L : z->P * L;
    if (to_host(z, b)) {
        if (!b->host || zl_tensor_numel(b->host) < span) {
            zl_tensor_release(b->host);
            b->host = zz_new_host(z, z->cfg.offload_optimizer.pin_memory, ZL_DTYPE_F32, zl_tensor_numel(b->data),
                                  ZL_MEM_COMM, false);
        }
        void *copied = NULL;
        st = b->host ? zz_copy_start(z, b->ready, b->host, 0, src, base, span, &copied) : ZL_ENOMEM;
        if (!st) st = zz_event_wait(z, &copied, true);
        zz_event_drop(z, &b->ready);
        if (st) return st;
        src = b->host;
        base = 0;
    }
    for (int i = 0; i < b->nitems && !st; i++)
        st = zz_grads_add(z, b->items[i].e, src, base + b->items[i].boff, L, inv);
    b->nitems = 0;
    return st;
}

/* The next bucket buffer, large enough for len elements per partition. */
static zl_status next_bucket(zl_zero *z, int64_t len, zz_bucket **out)
{
    z->turn ^= 1;
    zz_bucket *b = &z->buckets[z->turn];
    if (b->busy) {
        zl_status st = finish(z, b);
        if (st) return st;
    }
    if (!b->data || b->cap < len) {
        /* Never more than the partition's gradients (S elements) ever fill:
         * DeepSpeed's default reduce_bucket_size, 5e8, would otherwise take
         * 2 GB per bucket for any model, however small. */
        int64_t want = z->bucket_cap < z->S ? z->bucket_cap : z->S;
        if (want < len) want = len;
        zl_tensor_release(b->data);
        zl_tensor_release(b->out);
        b->out = NULL;
        b->data = zz_new(z, true, ZL_DTYPE_F32, z->P * want, ZL_MEM_COMM, false);
        if (!b->data) return ZL_ENOMEM;
        if (scatter(z) && !(b->out = zz_new(z, true, ZL_DTYPE_F32, want, ZL_MEM_COMM, false))) return ZL_ENOMEM;
        b->cap = want;
    }
    *out = b;
    return ZL_OK;
}

/* Reduce what the bucket holds (at the end of backward, or when full). */
static zl_status flush(zl_zero *z)
{
    if (z->npending == 0) return ZL_OK;
    int64_t L = z->fill;
    zz_bucket *b;
    zl_status st = next_bucket(z, L, &b);
    if (st) return st;
    float pre = pre_scale(z);
    for (int i = 0; i < z->npending && !st; i++) {
        zz_item *it = &z->pending[i];
        zz_entry *e = it->e;
        for (int q = 0; q < z->P && !st; q++) {
            int64_t lo, own;
            zz_owned(e->n, e->k, q, &lo, &own);
            int64_t at = q * L + it->boff;
            if (own > 0 && pre == 1.0f) st = zz_copy(b->data, at, it->g, lo, own);
            else if (own > 0 && !(st = zz_zero(b->data, at, own))) st = zz_add(b->data, at, it->g, lo, own, pre);
            /* the padding: up to a whole chunk for a parameter smaller than P chunks */
            if (!st && own < e->k) st = zz_zero(b->data, at + own, e->k - own);
        }
    }
    for (int i = 0; i < z->npending; i++) {
        zl_tensor_release(z->pending[i].g);
        z->pending[i].g = NULL;
    }
    if (st) {
        z->npending = 0;
        z->fill = 0;
        return st;
    }
    /* The bucket keeps the list until its reduction is added in. */
    if (b->icap < z->npending) {
        zz_item *ni = realloc(b->items, (size_t)z->npending * sizeof *ni);
        if (!ni) return zl_error(ZL_ENOMEM, "ZeRO: out of memory laying out a gradient bucket");
        b->items = ni;
        b->icap = z->npending;
    }
    memcpy(b->items, z->pending, (size_t)z->npending * sizeof *b->items);
    b->nitems = z->npending;
    z->npending = 0;
    z->fill = 0;
    b->len = L;
    b->busy = true;
    zl_tensor *whole = zz_slice(b->data, 0, z->P * L);
    zl_tensor *part = scatter(z) ? zz_slice(b->out, 0, L) : NULL;
    if (!whole || (scatter(z) && !part)) {
        zl_tensor_release(whole);
        b->busy = false;
        b->nitems = 0;
        return zl_error(ZL_ENOMEM, "ZeRO: out of memory viewing a gradient bucket");
    }
    b->req = part ? zz_start(z, ZZ_REDUCE_SCATTER, whole, part, ZL_COMM_SUM, 0)
                  : zz_start(z, ZZ_ALLREDUCE, whole, NULL, ZL_COMM_SUM, 0);
    zl_tensor_release(whole);
    zl_tensor_release(part);
    zl_status marked = b->req && to_host(z, b) ? zz_mark(z, &b->ready) : ZL_OK;
    if (!b->req || marked) {
        zl_status code = b->req ? marked : zli_last_code();
        zz_wait(z, b->req);
        b->req = NULL;
        b->busy = false;
        b->nitems = 0;
        return code;
    }
    return z->cfg.overlap_comm ? ZL_OK : finish(z, b);
}

zl_status zz_reduce_add(zl_zero *z, zz_entry *e)
{
    e->seen = true;
    z->grads_open = true;
    zl_tensor *g0 = zl_tensor_grad(e->p);
    if (!g0) return ZL_OK;
    int64_t n = e->n;
    zl_tensor *flat = zl_tensor_reshape(g0, 1, &n);
    zl_tensor *g = flat ? zl_tensor_contiguous(flat) : NULL;
    zl_tensor_release(flat);
    if (!g) return zz_fail("the gradient of", e->name);
    if (zl_tensor_dtype(g) != ZL_DTYPE_F32) {
        zl_tensor *f = zl_tensor_to(g, ZL_DTYPE_F32);
        zl_tensor_release(g);
        if (!(g = f)) return zz_fail("the gradient of", e->name);
    }
    zl_tensor_set_grad(e->p, NULL);
    zl_status st = ZL_OK;
    /* Alone, the sum over ranks is the gradient itself: it goes straight into
     * the gradient buffer, the bucket's copy and collective skipped, with the
     * bucket's arithmetic (a copy, then the post-scaled add), so the same bits. */
    if (z->world == 1 && e->k == e->n && pre_scale(z) == 1.0f && zz_on_device(g) == zz_grads_on_device(z)) {
        st = zz_grads_add(z, e, g, 0, 0, post_scale(z));
        zl_tensor_release(g);
        return st;
    }
    if (z->fill > 0 && z->fill + e->k > z->bucket_cap && (st = flush(z))) {
        zl_tensor_release(g);
        return st;
    }
    if (z->npending == z->cap_pending) {
        int nc = z->cap_pending ? 2 * z->cap_pending : 16;
        zz_item *ni = realloc(z->pending, (size_t)nc * sizeof *ni);
        if (!ni) {
            zl_tensor_release(g);
            return zl_error(ZL_ENOMEM, "ZeRO: out of memory queueing the gradient of %s", e->name);
        }
        z->pending = ni;
        z->cap_pending = nc;
    }
    z->pending[z->npending++] = (zz_item){.e = e, .g = g, .boff = z->fill};
    z->fill += e->k;
    if (z->fill >= z->bucket_cap) return flush(z);
    return ZL_OK;
}

zl_status zz_reduce_drain(zl_zero *z)
{
    zl_status st = flush(z);
    for (int i = 0; i < 2; i++) {
        zl_status s2 = finish(z, &z->buckets[i]);
        if (!st) st = s2;
    }
    if (st) return st;
    bool check = !z->cfg.ignore_unused_parameters;
    for (int i = 0; i < z->nent; i++) {
        zz_entry *e = &z->ents[i];
        if (check && !e->seen && !st)
            st = zl_error(ZL_ESTATE,
                          "engine:backward: parameter %s received no gradient (the loss does not depend on it); "
                          "set zero_optimization.ignore_unused_parameters to true to allow this", e->name);
        e->seen = false;
    }
    return st;
}

void zz_reduce_free(zl_zero *z)
{
    for (int i = 0; i < 2; i++) {
        zz_bucket *b = &z->buckets[i];
        if (b->req) zz_wait(z, b->req);
        zz_event_drop(z, &b->ready);
        for (int j = 0; j < b->nitems; j++) zl_tensor_release(b->items[j].g);
        free(b->items);
        zl_tensor_release(b->data);
        zl_tensor_release(b->out);
        zl_tensor_release(b->host);
        memset(b, 0, sizeof *b);
    }
    for (int j = 0; j < z->npending; j++) zl_tensor_release(z->pending[j].g);
    free(z->pending);
    z->pending = NULL;
    z->npending = z->cap_pending = 0;
}

int64_t zz_reduce_bytes(const zl_zero *z)
{
    int64_t b = 0;
    for (int i = 0; i < 2; i++) {
        if (z->buckets[i].data) b += zl_tensor_numel(z->buckets[i].data) * 4;
        if (z->buckets[i].out) b += zl_tensor_numel(z->buckets[i].out) * 4;
    }
    return b;
}
