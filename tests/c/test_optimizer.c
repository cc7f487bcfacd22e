/* The optimizer object (zlua/optimizer.h): Adam, AdamW, Lamb and SGD over two
 * param groups against the fused kernels called by hand, bit for bit, with a
 * parameter that misses a step; state get/set and a resumed run; the
 * hyperparameter checks; every bad group, entry and key by its message. */
#include <stdlib.h>
#include "harness.h"

enum { NP = 3, STEPS = 6 };

static const int64_t sizes[NP] = {35, 33, 9};
static const int group_of[NP] = {0, 0, 1};

/* One parameter stepped by hand: p, m, v as the kernels see them, its own step count. */
typedef struct ref_param {
    float *p, *m, *v;
    int64_t step;
    double ratio;     /* Lamb's trust ratio at the last step */
} ref_param;

/* The kernel's hyperparameters as the optimizer must derive them from a group. */
static void ref_step(zl_optimizer_kind kind, const zl_optimizer_hparams *h, ref_param *r, const float *g, int64_t n,
                     double scale)
{
    r->step++;
    zl_optim_buf b = {.p = r->p, .g = g, .g_dtype = ZL_DTYPE_F32, .m = r->m, .v = r->v, .n = n};
    if (kind == ZL_OPTIMIZER_LAMB) {
        zl_optim_lamb hp = zl_optim_lamb_defaults();
        hp.lr = h->lr, hp.beta1 = h->beta1, hp.beta2 = h->beta2, hp.eps = h->eps, hp.weight_decay = h->weight_decay;
        hp.max_coeff = h->max_coeff, hp.min_coeff = h->min_coeff, hp.bias_correction = h->bias_correction;
        hp.step = r->step, hp.grad_scale = scale;
        CHECK(zl_optim_lamb_step(&hp, &b, &r->ratio) == ZL_OK);
    } else if (kind == ZL_OPTIMIZER_SGD) {
        zl_optim_sgd hp = zl_optim_sgd_defaults();
        hp.lr = h->lr, hp.momentum = h->momentum, hp.dampening = h->dampening, hp.weight_decay = h->weight_decay;
        hp.nesterov = h->nesterov, hp.step = r->step, hp.grad_scale = scale;
        b.v = NULL;
        CHECK(zl_optim_sgd_step(&hp, &b) == ZL_OK);
    } else {
        zl_optim_adam hp = zl_optim_adam_defaults();
        hp.lr = h->lr, hp.beta1 = h->beta1, hp.beta2 = h->beta2, hp.eps = h->eps, hp.weight_decay = h->weight_decay;
        hp.adamw_mode = h->adamw_mode, hp.bias_correction = h->bias_correction;
        hp.step = r->step, hp.grad_scale = scale;
        CHECK(zl_optim_adam_step(&hp, &b) == ZL_OK);
    }
}

static bool same_bits(const float *a, const zl_tensor *t, int64_t n)
{
    return zl_tensor_numel(t) == n && !memcmp(a, zl_tensor_data(t), (size_t)n * sizeof *a);
}

/* Two groups (different lr, weight decay), STEPS steps with a gradient scale
 * and parameter 2 without a gradient at step 3, so its step count lags: the
 * optimizer must equal the kernel on each parameter at its own step. */
static void check_against_kernel(zl_optimizer_kind kind, zl_optimizer_hparams base)
{
    zl_tensor *ps[NP];
    ref_param refs[NP];
    for (int i = 0; i < NP; i++) {
        ps[i] = zt_randn(1, &sizes[i]);
        size_t bytes = (size_t)sizes[i] * sizeof(float);
        refs[i] = (ref_param){.p = malloc(bytes), .m = calloc(1, bytes), .v = calloc(1, bytes)};
        memcpy(refs[i].p, zl_tensor_data(ps[i]), bytes);
    }
    zl_optimizer_hparams hp[2] = {base, base};
    hp[0].lr = 0.01, hp[0].weight_decay = 0.1;
    hp[1].lr = 0.003, hp[1].weight_decay = 0;
    zl_optimizer *o = zl_optimizer_new(kind, &base);
    CHECK(o != NULL);
    CHECK(zl_optimizer_add_group(o, ps, 2, &hp[0]) == ZL_OK);
    CHECK(zl_optimizer_add_group(o, &ps[2], 1, &hp[1]) == ZL_OK);
    for (int s = 1; s <= STEPS; s++) {
        for (int i = 0; i < NP; i++) {
            zl_tensor *g = NULL;
            if (!(s == 3 && i == 1)) g = zt_randn(1, &sizes[i]);
            CHECK(zl_tensor_set_grad(ps[i], g) == ZL_OK);
            if (g) {
                ref_step(kind, &hp[group_of[i]], &refs[i], zl_tensor_data(g), sizes[i], 0.5);
                zl_tensor_release(g);
            }
        }
        CHECK(zl_optimizer_step(o, 0.5) == ZL_OK);
    }
    const char *const *keys = zl_optimizer_state_keys(kind);
    for (int i = 0; i < NP; i++) {
        int g = group_of[i], at = i - (g == 0 ? 0 : 2);
        CHECK(same_bits(refs[i].p, ps[i], sizes[i]));
        zl_tensor *m = NULL, *v = NULL;
        CHECK(zl_optimizer_get_state(o, g, at, keys[0], &m) == ZL_OK && m && same_bits(refs[i].m, m, sizes[i]));
        if (keys[1])
            CHECK(zl_optimizer_get_state(o, g, at, keys[1], &v) == ZL_OK && v && same_bits(refs[i].v, v, sizes[i]));
        int64_t step = -1;
        CHECK(zl_optimizer_get_step(o, g, at, &step) == ZL_OK && step == refs[i].step);
        CHECK(step == (i == 1 ? STEPS - 1 : STEPS));
        if (kind == ZL_OPTIMIZER_LAMB) {
            double coeff = 0;
            CHECK(zl_optimizer_lamb_coeff(o, g, at, &coeff) == ZL_OK && coeff == refs[i].ratio && coeff > 0);
        }
        free(refs[i].p), free(refs[i].m), free(refs[i].v);
    }
    zl_optimizer_free(o);
    for (int i = 0; i < NP; i++) zl_tensor_release(ps[i]);
}

TEST(adam_matches_the_kernel)
{
    check_against_kernel(ZL_OPTIMIZER_ADAM, zl_optimizer_defaults(ZL_OPTIMIZER_ADAM));
    zl_optimizer_hparams h = zl_optimizer_defaults(ZL_OPTIMIZER_ADAM);
    h.bias_correction = false, h.beta1 = 0.8;
    check_against_kernel(ZL_OPTIMIZER_ADAM, h);
}

TEST(adamw_matches_the_kernel)
{
    zl_optimizer_hparams h = zl_optimizer_defaults(ZL_OPTIMIZER_ADAMW);
    CHECK(h.adamw_mode && h.weight_decay == 1e-2);
    h.beta2 = 0.95;
    check_against_kernel(ZL_OPTIMIZER_ADAMW, h);
}

TEST(lamb_matches_the_kernel)
{
    zl_optimizer_hparams h = zl_optimizer_defaults(ZL_OPTIMIZER_LAMB);
    h.eps = 1e-6;
    check_against_kernel(ZL_OPTIMIZER_LAMB, h);
}

TEST(sgd_matches_the_kernel)
{
    zl_optimizer_hparams h = zl_optimizer_defaults(ZL_OPTIMIZER_SGD);
    check_against_kernel(ZL_OPTIMIZER_SGD, h);
    h.momentum = 0.9, h.dampening = 0.1;
    check_against_kernel(ZL_OPTIMIZER_SGD, h);
    h.dampening = 0, h.nesterov = true;
    check_against_kernel(ZL_OPTIMIZER_SGD, h);
}

TEST(defaults_and_hparams)
{
    CHECK(!strcmp(zl_optimizer_kind_name(ZL_OPTIMIZER_ADAMW), "AdamW") && !zl_optimizer_kind_name(9));
    zl_optimizer_hparams a = zl_optimizer_defaults(ZL_OPTIMIZER_ADAM);
    CHECK(a.lr == 1e-3 && a.beta1 == 0.9 && a.beta2 == 0.999 && a.eps == 1e-8 && a.weight_decay == 0);
    CHECK(!a.adamw_mode && a.bias_correction);
    zl_optimizer_hparams l = zl_optimizer_defaults(ZL_OPTIMIZER_LAMB);
    CHECK(l.max_coeff == 10 && l.min_coeff == 0.01);
    zl_optimizer_hparams s = zl_optimizer_defaults(ZL_OPTIMIZER_SGD);
    CHECK(s.momentum == 0 && s.dampening == 0 && !s.nesterov && s.weight_decay == 0);

    zl_tensor *p = zt_randn(SHAPE(4));
    zl_optimizer *o = zl_optimizer_new(ZL_OPTIMIZER_ADAMW, NULL);
    CHECK(zl_optimizer_add_group(o, &p, 1, NULL) == ZL_OK);
    zl_optimizer_hparams got;
    CHECK(zl_optimizer_get_hparams(o, 0, &got) == ZL_OK && got.weight_decay == 1e-2 && got.adamw_mode);
    CHECK(zl_optimizer_set_lr(o, 0, 0.25) == ZL_OK);
    CHECK(zl_optimizer_get_hparams(o, 0, &got) == ZL_OK && got.lr == 0.25);
    CHECK_ERR(zl_optimizer_set_lr(o, 0, -1), "AdamW in param group 1: lr must be a finite number >= 0, got -1");
    CHECK(zl_optimizer_get_hparams(o, 0, &got) == ZL_OK && got.lr == 0.25);
    CHECK(zl_optimizer_group_count(o) == 1 && zl_optimizer_param_count(o, 0) == 1 && zl_optimizer_param(o, 0, 0) == p);
    int g = -1, i = -1;
    CHECK(zl_optimizer_find(o, p, &g, &i) == ZL_OK && g == 0 && i == 0);

    zl_tensor *grad = zt_randn(SHAPE(4));
    CHECK(zl_tensor_set_grad(p, grad) == ZL_OK);
    CHECK(zl_optimizer_zero_grad(o) == ZL_OK && zl_tensor_grad(p) == NULL);
    /* no gradient: nothing moves, no state is made */
    float before = ((float *)zl_tensor_data(p))[0];
    zl_tensor *m = p;
    CHECK(zl_optimizer_step(o, 1) == ZL_OK && ((float *)zl_tensor_data(p))[0] == before);
    CHECK(zl_optimizer_get_state(o, 0, 0, "exp_avg", &m) == ZL_OK && m == NULL);
    zl_tensor_release(grad);
    zl_optimizer_free(o);
    zl_optimizer_free(NULL);
    zl_tensor_release(p);
}

/* The half copy is written in the same pass: p rounded to bf16. */
TEST(half_copy)
{
    zl_tensor *p = zt_randn(SHAPE(100)), *half = zl_tensor_zeros(ZL_DTYPE_BF16, SHAPE(100));
    zl_optimizer *o = zl_optimizer_new(ZL_OPTIMIZER_ADAMW, NULL);
    CHECK(zl_optimizer_add_group(o, &p, 1, NULL) == ZL_OK && zl_optimizer_set_half(o, 0, 0, half) == ZL_OK);
    zl_tensor *g = zt_randn(SHAPE(100));
    CHECK(zl_tensor_set_grad(p, g) == ZL_OK && zl_optimizer_step(o, 1) == ZL_OK);
    const float *pv = zl_tensor_data(p);
    const uint16_t *hv = zl_tensor_data(half);
    bool same = true;
    for (int i = 0; i < 100; i++) same = same && hv[i] == zl_f32_to_bf16(pv[i]);
    CHECK(same);
    zl_tensor *small = zl_tensor_zeros(ZL_DTYPE_BF16, SHAPE(3));
    CHECK_ERR(zl_optimizer_set_half(o, 0, 0, small),
              "AdamW: set_half needs a bf16 or f16 tensor of 100 elements, got bf16 of 3");
    zl_optimizer_free(o);
    zl_tensor_release(small), zl_tensor_release(g), zl_tensor_release(half), zl_tensor_release(p);
}

/* Three steps, the state saved; a second optimizer given it (through a flat
 * copy of each tensor) steps on exactly as the first. */
TEST(state_round_trip_and_resume)
{
    const int64_t shape[2] = {5, 7};
    zl_tensor *a = zt_randn(2, shape), *b = zl_tensor_clone(a);
    zl_optimizer *oa = zl_optimizer_new(ZL_OPTIMIZER_LAMB, NULL), *ob = zl_optimizer_new(ZL_OPTIMIZER_LAMB, NULL);
    CHECK(zl_optimizer_add_group(oa, &a, 1, NULL) == ZL_OK && zl_optimizer_add_group(ob, &b, 1, NULL) == ZL_OK);
    zl_tensor *grads[6];
    for (int s = 0; s < 6; s++) grads[s] = zt_randn(2, shape);
    for (int s = 0; s < 3; s++) CHECK(zl_tensor_set_grad(a, grads[s]) == ZL_OK && zl_optimizer_step(oa, 1) == ZL_OK);

    CHECK(zl_tensor_copy_(b, a) == ZL_OK);
    const char *const *keys = zl_optimizer_state_keys(ZL_OPTIMIZER_LAMB);
    for (int k = 0; keys[k]; k++) {
        zl_tensor *t = NULL, *back = NULL;
        CHECK(zl_optimizer_get_state(oa, 0, 0, keys[k], &t) == ZL_OK && t);
        zl_tensor *flat = zl_tensor_reshape(t, 1, (int64_t[]){35});
        CHECK(zl_optimizer_set_state(ob, 0, 0, keys[k], flat) == ZL_OK);
        CHECK(zl_optimizer_get_state(ob, 0, 0, keys[k], &back) == ZL_OK && back != t);
        CHECK(!memcmp(zl_tensor_data(back), zl_tensor_data(t), 35 * sizeof(float)));
        zl_tensor_release(flat);
    }
    int64_t step = 0;
    CHECK(zl_optimizer_get_step(oa, 0, 0, &step) == ZL_OK && step == 3);
    CHECK(zl_optimizer_set_step(ob, 0, 0, step) == ZL_OK);
    for (int s = 3; s < 6; s++) {
        CHECK(zl_tensor_set_grad(a, grads[s]) == ZL_OK && zl_optimizer_step(oa, 1) == ZL_OK);
        CHECK(zl_tensor_set_grad(b, grads[s]) == ZL_OK && zl_optimizer_step(ob, 1) == ZL_OK);
    }
    CHECK(!memcmp(zl_tensor_data(a), zl_tensor_data(b), 35 * sizeof(float)));
    double ca = 0, cb = 1;
    CHECK(zl_optimizer_lamb_coeff(oa, 0, 0, &ca) == ZL_OK && zl_optimizer_lamb_coeff(ob, 0, 0, &cb) == ZL_OK && ca == cb);

    /* reset: no state, step 0; the next step is a first step again */
    zl_tensor *t = a;
    CHECK(zl_optimizer_reset_state(ob, 0, 0) == ZL_OK);
    CHECK(zl_optimizer_get_state(ob, 0, 0, "exp_avg", &t) == ZL_OK && t == NULL);
    CHECK(zl_optimizer_get_step(ob, 0, 0, &step) == ZL_OK && step == 0);
    /* set_step alone makes a zero state */
    CHECK(zl_optimizer_set_step(ob, 0, 0, 4) == ZL_OK);
    CHECK(zl_optimizer_get_state(ob, 0, 0, "exp_avg_sq", &t) == ZL_OK && t && zl_tensor_get(t, 0) == 0);
    CHECK(zl_tensor_category(t) == ZL_MEM_OPTIMIZER);

    for (int s = 0; s < 6; s++) zl_tensor_release(grads[s]);
    zl_optimizer_free(oa), zl_optimizer_free(ob);
    zl_tensor_release(a), zl_tensor_release(b);
}

TEST(hyperparameter_errors)
{
    zl_optimizer_hparams h = zl_optimizer_defaults(ZL_OPTIMIZER_ADAMW);
    h.beta2 = 1.5;
    CHECK_ERR(zl_optimizer_new(ZL_OPTIMIZER_ADAMW, &h),
              "AdamW: betas must be a pair {beta1, beta2}, each in [0, 1), got {0.9, 1.5}");
    h = zl_optimizer_defaults(ZL_OPTIMIZER_ADAM), h.eps = -1;
    CHECK_ERR(zl_optimizer_new(ZL_OPTIMIZER_ADAM, &h), "Adam: eps must be a finite number >= 0, got -1");
    h = zl_optimizer_defaults(ZL_OPTIMIZER_LAMB), h.max_coeff = 0.001;
    CHECK_ERR(zl_optimizer_new(ZL_OPTIMIZER_LAMB, &h), "Lamb: max_coeff must be finite and >= min_coeff (0.01), got 0.001");
    CHECK_ERR(zl_optimizer_new((zl_optimizer_kind)7, NULL), "optimizer: unknown kind 7");

    /* SGD's nesterov is a group's: the defaults may carry it, a group may not */
    h = zl_optimizer_defaults(ZL_OPTIMIZER_SGD), h.nesterov = true;
    zl_optimizer *o = zl_optimizer_new(ZL_OPTIMIZER_SGD, &h);
    CHECK(o != NULL);
    zl_tensor *p = zt_randn(SHAPE(3));
    CHECK_ERR(zl_optimizer_add_group(o, &p, 1, NULL), "SGD: nesterov needs momentum > 0 and dampening 0");
    CHECK(strstr(zl_last_error(), "(param group 1)"));
    CHECK(zl_optimizer_group_count(o) == 0);
    h.momentum = -1;
    CHECK_ERR(zl_optimizer_add_group(o, &p, 1, &h), "SGD in param group 1: momentum must be a finite number >= 0, got -1");
    h.momentum = 0.9;
    CHECK(zl_optimizer_add_group(o, &p, 1, &h) == ZL_OK);
    h.dampening = NAN;
    CHECK_ERR(zl_optimizer_set_hparams(o, 0, &h), "SGD in param group 1: dampening must be finite, got nan");
    zl_optimizer_free(o);
    zl_tensor_release(p);
}

TEST(group_param_and_key_errors)
{
    zl_tensor *p = zt_randn(SHAPE(6)), *q = zt_randn(SHAPE(2, 3));
    zl_tensor *half = zl_tensor_zeros(ZL_DTYPE_BF16, SHAPE(6));
    zl_tensor *strided = zl_tensor_transpose(q, 0, 1);
    zl_optimizer *o = zl_optimizer_new(ZL_OPTIMIZER_ADAM, NULL);
    CHECK_ERR(zl_optimizer_add_group(o, &half, 1, NULL),
              "Adam: param group 1, entry 1 must be a contiguous f32 tensor (the master weights), got bf16");
    CHECK_ERR(zl_optimizer_add_group(o, &strided, 1, NULL), "got f32 non-contiguous");
    CHECK_ERR(zl_optimizer_add_group(o, NULL, -1, NULL), "the count must be >= 0");
    CHECK(zl_optimizer_add_group(o, &p, 1, NULL) == ZL_OK);

    zl_tensor *t = NULL;
    int64_t step;
    CHECK_ERR(zl_optimizer_get_state(o, 1, 0, "exp_avg", &t), "Adam: no param group 1 (it has 1");
    CHECK_ERR(zl_optimizer_get_state(o, 0, 1, "exp_avg", &t), "Adam: param group 1 has no entry 1 (it has 1");
    CHECK_ERR(zl_optimizer_get_state(o, 0, 0, "momentum_buffer", &t),
              "Adam: no state \"momentum_buffer\" (it keeps exp_avg, exp_avg_sq)");
    zl_tensor *five = zt_randn(SHAPE(5));
    CHECK_ERR(zl_optimizer_set_state(o, 0, 0, "exp_avg", five),
              "Adam: state \"exp_avg\" of param group 1, entry 1 has 5 elements, the parameter 6");
    zl_tensor_release(five);
    CHECK_ERR(zl_optimizer_set_state(o, 0, 0, "exp_avgg", p), "Adam: no state \"exp_avgg\"");
    CHECK(zl_optimizer_get_state(o, 0, 0, "exp_avg", &t) == ZL_OK && t == NULL);   /* nothing was made */
    CHECK_ERR(zl_optimizer_set_step(o, 0, 0, -1), "Adam: the step of param group 1, entry 1 must be >= 0, got -1");
    CHECK_ERR(zl_optimizer_get_step(o, -1, 0, &step), "Adam: no param group -1");
    CHECK_ERR(zl_optimizer_lamb_coeff(o, 0, 0, &(double){0}), "Adam: only Lamb has a trust ratio");
    CHECK_ERR(zl_optimizer_param_count(o, 3), "Adam: no param group 3");
    CHECK_ERR(zl_optimizer_find(o, q, &(int){0}, &(int){0}), "Adam: the tensor is not one of its parameters");
    CHECK_ERR(zl_optimizer_reset_state(o, 0, 5), "Adam: param group 1 has no entry 5");
    CHECK(zl_optimizer_state_keys((zl_optimizer_kind)9) == NULL);

    /* a step the kernel refuses: the error names the group, the step count stays */
    zl_tensor *g = zt_randn(SHAPE(6));
    CHECK(zl_tensor_set_grad(p, g) == ZL_OK);
    CHECK_ERR(zl_optimizer_step(o, NAN),
              "Adam in param group 1: optim.adam: grad_scale must be a finite number >= 0, got nan");
    CHECK(zl_optimizer_get_step(o, 0, 0, &step) == ZL_OK && step == 0);
    zl_optimizer_free(o);
    zl_tensor_release(g), zl_tensor_release(strided);
    zl_tensor_release(half), zl_tensor_release(q), zl_tensor_release(p);
}

/* A parameter in two places is taken (what reads the groups reports it its
 * own way) but never stepped: a step refuses, naming both places. */
TEST(a_parameter_in_two_places)
{
    zl_tensor *p = zt_randn(SHAPE(6)), *q = zt_randn(SHAPE(2, 3)), *g = zt_randn(SHAPE(6));
    zl_optimizer *o = zl_optimizer_new(ZL_OPTIMIZER_SGD, NULL);
    CHECK(zl_optimizer_add_group(o, &q, 1, NULL) == ZL_OK && zl_optimizer_add_group(o, &p, 1, NULL) == ZL_OK);
    CHECK(zl_optimizer_add_group(o, (zl_tensor *[]){q, p}, 2, NULL) == ZL_OK);
    CHECK(zl_tensor_set_grad(p, g) == ZL_OK);
    float before = ((float *)zl_tensor_data(p))[0];
    CHECK_ERR(zl_optimizer_step(o, 1), "SGD: param group 3, entry 1 is already in param group 1 (entry 1): "
                                       "a parameter steps in one place only");
    CHECK(((float *)zl_tensor_data(p))[0] == before);
    zl_optimizer_free(o);

    o = zl_optimizer_new(ZL_OPTIMIZER_SGD, NULL);
    CHECK(zl_optimizer_add_group(o, (zl_tensor *[]){p, q, p}, 3, NULL) == ZL_OK);
    CHECK_ERR(zl_optimizer_step(o, 1), "SGD: param group 1, entry 3 is already in param group 1 (entry 1)");
    zl_optimizer_free(o);
    zl_tensor_release(g), zl_tensor_release(q), zl_tensor_release(p);
}
