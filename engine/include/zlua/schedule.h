/* zlua/schedule.h — DeepSpeed's five learning-rate schedules (WarmupLR,
 * WarmupDecayLR, WarmupCosineLR, OneCycle, LRRangeTest) as functions of the
 * step: each param group's lr, and OneCycle's betas, at a given
 * last_batch_iteration. A schedule keeps no position: the caller keeps it
 * and writes the values into its optimizer (zl_optimizer_set_lr). zlua.lr's
 * schedule objects are these formulas behind DeepSpeed's object API. */
#ifndef ZLUA_SCHEDULE_H
#define ZLUA_SCHEDULE_H

#include "base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Parity target: deepspeed/runtime/lr_schedules.py as of 0.16.5, with the
 * later fixes that only turn a crash or a nonsense value into a sane one
 * (per-group values in OneCycle, OneCycle's stair counts, WarmupCosineLR
 * holding at cos_min_ratio past its end).
 *
 * The step t is DeepSpeed's last_batch_iteration: -1 before the first
 * scheduler step, when DeepSpeed's constructors write the t = -1 values
 * (the minimum lr, 0 for WarmupCosineLR, OneCycle's minimum momentum), then
 * 0, 1, ... With W = max(2, warmup_num_steps) (DeepSpeed's clamp, which
 * keeps 1/ln W finite) and the warmup fraction w(t) = ln(t+1)/ln W (log) or
 * t/W (linear), per group:
 *   WarmupLR        min_lr + (max_lr - min_lr) * (t < W ? w(t) : 1)
 *   WarmupDecayLR   the same, with max(0, (T - t) / max(1, T - W)) for t >= W
 *                   (T = total_num_steps: a linear fall to 0, held there)
 *   WarmupCosineLR  base_lr * r(t): r = warmup_min_ratio + w(t) * (1 -
 *                   warmup_min_ratio) for t < W, then with progress p =
 *                   min(1, (t - W + 1) / max(1, T - W)),
 *                   r = max(0, cos_min_ratio + (1 - cos_min_ratio) * (1 + cos(pi p)) / 2)
 *   OneCycle        cycle_first_step_size steps up from min_lr to max_lr (the
 *                   momentum down from max_mom to min_mom), cycle_second_step_size
 *                   back, quantised into stairs when a stair count is set; then,
 *                   k = t - first - second + 1 steps past the cycle,
 *                   lr = min_lr / (1 + decay_lr_rate * k / decay_step_size) and
 *                   momentum = max_mom * (1 + decay_mom_rate * k / decay_step_size)
 *                   (held at min_lr and max_mom when the rate or decay_step_size is 0)
 *   LRRangeTest     min_lr * (1 + lr_range_test_step_rate * i), i = (t+1) /
 *                   lr_range_test_step_size, floored when lr_range_test_staircase
 * All in double, in DeepSpeed's order of operations. */
typedef enum zl_lr_kind {
    ZL_LR_WARMUP = 0,          /* WarmupLR */
    ZL_LR_WARMUP_DECAY = 1,    /* WarmupDecayLR */
    ZL_LR_WARMUP_COSINE = 2,   /* WarmupCosineLR */
    ZL_LR_ONE_CYCLE = 3,       /* OneCycle */
    ZL_LR_RANGE_TEST = 4,      /* LRRangeTest */
} zl_lr_kind;

typedef enum zl_lr_warmup_type { ZL_LR_WARMUP_LOG = 0, ZL_LR_WARMUP_LINEAR = 1 } zl_lr_warmup_type;

/* One param group's values, each finite. */
typedef struct zl_lr_group {
    double min_lr;    /* warmup_min_lr, cycle_min_lr or lr_range_test_min_lr */
    double max_lr;    /* warmup_max_lr or cycle_max_lr */
    double base_lr;   /* WarmupCosineLR: the group's lr when the schedule starts (its peak) */
    double min_mom;   /* OneCycle: cycle_min_mom */
    double max_mom;   /* OneCycle: cycle_max_mom */
} zl_lr_group;

/* A schedule: DeepSpeed's parameters under DeepSpeed's names. Fields another
 * kind uses are ignored. */
typedef struct zl_lr_schedule {
    zl_lr_kind kind;
    int ngroups;                       /* >= 0 */
    const zl_lr_group *groups;         /* [ngroups], borrowed: must outlive every call */
    /* WarmupLR, WarmupDecayLR, WarmupCosineLR */
    int64_t warmup_num_steps;          /* >= 0; below 2 runs as 2 */
    zl_lr_warmup_type warmup_type;
    int64_t total_num_steps;           /* WarmupDecayLR: >= the warmup; WarmupCosineLR: >= 0 */
    double warmup_min_ratio;           /* WarmupCosineLR: finite */
    double cos_min_ratio;              /* WarmupCosineLR: finite */
    /* OneCycle. DeepSpeed's None for the second half's size or stair count
     * means the first half's: set them equal. */
    double cycle_first_step_size;      /* > 0 */
    double cycle_second_step_size;     /* >= 0 */
    int64_t cycle_first_stair_count;   /* >= 0; 0: no stairs */
    int64_t cycle_second_stair_count;  /* >= 0 */
    double decay_step_size;            /* >= 0; 0: no decay */
    double decay_lr_rate;              /* finite */
    double decay_mom_rate;             /* finite */
    bool cycle_momentum;               /* write betas (zl_lr_schedule_betas) */
    /* LRRangeTest */
    int64_t lr_range_test_step_size;   /* >= 1 */
    double lr_range_test_step_rate;    /* finite */
    bool lr_range_test_staircase;
} zl_lr_schedule;

/* DeepSpeed's defaults for `kind`, with no groups: warmup_num_steps 1000, log
 * warmup, cos_min_ratio 1e-4, warmup_min_ratio 0; both OneCycle step sizes
 * 2000, no stairs, no decay, cycle_momentum true; LRRangeTest step size 2000,
 * rate 1, no staircase. total_num_steps (required by WarmupDecayLR and
 * WarmupCosineLR) is 0. */
ZL_API zl_lr_schedule zl_lr_schedule_defaults(zl_lr_kind kind);
/* DeepSpeed's per-group defaults for `kind`: min_lr 0 and max_lr 1e-3 for the
 * warmups (1e-3 whatever the optimizer's lr), min_lr 1e-3 for LRRangeTest,
 * momenta 0.8 and 0.9 for OneCycle; OneCycle's lrs (required) and base_lr
 * (the optimizer's) are 0. */
ZL_API zl_lr_group zl_lr_group_defaults(zl_lr_kind kind);
/* "WarmupLR", "WarmupDecayLR", "WarmupCosineLR", "OneCycle" or "LRRangeTest";
 * NULL for another value. */
ZL_API const char *zl_lr_kind_name(zl_lr_kind kind);

/* ZL_EINVAL unless the schedule is valid, with a message naming the kind and
 * the parameter ("WarmupCosineLR: total_num_steps must be at least 0, got
 * -1"; "OneCycle: cycle_min_lr of param group 2 must be a finite number, got
 * nan": groups are counted from 1 in messages). */
ZL_API zl_status zl_lr_schedule_check(const zl_lr_schedule *s);
/* A valid schedule that likely is not what was meant, as DeepSpeed warns of
 * it: WarmupDecayLR with total_num_steps below the warmup (it warms up, then
 * stays at its minimum). Writes that one line (no newline) into buf, at most
 * size bytes, and returns true; false, buf untouched, when there is none. */
ZL_API bool zl_lr_schedule_caveat(const zl_lr_schedule *s, char *buf, size_t size);
/* The warmup the formulas run: warmup_num_steps, or 2 when below. */
ZL_API int64_t zl_lr_schedule_warmup_steps(const zl_lr_schedule *s);

/* *lr = the lr of group (0-based) at step t >= -1. Checks s as
 * zl_lr_schedule_check does, then t and group (ZL_EINVAL naming them); *lr is
 * untouched on error. */
ZL_API zl_status zl_lr_schedule_lr(const zl_lr_schedule *s, int64_t t, int group, double *lr);
/* OneCycle with cycle_momentum: betas[0] = the momentum of group at step t,
 * betas[1] = 0.99 (DeepSpeed overwrites beta2 so). ZL_EINVAL for another
 * kind or with cycle_momentum off, and as zl_lr_schedule_lr. */
ZL_API zl_status zl_lr_schedule_betas(const zl_lr_schedule *s, int64_t t, int group, double betas[2]);

#ifdef __cplusplus
}
#endif
#endif
