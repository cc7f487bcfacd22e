/* DeepSpeed's learning-rate schedules (zlua/schedule.h): their defaults, the
 * checks of their parameters, and each formula as a function of the step. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include "zlua/schedule.h"

/* The formulas round as DeepSpeed's Python does, one operation at a time: a
 * multiply-add fused by the compiler (GCC does under -march=native) would
 * move the last bit of some values. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

static const char *const kind_names[] = {"WarmupLR", "WarmupDecayLR", "WarmupCosineLR", "OneCycle", "LRRangeTest"};

const char *zl_lr_kind_name(zl_lr_kind kind)
{
    return (unsigned)kind < sizeof kind_names / sizeof kind_names[0] ? kind_names[kind] : NULL;
}

zl_lr_schedule zl_lr_schedule_defaults(zl_lr_kind kind)
{
    return (zl_lr_schedule){
        .kind = kind, .warmup_num_steps = 1000, .warmup_type = ZL_LR_WARMUP_LOG, .cos_min_ratio = 0.0001,
        .cycle_first_step_size = 2000, .cycle_second_step_size = 2000, .cycle_momentum = true,
        .lr_range_test_step_size = 2000, .lr_range_test_step_rate = 1.0,
    };
}

zl_lr_group zl_lr_group_defaults(zl_lr_kind kind)
{
    switch (kind) {
    case ZL_LR_WARMUP:
    case ZL_LR_WARMUP_DECAY: return (zl_lr_group){.max_lr = 0.001};
    case ZL_LR_ONE_CYCLE: return (zl_lr_group){.min_mom = 0.8, .max_mom = 0.9};
    case ZL_LR_RANGE_TEST: return (zl_lr_group){.min_lr = 0.001};
    default: return (zl_lr_group){0};
    }
}

int64_t zl_lr_schedule_warmup_steps(const zl_lr_schedule *s)
{
    return s->warmup_num_steps < 2 ? 2 : s->warmup_num_steps;
}

/* ---- checks ---- */

static zl_status need_finite(const char *name, const char *key, double v)
{
    return isfinite(v) ? ZL_OK : zl_error(ZL_EINVAL, "%s: %s must be a finite number, got %.14g", name, key, v);
}

static zl_status need_at_least(const char *name, const char *key, int64_t v, int64_t min)
{
    if (v >= min) return ZL_OK;
    return zl_error(ZL_EINVAL, "%s: %s must be at least %lld, got %lld", name, key, (long long)min, (long long)v);
}

/* The per-group values a kind reads, under its parameter names. */
typedef struct group_key {
    const char *name;
    size_t offset;
} group_key;

static int group_keys(zl_lr_kind kind, group_key keys[4])
{
    switch (kind) {
    case ZL_LR_WARMUP:
    case ZL_LR_WARMUP_DECAY:
        keys[0] = (group_key){"warmup_min_lr", offsetof(zl_lr_group, min_lr)};
        keys[1] = (group_key){"warmup_max_lr", offsetof(zl_lr_group, max_lr)};
        return 2;
    case ZL_LR_WARMUP_COSINE: keys[0] = (group_key){"lr", offsetof(zl_lr_group, base_lr)}; return 1;
    case ZL_LR_ONE_CYCLE:
        keys[0] = (group_key){"cycle_min_lr", offsetof(zl_lr_group, min_lr)};
        keys[1] = (group_key){"cycle_max_lr", offsetof(zl_lr_group, max_lr)};
        keys[2] = (group_key){"cycle_min_mom", offsetof(zl_lr_group, min_mom)};
        keys[3] = (group_key){"cycle_max_mom", offsetof(zl_lr_group, max_mom)};
        return 4;
    default: keys[0] = (group_key){"lr_range_test_min_lr", offsetof(zl_lr_group, min_lr)}; return 1;
    }
}

static zl_status check_groups(const char *name, const zl_lr_schedule *s)
{
    if (s->ngroups < 0 || (s->ngroups > 0 && !s->groups))
        return zl_error(ZL_EINVAL, "%s: %d param groups%s", name, s->ngroups,
                        s->ngroups < 0 ? " (the count must be >= 0)" : " and their values NULL");
    group_key keys[4];
    int nkeys = group_keys(s->kind, keys);
    for (int g = 0; g < s->ngroups; g++)
        for (int k = 0; k < nkeys; k++) {
            double v;
            memcpy(&v, (const char *)&s->groups[g] + keys[k].offset, sizeof v);
            if (!isfinite(v))
                return zl_error(ZL_EINVAL, "%s: %s of param group %d must be a finite number, got %.14g", name,
                                keys[k].name, g + 1, v);
        }
    return ZL_OK;
}

static zl_status check_warmup(const char *name, const zl_lr_schedule *s)
{
    if (need_at_least(name, "warmup_num_steps", s->warmup_num_steps, 0)) return ZL_EINVAL;
    if (s->warmup_type != ZL_LR_WARMUP_LOG && s->warmup_type != ZL_LR_WARMUP_LINEAR)
        return zl_error(ZL_EINVAL, "%s: warmup_type must be 'log' or 'linear', got %d", name, (int)s->warmup_type);
    if (s->kind == ZL_LR_WARMUP) return ZL_OK;
    if (need_at_least(name, "total_num_steps", s->total_num_steps, 0)) return ZL_EINVAL;
    if (s->kind == ZL_LR_WARMUP_COSINE &&
        (need_finite(name, "warmup_min_ratio", s->warmup_min_ratio) ||
         need_finite(name, "cos_min_ratio", s->cos_min_ratio)))
        return ZL_EINVAL;
    return ZL_OK;
}

bool zl_lr_schedule_caveat(const zl_lr_schedule *s, char *buf, size_t size)
{
    if (s->kind != ZL_LR_WARMUP_DECAY) return false;
    int64_t w = zl_lr_schedule_warmup_steps(s);
    if (s->total_num_steps >= w) return false;
    snprintf(buf, size,
             "WarmupDecayLR: total_num_steps (%lld) is less than warmup_num_steps (%lld%s): the lr warms up for "
             "%lld steps, then stays at warmup_min_lr",
             (long long)s->total_num_steps, (long long)s->warmup_num_steps,
             w != s->warmup_num_steps ? ", raised to the minimum of 2" : "", (long long)w);
    return true;
}

static zl_status check_one_cycle(const char *name, const zl_lr_schedule *s)
{
    if (need_finite(name, "cycle_first_step_size", s->cycle_first_step_size)) return ZL_EINVAL;
    if (s->cycle_first_step_size <= 0)
        return zl_error(ZL_EINVAL, "%s: cycle_first_step_size must be positive, got %.14g", name,
                        s->cycle_first_step_size);
    if (need_finite(name, "cycle_second_step_size", s->cycle_second_step_size)) return ZL_EINVAL;
    if (s->cycle_second_step_size < 0)
        return zl_error(ZL_EINVAL, "%s: cycle_second_step_size must be non-negative, got %.14g", name,
                        s->cycle_second_step_size);
    if (need_at_least(name, "cycle_first_stair_count", s->cycle_first_stair_count, 0) ||
        need_at_least(name, "cycle_second_stair_count", s->cycle_second_stair_count, 0) ||
        need_finite(name, "decay_step_size", s->decay_step_size))
        return ZL_EINVAL;
    if (s->decay_step_size < 0)
        return zl_error(ZL_EINVAL, "%s: decay_step_size must be non-negative, got %.14g", name, s->decay_step_size);
    if (need_finite(name, "decay_lr_rate", s->decay_lr_rate) || need_finite(name, "decay_mom_rate", s->decay_mom_rate))
        return ZL_EINVAL;
    return ZL_OK;
}

zl_status zl_lr_schedule_check(const zl_lr_schedule *s)
{
    if (!s) return zl_error(ZL_EINVAL, "lr schedule: the schedule is NULL");
    const char *name = zl_lr_kind_name(s->kind);
    if (!name) return zl_error(ZL_EINVAL, "lr schedule: unknown kind %d", (int)s->kind);
    if (check_groups(name, s)) return ZL_EINVAL;
    switch (s->kind) {
    case ZL_LR_ONE_CYCLE: return check_one_cycle(name, s);
    case ZL_LR_RANGE_TEST:
        if (need_at_least(name, "lr_range_test_step_size", s->lr_range_test_step_size, 1) ||
            need_finite(name, "lr_range_test_step_rate", s->lr_range_test_step_rate))
            return ZL_EINVAL;
        return ZL_OK;
    default: return check_warmup(name, s);
    }
}

/* The schedule, the step and the group of a call. */
static zl_status check_call(const zl_lr_schedule *s, int64_t t, int group)
{
    if (zl_lr_schedule_check(s)) return ZL_EINVAL;
    const char *name = zl_lr_kind_name(s->kind);
    if (need_at_least(name, "last_batch_iteration", t, -1)) return ZL_EINVAL;
    if (group < 0 || group >= s->ngroups)
        return zl_error(ZL_EINVAL, "%s: param group %d of %d does not exist (groups are numbered from 0 here)", name,
                        group, s->ngroups);
    return ZL_OK;
}

/* ---- formulas ---- */

/* The warmup fraction w(t) for 0 <= t < W. */
static double warmup_fraction(const zl_lr_schedule *s, int64_t t)
{
    int64_t w = zl_lr_schedule_warmup_steps(s);
    if (s->warmup_type == ZL_LR_WARMUP_LOG) return (1.0 / log((double)w)) * log((double)(t + 1));
    return (double)t / (double)w;
}

/* WarmupLR's and WarmupDecayLR's fraction of the way from min_lr to max_lr, t >= 0. */
static double warmup_gamma(const zl_lr_schedule *s, int64_t t)
{
    int64_t w = zl_lr_schedule_warmup_steps(s);
    if (t < w) return warmup_fraction(s, t);
    if (s->kind == ZL_LR_WARMUP) return 1.0;
    int64_t total = s->total_num_steps;
    double span = total - w > 1 ? (double)(total - w) : 1.0;
    double gamma = (double)(total - t) / span;
    return gamma > 0.0 ? gamma : 0.0;
}

/* WarmupCosineLR's factor on base_lr, t >= 0. */
static double cosine_ratio(const zl_lr_schedule *s, int64_t t)
{
    int64_t w = zl_lr_schedule_warmup_steps(s);
    if (t < w) return s->warmup_min_ratio + warmup_fraction(s, t) * (1.0 - s->warmup_min_ratio);
    int64_t real_total = s->total_num_steps - w > 1 ? s->total_num_steps - w : 1;
    double x = (double)(t - w + 1) / (double)real_total;
    double progress = x < 1.0 ? x : 1.0;
    double ratio = (1.0 + cos(M_PI * progress)) / 2.0;
    double r = s->cos_min_ratio + (1.0 - s->cos_min_ratio) * ratio;
    return r > 0.0 ? r : 0.0;
}

/* OneCycle's position in the cycle at t < first + second, as a fraction of
 * the way from the minimum lr to the maximum. A stair count quantises it from
 * the offset into the cycle, so a half-cycle boundary lands exactly on a
 * stair rather than a rounding error below it. */
static double cycle_scale(const zl_lr_schedule *s, int64_t t)
{
    double first = s->cycle_first_step_size, second = s->cycle_second_step_size;
    double total = first + second, step_ratio = first / total;
    double batch_iteration = (double)(t + 1);
    double cycle = floor(1 + batch_iteration / total);
    double x = 1.0 + batch_iteration / total - cycle;
    double scale;
    int64_t stairs;
    if (x <= step_ratio) {
        scale = x / step_ratio;
        stairs = s->cycle_first_stair_count;
    } else {
        scale = (x - 1) / (step_ratio - 1);
        stairs = s->cycle_second_stair_count;
    }
    if (stairs > 0) {
        double pos = fmod(batch_iteration, total);
        if (pos <= first) pos = pos * (double)stairs / first;
        else pos = (total - pos) * (double)stairs / second;
        scale = floor(pos) / (double)stairs;
    }
    return scale;
}

/* OneCycle's decay factor k steps past the cycle (k >= 1). */
static double cycle_decay(const zl_lr_schedule *s, int64_t t, double rate)
{
    double total = s->cycle_first_step_size + s->cycle_second_step_size;
    return 1 + rate * (((double)t - total + 1) / s->decay_step_size);
}

static double one_cycle_lr(const zl_lr_schedule *s, const zl_lr_group *g, int64_t t)
{
    if (t < 0) return g->min_lr;
    if ((double)t < s->cycle_first_step_size + s->cycle_second_step_size)
        return g->min_lr + (g->max_lr - g->min_lr) * cycle_scale(s, t);
    if (s->decay_step_size == 0 || s->decay_lr_rate == 0) return g->min_lr;
    return g->min_lr / cycle_decay(s, t, s->decay_lr_rate);
}

zl_status zl_lr_schedule_lr(const zl_lr_schedule *s, int64_t t, int group, double *lr)
{
    if (check_call(s, t, group)) return ZL_EINVAL;
    if (!lr) return zl_error(ZL_EINVAL, "%s: the output lr is NULL", zl_lr_kind_name(s->kind));
    const zl_lr_group *g = &s->groups[group];
    switch (s->kind) {
    case ZL_LR_WARMUP:
    case ZL_LR_WARMUP_DECAY: *lr = t < 0 ? g->min_lr : g->min_lr + (g->max_lr - g->min_lr) * warmup_gamma(s, t); break;
    case ZL_LR_WARMUP_COSINE: *lr = t < 0 ? 0.0 : g->base_lr * cosine_ratio(s, t); break;
    case ZL_LR_ONE_CYCLE: *lr = one_cycle_lr(s, g, t); break;
    default: {
        double interval = (double)(t + 1) / (double)s->lr_range_test_step_size;
        if (s->lr_range_test_staircase) interval = floor(interval);
        *lr = g->min_lr * (1 + s->lr_range_test_step_rate * interval);
    }
    }
    return ZL_OK;
}

zl_status zl_lr_schedule_betas(const zl_lr_schedule *s, int64_t t, int group, double betas[2])
{
    if (check_call(s, t, group)) return ZL_EINVAL;
    const char *name = zl_lr_kind_name(s->kind);
    if (s->kind != ZL_LR_ONE_CYCLE) return zl_error(ZL_EINVAL, "%s: only OneCycle cycles the momentum", name);
    if (!s->cycle_momentum) return zl_error(ZL_EINVAL, "%s: cycle_momentum is off", name);
    if (!betas) return zl_error(ZL_EINVAL, "%s: the output betas are NULL", name);
    const zl_lr_group *g = &s->groups[group];
    double mom;
    if (t < 0) mom = g->min_mom;
    else if ((double)t < s->cycle_first_step_size + s->cycle_second_step_size)
        mom = g->max_mom - (g->max_mom - g->min_mom) * cycle_scale(s, t);
    else if (s->decay_step_size == 0 || s->decay_mom_rate == 0) mom = g->max_mom;
    else mom = g->max_mom * cycle_decay(s, t, s->decay_mom_rate);
    betas[0] = mom;
    betas[1] = 0.99;
    return ZL_OK;
}
