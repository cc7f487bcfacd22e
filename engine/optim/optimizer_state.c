/* The optimizer object's per-parameter state (zlua/optimizer.h): made on a
 * parameter's first step where the parameter lives, read and written by key
 * for checkpoints, dropped on request. */
#include <stdio.h>
#include "optimizer_impl.h"

static const char *const adam_keys[] = {"exp_avg", "exp_avg_sq", NULL};
static const char *const sgd_keys[] = {"momentum_buffer", NULL};

const char *const *zl_optimizer_state_keys(zl_optimizer_kind kind)
{
    switch (kind) {
    case ZL_OPTIMIZER_ADAM:
    case ZL_OPTIMIZER_ADAMW:
    case ZL_OPTIMIZER_LAMB: return adam_keys;
    case ZL_OPTIMIZER_SGD: return sgd_keys;
    default: return NULL;
    }
}

static int nstate(zl_optimizer_kind kind) { return kind == ZL_OPTIMIZER_SGD ? 1 : 2; }

static void drop_state(zli_opt_param *e)
{
    for (int k = 0; k < ZLI_OPT_MAX_STATE; k++) {
        zl_tensor_release(e->state[k]);
        e->state[k] = NULL;
    }
    e->step = 0;
    e->lamb_coeff = 0;
}

zl_status zli_opt_make_state(const zl_optimizer *o, zli_opt_param *e)
{
    if (e->state[0]) return ZL_OK;
    for (int k = 0; k < nstate(o->kind); k++) {
        const zl_tensor *p = e->p;
        if (!(e->state[k] = zli_full_like_device(p, ZL_DTYPE_F32, p->ndim, p->shape, ZL_MEM_OPTIMIZER, 0))) {
            zl_status st = zli_last_code();
            drop_state(e);
            return st;
        }
    }
    return ZL_OK;
}

/* The position of key among the kind's state keys, or -1 with ZL_EINVAL naming it. */
static int key_index(const zl_optimizer *o, const char *key)
{
    const char *const *keys = zl_optimizer_state_keys(o->kind);
    for (int k = 0; key && keys[k]; k++)
        if (!strcmp(keys[k], key)) return k;
    zl_error(ZL_EINVAL, "%s: no state \"%s\" (it keeps %s%s%s)", zl_optimizer_kind_name(o->kind),
             key ? key : "(NULL)", keys[0], keys[1] ? ", " : "", keys[1] ? keys[1] : "");
    return -1;
}

zl_status zl_optimizer_get_state(const zl_optimizer *o, int group, int index, const char *key, zl_tensor **out)
{
    zli_opt_param *e = zli_opt_entry(o, group, index);
    if (!e) return ZL_EINVAL;
    int k = key_index(o, key);
    if (k < 0) return ZL_EINVAL;
    if (!out) return zl_error(ZL_EINVAL, "%s: get_state into NULL", zl_optimizer_kind_name(o->kind));
    *out = e->state[k];
    return ZL_OK;
}

/* dst = src's values, src reshaped to dst's shape: in place when both live
 * in one place, else from host memory to dst's device as a contiguous f32
 * copy handed to the device's table. */
static zl_status copy_into(zl_tensor *dst, zl_tensor *src, const char *what)
{
    const zli_device_ops *dev = dst->storage->dev;
    bool same = src->storage->dev == dev && src->storage->dev_index == dst->storage->dev_index;
    if (!same && src->storage->dev) {
        char at[32], want[32];
        zl_device_str(zl_tensor_device(src), zl_tensor_device_index(src), at, sizeof at);
        zl_device_str(zl_tensor_device(dst), zl_tensor_device_index(dst), want, sizeof want);
        return zl_error(ZL_EDEVICE, "%s is on %s and its parameter on %s: give it from host memory or from %s", what,
                        at, want, want);
    }
    bool grad = zl_grad_set_enabled(false);
    zl_tensor *flat = zl_tensor_reshape(src, dst->ndim, dst->shape);
    zl_status st;
    if (!flat) {
        st = zli_last_code();
    } else if (same) {
        st = zl_tensor_copy_(dst, flat);
    } else {
        zl_tensor *host = zli_copy_as(flat, ZL_DTYPE_F32, ZL_MEM_OTHER);
        st = host ? dev->from_host(dst, host) : zli_last_code();
        zl_tensor_release(host);
    }
    zl_tensor_release(flat);
    zl_grad_set_enabled(grad);
    return st;
}

zl_status zl_optimizer_set_state(zl_optimizer *o, int group, int index, const char *key, zl_tensor *src)
{
    zli_opt_param *e = zli_opt_entry(o, group, index);
    if (!e) return ZL_EINVAL;
    int k = key_index(o, key);
    if (k < 0) return ZL_EINVAL;
    char what[96];
    snprintf(what, sizeof what, "%s: state \"%s\" of param group %d, entry %d", zl_optimizer_kind_name(o->kind), key,
             group + 1, index + 1);
    if (!src) return zl_error(ZL_EINVAL, "%s: the source is NULL", what);
    if (zl_tensor_numel(src) != zl_tensor_numel(e->p))
        return zl_error(ZL_EINVAL, "%s has %lld elements, the parameter %lld", what, (long long)zl_tensor_numel(src),
                        (long long)zl_tensor_numel(e->p));
    bool made = !e->state[0];
    if (zli_opt_make_state(o, e)) return zli_last_code();
    zl_status st = copy_into(e->state[k], src, what);
    if (st && made) drop_state(e);
    return st;
}

zl_status zl_optimizer_get_step(const zl_optimizer *o, int group, int index, int64_t *step)
{
    zli_opt_param *e = zli_opt_entry(o, group, index);
    if (!e) return ZL_EINVAL;
    if (!step) return zl_error(ZL_EINVAL, "%s: get_step into NULL", zl_optimizer_kind_name(o->kind));
    *step = e->step;
    return ZL_OK;
}

zl_status zl_optimizer_set_step(zl_optimizer *o, int group, int index, int64_t step)
{
    zli_opt_param *e = zli_opt_entry(o, group, index);
    if (!e) return ZL_EINVAL;
    if (step < 0)
        return zl_error(ZL_EINVAL, "%s: the step of param group %d, entry %d must be >= 0, got %lld",
                        zl_optimizer_kind_name(o->kind), group + 1, index + 1, (long long)step);
    if (zli_opt_make_state(o, e)) return zli_last_code();
    e->step = step;
    return ZL_OK;
}

zl_status zl_optimizer_reset_state(zl_optimizer *o, int group, int index)
{
    zli_opt_param *e = zli_opt_entry(o, group, index);
    if (!e) return ZL_EINVAL;
    drop_state(e);
    return ZL_OK;
}

zl_status zl_optimizer_lamb_coeff(const zl_optimizer *o, int group, int index, double *out)
{
    zli_opt_param *e = zli_opt_entry(o, group, index);
    if (!e) return ZL_EINVAL;
    if (o->kind != ZL_OPTIMIZER_LAMB)
        return zl_error(ZL_EINVAL, "%s: only Lamb has a trust ratio", zl_optimizer_kind_name(o->kind));
    if (!out) return zl_error(ZL_EINVAL, "Lamb: lamb_coeff into NULL");
    *out = e->lamb_coeff;
    return ZL_OK;
}
