/* The fp16 loss scaler: a static scale, or DeepSpeed's dynamic one (halve on
 * overflow once the hysteresis runs out, double after a clean window), with
 * its state for checkpoints. */
#include <math.h>
#include <stdlib.h>
#include "../ops/op_util.h"

struct zl_loss_scaler {
    zl_loss_scaler_config cfg;
    bool dynamic;
    zl_loss_scaler_state st;
};

zl_loss_scaler_config zl_loss_scaler_defaults(void)
{
    return (zl_loss_scaler_config){
        .loss_scale = 0,
        .initial_scale_power = 16,
        .loss_scale_window = 1000,
        .hysteresis = 2,
        .consecutive_hysteresis = false,
        .min_loss_scale = 1,
        .raise_error_at_min_scale = true,
    };
}

static zl_status check_config(const zl_loss_scaler_config *c)
{
    if (!c) return zl_error(ZL_EINVAL, "loss scaler: the config is NULL");
    if (!isfinite(c->loss_scale) || c->loss_scale < 0)
        return zl_error(ZL_EINVAL, "fp16.loss_scale must be 0 (dynamic) or a finite scale > 0, got %g", c->loss_scale);
    if (c->loss_scale > 0) return ZL_OK;   /* static: the dynamic keys are not used */
    if (c->initial_scale_power < 0 || c->initial_scale_power > 127)
        return zl_error(ZL_EINVAL, "fp16.initial_scale_power must be in 0..127 (the first scale is 2^power), got %d",
                        c->initial_scale_power);
    if (c->loss_scale_window < 1)
        return zl_error(ZL_EINVAL, "fp16.loss_scale_window must be an integer >= 1, got %lld",
                        (long long)c->loss_scale_window);
    if (c->hysteresis < 1)
        return zl_error(ZL_EINVAL, "fp16.hysteresis must be an integer >= 1, got %d", c->hysteresis);
    if (!isfinite(c->min_loss_scale) || c->min_loss_scale <= 0)
        return zl_error(ZL_EINVAL, "fp16.min_loss_scale must be a finite number > 0, got %g", c->min_loss_scale);
    return ZL_OK;
}

zl_loss_scaler *zl_loss_scaler_new(const zl_loss_scaler_config *cfg)
{
    if (check_config(cfg)) return NULL;
    zl_loss_scaler *ls = malloc(sizeof *ls);
    if (!ls) {
        zl_error(ZL_ENOMEM, "loss scaler: out of memory");
        return NULL;
    }
    ls->cfg = *cfg;
    ls->dynamic = cfg->loss_scale == 0;
    ls->st = (zl_loss_scaler_state){
        .cur_scale = ls->dynamic ? ldexp(1.0, cfg->initial_scale_power) : cfg->loss_scale,
        .cur_iter = 0,
        .last_overflow_iter = -1,
        .cur_hysteresis = cfg->hysteresis > 1 ? cfg->hysteresis : 1,   /* unchecked when static */
    };
    return ls;
}

void zl_loss_scaler_free(zl_loss_scaler *ls) { free(ls); }

/* DeepSpeed's DynamicLossScaler.update_scale (0.16.5), statement for
 * statement, with its fixed scale factor of 2; the floor's exception becomes
 * an error that leaves the state as it was. */
zl_status zl_loss_scaler_update(zl_loss_scaler *ls, bool overflow)
{
    if (!ls) return zl_error(ZL_EINVAL, "loss scaler: the scaler is NULL");
    if (!ls->dynamic) return ZL_OK;
    const zl_loss_scaler_config *c = &ls->cfg;
    zl_loss_scaler_state *s = &ls->st;
    if (overflow) {
        if (c->hysteresis == 1 || s->cur_hysteresis == 1) {
            if (s->cur_scale == c->min_loss_scale && c->raise_error_at_min_scale)
                return zl_error(ZL_ESTATE, "fp16: gradient overflow at the minimum loss scale %g (min_loss_scale); "
                                "the run cannot continue: lower the learning rate or use bf16", c->min_loss_scale);
            s->cur_scale = fmax(s->cur_scale / 2, c->min_loss_scale);
        } else {
            s->cur_hysteresis -= 1;
        }
        s->last_overflow_iter = s->cur_iter;
    } else {
        if (c->consecutive_hysteresis) s->cur_hysteresis = c->hysteresis;
        if ((s->cur_iter - s->last_overflow_iter) % c->loss_scale_window == 0) {
            if (!c->consecutive_hysteresis) s->cur_hysteresis = c->hysteresis;
            s->cur_scale *= 2;
        }
    }
    s->cur_iter += 1;
    return ZL_OK;
}

double zl_loss_scaler_scale(const zl_loss_scaler *ls) { return ls ? ls->st.cur_scale : 1.0; }

bool zl_loss_scaler_is_dynamic(const zl_loss_scaler *ls) { return ls && ls->dynamic; }

zl_loss_scaler_state zl_loss_scaler_get_state(const zl_loss_scaler *ls)
{
    return ls ? ls->st : (zl_loss_scaler_state){1.0, 0, -1, 1};
}

zl_status zl_loss_scaler_set_state(zl_loss_scaler *ls, const zl_loss_scaler_state *st)
{
    if (!ls || !st) return zl_error(ZL_EINVAL, "loss scaler: %s is NULL", ls ? "the state" : "the scaler");
    if (!isfinite(st->cur_scale) || st->cur_scale <= 0)
        return zl_error(ZL_EINVAL, "loss scaler state: cur_scale must be a finite number > 0, got %g", st->cur_scale);
    if (st->cur_iter < 0)
        return zl_error(ZL_EINVAL, "loss scaler state: cur_iter must be >= 0, got %lld", (long long)st->cur_iter);
    if (st->last_overflow_iter < -1 || st->last_overflow_iter >= st->cur_iter)
        return zl_error(ZL_EINVAL, "loss scaler state: last_overflow_iter must be in -1..cur_iter-1 (%lld), got %lld",
                        (long long)(st->cur_iter - 1), (long long)st->last_overflow_iter);
    if (st->cur_hysteresis < 1)
        return zl_error(ZL_EINVAL, "loss scaler state: cur_hysteresis must be >= 1, got %d", st->cur_hysteresis);
    ls->st = *st;
    return ZL_OK;
}
