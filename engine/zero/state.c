/* One parameter's gradient, f32 master and optimizer state, whole or this
 * rank's part (DeepSpeed's safe_get/set_full_* and safe_get/set_local_*):
 * read from and written to wherever the engine keeps them (memory, the
 * device, NVMe), and the working copies kept in step with a master written. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "zero_impl.h"

/* What is read or written: the gradient, or tensor j of the optimizer's
 * sub-groups (0 the master, then each state key). */
enum { GRAD = -1, MASTER = 0 };

static zl_status find(zl_zero *z, zl_tensor *p, const char *fn, zz_entry **e)
{
    if (!z) return zl_error(ZL_EINVAL, "%s: no engine", fn);
    int i = p ? zz_find(z, p) : -1;
    if (i < 0)
        return zl_error(ZL_EINVAL, "%s: the tensor is not a parameter this engine trains (a frozen one is not "
                                   "in the engine)", fn);
    *e = &z->ents[i];
    return ZL_OK;
}

/* The index of state `key` among the sub-groups' tensors. */
static zl_status state_of(const zl_zero *z, const char *fn, const zz_entry *e, const char *key, int *j)
{
    for (int s = 0; key && s < z->nstates; s++)
        if (strcmp(z->keys[s], key) == 0) {
            *j = s + 1;
            return ZL_OK;
        }
    char kept[256] = "";
    size_t len = 0;
    for (int s = 0; s < z->nstates && len < sizeof kept; s++)
        len += (size_t)snprintf(kept + len, sizeof kept - len, "%s%s", s ? ", " : "", z->keys[s]);
    return zl_error(ZL_EINVAL, "%s: %s: the optimizer keeps no state '%s' (%s%s)", fn, e->name, key ? key : "(null)",
                    z->nstates ? "it keeps " : "it keeps none", kept);
}

/* A gradient exists from the end of a backward to the step. */
static zl_status grad_window(const zl_zero *z, const char *fn, const zz_entry *e)
{
    if (z->grads_open)
        return zl_error(ZL_ESTATE, "%s: %s: a backward's gradients are still being reduced (its end, "
                                   "zl_zero_end_backward, comes first)", fn, e->name);
    if (!z->backward_ended)
        return zl_error(ZL_ESTATE, "%s: %s: there is no gradient now: one exists from the end of a backward until "
                                   "the step", fn, e->name);
    return ZL_OK;
}

/* Partition r's chunk of e's gradient into dst at doff; r must be this
 * rank's partition at stages 2-3, where the others are not kept. */
static zl_status read_grad(zl_zero *z, zz_entry *e, int r, zl_tensor *dst, int64_t doff)
{
    if (e->stale) return zz_zero(dst, doff, e->k);
    if (z->stage <= 1) return zz_copy(dst, doff, z->grads, (z->stage == 1 ? (int64_t)r * z->S : 0) + e->off, e->k);
    zl_tensor *t;
    int64_t at;
    zl_status st = zz_grads_view(z, e->sub, &t, &at);
    if (st) return st;
    st = zz_copy(dst, doff, t, at + (e->off - z->subs[e->sub].off), e->k);
    zl_status s2 = zz_grads_done(z, e->sub);
    return st ? st : s2;
}

/* This rank's chunk of tensor j (k elements) into dst at doff. */
static zl_status read_chunk(zl_zero *z, zz_entry *e, int j, zl_tensor *dst, int64_t doff)
{
    if (j == GRAD) return read_grad(z, e, z->q, dst, doff);
    zz_view v;
    zl_status st = zz_sub_acquire(z, e->sub, false, &v);
    if (st) return st;
    st = zz_copy(dst, doff, v.t[j], v.at[j] + (e->off - v.off), e->k);
    zl_status s2 = zz_sub_release(z, e->sub, false);
    return st ? st : s2;
}

/* A gradient read is the unscaled one: divided by the loss scale. */
static zl_status unscale(zl_tensor *t, int j, double loss_scale)
{
    if (j != GRAD || loss_scale == 1.0) return ZL_OK;
    float *x = zl_tensor_data(t);
    int64_t n = zl_tensor_numel(t);
    float s = (float)loss_scale;
    for (int64_t i = 0; i < n; i++) x[i] /= s;
    return ZL_OK;
}

static zl_status check_scale(const char *fn, double loss_scale)
{
    if (!(loss_scale > 0) || !isfinite(loss_scale))
        return zl_error(ZL_EINVAL, "%s: loss_scale must be finite and > 0, got %g", fn, loss_scale);
    return ZL_OK;
}

/* The whole of tensor j (or the gradient) of e, in e's shape. */
static zl_status get_full(zl_zero *z, zz_entry *e, int j, double loss_scale, zl_tensor **out)
{
    *out = NULL;
    int P = z->P;
    zl_tensor *all = zz_buffer(ZL_DTYPE_F32, (int64_t)P * e->k, ZL_MEM_OTHER, false);
    zl_tensor *chunk = all && P > 1 ? zz_buffer(ZL_DTYPE_F32, e->k, ZL_MEM_OTHER, false) : NULL;
    zl_status st = all && (P == 1 || chunk) ? ZL_OK : ZL_ENOMEM;
    if (!st && j == GRAD && z->stage <= 1) {
        /* every rank keeps the whole gradient: no collective */
        for (int r = 0; r < P && !st; r++) st = read_grad(z, e, r, all, (int64_t)r * e->k);
    } else if (!st && P == 1) {
        st = read_chunk(z, e, j, all, 0);
    } else if (!st) {
        st = read_chunk(z, e, j, chunk, 0);
        if (!st) st = zz_run(z, ZZ_ALLGATHER, chunk, all, ZL_COMM_SUM, 0);
    }
    if (!st) st = unscale(all, j, loss_scale);
    zl_tensor *part = st ? NULL : zz_slice(all, 0, e->n);
    zl_tensor *shaped = part ? zl_tensor_view(part, e->ndim, e->shape) : NULL;
    if (!st) *out = shaped ? zl_tensor_clone(shaped) : NULL;
    if (!st && !*out) st = ZL_ENOMEM;
    zl_tensor_release(shaped);
    zl_tensor_release(part);
    zl_tensor_release(chunk);
    zl_tensor_release(all);
    return st;
}

/* This rank's part of tensor j (or the gradient) of e: the `own` elements
 * [lo, lo + own) of the flattened parameter, 1-d. */
static zl_status get_local(zl_zero *z, zz_entry *e, int j, double loss_scale, zl_tensor **out)
{
    *out = NULL;
    zl_tensor *chunk = zz_buffer(ZL_DTYPE_F32, e->k, ZL_MEM_OTHER, false);
    zl_status st = chunk ? read_chunk(z, e, j, chunk, 0) : ZL_ENOMEM;
    if (!st) st = unscale(chunk, j, loss_scale);
    zl_tensor *part = st ? NULL : zz_slice(chunk, 0, e->own);
    if (!st) *out = part ? zl_tensor_clone(part) : NULL;
    if (!st && !*out) st = ZL_ENOMEM;
    zl_tensor_release(part);
    zl_tensor_release(chunk);
    return st;
}

/* The value given, flattened (contiguous), after checking its size against
 * what it replaces. */
static zl_status flat_value(const char *fn, const zz_entry *e, const zl_tensor *value, int64_t want, bool whole,
                            zl_tensor **flat)
{
    *flat = NULL;
    if (!value) return zl_error(ZL_EINVAL, "%s: %s: no value given", fn, e->name);
    if (!zl_dtype_traits_of(zl_tensor_dtype(value))->is_float)
        return zl_error(ZL_EINVAL, "%s: %s: the value must be a floating-point tensor, got %s", fn, e->name,
                        zl_dtype_name(zl_tensor_dtype(value)));
    int64_t n = zl_tensor_numel(value);
    bool shaped = zl_tensor_ndim(value) == e->ndim && n == want;
    for (int d = 0; shaped && d < e->ndim; d++) shaped = zl_tensor_shape(value)[d] == e->shape[d];
    char have[128], need[128];
    zl_shape_str(zl_tensor_ndim(value), zl_tensor_shape(value), have, sizeof have);
    if (whole && !shaped) {
        zl_shape_str(e->ndim, e->shape, need, sizeof need);
        return zl_error(ZL_EINVAL, "%s: %s: the value's shape %s is not the parameter's %s", fn, e->name, have,
                        need);
    }
    if (!whole && (zl_tensor_ndim(value) != 1 || n != want))
        return zl_error(ZL_EINVAL, "%s: %s: this rank's part is 1-d with %lld elements; the value's shape is %s", fn,
                        e->name, (long long)want, have);
    zl_tensor *c = zl_tensor_contiguous((zl_tensor *)value);
    *flat = c ? zl_tensor_reshape(c, 1, &n) : NULL;
    zl_tensor_release(c);
    return *flat ? ZL_OK : zz_fail("flattening the value for", e->name);
}

/* Elements [soff, soff + own) of src become this rank's part of tensor j;
 * a master's working chunk follows it. */
static zl_status write_chunk(zl_zero *z, zz_entry *e, int j, const zl_tensor *src, int64_t soff)
{
    /* a gather fetched ahead may still be reading a working chunk this changes */
    zl_status st = z->stage == 3 ? zz_params_settle(z) : ZL_OK;
    zz_view v;
    if (!st) st = zz_sub_acquire(z, e->sub, false, &v);
    if (st) return st;
    int64_t m = v.at[j] + (e->off - v.off);
    if (e->own > 0) st = zz_copy(v.t[j], m, src, soff, e->own);
    if (!st && j == MASTER) st = zz_store_working(z, e, v.t[0], m);
    zl_status s2 = zz_sub_release(z, e->sub, st == ZL_OK);
    if (!st) st = s2;
    if (!st) st = zz_masters_flush(z);
    if (!st && j == MASTER && z->pswap) st = zli_swap_flush(z->pswap);
    return st;
}

/* Stage 3: a parameter gathered now is gathered again from the chunks just written. */
static zl_status regather(zl_zero *z, zz_entry *e)
{
    if (z->stage < 3 || e->status == ZZ_RELEASED) return ZL_OK;
    zl_status st = zz_params_release(z, e);
    return st ? st : zz_params_complete(z, e);
}

/* Stages 1-2 after a local write: every rank's working chunk of e into every
 * rank's whole buffer (the parameter's data). */
static zl_status allgather_working(zl_zero *z, zz_entry *e)
{
    int64_t base = (int64_t)z->P * e->off;
    zl_tensor *send = zz_new(z, true, z->wdtype, e->k, ZL_MEM_COMM, false);
    zl_tensor *recv = send ? zz_new(z, true, z->wdtype, (int64_t)z->P * e->k, ZL_MEM_COMM, false) : NULL;
    zl_status st = recv ? zz_copy(send, 0, z->full, base + (int64_t)z->q * e->k, e->k) : ZL_ENOMEM;
    if (!st) st = zz_run(z, ZZ_ALLGATHER, send, recv, ZL_COMM_SUM, 0);
    if (!st) st = zz_copy(z->full, base, recv, 0, (int64_t)z->P * e->k);
    zl_tensor_release(send);
    zl_tensor_release(recv);
    return st;
}

static zl_status set_full(zl_zero *z, zz_entry *e, int j, const char *fn, const zl_tensor *value)
{
    zl_tensor *flat;
    zl_status st = flat_value(fn, e, value, e->n, true, &flat);
    if (st) return st;
    st = write_chunk(z, e, j, flat, e->lo);
    /* Stages 0-2: every rank holds the value, so each writes the whole working copy. */
    if (!st && j == MASTER && z->stage <= 2 && z->full != z->master) st = zz_copy(z->full, (int64_t)z->P * e->off,
                                                                              flat, 0, e->n);
    if (!st && j == MASTER) st = regather(z, e);
    zl_tensor_release(flat);
    return st;
}

static zl_status set_local(zl_zero *z, zz_entry *e, int j, const char *fn, const zl_tensor *value)
{
    zl_tensor *flat;
    zl_status st = flat_value(fn, e, value, e->own, false, &flat);
    if (st) return st;
    st = write_chunk(z, e, j, flat, 0);
    if (!st && j == MASTER && z->stage <= 2 && z->P > 1) st = allgather_working(z, e);
    if (!st && j == MASTER) st = regather(z, e);
    zl_tensor_release(flat);
    return st;
}

zl_status zl_zero_full_grad(zl_zero *z, zl_tensor *p, double loss_scale, zl_tensor **out)
{
    const char *fn = "safe_get_full_grad";
    zz_entry *e = NULL;
    zl_status st = find(z, p, fn, &e);
    if (!st) st = check_scale(fn, loss_scale);
    if (!st) st = grad_window(z, fn, e);
    return st ? st : get_full(z, e, GRAD, loss_scale, out);
}

zl_status zl_zero_local_grad(zl_zero *z, zl_tensor *p, double loss_scale, zl_tensor **out)
{
    const char *fn = "safe_get_local_grad";
    zz_entry *e = NULL;
    zl_status st = find(z, p, fn, &e);
    if (!st) st = check_scale(fn, loss_scale);
    if (!st) st = grad_window(z, fn, e);
    return st ? st : get_local(z, e, GRAD, loss_scale, out);
}

zl_status zl_zero_full_fp32(zl_zero *z, zl_tensor *p, zl_tensor **out)
{
    zz_entry *e = NULL;
    zl_status st = find(z, p, "get_full_fp32_param", &e);
    return st ? st : get_full(z, e, MASTER, 1.0, out);
}

zl_status zl_zero_local_fp32(zl_zero *z, zl_tensor *p, zl_tensor **out)
{
    zz_entry *e = NULL;
    zl_status st = find(z, p, "safe_get_local_fp32_param", &e);
    return st ? st : get_local(z, e, MASTER, 1.0, out);
}

zl_status zl_zero_full_state(zl_zero *z, zl_tensor *p, const char *key, zl_tensor **out)
{
    const char *fn = "safe_get_full_optimizer_state";
    zz_entry *e = NULL;
    int j = 0;
    zl_status st = find(z, p, fn, &e);
    if (!st) st = state_of(z, fn, e, key, &j);
    return st ? st : get_full(z, e, j, 1.0, out);
}

zl_status zl_zero_local_state(zl_zero *z, zl_tensor *p, const char *key, zl_tensor **out)
{
    const char *fn = "safe_get_local_optimizer_state";
    zz_entry *e = NULL;
    int j = 0;
    zl_status st = find(z, p, fn, &e);
    if (!st) st = state_of(z, fn, e, key, &j);
    return st ? st : get_local(z, e, j, 1.0, out);
}

zl_status zl_zero_set_full_fp32(zl_zero *z, zl_tensor *p, const zl_tensor *value)
{
    const char *fn = "safe_set_full_fp32_param";
    zz_entry *e = NULL;
    zl_status st = find(z, p, fn, &e);
    return st ? st : set_full(z, e, MASTER, fn, value);
}

zl_status zl_zero_set_local_fp32(zl_zero *z, zl_tensor *p, const zl_tensor *value)
{
    const char *fn = "safe_set_local_fp32_param";
    zz_entry *e = NULL;
    zl_status st = find(z, p, fn, &e);
    return st ? st : set_local(z, e, MASTER, fn, value);
}

zl_status zl_zero_set_full_state(zl_zero *z, zl_tensor *p, const char *key, const zl_tensor *value)
{
    const char *fn = "safe_set_full_optimizer_state";
    zz_entry *e = NULL;
    int j = 0;
    zl_status st = find(z, p, fn, &e);
    if (!st) st = state_of(z, fn, e, key, &j);
    return st ? st : set_full(z, e, j, fn, value);
}

zl_status zl_zero_set_local_state(zl_zero *z, zl_tensor *p, const char *key, const zl_tensor *value)
{
    const char *fn = "safe_set_local_optimizer_state";
    zz_entry *e = NULL;
    int j = 0;
    zl_status st = find(z, p, fn, &e);
    if (!st) st = state_of(z, fn, e, key, &j);
    return st ? st : set_local(z, e, j, fn, value);
}
