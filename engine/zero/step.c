/* The optimizer step over this rank's partition: the overflow vote and the
 * global gradient norm over every rank, clipping, the fused optimizer kernel
 * once per param group span of each sub-group (all threads on one flat
 * buffer), then the working parameters brought up to date: rounded into
 * this rank's chunks and, at stages 1-2, all-gathered in buckets of
 * allgather_bucket_size; at stage 3 gathered again on use. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "zero_impl.h"

/* Stages 0-2: e's chunk in the whole working buffer. */
static int64_t full_at(const zl_zero *z, const zz_entry *e) { return (int64_t)z->P * e->off + (int64_t)z->q * e->k; }

/* The working chunk of e is the master itself (stage 0 and stage 3 in f32 without offload). */
static bool master_is_working(const zl_zero *z, const zz_entry *e)
{
    if (z->stage <= 2) return z->full == z->master && z->master;
    return !z->work && e->pslot < 0;
}

zl_status zz_store_working(zl_zero *z, zz_entry *e, zl_tensor *mt, int64_t at)
{
    if (master_is_working(z, e)) return ZL_OK;
    if (e->pslot >= 0) {
        zl_tensor *buf;
        zl_status st = zli_swap_acquire_new(z->pswap, e->pslot, &buf);
        if (st) return st;
        st = zz_copy(buf, 0, mt, at, e->k);
        zl_status s2 = zli_swap_release(z->pswap, e->pslot, true);
        return st ? st : s2;
    }
    if (z->stage <= 2) return zz_copy(z->full, full_at(z, e), mt, at, e->k);
    return zz_copy(z->work, e->off, mt, at, e->k);
}

zl_status zz_working_chunk(zl_zero *z, zz_entry *e, zl_tensor **out)
{
    if (e->pslot >= 0) {
        zl_tensor *buf;
        double t0 = zz_now();
        zl_status st = zli_swap_acquire(z->pswap, e->pslot, &buf);
        z->io_time += zz_now() - t0;
        if (st) return st;
        e->slot_held = true;
        *out = zz_slice(buf, 0, e->k);
    } else if (z->stage <= 2) {
        *out = zz_slice(z->full, full_at(z, e), e->k);
    } else {
        *out = zz_slice(z->work ? z->work : z->master, e->off, e->k);
    }
    return *out ? ZL_OK : ZL_ENOMEM;
}

void zz_working_done(zl_zero *z, zz_entry *e)
{
    if (e->slot_held) {
        zli_swap_release(z->pswap, e->pslot, false);
        e->slot_held = false;
    }
}

/* One set of the step: elements [at, at + n) of the partition's sub-group v
 * (master, states, gradient) and, when half is not NULL, of it from hoff. */
static zl_optim_tensors set_at(const zl_zero *z, const zz_view *v, int64_t at, int64_t n, zl_tensor *half,
                               int64_t hoff)
{
    zl_optim_tensors t = {
        .p = zz_slice(v->t[0], v->at[0] + at, n),
        .g = zz_slice(v->g, v->gat + at, n),
        .m = z->nstates > 0 ? zz_slice(v->t[1], v->at[1] + at, n) : NULL,
        .v = z->nstates > 1 ? zz_slice(v->t[2], v->at[2] + at, n) : NULL,
        .p_half = half ? zz_slice(half, hoff, n) : NULL,
    };
    return t;
}

static void set_free(zl_optim_tensors *t)
{
    zl_tensor *all[5] = {t->p, t->g, t->m, t->v, t->p_half};
    for (int i = 0; i < 5; i++) zl_tensor_release(all[i]);
}

static bool set_ok(const zl_zero *z, const zl_optim_tensors *t, bool half)
{
    return t->p && t->g && (z->nstates < 1 || t->m) && (z->nstates < 2 || t->v) && (!half || t->p_half);
}

/* The span of one group within a sub-group: consecutive entries [a, b),
 * stepped where the masters live (the host's kernels, or the device's). */
static zl_status step_span(zl_zero *z, const zz_view *v, int a, int b, double scale)
{
    zz_entry *first = &z->ents[a], *last = &z->ents[b - 1];
    int g = first->group;
    const zl_zero_hparams *hp = &z->hp[g];
    int64_t at = first->off - v->off, n = last->off + last->k - first->off;
    int64_t t = z->steps[g];
    /* The half copy is written by the kernel where the span's working chunks
     * are one flat run in the masters' memory. */
    zl_tensor *half = NULL;
    if (z->half && (z->stage == 0 || (z->stage == 3 && z->work))) {
        bool flat = true;
        for (int i = a; i < b; i++) flat = flat && z->ents[i].pslot < 0;
        zl_tensor *w = z->stage == 0 ? z->full : z->work;
        if (flat && zz_on_device(w) == zz_on_device(v->t[0])) half = w;
    }
    zl_status st = ZL_OK;
    if (z->cfg.optimizer == ZL_ZERO_LAMB) {
        /* Lamb's trust ratio is per parameter (stage 0: each chunk is the whole parameter). */
        zl_optim_lamb o = {.lr = hp->lr, .beta1 = hp->beta1, .beta2 = hp->beta2, .eps = hp->eps,
                           .weight_decay = hp->weight_decay, .max_coeff = hp->max_coeff,
                           .min_coeff = hp->min_coeff, .bias_correction = hp->bias_correction, .step = t,
                           .grad_scale = scale};
        zl_optim_tensors *sets = calloc((size_t)(b - a), sizeof *sets);
        if (!sets) return zl_error(ZL_ENOMEM, "ZeRO: out of memory stepping %s", first->name);
        for (int i = a; i < b; i++) {
            zz_entry *e = &z->ents[i];
            sets[i - a] = set_at(z, v, e->off - v->off, e->k, half, e->off);
            if (!set_ok(z, &sets[i - a], half)) st = ZL_ENOMEM;
        }
        if (!st) st = zl_optim_lamb_tensors(&o, sets, b - a, NULL);
        for (int i = 0; i < b - a; i++) set_free(&sets[i]);
        free(sets);
    } else {
        zl_optim_tensors set = set_at(z, v, at, n, half, first->off);
        if (!set_ok(z, &set, half)) {
            st = ZL_ENOMEM;
        } else if (z->cfg.optimizer == ZL_ZERO_ADAM) {
            zl_optim_adam o = {.lr = hp->lr, .beta1 = hp->beta1, .beta2 = hp->beta2, .eps = hp->eps,
                               .weight_decay = hp->weight_decay, .adamw_mode = hp->adamw_mode,
                               .bias_correction = hp->bias_correction, .step = t, .grad_scale = scale};
            st = zl_optim_adam_tensors(&o, &set, 1);
        } else {
            zl_optim_sgd o = {.lr = hp->lr, .momentum = hp->momentum, .dampening = hp->dampening,
                              .weight_decay = hp->weight_decay, .nesterov = hp->nesterov, .step = t,
                              .grad_scale = scale};
            st = zl_optim_sgd_tensors(&o, &set, 1);
        }
        set_free(&set);
    }
    if (st) return zz_fail("the optimizer step of", first->name);
    if (!half)
        for (int i = a; i < b && !st; i++)
            st = zz_store_working(z, &z->ents[i], v->t[0], v->at[0] + (z->ents[i].off - v->off));
    return st;
}

/* The sub-group stepped i-th. With the gradients swapped by sub-group the
 * step goes from the last to the first: the scan before it read them first
 * to last, so the last ones are still in the gradient buffers. */
static int step_order(const zl_zero *z, int i) { return z->gswap ? z->nsub - 1 - i : i; }

/* The i-th sub-group stepped; with ahead the next ones are read meanwhile. */
static zl_status step_sub(zl_zero *z, int i, double scale, bool ahead)
{
    int s = step_order(z, i);
    zz_view v;
    zl_status st = zz_sub_acquire(z, s, false, &v);
    if (!st && (st = zz_grads_view(z, s, &v.g, &v.gat))) zz_sub_release(z, s, false);
    if (st) return st;
    for (int j = i + 1; ahead && j < z->nsub && zz_sub_prefetch(z, step_order(z, j)); j++) continue;
    zz_sub *sg = &z->subs[s];
    int a = sg->first, end = sg->first + sg->count;
    while (a < end && !st) {
        int b = a + 1;
        while (b < end && z->ents[b].group == z->ents[a].group) b++;
        st = step_span(z, &v, a, b, scale);
        a = b;
    }
    zl_status s2 = zz_grads_done(z, s);
    if (!st) st = s2;
    s2 = zz_sub_release(z, s, st == ZL_OK);
    return st ? st : s2;
}

/* Stages 1-2: every rank's chunks into every rank's whole buffer, in buckets
 * of at most allgather_bucket_size elements. */
static zl_status allgather_full(zl_zero *z)
{
    int P = z->P;
    if (P == 1 || z->nent == 0) return ZL_OK;
    int64_t cap = z->cfg.allgather_bucket_size / P;
    if (cap < ZL_ZERO_ALIGN) cap = ZL_ZERO_ALIGN;
    zl_status st = ZL_OK;
    for (int i = 0; i < z->nent && !st;) {
        int j = i;
        int64_t len = z->ents[i].k;
        while (j + 1 < z->nent && len + z->ents[j + 1].k <= cap) len += z->ents[++j].k;
        if (!z->gsend || zl_tensor_numel(z->gsend) < len) {
            zl_tensor_release(z->gsend);
            zl_tensor_release(z->grecv);
            z->grecv = NULL;
            if (!(z->gsend = zz_new(z, true, z->wdtype, len, ZL_MEM_COMM, false)) ||
                !(z->grecv = zz_new(z, true, z->wdtype, P * len, ZL_MEM_COMM, false))) {
                st = ZL_ENOMEM;
                break;
            }
        }
        int64_t base = z->ents[i].off;
        for (int k = i; k <= j && !st; k++) {
            zz_entry *e = &z->ents[k];
            st = zz_copy(z->gsend, e->off - base, z->full, full_at(z, e), e->k);
        }
        zl_tensor *sv = st ? NULL : zz_slice(z->gsend, 0, len), *rv = sv ? zz_slice(z->grecv, 0, P * len) : NULL;
        if (!st) st = sv && rv ? zz_run(z, ZZ_ALLGATHER, sv, rv, ZL_COMM_SUM, 0) : ZL_ENOMEM;
        zl_tensor_release(sv);
        zl_tensor_release(rv);
        for (int k = i; k <= j && !st; k++) {
            zz_entry *e = &z->ents[k];
            for (int r = 0; r < P && !st; r++)
                if (r != z->q)
                    st = zz_copy(z->full, (int64_t)P * e->off + (int64_t)r * e->k, z->grecv,
                                 (int64_t)r * len + e->off - base, e->k);
        }
        i = j + 1;
    }
    return st;
}

zl_status zz_publish(zl_zero *z)
{
    if (z->pswap) {
        double t0 = zz_now();
        zl_status st = zli_swap_flush(z->pswap);
        z->io_time += zz_now() - t0;
        if (st) return st;
    }
    if (z->stage <= 2) return allgather_full(z);
    return zz_params_after_step(z);
}

/* Whether any rank found an inf or NaN. */
static zl_status overflow_vote(zl_zero *z, bool *found)
{
    if (z->world == 1) return ZL_OK;
    int64_t one = 1;
    zl_tensor *t = zl_tensor_full(ZL_DTYPE_F32, 1, &one, *found ? 1.0 : 0.0);
    if (!t) return ZL_ENOMEM;
    zl_status st = zz_run(z, ZZ_ALLREDUCE, t, NULL, ZL_COMM_MAX, 0);
    if (!st) *found = zl_tensor_get(t, 0) > 0;
    zl_tensor_release(t);
    return st;
}

/* The squared norm of the whole (averaged, still loss-scaled) gradient from
 * each rank's sum s over its partition (in f64): the partitions added in
 * rank order, so every rank gets the same bits. */
static zl_status norm_sq(zl_zero *z, double s, double *out)
{
    if (z->P == 1) {
        *out = s;
        return ZL_OK;
    }
    zl_status st = ZL_OK;
    int64_t one = 1, all = z->world;
    zl_tensor *mine = zl_tensor_new(ZL_DTYPE_I64, 1, &one, ZL_MEM_COMM);
    zl_tensor *every = zl_tensor_new(ZL_DTYPE_I64, 1, &all, ZL_MEM_COMM);
    if (!mine || !every) st = ZL_ENOMEM;
    if (!st) {
        memcpy(zl_tensor_data(mine), &s, sizeof s);
        st = zz_run(z, ZZ_ALLGATHER, mine, every, ZL_COMM_SUM, 0);
    }
    if (!st) {
        double sum = 0, v;
        for (int r = 0; r < z->world; r++) {
            memcpy(&v, (char *)zl_tensor_data(every) + 8 * r, sizeof v);
            sum += v;
        }
        *out = sum;
    }
    zl_tensor_release(mine);
    zl_tensor_release(every);
    return st;
}

zl_status zl_zero_zero_grad(zl_zero *z)
{
    if (!z) return zl_error(ZL_EINVAL, "zl_zero_zero_grad: no engine");
    return zz_grads_clear(z);
}

zl_status zl_zero_step(zl_zero *z, double loss_scale, double max_norm, bool check_overflow, zl_zero_step_info *info)
{
    if (!z) return zl_error(ZL_EINVAL, "zl_zero_step: no engine");
    if (!(loss_scale > 0) || !isfinite(loss_scale))
        return zl_error(ZL_EINVAL, "zl_zero_step: loss_scale must be finite and > 0, got %g", loss_scale);
    /* Stepping then would apply a partial gradient, or none, and report success. */
    if (z->grads_open)
        return zl_error(ZL_ESTATE, "zl_zero_step: gradients of a backward are still pending in the buckets; call "
                                   "zl_zero_end_backward after each backward, before the step");
    if (!z->backward_ended)
        return zl_error(ZL_ESTATE, "zl_zero_step: no backward ended since the last step; call "
                                   "zl_zero_end_backward after each backward, before the step");
    z->backward_ended = false;
    zl_zero_step_info r = {.overflow = false, .grad_norm = 0, .clip_coef = 1};
    /* a parameter fetched ahead and not used yet may still be reading its chunk */
    zl_status st = z->stage == 3 ? zz_params_settle(z) : ZL_OK;
    double mine = 0;
    if (!st) st = zz_grads_scan(z, check_overflow, &r.overflow, &mine);
    if (!st && check_overflow) st = overflow_vote(z, &r.overflow);
    if (!st && r.overflow) r.grad_norm = INFINITY;
    if (!st && !r.overflow) {
        double sq;
        st = norm_sq(z, mine, &sq);
        if (!st) {
            r.grad_norm = sqrt(sq) / loss_scale;
            if (max_norm > 0 && r.grad_norm > max_norm) r.clip_coef = max_norm / (r.grad_norm + 1e-6);
        }
    }
    if (!st && !r.overflow) {
        for (int g = 0; g < z->ngroups; g++) z->steps[g]++;
        double scale = r.clip_coef / loss_scale;
        bool ahead = z->oswap && z->cfg.offload_optimizer.pipeline_read;
        for (int i = 0; i < z->nsub && !st; i++) st = step_sub(z, i, scale, ahead);
        if (!st) st = zz_publish(z);
        /* The next step's first sub-groups are read during its forward and backward. */
        for (int i = 0; !st && ahead && i < z->nsub && zz_sub_prefetch(z, step_order(z, i)); i++) continue;
    }
    zl_status s2 = zl_zero_zero_grad(z);
    if (info) *info = r;
    return st ? st : s2;
}
