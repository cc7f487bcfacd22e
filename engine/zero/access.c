/* The engine's entry points besides creation and the step: hyperparameters
 * and step counts, the forward/backward boundaries, one parameter gathered
 * or changed (its state read and written: state.c), and the queries a
 * checkpoint and the memory report need. */
#include <string.h>
#include "zero_impl.h"

static zl_status check_group(const zl_zero *z, int group, const char *fn)
{
    if (!z) return zl_error(ZL_EINVAL, "%s: no engine", fn);
    if (group < 0 || group >= z->ngroups)
        return zl_error(ZL_EINVAL, "%s: group %d is outside 0..%d", fn, group, z->ngroups - 1);
    return ZL_OK;
}

zl_status zl_zero_set_hparams(zl_zero *z, int group, const zl_zero_hparams *hp)
{
    zl_status st = check_group(z, group, "zl_zero_set_hparams");
    if (!st) z->hp[group] = *hp;
    return st;
}

zl_status zl_zero_get_hparams(const zl_zero *z, int group, zl_zero_hparams *hp)
{
    zl_status st = check_group(z, group, "zl_zero_get_hparams");
    if (!st) *hp = z->hp[group];
    return st;
}

int64_t zl_zero_group_steps(const zl_zero *z, int group)
{
    return check_group(z, group, "zl_zero_group_steps") ? -1 : z->steps[group];
}

zl_status zl_zero_set_group_steps(zl_zero *z, int group, int64_t steps)
{
    zl_status st = check_group(z, group, "zl_zero_set_group_steps");
    if (!st && steps < 0) st = zl_error(ZL_EINVAL, "zl_zero_set_group_steps: steps must be >= 0, got %lld", (long long)steps);
    if (!st) z->steps[group] = steps;
    return st;
}

zl_status zl_zero_begin_forward(zl_zero *z)
{
    if (!z) return zl_error(ZL_EINVAL, "zl_zero_begin_forward: no engine");
    return z->stage == 3 ? zz_params_begin_forward(z) : ZL_OK;
}

zl_status zl_zero_end_backward(zl_zero *z)
{
    if (!z) return zl_error(ZL_EINVAL, "zl_zero_end_backward: no engine");
    zl_status st = zz_reduce_drain(z);
    z->grads_open = false;
    z->backward_ended = !st;
    return st;
}

static zl_status entry_of(zl_zero *z, zl_tensor *p, const char *fn, zz_entry **e)
{
    int i = z && p ? zz_find(z, p) : -1;
    if (i < 0) return zl_error(ZL_EINVAL, "%s: the tensor is not a parameter this engine trains", fn);
    *e = &z->ents[i];
    return ZL_OK;
}

/* A gather held by the caller counts as a use in progress, so that the ops
 * reading p meanwhile do not release it when they end. */
zl_status zl_zero_gather(zl_zero *z, zl_tensor *p)
{
    zz_entry *e = NULL;
    zl_status st = entry_of(z, p, "zl_zero_gather", &e);
    if (st || z->stage < 3) return st;
    st = zz_params_complete(z, e);
    if (!st) e->active++;
    return st;
}

zl_status zl_zero_release(zl_zero *z, zl_tensor *p)
{
    zz_entry *e = NULL;
    zl_status st = entry_of(z, p, "zl_zero_release", &e);
    if (st || z->stage < 3) return st;
    if (e->active > 0) e->active--;
    if (e->persistent || e->active > 0) return ZL_OK;
    return zz_params_release(z, e);
}

zl_status zl_zero_update_param(zl_zero *z, zl_tensor *p, int root)
{
    zz_entry *e = NULL;
    zl_status st = entry_of(z, p, "zl_zero_update_param", &e);
    if (st) return st;
    if (root < 0 || root >= z->world)
        return zl_error(ZL_EINVAL, "zl_zero_update_param: root must be a rank in 0..%d, got %d", z->world - 1, root);
    if (zl_tensor_numel(p) != e->n)
        return zl_error(ZL_ESTATE, "zl_zero_update_param: %s is not gathered", e->name);
    int64_t n = e->n;
    zl_tensor *flat = zl_tensor_reshape(p, 1, &n);
    if (!flat) return zz_fail("flattening", e->name);
    bool was = zl_grad_set_enabled(false);
    st = zz_run(z, ZZ_BROADCAST, flat, NULL, ZL_COMM_SUM, root);
    zl_grad_set_enabled(was);
    zz_view v;
    if (!st) st = zz_sub_acquire(z, e->sub, false, &v);
    if (!st) {
        int64_t m = v.at[0] + (e->off - v.off);
        if (e->own > 0) st = zz_copy(v.t[0], m, flat, e->lo, e->own);
        if (!st) st = zz_store_working(z, e, v.t[0], m);
        zl_status s2 = zz_sub_release(z, e->sub, st == ZL_OK);
        if (!st) st = s2;
        if (!st) st = zz_masters_flush(z);
        if (!st && z->pswap) st = zli_swap_flush(z->pswap);
    }
    zl_tensor_release(flat);
    return st;
}

int zl_zero_num_params(const zl_zero *z) { return z ? z->nent : 0; }
int zl_zero_stage(const zl_zero *z) { return z ? z->stage : -1; }
int zl_zero_partitions(const zl_zero *z) { return z ? z->P : 0; }
zl_dtype zl_zero_dtype(const zl_zero *z) { return z ? z->wdtype : ZL_DTYPE_F32; }

const char *const *zl_zero_state_keys(const zl_zero *z, int *n)
{
    *n = z ? z->nstates : 0;
    return z ? z->keys : NULL;
}

zl_status zl_zero_param_of(const zl_zero *z, int i, zl_zero_param_info *out)
{
    if (!z || i < 0 || i >= z->nent)
        return zl_error(ZL_EINVAL, "zl_zero_param_of: index %d is outside 0..%d", i, z ? z->nent - 1 : -1);
    const zz_entry *e = &z->ents[i];
    *out = (zl_zero_param_info){.name = e->name, .tensor = e->p, .group = e->group, .ndim = e->ndim, .numel = e->n,
                                .k = e->k, .lo = e->lo, .own = e->own, .persistent = e->persistent};
    memcpy(out->shape, e->shape, sizeof e->shape);
    return ZL_OK;
}

zl_status zl_zero_memory_of(const zl_zero *z, zl_zero_memory *out)
{
    if (!z || !out) return zl_error(ZL_EINVAL, "zl_zero_memory_of: no engine");
    memset(out, 0, sizeof *out);
    int64_t ws = (int64_t)zl_dtype_size(z->wdtype);
    out->grads = zz_grads_bytes(z);
    if (z->full) {
        out->params = zl_tensor_numel(z->full) * ws;
    } else {
        out->params = (z->work ? zl_tensor_numel(z->work) * ws : 0) + zz_params_gathered_bytes(z);
    }
    if (z->master && z->full != z->master) out->master = zl_tensor_numel(z->master) * 4;
    for (int j = 0; j < 2; j++)
        if (z->states[j]) out->moments += zl_tensor_numel(z->states[j]) * 4;
    out->reduce_buffers = zz_reduce_bytes(z);
    if (z->gsend) out->allgather_buffers = (zl_tensor_numel(z->gsend) + zl_tensor_numel(z->grecv)) * ws;
    if (z->oswap) {
        zli_swap_stats f = zli_swap_stats_of(z->oswap);
        out->swap_buffers = f.buffer_bytes;
        out->nvme += f.file_bytes;
        out->read_bytes += f.bytes_read;
        out->write_bytes += f.bytes_written;
    }
    if (z->pswap) {
        zli_swap_stats f = zli_swap_stats_of(z->pswap);
        out->params += f.buffer_bytes;
        out->nvme += f.file_bytes;
        out->read_bytes += f.bytes_read;
        out->write_bytes += f.bytes_written;
    }
    if (z->gswap) {
        zli_swap_stats f = zli_swap_stats_of(z->gswap);
        out->nvme += f.file_bytes;
        out->read_bytes += f.bytes_read;
        out->write_bytes += f.bytes_written;
    }
    out->partition_elements = z->S;
    out->peak_live = z->peak_live;
    out->comm_seconds = z->comm_time;
    out->io_seconds = z->io_time;
    out->io_busy_seconds = zl_aio_busy_seconds(z->aio);
    out->collectives = z->collectives;
    return ZL_OK;
}
