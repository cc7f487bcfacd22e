/* zlua/optimizer.h — optimizer objects: Adam, AdamW, Lamb and SGD over param
 * groups, each group with its own hyperparameters, each parameter with the
 * state it keeps (moments, step count), and one call that steps every
 * parameter holding a gradient through the fused kernels of zlua/optim.h.
 * zlua.optim's optimizers are these objects. */
#ifndef ZLUA_OPTIMIZER_H
#define ZLUA_OPTIMIZER_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zl_optimizer zl_optimizer;

typedef enum zl_optimizer_kind {
    ZL_OPTIMIZER_ADAM = 0,    /* torch.optim.Adam: L2 decay (adamw_mode off) */
    ZL_OPTIMIZER_ADAMW = 1,   /* torch.optim.AdamW: decoupled decay (adamw_mode on) */
    ZL_OPTIMIZER_LAMB = 2,    /* DeepSpeed's FusedLamb */
    ZL_OPTIMIZER_SGD = 3,     /* torch.optim.SGD */
} zl_optimizer_kind;

/* A param group's hyperparameters, as zlua/optim.h's kernels take them.
 * Fields a kind does not use are ignored. */
typedef struct zl_optimizer_hparams {
    double lr;                    /* >= 0 */
    double beta1, beta2;          /* Adam, AdamW, Lamb: each in [0, 1) */
    double eps;                   /* Adam, AdamW, Lamb: >= 0 */
    double weight_decay;          /* >= 0 */
    bool adamw_mode;              /* Adam, AdamW: decoupled decay */
    bool bias_correction;         /* Adam, AdamW, Lamb */
    double max_coeff, min_coeff;  /* Lamb: the trust ratio's clamp, 0 <= min_coeff <= max_coeff */
    double momentum;              /* SGD: >= 0 */
    double dampening;             /* SGD: finite */
    bool nesterov;                /* SGD: needs momentum > 0 and dampening 0 */
} zl_optimizer_hparams;

/* torch's and DeepSpeed's defaults: lr 1e-3; betas 0.9 and 0.999, eps 1e-8,
 * bias correction (Adam, AdamW, Lamb); weight_decay 0, or 1e-2 for AdamW;
 * adamw_mode on for AdamW only; max_coeff 10 and min_coeff 0.01 (Lamb);
 * momentum, dampening 0 and no nesterov (SGD). Another kind gets Adam's. */
ZL_API zl_optimizer_hparams zl_optimizer_defaults(zl_optimizer_kind kind);
/* "Adam", "AdamW", "Lamb" or "SGD"; NULL for another value. */
ZL_API const char *zl_optimizer_kind_name(zl_optimizer_kind kind);

/* Messages name the kind and count param groups and their entries from 1,
 * as a user counts them ("AdamW in param group 2: lr must be a finite number
 * >= 0, got -1"); the functions take 0-based indices. */

/* A new optimizer with no param groups. `defaults` (NULL: zl_optimizer_defaults)
 * are copied; zl_optimizer_add_group starts each group from them. NULL with
 * ZL_EINVAL for an unknown kind or a bad default ("AdamW: betas must be a
 * pair {beta1, beta2}, each in [0, 1), got {0.9, 1.5}"). */
ZL_API zl_optimizer *zl_optimizer_new(zl_optimizer_kind kind, const zl_optimizer_hparams *defaults);
/* Releases the parameters, their half copies and all state. NULL is a no-op. */
ZL_API void zl_optimizer_free(zl_optimizer *o);

/* Append a param group of n >= 0 parameters (retained): each a contiguous f32
 * tensor (the master weights), in host memory or on a device. `hp` NULL
 * gives the optimizer's defaults. ZL_EINVAL naming the group and entry, or
 * the bad hyperparameter ("SGD: nesterov needs momentum > 0 and dampening 0,
 * ... (param group 1)"); nothing is added then. A parameter in two places is
 * accepted here, so that what only reads the groups (ZeRO's engine takes
 * them over) can report it its own way, and refused by zl_optimizer_step. */
ZL_API zl_status zl_optimizer_add_group(zl_optimizer *o, zl_tensor *const *params, int n,
                                        const zl_optimizer_hparams *hp);
ZL_API int zl_optimizer_group_count(const zl_optimizer *o);
/* The parameters of a group; -1 and ZL_EINVAL for a group that does not exist. */
ZL_API int zl_optimizer_param_count(const zl_optimizer *o, int group);
/* Parameter `index` of `group`: borrowed, or NULL with ZL_EINVAL naming them. */
ZL_API zl_tensor *zl_optimizer_param(const zl_optimizer *o, int group, int index);
/* Where p is among the parameters (by identity); ZL_EINVAL when it is not one. */
ZL_API zl_status zl_optimizer_find(const zl_optimizer *o, const zl_tensor *p, int *group, int *index);

/* A group's hyperparameters. set checks them as add_group does (the group
 * keeps its old ones on error); set_lr changes only the lr, as a schedule
 * does each step (zlua/schedule.h). */
ZL_API zl_status zl_optimizer_get_hparams(const zl_optimizer *o, int group, zl_optimizer_hparams *out);
ZL_API zl_status zl_optimizer_set_hparams(zl_optimizer *o, int group, const zl_optimizer_hparams *hp);
ZL_API zl_status zl_optimizer_set_lr(zl_optimizer *o, int group, double lr);

/* After each step of the parameter, write its value rounded to half's dtype
 * into `half` (bf16 or f16, as many elements, where the parameter lives;
 * retained) in the same fused pass: mixed precision's working weights. NULL
 * stops it. */
ZL_API zl_status zl_optimizer_set_half(zl_optimizer *o, int group, int index, zl_tensor *half);

/* One step of every parameter whose gradient (zl_tensor_grad) is set, each
 * gradient f32, bf16 or f16 and read times grad_scale (finite, >= 0: the
 * loss-scale and clipping factors, without a pass of their own). Parameters
 * without a gradient are left alone, their step counts too. A parameter's
 * state is made (zeros, charged to the optimizer category, where it lives)
 * on its first step. Each group is one call of zlua/optim.h's tensor-list
 * kernel (one launch on a device) while its parameters' step counts agree,
 * one call per parameter once they differ (some missed a step): either way
 * each parameter steps as it would alone. A failed kernel call leaves the
 * step counts of its parameters as they were; the groups before it have
 * stepped. */
ZL_API zl_status zl_optimizer_step(zl_optimizer *o, double grad_scale);
/* Clear every parameter's gradient (torch's set_to_none). */
ZL_API zl_status zl_optimizer_zero_grad(zl_optimizer *o);

/* ---- state, for checkpoints ----
 * A parameter has state once it has stepped or was given some: tensors by
 * key ("exp_avg" and "exp_avg_sq" for Adam, AdamW and Lamb, "momentum_buffer"
 * for SGD), f32 shaped like the parameter where it lives, and a step count
 * (the number of its last step, 0 before any). Errors name the group, the
 * entry and the key; nothing is written on error. */

/* The keys of a kind's state tensors, NULL-terminated; NULL for an unknown kind. */
ZL_API const char *const *zl_optimizer_state_keys(zl_optimizer_kind kind);
/* *out = the state tensor under key (borrowed: valid until the state is
 * reset or the optimizer freed; writing it changes the state), or NULL when
 * the parameter has no state yet. */
ZL_API zl_status zl_optimizer_get_state(const zl_optimizer *o, int group, int index, const char *key,
                                        zl_tensor **out);
/* Copy src's values (any dtype, any shape with the parameter's element
 * count, in host memory or where the parameter lives) into the state under
 * key, making the state (zeros, step 0) first when there is none. */
ZL_API zl_status zl_optimizer_set_state(zl_optimizer *o, int group, int index, const char *key,
                                        zl_tensor *src);
ZL_API zl_status zl_optimizer_get_step(const zl_optimizer *o, int group, int index, int64_t *step);
/* step >= 0; makes the state as set_state does. */
ZL_API zl_status zl_optimizer_set_step(zl_optimizer *o, int group, int index, int64_t step);
/* Drop the parameter's state: its next step is its first. */
ZL_API zl_status zl_optimizer_reset_state(zl_optimizer *o, int group, int index);
/* Lamb: the trust ratio the parameter's last step used (0 before one in this
 * optimizer). ZL_EINVAL for another kind. */
ZL_API zl_status zl_optimizer_lamb_coeff(const zl_optimizer *o, int group, int index, double *out);

#ifdef __cplusplus
}
#endif
#endif
