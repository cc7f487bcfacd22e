/* The fp16 loss scaler (engine/optim/loss_scaler.c) against DeepSpeed's rules:
 * scale sequences for injected overflow patterns compared step by step with a
 * transcription of DeepSpeed's Python, hand-worked sequences, the floor, the
 * static scale, checkpoint state and config errors. */
#include <stdlib.h>
#include "harness.h"

/* ---- the reference: deepspeed/runtime/fp16/loss_scaler.py at DeepSpeed
 * 0.16.5 (38327e07), class DynamicLossScaler, one C line per Python line,
 * each commented with the Python it mirrors. Logging lines are left out. ---- */
typedef struct ds_scaler {
    double cur_scale;
    int64_t cur_iter, last_overflow_iter, scale_window;
    double scale_factor, min_scale;
    int delayed_shift, cur_hysteresis;
    bool consecutive_hysteresis, raise_error_at_min_scale;
} ds_scaler;

static ds_scaler ds_new(double init_scale, int64_t scale_window, double min_scale, int delayed_shift,
                        bool consecutive_hysteresis, bool raise_error_at_min_scale)
{
    ds_scaler s;
    s.cur_scale = init_scale;                                   /* super().__init__(init_scale): self.cur_scale = cur_scale */
    s.cur_iter = 0;                                             /* self.cur_iter = 0 */
    s.last_overflow_iter = -1;                                  /* self.last_overflow_iter = -1 */
    s.scale_factor = 2.0;                                       /* self.scale_factor = scale_factor  (default 2.) */
    s.scale_window = scale_window;                              /* self.scale_window = scale_window */
    s.min_scale = min_scale;                                    /* self.min_scale = min_scale */
    s.delayed_shift = delayed_shift;                            /* self.delayed_shift = delayed_shift */
    s.cur_hysteresis = delayed_shift;                           /* self.cur_hysteresis = delayed_shift */
    s.consecutive_hysteresis = consecutive_hysteresis;          /* self.consecutive_hysteresis = consecutive_hysteresis */
    s.raise_error_at_min_scale = raise_error_at_min_scale;      /* self.raise_error_at_min_scale = raise_error_at_min_scale */
    return s;
}

/* false where the Python raises. */
static bool ds_update_scale(ds_scaler *self, bool overflow)    /* def update_scale(self, overflow): */
{
    if (overflow) {                                                         /* if overflow: */
        if (self->delayed_shift == 1 || self->cur_hysteresis == 1) {        /*     if self.delayed_shift == 1 or self.cur_hysteresis == 1: */
            if (self->cur_scale == self->min_scale && self->raise_error_at_min_scale) /* if (self.cur_scale == self.min_scale) and self.raise_error_at_min_scale: */
                return false;                                               /*             raise Exception("Current loss scale already at minimum ...") */
            else {                                                          /*         else: */
                double next_scale = fmax(self->cur_scale / self->scale_factor, self->min_scale); /* next_scale = max(self.cur_scale / self.scale_factor, self.min_scale) */
                self->cur_scale = next_scale;                               /*             self.cur_scale = next_scale */
            }
        } else {                                                            /*     else: */
            self->cur_hysteresis -= 1;                                      /*         self.cur_hysteresis -= 1 */
        }
        self->last_overflow_iter = self->cur_iter;                          /*     self.last_overflow_iter = self.cur_iter */
    } else {                                                                /* else: */
        if (self->consecutive_hysteresis) {                                 /*     if self.consecutive_hysteresis: */
            self->cur_hysteresis = self->delayed_shift;                     /*         self.cur_hysteresis = self.delayed_shift */
        }
        if ((self->cur_iter - self->last_overflow_iter) % self->scale_window == 0) { /* if (self.cur_iter - self.last_overflow_iter) % self.scale_window == 0: */
            if (!self->consecutive_hysteresis)                              /*         if not self.consecutive_hysteresis: */
                self->cur_hysteresis = self->delayed_shift;                 /*             self.cur_hysteresis = self.delayed_shift */
            self->cur_scale *= self->scale_factor;                          /*         self.cur_scale *= self.scale_factor */
        }
    }
    self->cur_iter += 1;                                                    /* self.cur_iter += 1 */
    return true;
}

/* ---- helpers ---- */

static zl_loss_scaler_config config(int power, int64_t window, int hysteresis, bool consecutive, double min_scale,
                                    bool raise)
{
    zl_loss_scaler_config c = zl_loss_scaler_defaults();
    c.initial_scale_power = power;
    c.loss_scale_window = window;
    c.hysteresis = hysteresis;
    c.consecutive_hysteresis = consecutive;
    c.min_loss_scale = min_scale;
    c.raise_error_at_min_scale = raise;
    return c;
}

static uint64_t lcg = 0x9e3779b97f4a7c15ull;
static double uniform(void)
{
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(lcg >> 11) * 0x1p-53;
}

/* Drive ours and the reference through the same overflow pattern (pattern[i]
 * for step i, or random with probability p when pattern is NULL) and compare
 * the whole state after every step. Returns the step that raised, or -1. */
static int64_t run_both(const zl_loss_scaler_config *c, const bool *pattern, int64_t steps, double p,
                        const char *what)
{
    zl_loss_scaler *ls = zl_loss_scaler_new(c);
    CHECK(ls != NULL);
    if (!ls) return -2;
    ds_scaler ref = ds_new(ldexp(1.0, c->initial_scale_power), c->loss_scale_window, c->min_loss_scale,
                           c->hysteresis, c->consecutive_hysteresis, c->raise_error_at_min_scale);
    int64_t raised = -1;
    for (int64_t i = 0; i < steps; i++) {
        bool overflow = pattern ? pattern[i] : uniform() < p;
        zl_loss_scaler_state before = zl_loss_scaler_get_state(ls);
        zl_status st = zl_loss_scaler_update(ls, overflow);
        bool ok = ds_update_scale(&ref, overflow);
        zl_loss_scaler_state s = zl_loss_scaler_get_state(ls);
        if ((st == ZL_OK) != ok) {
            zt_fail(__FILE__, __LINE__, "%s: step %lld: ours %s, DeepSpeed %s", what, (long long)i,
                    st ? "raised" : "did not raise", ok ? "did not" : "raised");
            break;
        }
        if (!ok) {
            CHECK(memcmp(&before, &s, sizeof s) == 0);   /* an error changes nothing */
            raised = i;
            break;
        }
        if (s.cur_scale != ref.cur_scale || s.cur_iter != ref.cur_iter ||
            s.last_overflow_iter != ref.last_overflow_iter || s.cur_hysteresis != ref.cur_hysteresis ||
            zl_loss_scaler_scale(ls) != ref.cur_scale) {
            zt_fail(__FILE__, __LINE__, "%s: step %lld (overflow %d): ours scale %g iter %lld last %lld hyst %d, "
                    "DeepSpeed scale %g iter %lld last %lld hyst %d", what, (long long)i, overflow, s.cur_scale,
                    (long long)s.cur_iter, (long long)s.last_overflow_iter, s.cur_hysteresis, ref.cur_scale,
                    (long long)ref.cur_iter, (long long)ref.last_overflow_iter, ref.cur_hysteresis);
            break;
        }
    }
    zl_loss_scaler_free(ls);
    return raised;
}

/* The scales seen by each step's backward, and the update results. */
static void sequence(const zl_loss_scaler_config *c, const char *pattern, double *scales, zl_status *st)
{
    zl_loss_scaler *ls = zl_loss_scaler_new(c);
    for (int i = 0; pattern[i]; i++) {
        scales[i] = zl_loss_scaler_scale(ls);
        st[i] = zl_loss_scaler_update(ls, pattern[i] == 'O');
    }
    zl_loss_scaler_free(ls);
}

static void check_sequence(const char *what, const zl_loss_scaler_config *c, const char *pattern,
                           const double *want)
{
    double got[64];
    zl_status st[64];
    sequence(c, pattern, got, st);
    for (int i = 0; pattern[i]; i++)
        if (got[i] != want[i] || st[i]) {
            zt_fail(__FILE__, __LINE__, "%s: step %d of %s: scale %g, expected %g (status %d)", what, i, pattern,
                    got[i], want[i], st[i]);
            return;
        }
}

/* ---- tests ---- */

TEST(defaults_are_deepspeeds)
{
    zl_loss_scaler_config c = zl_loss_scaler_defaults();
    CHECK(c.loss_scale == 0 && c.initial_scale_power == 16 && c.loss_scale_window == 1000 && c.hysteresis == 2 &&
          !c.consecutive_hysteresis && c.min_loss_scale == 1 && c.raise_error_at_min_scale);
    zl_loss_scaler *ls = zl_loss_scaler_new(&c);
    CHECK(ls && zl_loss_scaler_is_dynamic(ls) && zl_loss_scaler_scale(ls) == 65536);
    zl_loss_scaler_state s = zl_loss_scaler_get_state(ls);
    CHECK(s.cur_iter == 0 && s.last_overflow_iter == -1 && s.cur_hysteresis == 2);
    zl_loss_scaler_free(ls);
    zl_loss_scaler_free(NULL);
}

/* Worked by hand from the rules: window 3, so a clean step doubles when
 * (iter - last_overflow_iter) is a multiple of 3. */
TEST(hand_worked_sequences)
{
    zl_loss_scaler_config c = config(4, 3, 1, false, 1, true);   /* scale 16 */
    /* no overflow: doubles after steps 2, 5, 8 (iter - (-1) = 3, 6, 9) */
    check_sequence("clean", &c, "CCCCCCCCCC", (double[]){16, 16, 16, 32, 32, 32, 64, 64, 64, 128});
    /* an overflow at step 2 halves at once (hysteresis 1) and restarts the window from it */
    check_sequence("one overflow", &c, "CCOCCCCC", (double[]){16, 16, 16, 8, 8, 8, 16, 16});
    /* hysteresis 2: the first overflow only spends the hysteresis, the second halves */
    c.hysteresis = 2;
    check_sequence("hysteresis 2", &c, "OOCCCO", (double[]){16, 16, 8, 8, 8, 16});
    /* without consecutive_hysteresis the spent hysteresis comes back only when the
     * scale doubles: O C O halves at the second overflow */
    check_sequence("not consecutive", &c, "OCOC", (double[]){16, 16, 16, 8});
    /* with it, every clean step refills it: O C O C O never halves */
    c.consecutive_hysteresis = true;
    check_sequence("consecutive", &c, "OCOCOC", (double[]){16, 16, 16, 16, 16, 16});
    /* hysteresis 3, not consecutive: third overflow in a row halves, later ones too
     * (the hysteresis stays at 1 until a doubling refills it) */
    c = config(4, 3, 3, false, 1, true);
    check_sequence("hysteresis 3", &c, "OOOOCCCO", (double[]){16, 16, 16, 8, 4, 4, 4, 8});
}

TEST(no_overflow_doubles_every_window)
{
    const int64_t windows[] = {1, 3, 1000};
    for (size_t w = 0; w < 3; w++) {
        zl_loss_scaler_config c = config(16, windows[w], 2, false, 1, true);
        run_both(&c, NULL, 2500, 0.0, "no overflow");
        zl_loss_scaler *ls = zl_loss_scaler_new(&c);
        for (int64_t k = 0; k < 2500; k++) {
            double want = ldexp(1.0, 16 + (int)(k / windows[w]));
            if (zl_loss_scaler_scale(ls) != want) {
                zt_fail(__FILE__, __LINE__, "window %lld: step %lld scale %g, expected %g",
                        (long long)windows[w], (long long)k, zl_loss_scaler_scale(ls), want);
                break;
            }
            CHECK(zl_loss_scaler_update(ls, false) == ZL_OK);
        }
        zl_loss_scaler_free(ls);
    }
}

TEST(all_overflow_to_the_floor)
{
    const int hyst[] = {1, 2, 3};
    const double mins[] = {1, 0.25, 3};
    for (int h = 0; h < 3; h++)
        for (int m = 0; m < 3; m++) {
            zl_loss_scaler_config c = config(8, 1000, hyst[h], false, mins[m], true);
            int64_t raised = run_both(&c, NULL, 100, 1.0, "all overflow");
            /* hysteresis-1 overflows spend it, then one halving per overflow from 2^8 down to
             * the floor (a floor that is not a power of two is reached by the clamp), then
             * the overflow at the floor raises */
            int halvings = mins[m] == 1 ? 8 : mins[m] == 0.25 ? 10 : 7;
            CHECK(raised == hyst[h] - 1 + halvings);
            /* without the error the scale stays at the floor */
            c.raise_error_at_min_scale = false;
            CHECK(run_both(&c, NULL, 100, 1.0, "all overflow, no raise") == -1);
            zl_loss_scaler *ls = zl_loss_scaler_new(&c);
            for (int i = 0; i < 100; i++) zl_loss_scaler_update(ls, true);
            CHECK(zl_loss_scaler_scale(ls) == mins[m]);
            zl_loss_scaler_free(ls);
        }
}

TEST(floor_error_message)
{
    zl_loss_scaler_config c = config(1, 1000, 1, false, 1, true);   /* scale 2 */
    zl_loss_scaler *ls = zl_loss_scaler_new(&c);
    CHECK(zl_loss_scaler_update(ls, true) == ZL_OK && zl_loss_scaler_scale(ls) == 1);
    zl_loss_scaler_state before = zl_loss_scaler_get_state(ls);
    CHECK_ERR(zl_loss_scaler_update(ls, true), "fp16: gradient overflow at the minimum loss scale 1 "
              "(min_loss_scale); the run cannot continue: lower the learning rate or use bf16");
    zl_loss_scaler_state after = zl_loss_scaler_get_state(ls);
    CHECK(memcmp(&before, &after, sizeof before) == 0);
    CHECK(zl_loss_scaler_update(ls, false) == ZL_OK);   /* a clean step is still fine */
    zl_loss_scaler_free(ls);
}

TEST(mixed_patterns_match_deepspeed)
{
    const int64_t windows[] = {1, 2, 7, 50};
    const double probs[] = {0.01, 0.1, 0.5, 0.9};
    int runs = 0;
    for (int h = 1; h <= 3; h++)
        for (int cons = 0; cons < 2; cons++)
            for (size_t w = 0; w < 4; w++)
                for (size_t p = 0; p < 4; p++)
                    for (int raise = 0; raise < 2; raise++) {
                        zl_loss_scaler_config c = config(6, windows[w], h, cons, raise ? 1 : 0.5, raise);
                        char what[96];
                        snprintf(what, sizeof what, "hysteresis %d consecutive %d window %lld p %g raise %d", h,
                                 cons, (long long)windows[w], probs[p], raise);
                        run_both(&c, NULL, 3000, probs[p], what);
                        runs++;
                    }
    CHECK(runs == 3 * 2 * 4 * 4 * 2);
    /* bursts: long clean runs between runs of overflows */
    bool pattern[4000];
    for (int i = 0; i < 4000; i++) pattern[i] = (i / 37) % 5 == 0 && i % 3 != 0;
    for (int h = 1; h <= 3; h++)
        for (int cons = 0; cons < 2; cons++) {
            zl_loss_scaler_config c = config(16, 20, h, cons, 1, true);
            run_both(&c, pattern, 4000, 0, "bursts");
        }
}

TEST(static_scale_never_changes)
{
    zl_loss_scaler_config c = zl_loss_scaler_defaults();
    c.loss_scale = 128;
    c.hysteresis = 0;   /* the dynamic keys are not used, nor checked */
    zl_loss_scaler *ls = zl_loss_scaler_new(&c);
    CHECK(ls && !zl_loss_scaler_is_dynamic(ls));
    for (int i = 0; i < 3000; i++) {
        CHECK(zl_loss_scaler_update(ls, uniform() < 0.3) == ZL_OK);
        if (zl_loss_scaler_scale(ls) != 128) {
            zt_fail(__FILE__, __LINE__, "static scale changed to %g at step %d", zl_loss_scaler_scale(ls), i);
            break;
        }
    }
    zl_loss_scaler_free(ls);
}

/* Saving at step 100 and loading into a new scaler continues the same sequence. */
TEST(state_round_trip)
{
    zl_loss_scaler_config c = config(12, 10, 2, false, 1, false);   /* this pattern reaches the floor */
    bool pattern[200];
    for (int i = 0; i < 200; i++) pattern[i] = uniform() < 0.15;
    zl_loss_scaler *a = zl_loss_scaler_new(&c), *b = zl_loss_scaler_new(&c);
    for (int i = 0; i < 100; i++) CHECK(zl_loss_scaler_update(a, pattern[i]) == ZL_OK);
    zl_loss_scaler_state saved = zl_loss_scaler_get_state(a);
    CHECK(saved.cur_iter == 100);
    CHECK(zl_loss_scaler_set_state(b, &saved) == ZL_OK);
    for (int i = 100; i < 200; i++) {
        CHECK(zl_loss_scaler_update(a, pattern[i]) == ZL_OK && zl_loss_scaler_update(b, pattern[i]) == ZL_OK);
        zl_loss_scaler_state sa = zl_loss_scaler_get_state(a), sb = zl_loss_scaler_get_state(b);
        if (memcmp(&sa, &sb, sizeof sa)) {
            zt_fail(__FILE__, __LINE__, "resumed scaler differs at step %d", i);
            break;
        }
    }
    zl_loss_scaler_state bad = saved;
    bad.cur_scale = 0;
    CHECK_ERR(zl_loss_scaler_set_state(b, &bad), "loss scaler state: cur_scale must be a finite number > 0, got 0");
    bad = saved;
    bad.cur_iter = -3;
    CHECK_ERR(zl_loss_scaler_set_state(b, &bad), "loss scaler state: cur_iter must be >= 0, got -3");
    bad = saved;
    bad.last_overflow_iter = saved.cur_iter;
    CHECK_ERR(zl_loss_scaler_set_state(b, &bad), "loss scaler state: last_overflow_iter must be in -1..cur_iter-1");
    bad = saved;
    bad.cur_hysteresis = 0;
    CHECK_ERR(zl_loss_scaler_set_state(b, &bad), "loss scaler state: cur_hysteresis must be >= 1, got 0");
    CHECK_ERR(zl_loss_scaler_set_state(b, NULL), "loss scaler: the state is NULL");
    zl_loss_scaler_free(a);
    zl_loss_scaler_free(b);
}

TEST(bad_configs)
{
    zl_loss_scaler_config c = zl_loss_scaler_defaults();
    c.loss_scale = -1;
    CHECK_ERR(zl_loss_scaler_new(&c), "fp16.loss_scale must be 0 (dynamic) or a finite scale > 0, got -1");
    c = zl_loss_scaler_defaults();
    c.initial_scale_power = 200;
    CHECK_ERR(zl_loss_scaler_new(&c), "fp16.initial_scale_power must be in 0..127 (the first scale is 2^power), got 200");
    c = zl_loss_scaler_defaults();
    c.loss_scale_window = 0;
    CHECK_ERR(zl_loss_scaler_new(&c), "fp16.loss_scale_window must be an integer >= 1, got 0");
    c = zl_loss_scaler_defaults();
    c.hysteresis = 0;
    CHECK_ERR(zl_loss_scaler_new(&c), "fp16.hysteresis must be an integer >= 1, got 0");
    c = zl_loss_scaler_defaults();
    c.min_loss_scale = 0;
    CHECK_ERR(zl_loss_scaler_new(&c), "fp16.min_loss_scale must be a finite number > 0, got 0");
    CHECK_ERR(zl_loss_scaler_new(NULL), "loss scaler: the config is NULL");
    CHECK_ERR(zl_loss_scaler_update(NULL, false), "loss scaler: the scaler is NULL");
}
