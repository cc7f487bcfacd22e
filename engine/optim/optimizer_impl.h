/* Private to engine/optim/: the optimizer object's layout (zlua/optimizer.h)
 * shared by its groups (optimizer.c), its state (optimizer_state.c) and its
 * step (optimizer_step.c), and the kernel hyperparameters of a group. */
#ifndef ZL_OPTIMIZER_IMPL_H
#define ZL_OPTIMIZER_IMPL_H

#include "optim_impl.h"

/* Adam, AdamW and Lamb keep two state tensors, SGD one. */
#define ZLI_OPT_MAX_STATE 2

typedef struct zli_opt_param {
    zl_tensor *p;                           /* retained */
    zl_tensor *half;                        /* retained, or NULL */
    zl_tensor *state[ZLI_OPT_MAX_STATE];    /* zl_optimizer_state_keys order; all NULL without state */
    int64_t step;
    double lamb_coeff;
} zli_opt_param;

typedef struct zli_opt_group {
    zl_optimizer_hparams hp;
    zli_opt_param *params;
    int n;
} zli_opt_group;

/* The first parameter found in two places: its later place (group, index)
 * and its earlier one. */
typedef struct zli_opt_twice {
    bool found;
    int group, index, first_group, first_index;
} zli_opt_twice;

struct zl_optimizer {
    zl_optimizer_kind kind;
    zl_optimizer_hparams defaults;
    zli_opt_group *groups;
    int ngroups;
    zli_opt_twice twice;   /* zl_optimizer_step refuses to run while found */
};

/* The entry, or NULL with ZL_EINVAL naming the group and index. */
ZLI_HIDDEN zli_opt_param *zli_opt_entry(const zl_optimizer *o, int group, int index);
/* Give e its state (zeros where its parameter lives, charged to the optimizer
 * category, step 0) unless it has some; on error it still has none. */
ZLI_HIDDEN zl_status zli_opt_make_state(const zl_optimizer *o, zli_opt_param *e);

static inline zl_optim_adam zli_opt_adam(const zl_optimizer_hparams *h, int64_t step, double grad_scale)
{
    return (zl_optim_adam){.lr = h->lr, .beta1 = h->beta1, .beta2 = h->beta2, .eps = h->eps,
                           .weight_decay = h->weight_decay, .adamw_mode = h->adamw_mode,
                           .bias_correction = h->bias_correction, .step = step, .grad_scale = grad_scale};
}

static inline zl_optim_lamb zli_opt_lamb(const zl_optimizer_hparams *h, int64_t step, double grad_scale)
{
    return (zl_optim_lamb){.lr = h->lr, .beta1 = h->beta1, .beta2 = h->beta2, .eps = h->eps,
                           .weight_decay = h->weight_decay, .max_coeff = h->max_coeff, .min_coeff = h->min_coeff,
                           .bias_correction = h->bias_correction, .step = step, .grad_scale = grad_scale};
}

static inline zl_optim_sgd zli_opt_sgd(const zl_optimizer_hparams *h, int64_t step, double grad_scale)
{
    return (zl_optim_sgd){.lr = h->lr, .momentum = h->momentum, .dampening = h->dampening,
                          .weight_decay = h->weight_decay, .nesterov = h->nesterov, .step = step,
                          .grad_scale = grad_scale};
}

#endif
