/* The optimizers over lists of tensor sets (zl_optim_*_tensors): every set
 * checked and turned into a zl_optim_buf, then stepped by the CPU kernels in
 * host memory or, on a device, by the device's table in one call. Also the
 * lookup of that table, which grad.c shares. */
#include <stdio.h>
#include <stdlib.h>
#include "optim_impl.h"
#include "device_optim.h"

const zli_dev_optim *zli_dev_optim_of(const char *op, const zl_tensor *t)
{
    const zli_dev_optim *o = t->storage->dev->optim;
    if (o) return o;
    char where[32];
    zl_device_str(zl_tensor_device(t), zl_tensor_device_index(t), where, sizeof where);
    zl_error(ZL_EDEVICE, "%s: the tensors are on %s, which runs no optimizer kernels: move them with :cpu() first", op,
             where);
    return NULL;
}

/* The sets as buffers, after every check a step makes; *on_device when they
 * live on a device (that of t[0].p). */
static zl_status buffers_of(const char *op, const void *hp, const zl_optim_tensors *t, int n, bool need_m,
                            bool need_v, zl_optim_buf *b, bool *on_device)
{
    static const char *const role[5] = {"p", "g", "m", "v", "p_half"};
    for (int k = 0; k < n; k++) {
        zl_tensor *const all[5] = {t[k].p, t[k].g, t[k].m, t[k].v, t[k].p_half};
        const bool needed[5] = {true, true, need_m, need_v, false};
        for (int i = 0; i < 5; i++) {
            if (!all[i]) {
                if (needed[i]) return zl_error(ZL_EINVAL, "%s: set %d of %d has no %s", op, k + 1, n, role[i]);
                continue;
            }
            const zl_storage *a = all[i]->storage, *home = t[0].p->storage;
            if (a->dev != home->dev || a->dev_index != home->dev_index) {
                char wa[32], wh[32];
                zl_device_str(zl_tensor_device(all[i]), zl_tensor_device_index(all[i]), wa, sizeof wa);
                zl_device_str(zl_tensor_device(t[0].p), zl_tensor_device_index(t[0].p), wh, sizeof wh);
                return zl_error(ZL_EDEVICE, "%s: %s of set %d is on %s and p of set 1 on %s: a step's tensors live "
                                "in one place", op, role[i], k + 1, wa, wh);
            }
        }
        if (zli_optim_buf_of(op, &b[k], t[k].p, t[k].g, need_m ? t[k].m : NULL, need_v ? t[k].v : NULL,
                             t[k].p_half) ||
            zli_optim_check_buf(op, hp, &b[k], true, need_m, need_v)) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", zl_last_error());
            return zl_error(zli_last_code(), "%s (set %d of %d)", msg, k + 1, n);
        }
    }
    *on_device = n > 0 && t[0].p->storage->dev != NULL;
    return ZL_OK;
}

/* The common head of the three entry points: the list checked and laid out. */
static zl_optim_buf *begin(const char *op, const void *hp, const zl_optim_tensors *t, int n, bool need_m,
                           bool need_v, bool *on_device)
{
    if (!hp) {
        zl_error(ZL_EINVAL, "%s: hyperparameters are NULL", op);
        return NULL;
    }
    if (n < 0 || (n > 0 && !t)) {
        zl_error(ZL_EINVAL, "%s: a list of %d tensor sets%s", op, n, n < 0 ? " (the count must be >= 0)" : " is NULL");
        return NULL;
    }
    zl_optim_buf *b = calloc((size_t)(n > 0 ? n : 1), sizeof *b);
    if (!b) {
        zl_error(ZL_ENOMEM, "%s: out of memory for %d tensor sets", op, n);
        return NULL;
    }
    if (buffers_of(op, hp, t, n, need_m, need_v, b, on_device)) {
        free(b);
        return NULL;
    }
    return b;
}

zl_status zl_optim_adam_tensors(const zl_optim_adam *hp, const zl_optim_tensors *t, int n)
{
    const char *op = "optim.adam";
    bool dev = false;
    if (hp && zli_optim_adam_check(op, hp)) return zli_last_code();
    zl_optim_buf *b = begin(op, hp, t, n, true, true, &dev);
    if (!b) return zli_last_code();
    zl_status st = ZL_OK;
    if (dev) {
        const zli_dev_optim *o = zli_dev_optim_of(op, t[0].p);
        st = o ? o->adam(zl_tensor_device_index(t[0].p), hp, b, n) : ZL_EDEVICE;
    } else {
        for (int k = 0; k < n && !st; k++) st = zl_optim_adam_step(hp, &b[k]);
    }
    free(b);
    return st;
}

zl_status zl_optim_sgd_tensors(const zl_optim_sgd *hp, const zl_optim_tensors *t, int n)
{
    const char *op = "optim.sgd";
    bool dev = false;
    if (hp && zli_optim_sgd_check(op, hp)) return zli_last_code();
    zl_optim_buf *b = begin(op, hp, t, n, hp && hp->momentum != 0, false, &dev);
    if (!b) return zli_last_code();
    zl_status st = ZL_OK;
    if (dev) {
        const zli_dev_optim *o = zli_dev_optim_of(op, t[0].p);
        st = o ? o->sgd(zl_tensor_device_index(t[0].p), hp, b, n) : ZL_EDEVICE;
    } else {
        for (int k = 0; k < n && !st; k++) st = zl_optim_sgd_step(hp, &b[k]);
    }
    free(b);
    return st;
}

/* On a device: both passes over the whole list, the trust ratios taken on
 * the host between them by the host's own function. */
static zl_status lamb_on_device(const zl_optim_lamb *hp, const zl_optim_tensors *t, const zl_optim_buf *b, int n,
                                double *ratio)
{
    const char *op = "optim.lamb";
    const zli_dev_optim *o = zli_dev_optim_of(op, t[0].p);
    if (!o) return ZL_EDEVICE;
    int index = zl_tensor_device_index(t[0].p);
    double *sq = malloc((size_t)n * 3 * sizeof *sq);
    if (!sq) return zl_error(ZL_ENOMEM, "%s: out of memory for %d trust ratios", op, n);
    double *r = sq + 2 * n;
    zl_status st = o->lamb_moments(index, hp, b, n, sq);
    for (int k = 0; k < n && !st; k++) {
        r[k] = zl_optim_lamb_trust_ratio(hp, sq[2 * k], sq[2 * k + 1]);
        if (zli_optim_check_range(op, "trust ratio", r[k], 0, INFINITY, false)) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", zl_last_error());
            st = zl_error(ZL_EINVAL, "%s (set %d of %d: skip overflowed steps before stepping)", msg, k + 1, n);
        }
    }
    if (!st) st = o->lamb_apply(index, hp, b, n, r);
    if (!st && ratio)
        for (int k = 0; k < n; k++) ratio[k] = r[k];
    free(sq);
    return st;
}

zl_status zl_optim_lamb_tensors(const zl_optim_lamb *hp, const zl_optim_tensors *t, int n, double *ratio)
{
    bool dev = false;
    if (hp && zli_optim_lamb_check("optim.lamb", hp)) return zli_last_code();
    zl_optim_buf *b = begin("optim.lamb", hp, t, n, true, true, &dev);
    if (!b) return zli_last_code();
    zl_status st = ZL_OK;
    if (dev) {
        st = lamb_on_device(hp, t, b, n, ratio);
    } else {
        for (int k = 0; k < n && !st; k++) st = zl_optim_lamb_step(hp, &b[k], ratio ? &ratio[k] : NULL);
    }
    free(b);
    return st;
}
