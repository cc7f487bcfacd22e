/* The optimizer object's step (zlua/optimizer.h): per param group, the
 * parameters holding a gradient go through the tensor-list kernel of their
 * kind in one call while their step counts agree, one call each otherwise. */
#include <stdio.h>
#include <stdlib.h>
#include "optimizer_impl.h"

/* One kernel call over entries idx[0..n) of group g, all at the step after
 * that of idx[0]; their step counts (and Lamb's trust ratios) advance only
 * when it succeeds. sets and ratio are scratch space for n. */
static zl_status run(zl_optimizer *o, int g, const int *idx, int n, double grad_scale, zl_optim_tensors *sets,
                     double *ratio)
{
    zli_opt_group *grp = &o->groups[g];
    for (int k = 0; k < n; k++) {
        zli_opt_param *e = &grp->params[idx[k]];
        sets[k] = (zl_optim_tensors){.p = e->p, .g = zl_tensor_grad(e->p), .m = e->state[0], .v = e->state[1],
                                     .p_half = e->half};
    }
    int64_t step = grp->params[idx[0]].step + 1;
    zl_status st;
    switch (o->kind) {
    case ZL_OPTIMIZER_LAMB: {
        zl_optim_lamb hp = zli_opt_lamb(&grp->hp, step, grad_scale);
        st = zl_optim_lamb_tensors(&hp, sets, n, ratio);
        break;
    }
    case ZL_OPTIMIZER_SGD: {
        zl_optim_sgd hp = zli_opt_sgd(&grp->hp, step, grad_scale);
        st = zl_optim_sgd_tensors(&hp, sets, n);
        break;
    }
    default: {
        zl_optim_adam hp = zli_opt_adam(&grp->hp, step, grad_scale);
        st = zl_optim_adam_tensors(&hp, sets, n);
    }
    }
    if (st) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", zl_last_error());
        return zl_error(st, "%s in param group %d: %s", zl_optimizer_kind_name(o->kind), g + 1, msg);
    }
    for (int k = 0; k < n; k++) {
        zli_opt_param *e = &grp->params[idx[k]];
        e->step = step;
        if (o->kind == ZL_OPTIMIZER_LAMB) e->lamb_coeff = ratio[k];
    }
    return ZL_OK;
}

static zl_status step_group(zl_optimizer *o, int g, double grad_scale, int *idx, zl_optim_tensors *sets,
                            double *ratio)
{
    zli_opt_group *grp = &o->groups[g];
    int n = 0;
    bool same = true;
    for (int i = 0; i < grp->n; i++) {
        zli_opt_param *e = &grp->params[i];
        if (!zl_tensor_grad(e->p)) continue;
        if (zli_opt_make_state(o, e)) return zli_last_code();
        same = same && (n == 0 || e->step == grp->params[idx[0]].step);
        idx[n++] = i;
    }
    if (n == 0) return ZL_OK;
    if (same) return run(o, g, idx, n, grad_scale, sets, ratio);
    for (int k = 0; k < n; k++)
        if (run(o, g, &idx[k], 1, grad_scale, sets, ratio)) return zli_last_code();
    return ZL_OK;
}

zl_status zl_optimizer_step(zl_optimizer *o, double grad_scale)
{
    if (!o) return zl_error(ZL_EINVAL, "optimizer: step on NULL");
    const zli_opt_twice *t = &o->twice;
    if (t->found)
        return zl_error(ZL_EINVAL, "%s: param group %d, entry %d is already in param group %d (entry %d): a parameter "
                        "steps in one place only", zl_optimizer_kind_name(o->kind), t->group + 1, t->index + 1,
                        t->first_group + 1, t->first_index + 1);
    int most = 1;
    for (int g = 0; g < o->ngroups; g++)
        if (o->groups[g].n > most) most = o->groups[g].n;
    int *idx = malloc((size_t)most * sizeof *idx);
    zl_optim_tensors *sets = malloc((size_t)most * sizeof *sets);
    double *ratio = malloc((size_t)most * sizeof *ratio);
    zl_status st = idx && sets && ratio ? ZL_OK
                                        : zl_error(ZL_ENOMEM, "%s: out of memory for a step of %d parameters",
                                                   zl_optimizer_kind_name(o->kind), most);
    for (int g = 0; g < o->ngroups && !st; g++) st = step_group(o, g, grad_scale, idx, sets, ratio);
    free(idx);
    free(sets);
    free(ratio);
    return st;
}
