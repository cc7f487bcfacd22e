/* Where the f32 masters and optimizer moments live: one flat buffer each for
 * the whole partition, or (offload_optimizer nvme) sub-groups of at most
 * sub_group_size elements in the optimizer swap, each slot holding a
 * sub-group's master then each state tensor, brought into a swap buffer
 * while it is stepped, saved or loaded; and the walk over them that
 * checkpoints read and write through. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "zero_impl.h"

static bool swapped(const zl_zero *z) { return z->oswap != NULL; }

zl_status zz_masters_setup(zl_zero *z)
{
    bool nvme = z->cfg.offload_optimizer.device == ZL_OFFLOAD_NVME && z->stage >= 1;
    const zl_zero_offload *oc = &z->cfg.offload_optimizer;
    int ntensors = 1 + z->nstates;
    int least = oc->pipeline_read || oc->pipeline_write ? 2 : 1;
    int per = oc->buffer_count / ntensors;
    if (per < least) per = least;
    int64_t cap = INT64_MAX;
    if (nvme) {
        /* what an element of a sub-group takes in the optimizer's and the gradients' buffers */
        int64_t unit = (int64_t)per * ntensors * 4 + ZZ_GRAD_BUFFERS * (int64_t)zl_dtype_size(z->gdtype);
        int64_t asked = z->cfg.sub_group_size > 0 ? z->cfg.sub_group_size : 1;
        cap = zz_fit(z, "sub_group_size", asked, asked < z->S ? asked : z->S, 1, unit);
    }
    z->subs = calloc((size_t)(z->nent > 0 ? z->nent : 1), sizeof *z->subs);
    if (!z->subs) return zl_error(ZL_ENOMEM, "ZeRO: out of memory for the optimizer sub-groups");
    int64_t maxlen = 0;
    zz_sub *cur = NULL;
    for (int i = 0; i < z->nent; i++) {
        zz_entry *e = &z->ents[i];
        if (!cur || cur->len + e->k > cap) {
            cur = &z->subs[z->nsub++];
            *cur = (zz_sub){.first = i, .off = e->off, .slot = -1};
        }
        cur->count++;
        cur->len += e->k;
        e->sub = (int)(cur - z->subs);
        if (cur->len > maxlen) maxlen = cur->len;
    }
    if (!nvme) {
        bool pin = z->cfg.offload_optimizer.pin_memory;
        for (int j = 0; j <= z->nstates; j++) {
            zl_tensor *t = z->opt_on_dev ? zz_new(z, true, ZL_DTYPE_F32, z->S, ZL_MEM_OPTIMIZER, true)
                                         : zz_new_host(z, pin, ZL_DTYPE_F32, z->S, ZL_MEM_OPTIMIZER, true);
            if (!t) return ZL_ENOMEM;
            *(j ? &z->states[j - 1] : &z->master) = t;
        }
        return ZL_OK;
    }
    char dir[4096], path[4200];
    char sub[64];
    snprintf(sub, sizeof sub, "optimizer/rank%d", z->rank);
    zl_status st = zli_swap_folder(oc->nvme_path, sub, "offload_optimizer", dir, sizeof dir);
    if (st) return st;
    snprintf(path, sizeof path, "%s/optimizer.swp", dir);
    /* counted as the config counts them: a buffer per tensor of a sub-group */
    per = (int)(zz_fit(z, "offload_optimizer.buffer_count", oc->buffer_count, (int64_t)per * ntensors,
                       (int64_t)least * ntensors, (maxlen > 0 ? maxlen : 1) * 4) / ntensors);
    zli_swap_config sc = {.path = path, .dtype = ZL_DTYPE_F32, .buffer_elems = ntensors * (maxlen > 0 ? maxlen : 1),
                         .buffer_count = per, .cat = ZL_MEM_OPTIMIZER, .what = "offload_optimizer"};
    if ((st = zli_swap_open(z->aio, &sc, &z->oswap))) return st;
    for (int s = 0; s < z->nsub; s++) {
        z->subs[s].slot = zli_swap_add_slot(z->oswap, ntensors * z->subs[s].len);
        if (z->subs[s].slot < 0) return zl_error(ZL_EINVAL, "offload_optimizer: %s", zl_last_error());
    }
    return ZL_OK;
}

zl_status zz_sub_acquire(zl_zero *z, int s, bool fresh, zz_view *v)
{
    zz_sub *sg = &z->subs[s];
    memset(v, 0, sizeof *v);
    v->off = sg->off;
    v->len = sg->len;
    if (!swapped(z)) {
        v->t[0] = z->master;
        v->at[0] = sg->off;
        for (int j = 0; j < z->nstates; j++) {
            v->t[j + 1] = z->states[j];
            v->at[j + 1] = sg->off;
        }
        return ZL_OK;
    }
    double t0 = zz_now();
    zl_status st = fresh ? zli_swap_acquire_new(z->oswap, sg->slot, &v->buf)
                         : zli_swap_acquire(z->oswap, sg->slot, &v->buf);
    z->io_time += zz_now() - t0;
    if (st) return st;
    for (int j = 0; j <= z->nstates; j++) {
        v->t[j] = v->buf;
        v->at[j] = (int64_t)j * sg->len;
    }
    return ZL_OK;
}

zl_status zz_sub_release(zl_zero *z, int s, bool dirty)
{
    if (!swapped(z)) return ZL_OK;
    zl_status st = zli_swap_release(z->oswap, z->subs[s].slot, dirty);
    if (!st && dirty && !z->cfg.offload_optimizer.pipeline_write) st = zz_masters_flush(z);
    return st;
}

/* A read ahead that cannot start now is no error (the acquire reads it):
 * false tells the caller to stop reading further ahead, since a prefetched
 * slot holds its buffer until it is acquired. */
bool zz_sub_prefetch(zl_zero *z, int s)
{
    bool started = false;
    return swapped(z) && !zli_swap_prefetch(z->oswap, z->subs[s].slot, false, &started) && started;
}

zl_status zz_masters_flush(zl_zero *z)
{
    if (!swapped(z)) return ZL_OK;
    double t0 = zz_now();
    zl_status st = zli_swap_flush(z->oswap);
    z->io_time += zz_now() - t0;
    return st;
}

zl_status zl_zero_each_chunk(zl_zero *z, bool write, const bool *only, zl_zero_chunk_fn fn, void *user)
{
    if (!z || !fn) return zl_error(ZL_EINVAL, "zl_zero_each_chunk: no engine or function");
    zl_status st = write && z->stage == 3 ? zz_params_settle(z) : ZL_OK;
    for (int s = 0; s < z->nsub && !st; s++) {
        zz_sub *sg = &z->subs[s];
        bool wanted = !only;
        for (int i = sg->first; i < sg->first + sg->count && !wanted; i++) wanted = only[i];
        if (!wanted) continue;
        zz_view v;
        if ((st = zz_sub_acquire(z, s, false, &v))) break;
        for (int i = sg->first; i < sg->first + sg->count && !st; i++) {
            if (only && !only[i]) continue;
            zz_entry *e = &z->ents[i];
            int64_t at = e->off - v.off;
            /* fn sees host copies wherever the chunks live */
            zl_tensor *ts[3] = {NULL, NULL, NULL};
            for (int j = 0; j <= z->nstates && !st; j++)
                if (!(ts[j] = zz_buffer(ZL_DTYPE_F32, e->k, ZL_MEM_OTHER, false)) ||
                    (st = zz_copy(ts[j], 0, v.t[j], v.at[j] + at, e->k)))
                    st = st ? st : ZL_ENOMEM;
            zl_tensor *m = ts[0], *sts[2] = {ts[1], ts[2]};
            if (!st) st = fn(i, m, sts, user);
            for (int j = 0; j <= z->nstates && !st && write; j++) st = zz_copy(v.t[j], v.at[j] + at, ts[j], 0, e->k);
            for (int j = 0; j < 3; j++) zl_tensor_release(ts[j]);
        }
        zl_status s2 = zz_sub_release(z, s, write && !st);
        if (!st) st = s2;
    }
    if (!st) st = zz_masters_flush(z);
    return st;
}

zl_status zl_zero_sync_working(zl_zero *z)
{
    if (!z) return zl_error(ZL_EINVAL, "zl_zero_sync_working: no engine");
    zl_status st = z->stage == 3 ? zz_params_settle(z) : ZL_OK;
    for (int s = 0; s < z->nsub && !st; s++) {
        zz_view v;
        if ((st = zz_sub_acquire(z, s, false, &v))) break;
        zz_sub *sg = &z->subs[s];
        for (int i = sg->first; i < sg->first + sg->count && !st; i++)
            st = zz_store_working(z, &z->ents[i], v.t[0], v.at[0] + (z->ents[i].off - v.off));
        zl_status s2 = zz_sub_release(z, s, false);
        if (!st) st = s2;
    }
    if (!st) st = zz_publish(z);
    return st;
}
