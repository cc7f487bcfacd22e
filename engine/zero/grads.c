/* The gradient partition: where the reduced gradients accumulate, micro-step
 * after micro-step, until the optimizer reads them. One buffer ([S], or
 * [P*S] at stage 1, where every rank keeps the whole gradient), or, with the
 * optimizer state on NVMe at stages 2-3 in more sub-groups than its buffers,
 * one slot per optimizer sub-group in a gradient swap (DeepSpeed's gradient
 * swap-out), so that nothing of the model's size stays in memory; and the
 * passes the step makes over it. */
#include <stdio.h>
#include <stdlib.h>
#include "zero_impl.h"

static bool partitioned(const zl_zero *z) { return z->stage >= 2; }

/* Alone, with the buffer in host memory, zero_grad only marks the slots
 * stale: a step's first gradient is written over its slot, not added to a
 * cleared one (no pass over the whole buffer), and the scan before the step
 * clears the slots no gradient reached before the buffer is read. */
static bool lazy(const zl_zero *z) { return z->grads && z->world == 1 && z->P == 1 && !zz_on_device(z->grads); }

bool zz_grads_on_device(const zl_zero *z) { return z->grads && zz_on_device(z->grads); }

static zl_status setup_swap(zl_zero *z)
{
    int64_t largest = 1;
    for (int s = 0; s < z->nsub; s++)
        if (z->subs[s].len > largest) largest = z->subs[s].len;
    char dir[4096], path[4200], sub[64];
    snprintf(sub, sizeof sub, "gradients/rank%d", z->rank);
    zl_status st = zli_swap_folder(z->cfg.offload_optimizer.nvme_path, sub, "offload_optimizer", dir, sizeof dir);
    if (st) return st;
    snprintf(path, sizeof path, "%s/gradients.swp", dir);
    zli_swap_config sc = {.path = path, .dtype = z->gdtype, .buffer_elems = largest, .buffer_count = ZZ_GRAD_BUFFERS,
                         .cat = ZL_MEM_GRADS, .what = "offload_optimizer", .write_back = true};
    if ((st = zli_swap_open(z->aio, &sc, &z->gswap))) return st;
    for (int s = 0; s < z->nsub; s++)
        if (zli_swap_add_slot(z->gswap, z->subs[s].len) != s)
            return zl_error(ZL_EINVAL, "offload_optimizer: %s", zl_last_error());
    return ZL_OK;
}

zl_status zz_grads_setup(zl_zero *z)
{
    /* swapping pays only where the sub-groups outnumber the buffers that hold them */
    if (z->oswap && partitioned(z) && z->nsub > ZZ_GRAD_BUFFERS) return setup_swap(z);
    int64_t gsize = z->stage == 1 ? (int64_t)z->P * z->S : z->S;
    z->gbase = z->stage == 1 ? (int64_t)z->q * z->S : 0;
    z->grads = z->opt_on_dev ? zz_new(z, true, z->gdtype, gsize, ZL_MEM_GRADS, true)
                             : zz_new_host(z, z->cfg.offload_optimizer.pin_memory, z->gdtype, gsize, ZL_MEM_GRADS,
                                           true);
    return z->grads ? ZL_OK : ZL_ENOMEM;
}

/* A stale entry's slot cleared, for an add into it. */
static zl_status settle(zl_zero *z, zz_entry *e)
{
    if (!e->stale) return ZL_OK;
    e->stale = false;
    return zz_zero(z->grads, e->off, e->k);
}

/* Before anything reads the buffer whole: slots zero_grad left stale cleared. */
static zl_status settle_all(zl_zero *z)
{
    zl_status st = ZL_OK;
    for (int i = 0; i < z->nent && !st; i++) st = settle(z, &z->ents[i]);
    return st;
}

zl_status zz_grads_add(zl_zero *z, zz_entry *e, const zl_tensor *src, int64_t soff, int64_t stride, float alpha)
{
    if (z->gswap) {
        zz_sub *sg = &z->subs[e->sub];
        zl_tensor *buf;
        double t0 = zz_now();
        zl_status st = zli_swap_acquire(z->gswap, e->sub, &buf);
        z->io_time += zz_now() - t0;
        if (st) return st;
        st = zz_add(buf, e->off - sg->off, src, soff, e->k, alpha);
        zl_status s2 = zli_swap_release(z->gswap, e->sub, true);
        return st ? st : s2;
    }
    /* stale slots exist only alone (P == 1), with the buffer in host memory */
    if (e->stale) {
        zz_put(z->grads, e->off, src, soff, e->k, alpha);
        e->stale = false;
        return ZL_OK;
    }
    if (partitioned(z)) return zz_add(z->grads, e->off, src, soff, e->k, alpha);
    zl_status st = ZL_OK;
    for (int q = 0; q < z->P && !st; q++)
        st = zz_add(z->grads, (int64_t)q * z->S + e->off, src, soff + q * stride, e->k, alpha);
    return st;
}

zl_status zz_grads_clear(zl_zero *z)
{
    if (z->gswap) {
        zl_status st = ZL_OK;
        for (int s = 0; s < z->nsub && !st; s++) st = zli_swap_drop(z->gswap, s);
        return st;
    }
    if (!lazy(z)) return zz_zero(z->grads, 0, zl_tensor_numel(z->grads));
    for (int i = 0; i < z->nent; i++) z->ents[i].stale = true;
    return ZL_OK;
}

zl_status zz_grads_view(zl_zero *z, int s, zl_tensor **t, int64_t *at)
{
    if (!z->gswap) {
        *t = z->grads;
        *at = z->gbase + z->subs[s].off;
        return ZL_OK;
    }
    *at = 0;
    double t0 = zz_now();
    zl_status st = zli_swap_acquire(z->gswap, s, t);
    z->io_time += zz_now() - t0;
    return st;
}

zl_status zz_grads_done(zl_zero *z, int s) { return z->gswap ? zli_swap_release(z->gswap, s, false) : ZL_OK; }

/* The scan of sub-group s: its entries' chunks, one tensor each, so that
 * the chunks of the norm's sum are the same whether the gradients are one
 * buffer or a slot per sub-group. */
static zl_status scan_sub(zl_zero *z, int s, bool check, bool *found, double *sumsq)
{
    zz_sub *sg = &z->subs[s];
    zl_tensor *t;
    int64_t at;
    zl_status st = zz_grads_view(z, s, &t, &at);
    if (st) return st;
    zl_tensor **parts = calloc((size_t)sg->count, sizeof *parts);
    if (!parts) st = zl_error(ZL_ENOMEM, "ZeRO: out of memory for the gradient norm");
    for (int i = 0; i < sg->count && !st; i++) {
        zz_entry *e = &z->ents[sg->first + i];
        if (!(parts[i] = zz_slice(t, at + e->off - sg->off, e->k))) st = ZL_ENOMEM;
    }
    bool any = false;
    if (!st && check) st = zl_grad_nonfinite(parts, sg->count, &any);
    if (!st) st = zl_grad_norm_sq_add(parts, sg->count, sumsq);
    *found = *found || any;
    for (int i = 0; parts && i < sg->count; i++) zl_tensor_release(parts[i]);
    free(parts);
    zl_status s2 = zz_grads_done(z, s);
    return st ? st : s2;
}

zl_status zz_grads_scan(zl_zero *z, bool check, bool *found, double *sumsq)
{
    *found = false;
    *sumsq = 0;
    zl_status st = settle_all(z);
    for (int s = 0; s < z->nsub && !st; s++) {
        bool started;
        if (z->gswap && s + 1 < z->nsub) zli_swap_prefetch(z->gswap, s + 1, false, &started);
        st = scan_sub(z, s, check, found, sumsq);
    }
    return st;
}

int64_t zz_grads_bytes(const zl_zero *z)
{
    if (z->gswap) return zli_swap_stats_of(z->gswap).buffer_bytes;
    return zl_tensor_numel(z->grads) * (int64_t)zl_dtype_size(z->gdtype);
}
