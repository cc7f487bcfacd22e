/* DeepSpeed's learning-rate schedules (zlua/schedule.h): each schedule's lr
 * (and OneCycle's betas) at chosen steps against values worked out by hand
 * from deepspeed/runtime/lr_schedules.py's formulas, the defaults, and every
 * bad parameter by its message. */
#include "harness.h"

/* CHECK_CLOSE scales this by 1 + |expected|: a few ulps of a value near 1.
 * The expected values are the worked-out results to 16 or 17 digits. */
#define TOL 1e-15

static double lr_at(const zl_lr_schedule *s, int64_t t, int group)
{
    double lr = NAN;
    CHECK(zl_lr_schedule_lr(s, t, group, &lr) == ZL_OK);
    return lr;
}

static double beta1_at(const zl_lr_schedule *s, int64_t t, int group)
{
    double b[2] = {NAN, NAN};
    CHECK(zl_lr_schedule_betas(s, t, group, b) == ZL_OK);
    CHECK(b[1] == 0.99);
    return b[0];
}

TEST(warmup_lr)
{
    /* lr = min + (max - min) * w(t) for t < W, max after; w(t) = ln(t+1) / ln W (log)
     * or t / W (linear); min before the first step. */
    zl_lr_group groups[2] = {{.min_lr = 0.001, .max_lr = 0.05}, {.min_lr = 0, .max_lr = 0.02}};
    zl_lr_schedule s = zl_lr_schedule_defaults(ZL_LR_WARMUP);
    s.ngroups = 2, s.groups = groups, s.warmup_num_steps = 10;
    CHECK(zl_lr_schedule_check(&s) == ZL_OK);
    CHECK_CLOSE(lr_at(&s, -1, 0), 0.001, TOL);
    CHECK_CLOSE(lr_at(&s, 0, 0), 0.001, TOL);                  /* ln 1 = 0 */
    CHECK_CLOSE(lr_at(&s, 1, 0), 0.015750469787535075, TOL);   /* 0.001 + 0.049 ln 2 / ln 10 */
    CHECK_CLOSE(lr_at(&s, 4, 0), 0.035249530212464915, TOL);   /* 0.001 + 0.049 ln 5 / ln 10 */
    CHECK_CLOSE(lr_at(&s, 9, 0), 0.05, TOL);                   /* ln 10 / ln 10 */
    CHECK_CLOSE(lr_at(&s, 50, 0), 0.05, TOL);
    s.warmup_type = ZL_LR_WARMUP_LINEAR;
    CHECK_CLOSE(lr_at(&s, 1, 1), 0.002, TOL);                  /* 0.02 * 1/10 */
    CHECK_CLOSE(lr_at(&s, 4, 1), 0.008, TOL);                  /* 0.02 * 4/10 */
    CHECK_CLOSE(lr_at(&s, 9, 1), 0.018, TOL);
    CHECK_CLOSE(lr_at(&s, 10, 1), 0.02, TOL);

    /* warmup_num_steps below 2 runs as 2: at t = 1 the warmup is over */
    s.warmup_num_steps = 1, s.warmup_type = ZL_LR_WARMUP_LOG;
    CHECK(zl_lr_schedule_warmup_steps(&s) == 2);
    CHECK_CLOSE(lr_at(&s, 0, 0), 0.001, TOL);
    CHECK_CLOSE(lr_at(&s, 1, 0), 0.05, TOL);
}

TEST(warmup_decay_lr)
{
    /* after the warmup W = 10: lr = min + (max - min) * max(0, (T - t) / max(1, T - W)), T = 40 */
    zl_lr_group g = {.min_lr = 0.002, .max_lr = 0.05};
    zl_lr_schedule s = zl_lr_schedule_defaults(ZL_LR_WARMUP_DECAY);
    s.ngroups = 1, s.groups = &g, s.warmup_num_steps = 10, s.total_num_steps = 40, s.warmup_type = ZL_LR_WARMUP_LINEAR;
    CHECK_CLOSE(lr_at(&s, -1, 0), 0.002, TOL);
    CHECK_CLOSE(lr_at(&s, 9, 0), 0.0452, TOL);                 /* 0.002 + 0.048 * 9/10 */
    CHECK_CLOSE(lr_at(&s, 10, 0), 0.05, TOL);                  /* (40 - 10) / 30 = 1 */
    CHECK_CLOSE(lr_at(&s, 25, 0), 0.026, TOL);                 /* 15 / 30 */
    CHECK_CLOSE(lr_at(&s, 39, 0), 0.0036, TOL);                /* 1 / 30 */
    CHECK_CLOSE(lr_at(&s, 40, 0), 0.002, TOL);
    CHECK_CLOSE(lr_at(&s, 45, 0), 0.002, TOL);                 /* held at the minimum */
}

TEST(warmup_cosine_lr)
{
    /* lr = base * r(t): r = wmin + w(t) (1 - wmin) over the warmup W = 10, then
     * max(0, cmin + (1 - cmin)(1 + cos(pi p)) / 2), p = min(1, (t - W + 1) / (T - W)), T = 50;
     * 0 before the first step. wmin 0.1, cmin 0.01, base 0.1. */
    zl_lr_group g = {.base_lr = 0.1};
    zl_lr_schedule s = zl_lr_schedule_defaults(ZL_LR_WARMUP_COSINE);
    s.ngroups = 1, s.groups = &g, s.warmup_num_steps = 10, s.total_num_steps = 50;
    s.warmup_min_ratio = 0.1, s.cos_min_ratio = 0.01;
    CHECK(lr_at(&s, -1, 0) == 0);
    CHECK_CLOSE(lr_at(&s, 0, 0), 0.01, TOL);                   /* r = 0.1 */
    CHECK_CLOSE(lr_at(&s, 5, 0), 0.08003361253452793, TOL);    /* 0.1 (0.1 + 0.9 ln 6 / ln 10) */
    CHECK_CLOSE(lr_at(&s, 10, 0), 0.09984740801978985, TOL);   /* p = 1/40 */
    CHECK_CLOSE(lr_at(&s, 30, 0), 0.046616274761471684, TOL);  /* p = 21/40 */
    CHECK_CLOSE(lr_at(&s, 49, 0), 0.001, TOL);                 /* p = 1: r = cmin */
    CHECK_CLOSE(lr_at(&s, 60, 0), 0.001, TOL);                 /* held there */
    /* a negative floor is clamped at 0 */
    s.warmup_num_steps = 5, s.total_num_steps = 30, s.warmup_min_ratio = 0, s.cos_min_ratio = -0.2;
    CHECK(lr_at(&s, 29, 0) == 0 && lr_at(&s, 40, 0) == 0);
}

TEST(one_cycle)
{
    /* 6 steps up from 0.01 to 0.1 (momentum down from 0.95 to 0.85), 4 back,
     * then k = t - 9 steps past the cycle: lr = 0.01 / (1 + 0.5 k / 3) and
     * momentum = 0.95 (1 + 0.1 k / 3). The position is (t + 1) / 6 going up,
     * (10 - (t + 1)) / 4 coming down. */
    zl_lr_group g = {.min_lr = 0.01, .max_lr = 0.1, .min_mom = 0.85, .max_mom = 0.95};
    zl_lr_schedule s = zl_lr_schedule_defaults(ZL_LR_ONE_CYCLE);
    s.ngroups = 1, s.groups = &g, s.cycle_first_step_size = 6, s.cycle_second_step_size = 4;
    s.decay_step_size = 3, s.decay_lr_rate = 0.5, s.decay_mom_rate = 0.1;
    CHECK_CLOSE(lr_at(&s, -1, 0), 0.01, TOL);
    CHECK_CLOSE(beta1_at(&s, -1, 0), 0.85, TOL);               /* DeepSpeed's constructor writes the minimum */
    CHECK_CLOSE(lr_at(&s, 0, 0), 0.025, TOL);                  /* 1/6 of the way */
    CHECK_CLOSE(beta1_at(&s, 0, 0), 0.9333333333333333, TOL);
    CHECK_CLOSE(lr_at(&s, 5, 0), 0.1, TOL);                    /* the peak */
    CHECK_CLOSE(beta1_at(&s, 5, 0), 0.85, TOL);
    CHECK_CLOSE(lr_at(&s, 6, 0), 0.0775, TOL);                 /* 3/4 of the way, coming down */
    CHECK_CLOSE(beta1_at(&s, 6, 0), 0.875, TOL);
    CHECK_CLOSE(lr_at(&s, 9, 0), 0.01, TOL);
    CHECK_CLOSE(beta1_at(&s, 9, 0), 0.95, TOL);
    CHECK_CLOSE(lr_at(&s, 10, 0), 0.008571428571428572, TOL);  /* 0.01 / (1 + 0.5/3) */
    CHECK_CLOSE(beta1_at(&s, 10, 0), 0.9816666666666667, TOL); /* 0.95 (1 + 0.1/3) */
    CHECK_CLOSE(lr_at(&s, 15, 0), 0.005, TOL);                 /* k = 6 */
    CHECK_CLOSE(beta1_at(&s, 15, 0), 1.14, TOL);
    /* no decay: held at the minimum lr and the maximum momentum */
    s.decay_step_size = 0;
    CHECK(lr_at(&s, 15, 0) == 0.01 && beta1_at(&s, 15, 0) == 0.95);

    /* stairs: 3 up over 9 steps, 2 down over 6; the position floored to a stair */
    s.cycle_first_step_size = 9, s.cycle_second_step_size = 6, s.decay_step_size = 4, s.decay_lr_rate = 1;
    s.cycle_first_stair_count = 3, s.cycle_second_stair_count = 2;
    CHECK_CLOSE(lr_at(&s, 0, 0), 0.01, TOL);                   /* floor(1 * 3/9) = 0 */
    CHECK_CLOSE(lr_at(&s, 2, 0), 0.04, TOL);                   /* floor(3 * 3/9) / 3 = 1/3 */
    CHECK_CLOSE(lr_at(&s, 5, 0), 0.07, TOL);                   /* 2/3 */
    CHECK_CLOSE(lr_at(&s, 8, 0), 0.1, TOL);                    /* 3/3 */
    CHECK_CLOSE(lr_at(&s, 9, 0), 0.055, TOL);                  /* floor((15 - 10) * 2/6) / 2 = 1/2 */
    CHECK_CLOSE(lr_at(&s, 14, 0), 0.01, TOL);
    CHECK_CLOSE(lr_at(&s, 20, 0), 0.004, TOL);                 /* 0.01 / (1 + 6/4) */
}

TEST(lr_range_test)
{
    /* lr = min * (1 + rate * (t + 1) / size), the quotient floored with staircase */
    zl_lr_group g = {.min_lr = 0.01};
    zl_lr_schedule s = zl_lr_schedule_defaults(ZL_LR_RANGE_TEST);
    s.ngroups = 1, s.groups = &g, s.lr_range_test_step_size = 5, s.lr_range_test_step_rate = 0.5;
    CHECK_CLOSE(lr_at(&s, -1, 0), 0.01, TOL);
    CHECK_CLOSE(lr_at(&s, 0, 0), 0.011, TOL);                  /* 1 + 0.5/5 */
    CHECK_CLOSE(lr_at(&s, 3, 0), 0.014, TOL);
    CHECK_CLOSE(lr_at(&s, 9, 0), 0.02, TOL);
    CHECK_CLOSE(lr_at(&s, 40, 0), 0.051, TOL);
    s.lr_range_test_staircase = true;
    CHECK_CLOSE(lr_at(&s, 3, 0), 0.01, TOL);                   /* floor(4/5) = 0 */
    CHECK_CLOSE(lr_at(&s, 4, 0), 0.015, TOL);
    CHECK_CLOSE(lr_at(&s, 40, 0), 0.05, TOL);                  /* floor(41/5) = 8 */
}

TEST(defaults)
{
    zl_lr_schedule w = zl_lr_schedule_defaults(ZL_LR_WARMUP);
    CHECK(w.warmup_num_steps == 1000 && w.warmup_type == ZL_LR_WARMUP_LOG && w.cos_min_ratio == 0.0001);
    CHECK(w.warmup_min_ratio == 0 && w.ngroups == 0);
    zl_lr_schedule c = zl_lr_schedule_defaults(ZL_LR_ONE_CYCLE);
    CHECK(c.cycle_first_step_size == 2000 && c.cycle_second_step_size == 2000 && c.cycle_momentum);
    CHECK(c.cycle_first_stair_count == 0 && c.decay_step_size == 0);
    zl_lr_schedule r = zl_lr_schedule_defaults(ZL_LR_RANGE_TEST);
    CHECK(r.lr_range_test_step_size == 2000 && r.lr_range_test_step_rate == 1 && !r.lr_range_test_staircase);
    zl_lr_group gw = zl_lr_group_defaults(ZL_LR_WARMUP_DECAY), gc = zl_lr_group_defaults(ZL_LR_ONE_CYCLE);
    CHECK(gw.min_lr == 0 && gw.max_lr == 0.001 && gc.min_mom == 0.8 && gc.max_mom == 0.9);
    CHECK(zl_lr_group_defaults(ZL_LR_RANGE_TEST).min_lr == 0.001);
    CHECK(!strcmp(zl_lr_kind_name(ZL_LR_WARMUP_COSINE), "WarmupCosineLR") && !zl_lr_kind_name(5));
}

/* A WarmupDecayLR total below its warmup is valid, as in DeepSpeed, which
 * warns: the caveat is that line; the lr warms up, then stays at the minimum. */
TEST(warmup_decay_below_warmup)
{
    zl_lr_group g = {.min_lr = 0.25, .max_lr = 0.5};
    zl_lr_schedule s = zl_lr_schedule_defaults(ZL_LR_WARMUP_DECAY);
    s.ngroups = 1, s.groups = &g;
    char line[256] = "untouched";
    s.total_num_steps = 10, s.warmup_num_steps = 10;
    CHECK(zl_lr_schedule_check(&s) == ZL_OK && !zl_lr_schedule_caveat(&s, line, sizeof line));
    CHECK(strcmp(line, "untouched") == 0);
    s.total_num_steps = 5;
    CHECK(zl_lr_schedule_check(&s) == ZL_OK && zl_lr_schedule_caveat(&s, line, sizeof line));
    CHECK(strcmp(line, "WarmupDecayLR: total_num_steps (5) is less than warmup_num_steps (10): the lr warms up "
                       "for 10 steps, then stays at warmup_min_lr") == 0);
    CHECK_CLOSE(lr_at(&s, 4, 0), 0.25 + 0.25 * log(5.0) / log(10.0), TOL);
    CHECK_CLOSE(lr_at(&s, 9, 0), 0.5, TOL);
    CHECK(lr_at(&s, 10, 0) == 0.25 && lr_at(&s, 100, 0) == 0.25);
    s.total_num_steps = 1, s.warmup_num_steps = 1;
    CHECK(zl_lr_schedule_caveat(&s, line, 40) && strlen(line) == 39);
    CHECK(zl_lr_schedule_caveat(&s, line, sizeof line) &&
          strstr(line, "warmup_num_steps (1, raised to the minimum of 2): the lr warms up for 2 steps"));
    CHECK(!zl_lr_schedule_caveat(&(zl_lr_schedule){.kind = ZL_LR_WARMUP_COSINE}, line, sizeof line));
}

TEST(errors)
{
    double lr;
    zl_lr_group g = {.min_lr = 0.01, .max_lr = 0.1, .min_mom = 0.8, .max_mom = 0.9};
    zl_lr_schedule s = zl_lr_schedule_defaults(ZL_LR_WARMUP);
    s.ngroups = 1, s.groups = &g;
    s.warmup_num_steps = -1;
    CHECK_ERR(zl_lr_schedule_check(&s), "WarmupLR: warmup_num_steps must be at least 0, got -1");
    s.warmup_num_steps = 10, s.warmup_type = (zl_lr_warmup_type)5;
    CHECK_ERR(zl_lr_schedule_check(&s), "WarmupLR: warmup_type must be 'log' or 'linear', got 5");

    s = zl_lr_schedule_defaults(ZL_LR_WARMUP_COSINE), s.ngroups = 1, s.groups = &g;
    s.total_num_steps = -1;
    CHECK_ERR(zl_lr_schedule_check(&s), "WarmupCosineLR: total_num_steps must be at least 0, got -1");
    s.total_num_steps = 10, s.cos_min_ratio = INFINITY;
    CHECK_ERR(zl_lr_schedule_check(&s), "WarmupCosineLR: cos_min_ratio must be a finite number, got inf");

    s = zl_lr_schedule_defaults(ZL_LR_ONE_CYCLE), s.ngroups = 1, s.groups = &g;
    s.cycle_first_step_size = 0;
    CHECK_ERR(zl_lr_schedule_check(&s), "OneCycle: cycle_first_step_size must be positive, got 0");
    s.cycle_first_step_size = 4, s.cycle_second_step_size = -1;
    CHECK_ERR(zl_lr_schedule_check(&s), "OneCycle: cycle_second_step_size must be non-negative, got -1");
    s.cycle_second_step_size = 4, s.cycle_second_stair_count = -1;
    CHECK_ERR(zl_lr_schedule_check(&s), "OneCycle: cycle_second_stair_count must be at least 0, got -1");
    s.cycle_second_stair_count = 0, s.decay_step_size = -2;
    CHECK_ERR(zl_lr_schedule_check(&s), "OneCycle: decay_step_size must be non-negative, got -2");
    s.decay_step_size = 0, s.decay_lr_rate = NAN;
    CHECK_ERR(zl_lr_schedule_check(&s), "OneCycle: decay_lr_rate must be a finite number, got");
    s.decay_lr_rate = 0;
    zl_lr_group two[2] = {g, g};
    two[1].max_mom = NAN;
    s.ngroups = 2, s.groups = two;
    CHECK_ERR(zl_lr_schedule_check(&s), "OneCycle: cycle_max_mom of param group 2 must be a finite number, got");
    s.groups = NULL;
    CHECK_ERR(zl_lr_schedule_check(&s), "OneCycle: 2 param groups and their values NULL");
    s.ngroups = 1, s.groups = &g, s.cycle_momentum = false;
    double b[2];
    CHECK_ERR(zl_lr_schedule_betas(&s, 0, 0, b), "OneCycle: cycle_momentum is off");

    s = zl_lr_schedule_defaults(ZL_LR_RANGE_TEST), s.ngroups = 1, s.groups = &g;
    s.lr_range_test_step_size = 0;
    CHECK_ERR(zl_lr_schedule_check(&s), "LRRangeTest: lr_range_test_step_size must be at least 1, got 0");
    s.lr_range_test_step_size = 3;
    CHECK_ERR(zl_lr_schedule_lr(&s, -2, 0, &lr), "LRRangeTest: last_batch_iteration must be at least -1, got -2");
    CHECK_ERR(zl_lr_schedule_lr(&s, 0, 1, &lr), "LRRangeTest: param group 1 of 1 does not exist");
    CHECK_ERR(zl_lr_schedule_betas(&s, 0, 0, b), "LRRangeTest: only OneCycle cycles the momentum");
    s.kind = (zl_lr_kind)9;
    CHECK_ERR(zl_lr_schedule_check(&s), "lr schedule: unknown kind 9");
    CHECK_ERR(zl_lr_schedule_check(NULL), "lr schedule: the schedule is NULL");
}
