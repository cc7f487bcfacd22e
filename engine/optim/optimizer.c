/* The optimizer object (zlua/optimizer.h): kinds and their defaults, the
 * checks of a group's hyperparameters, param groups, half copies and
 * zero_grad. The state lives in optimizer_state.c, the step in optimizer_step.c. */
#include <stdio.h>
#include <stdlib.h>
#include "optimizer_impl.h"

static const char *const kind_names[] = {"Adam", "AdamW", "Lamb", "SGD"};

const char *zl_optimizer_kind_name(zl_optimizer_kind kind)
{
    return (unsigned)kind < sizeof kind_names / sizeof kind_names[0] ? kind_names[kind] : NULL;
}

zl_optimizer_hparams zl_optimizer_defaults(zl_optimizer_kind kind)
{
    zl_optim_adam a = zl_optim_adam_defaults();
    zl_optim_lamb l = zl_optim_lamb_defaults();
    zl_optim_sgd s = zl_optim_sgd_defaults();
    zl_optimizer_hparams h = {
        .lr = a.lr, .beta1 = a.beta1, .beta2 = a.beta2, .eps = a.eps, .weight_decay = a.weight_decay,
        .adamw_mode = kind == ZL_OPTIMIZER_ADAMW, .bias_correction = a.bias_correction,
        .max_coeff = l.max_coeff, .min_coeff = l.min_coeff,
        .momentum = s.momentum, .dampening = s.dampening, .nesterov = s.nesterov,
    };
    if (kind == ZL_OPTIMIZER_ADAMW) h.weight_decay = 1e-2;   /* torch.optim.AdamW's */
    return h;
}

/* The kernels check each beta alone; users set them as a pair. */
static zl_status check_betas(const char *where, const zl_optimizer_hparams *hp)
{
    if (zli_optim_check_range(where, "beta1", hp->beta1, 0, 1, true) ||
        zli_optim_check_range(where, "beta2", hp->beta2, 0, 1, true))
        return zl_error(ZL_EINVAL, "%s: betas must be a pair {beta1, beta2}, each in [0, 1), got {%.14g, %.14g}", where,
                        hp->beta1, hp->beta2);
    return ZL_OK;
}

/* hp checked as the kernels check it, with messages that start with `where`
 * ("AdamW", "AdamW in param group 2"). SGD's nesterov needs the group's
 * momentum and dampening together, whichever of them the group set, so it
 * is checked only for a group (group >= 0), and named after the kind. */
static zl_status check_hparams(zl_optimizer_kind kind, const char *where, int group, const zl_optimizer_hparams *hp)
{
    if (kind == ZL_OPTIMIZER_SGD) {
        zl_optim_sgd k = zli_opt_sgd(hp, 1, 1);
        k.nesterov = false;
        if (zli_optim_sgd_check(where, &k)) return ZL_EINVAL;
        k.nesterov = hp->nesterov;
        if (group < 0 || !zli_optim_sgd_check(zl_optimizer_kind_name(kind), &k)) return ZL_OK;
        char msg[512];
        snprintf(msg, sizeof msg, "%s", zl_last_error());
        return zl_error(ZL_EINVAL, "%s (param group %d)", msg, group + 1);
    }
    if (check_betas(where, hp)) return ZL_EINVAL;
    if (kind == ZL_OPTIMIZER_LAMB) {
        zl_optim_lamb k = zli_opt_lamb(hp, 1, 1);
        return zli_optim_lamb_check(where, &k);
    }
    zl_optim_adam k = zli_opt_adam(hp, 1, 1);
    return zli_optim_adam_check(where, &k);
}

static zl_status check_group_hparams(const zl_optimizer *o, int group, const zl_optimizer_hparams *hp)
{
    char where[64];
    snprintf(where, sizeof where, "%s in param group %d", zl_optimizer_kind_name(o->kind), group + 1);
    return check_hparams(o->kind, where, group, hp);
}

zl_optimizer *zl_optimizer_new(zl_optimizer_kind kind, const zl_optimizer_hparams *defaults)
{
    const char *name = zl_optimizer_kind_name(kind);
    if (!name) {
        zl_error(ZL_EINVAL, "optimizer: unknown kind %d (expected Adam, AdamW, Lamb or SGD)", (int)kind);
        return NULL;
    }
    zl_optimizer_hparams hp = defaults ? *defaults : zl_optimizer_defaults(kind);
    if (check_hparams(kind, name, -1, &hp)) return NULL;
    zl_optimizer *o = calloc(1, sizeof *o);
    if (!o) {
        zl_error(ZL_ENOMEM, "%s: out of memory", name);
        return NULL;
    }
    o->kind = kind;
    o->defaults = hp;
    return o;
}

void zl_optimizer_free(zl_optimizer *o)
{
    if (!o) return;
    for (int g = 0; g < o->ngroups; g++) {
        for (int i = 0; i < o->groups[g].n; i++) {
            zli_opt_param *e = &o->groups[g].params[i];
            zl_tensor_release(e->p);
            zl_tensor_release(e->half);
            for (int k = 0; k < ZLI_OPT_MAX_STATE; k++) zl_tensor_release(e->state[k]);
        }
        free(o->groups[g].params);
    }
    free(o->groups);
    free(o);
}

/* The group and entry where p already is, searching the groups and the
 * first `upto` entries of `pending` (the group being added). */
static bool find_in(const zl_optimizer *o, zl_tensor *const *pending, int upto, const zl_tensor *p, int *group,
                    int *index)
{
    for (int g = 0; g < o->ngroups; g++)
        for (int i = 0; i < o->groups[g].n; i++)
            if (o->groups[g].params[i].p == p) {
                *group = g, *index = i;
                return true;
            }
    for (int i = 0; i < upto; i++)
        if (pending[i] == p) {
            *group = o->ngroups, *index = i;
            return true;
        }
    return false;
}

static zl_status check_params(const zl_optimizer *o, zl_tensor *const *params, int n)
{
    const char *name = zl_optimizer_kind_name(o->kind);
    int gi = o->ngroups + 1;
    if (n < 0 || (n > 0 && !params))
        return zl_error(ZL_EINVAL, "%s: param group %d: %d parameters%s", name, gi, n,
                        n < 0 ? " (the count must be >= 0)" : " and their list NULL");
    for (int i = 0; i < n; i++) {
        zl_tensor *p = params[i];
        if (!p) return zl_error(ZL_EINVAL, "%s: param group %d, entry %d is NULL", name, gi, i + 1);
        if (zl_tensor_dtype(p) != ZL_DTYPE_F32 || !zl_tensor_is_contiguous(p))
            return zl_error(ZL_EINVAL,
                            "%s: param group %d, entry %d must be a contiguous f32 tensor (the master weights), "
                            "got %s%s", name, gi, i + 1, zl_dtype_name(zl_tensor_dtype(p)),
                            zl_tensor_is_contiguous(p) ? "" : " non-contiguous");
    }
    return ZL_OK;
}

/* The first of params found in an earlier place, if any. */
static zli_opt_twice find_twice(const zl_optimizer *o, zl_tensor *const *params, int n)
{
    zli_opt_twice t = {0};
    for (int i = 0; i < n && !t.found; i++)
        if (find_in(o, params, i, params[i], &t.first_group, &t.first_index))
            t = (zli_opt_twice){true, o->ngroups, i, t.first_group, t.first_index};
    return t;
}

zl_status zl_optimizer_add_group(zl_optimizer *o, zl_tensor *const *params, int n, const zl_optimizer_hparams *hp)
{
    if (!o) return zl_error(ZL_EINVAL, "optimizer: add_group on NULL");
    const char *name = zl_optimizer_kind_name(o->kind);
    zl_optimizer_hparams h = hp ? *hp : o->defaults;
    if (check_params(o, params, n) || check_group_hparams(o, o->ngroups, &h)) return ZL_EINVAL;
    zli_opt_group *groups = realloc(o->groups, (size_t)(o->ngroups + 1) * sizeof *groups);
    if (!groups) return zl_error(ZL_ENOMEM, "%s: out of memory for param group %d", name, o->ngroups + 1);
    o->groups = groups;
    zli_opt_param *entries = calloc((size_t)(n > 0 ? n : 1), sizeof *entries);
    if (!entries) return zl_error(ZL_ENOMEM, "%s: out of memory for param group %d", name, o->ngroups + 1);
    for (int i = 0; i < n; i++) entries[i].p = zl_tensor_retain(params[i]);
    if (!o->twice.found) o->twice = find_twice(o, params, n);
    o->groups[o->ngroups++] = (zli_opt_group){.hp = h, .params = entries, .n = n};
    return ZL_OK;
}

int zl_optimizer_group_count(const zl_optimizer *o) { return o ? o->ngroups : 0; }

static const zli_opt_group *group_at(const zl_optimizer *o, int group)
{
    if (!o) {
        zl_error(ZL_EINVAL, "optimizer: NULL");
        return NULL;
    }
    if (group < 0 || group >= o->ngroups) {
        zl_error(ZL_EINVAL, "%s: no param group %d (it has %d; indices here count from 0)",
                 zl_optimizer_kind_name(o->kind), group, o->ngroups);
        return NULL;
    }
    return &o->groups[group];
}

int zl_optimizer_param_count(const zl_optimizer *o, int group)
{
    const zli_opt_group *g = group_at(o, group);
    return g ? g->n : -1;
}

zli_opt_param *zli_opt_entry(const zl_optimizer *o, int group, int index)
{
    const zli_opt_group *g = group_at(o, group);
    if (!g) return NULL;
    if (index < 0 || index >= g->n) {
        zl_error(ZL_EINVAL, "%s: param group %d has no entry %d (it has %d; indices here count from 0)",
                 zl_optimizer_kind_name(o->kind), group + 1, index, g->n);
        return NULL;
    }
    return &g->params[index];
}

zl_tensor *zl_optimizer_param(const zl_optimizer *o, int group, int index)
{
    zli_opt_param *e = zli_opt_entry(o, group, index);
    return e ? e->p : NULL;
}

zl_status zl_optimizer_find(const zl_optimizer *o, const zl_tensor *p, int *group, int *index)
{
    if (!o || !group || !index) return zl_error(ZL_EINVAL, "optimizer: find with a NULL argument");
    if (p && find_in(o, NULL, 0, p, group, index)) return ZL_OK;
    return zl_error(ZL_EINVAL, "%s: the tensor is not one of its parameters", zl_optimizer_kind_name(o->kind));
}

zl_status zl_optimizer_get_hparams(const zl_optimizer *o, int group, zl_optimizer_hparams *out)
{
    const zli_opt_group *g = group_at(o, group);
    if (!g) return ZL_EINVAL;
    if (!out) return zl_error(ZL_EINVAL, "%s: get_hparams into NULL", zl_optimizer_kind_name(o->kind));
    *out = g->hp;
    return ZL_OK;
}

zl_status zl_optimizer_set_hparams(zl_optimizer *o, int group, const zl_optimizer_hparams *hp)
{
    if (!group_at(o, group)) return ZL_EINVAL;
    if (!hp) return zl_error(ZL_EINVAL, "%s: set_hparams from NULL", zl_optimizer_kind_name(o->kind));
    if (check_group_hparams(o, group, hp)) return ZL_EINVAL;
    o->groups[group].hp = *hp;
    return ZL_OK;
}

zl_status zl_optimizer_set_lr(zl_optimizer *o, int group, double lr)
{
    if (!group_at(o, group)) return ZL_EINVAL;
    zl_optimizer_hparams hp = o->groups[group].hp;
    hp.lr = lr;
    return zl_optimizer_set_hparams(o, group, &hp);
}

zl_status zl_optimizer_set_half(zl_optimizer *o, int group, int index, zl_tensor *half)
{
    zli_opt_param *e = zli_opt_entry(o, group, index);
    if (!e) return ZL_EINVAL;
    int64_t n = zl_tensor_numel(e->p);
    if (half && (zl_tensor_numel(half) != n ||
                 (zl_tensor_dtype(half) != ZL_DTYPE_BF16 && zl_tensor_dtype(half) != ZL_DTYPE_F16)))
        return zl_error(ZL_EINVAL, "%s: set_half needs a bf16 or f16 tensor of %lld elements, got %s of %lld "
                        "(param group %d, entry %d)", zl_optimizer_kind_name(o->kind), (long long)n,
                        zl_dtype_name(zl_tensor_dtype(half)), (long long)zl_tensor_numel(half), group + 1, index + 1);
    zl_tensor_release(e->half);
    e->half = zl_tensor_retain(half);
    return ZL_OK;
}

zl_status zl_optimizer_zero_grad(zl_optimizer *o)
{
    if (!o) return zl_error(ZL_EINVAL, "optimizer: zero_grad on NULL");
    for (int g = 0; g < o->ngroups; g++)
        for (int i = 0; i < o->groups[g].n; i++)
            if (zl_tensor_set_grad(o->groups[g].params[i].p, NULL)) return zli_last_code();
    return ZL_OK;
}
