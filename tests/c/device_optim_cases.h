/* The optimizer and mixed-precision checks on a device against the host,
 * shared by tests/c/test_device_optim.c (the stand-in device) and
 * tests/gpu/test_cuda_optim.c (a GPU). The includer defines to_dev (a host
 * tensor's copy on the device), check_dev_bits (a failure unless the device
 * tensor holds the host tensor's bits) and DEV_NAME ("cuda:N"). Adam/AdamW,
 * SGD and Lamb over lists of tensor sets, the overflow check, the global
 * norm, scaling and a loss-scaled, clipped step must give the host's bits:
 * the host's AVX2 kernels, whose multiply-adds the device's math shares. */
#include <stdlib.h>

enum { NSETS = 3, STEPS = 3 };
static const int64_t sizes[NSETS] = {1040, 37, 20000};

/* One list of sets in host memory and its twin on the stand-in. */
typedef struct sets {
    zl_tensor *p[NSETS], *g[NSETS], *m[NSETS], *v[NSETS], *half[NSETS];
    zl_optim_tensors t[NSETS];
} sets;

static void sets_make(sets *h, sets *d, zl_dtype hdt)
{
    for (int k = 0; k < NSETS; k++) {
        int64_t n = sizes[k];
        zl_tensor *p = zt_randn(1, &n), *z = zl_tensor_zeros(ZL_DTYPE_F32, 1, &n);
        zl_tensor *half = zl_tensor_zeros(hdt, 1, &n);
        h->p[k] = p, d->p[k] = to_dev(p);
        h->m[k] = zl_tensor_clone(z), d->m[k] = to_dev(z);
        h->v[k] = zl_tensor_clone(z), d->v[k] = to_dev(z);
        h->half[k] = zl_tensor_clone(half), d->half[k] = k == 1 ? NULL : to_dev(half);
        if (k == 1) {   /* a set without a half copy, between two with one */
            zl_tensor_release(h->half[k]);
            h->half[k] = NULL;
        }
        h->g[k] = d->g[k] = NULL;
        zl_tensor_release(z);
        zl_tensor_release(half);
    }
}

/* A fresh gradient of dtype gdt for every set, the same bits in both places. */
static void sets_grad(sets *h, sets *d, zl_dtype gdt, int step)
{
    for (int k = 0; k < NSETS; k++) {
        zl_tensor_release(h->g[k]);
        zl_tensor_release(d->g[k]);
        int64_t n = sizes[k];
        zl_tensor *r = zt_randn(1, &n);
        if (step == 2) zl_tensor_set(r, 3, 1e-20);   /* a tiny one, and a large one */
        if (step == 3) zl_tensor_set(r, 5, 3e3);
        h->g[k] = zl_tensor_to(r, gdt);
        d->g[k] = to_dev(h->g[k]);
        zl_tensor_release(r);
    }
    for (int k = 0; k < NSETS; k++) {
        h->t[k] = (zl_optim_tensors){h->p[k], h->g[k], h->m[k], h->v[k], h->half[k]};
        d->t[k] = (zl_optim_tensors){d->p[k], d->g[k], d->m[k], d->v[k], d->half[k]};
    }
}

static void sets_check(const sets *h, const sets *d, const char *what)
{
    for (int k = 0; k < NSETS; k++) {
        check_dev_bits(h->p[k], d->p[k], what);
        check_dev_bits(h->m[k], d->m[k], what);
        check_dev_bits(h->v[k], d->v[k], what);
        if (h->half[k]) check_dev_bits(h->half[k], d->half[k], what);
    }
}

static void sets_free(sets *x)
{
    for (int k = 0; k < NSETS; k++) {
        zl_tensor *objs[] = {x->p[k], x->g[k], x->m[k], x->v[k], x->half[k]};
        for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
    }
}

static const zl_dtype gdts[3] = {ZL_DTYPE_F32, ZL_DTYPE_BF16, ZL_DTYPE_F16};

/* The host's kernel whose multiply-adds are the device's: AVX2 (this suite's machines have it). */
static void exact_kernel(void) { CHECK(zl_optim_set_kernel("avx2") == ZL_OK); }

TEST(adam_and_adamw_match_the_host_bit_for_bit)
{
    exact_kernel();
    for (int adamw = 0; adamw < 2; adamw++)
        for (int di = 0; di < 3; di++) {
            sets h, d;
            zl_dtype hdt = di == 2 ? ZL_DTYPE_F16 : ZL_DTYPE_BF16;
            sets_make(&h, &d, hdt);
            zl_optim_adam hp = zl_optim_adam_defaults();
            hp.adamw_mode = adamw, hp.weight_decay = 0.01, hp.grad_scale = 0.5, hp.lr = 3e-3;
            for (int s = 1; s <= STEPS; s++) {
                sets_grad(&h, &d, gdts[di], s);
                hp.step = s;
                CHECK(zl_optim_adam_tensors(&hp, h.t, NSETS) == ZL_OK);
                CHECK(zl_optim_adam_tensors(&hp, d.t, NSETS) == ZL_OK);
            }
            sets_check(&h, &d, adamw ? "adamw" : "adam");
            sets_free(&h);
            sets_free(&d);
        }
    zl_optim_set_kernel(NULL);
}

TEST(sgd_matches_the_host_bit_for_bit)
{
    exact_kernel();
    const struct { double momentum, dampening, wd; bool nesterov; } cases[] = {
        {0, 0, 0, false}, {0.9, 0.1, 1e-2, false}, {0.9, 0, 1e-2, true}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
        for (int di = 0; di < 3; di++) {
            sets h, d;
            sets_make(&h, &d, ZL_DTYPE_BF16);
            zl_optim_sgd hp = zl_optim_sgd_defaults();
            hp.lr = 0.05, hp.momentum = cases[c].momentum, hp.dampening = cases[c].dampening;
            hp.weight_decay = cases[c].wd, hp.nesterov = cases[c].nesterov, hp.grad_scale = 0.25;
            for (int s = 1; s <= STEPS; s++) {
                sets_grad(&h, &d, gdts[di], s);
                hp.step = s;
                CHECK(zl_optim_sgd_tensors(&hp, h.t, NSETS) == ZL_OK);
                CHECK(zl_optim_sgd_tensors(&hp, d.t, NSETS) == ZL_OK);
            }
            sets_check(&h, &d, "sgd");
            sets_free(&h);
            sets_free(&d);
        }
    zl_optim_set_kernel(NULL);
}

/* The moments have the host's bits; the trust ratio's sums are added in
 * another order, so it agrees to double rounding, far below what moves the
 * f32 step: p has the host's bits too. */
TEST(lamb_matches_the_host)
{
    exact_kernel();
    for (int di = 0; di < 3; di++) {
        sets h, d;
        sets_make(&h, &d, ZL_DTYPE_F16);
        zl_optim_lamb hp = zl_optim_lamb_defaults();
        hp.weight_decay = 0.01, hp.grad_scale = 0.5, hp.lr = 1e-2;
        for (int s = 1; s <= STEPS; s++) {
            sets_grad(&h, &d, gdts[di], s);
            hp.step = s;
            double rh[NSETS], rd[NSETS];
            CHECK(zl_optim_lamb_tensors(&hp, h.t, NSETS, rh) == ZL_OK);
            CHECK(zl_optim_lamb_tensors(&hp, d.t, NSETS, rd) == ZL_OK);
            for (int k = 0; k < NSETS; k++) CHECK_CLOSE(rd[k], rh[k], 1e-12);
        }
        sets_check(&h, &d, "lamb");
        sets_free(&h);
        sets_free(&d);
    }
    zl_optim_set_kernel(NULL);
}

TEST(bad_lists_are_refused_by_name)
{
    sets h, d;
    sets_make(&h, &d, ZL_DTYPE_BF16);
    sets_grad(&h, &d, ZL_DTYPE_F32, 1);
    zl_optim_adam hp = zl_optim_adam_defaults();
    zl_optim_tensors mixed[2] = {d.t[0], h.t[2]};
    CHECK_ERR(zl_optim_adam_tensors(&hp, mixed, 2), "optim.adam: p of set 2 is on cpu and p of set 1 on " DEV_NAME);
    mixed[0].m = h.m[0];
    CHECK_ERR(zl_optim_adam_tensors(&hp, mixed, 1), "optim.adam: m of set 1 is on cpu and p of set 1 on " DEV_NAME);
    zl_optim_tensors t = d.t[2];
    t.v = NULL;
    CHECK_ERR(zl_optim_adam_tensors(&hp, &t, 1), "optim.adam: set 1 of 1 has no v");
    t = d.t[0];
    t.g = d.g[1];
    CHECK_ERR(zl_optim_adam_tensors(&hp, &t, 1), "g has 37 elements, p has 1040");
    t = d.t[0];
    t.m = d.p[0];
    CHECK_ERR(zl_optim_adam_tensors(&hp, &t, 1), "optim.adam: buffers p and m overlap (set 1 of 1)");
    hp.beta1 = 1;
    CHECK_ERR(zl_optim_adam_tensors(&hp, d.t, NSETS), "optim.adam: beta1 must be in [0, 1)");
    zl_optim_buf b;
    CHECK_ERR(zl_optim_buf_from_tensors(&b, d.p[0], d.g[0], d.m[0], d.v[0], NULL), "optim: p must be a CPU tensor");
    sets_free(&h);
    sets_free(&d);
}

/* A list of gradients on the host and its twin on the stand-in; one is strided. */
static void grads_make(zl_tensor **h, zl_tensor **d, zl_dtype dt)
{
    const int64_t n0 = 2 * 32768 + 999;   /* the norm's chunks (optim/device_optim.h) and a tail */
    zl_tensor *a = zt_randn(1, &n0), *b = zt_randn(SHAPE(40, 30)), *c = zt_randn(SHAPE(7));
    zl_tensor *raw[3] = {a, b, c};
    for (int i = 0; i < 3; i++) {
        h[i] = zl_tensor_to(raw[i], dt);
        d[i] = to_dev(h[i]);
        zl_tensor_release(raw[i]);
    }
    h[3] = zl_tensor_transpose(h[1], 0, 1);
    d[3] = zl_tensor_transpose(d[1], 0, 1);
}

TEST(overflow_norm_and_scale_match_the_host)
{
    for (int di = 0; di < 3; di++) {
        zl_tensor *h[4], *d[4];
        grads_make(h, d, gdts[di]);
        bool fh = true, fd = true;
        CHECK(zl_grad_nonfinite(h, 4, &fh) == ZL_OK && zl_grad_nonfinite(d, 4, &fd) == ZL_OK);
        CHECK(!fh && !fd);
        double sh = 0, sd = 1;
        CHECK(zl_grad_norm_sq(h, 4, &sh) == ZL_OK && zl_grad_norm_sq(d, 4, &sd) == ZL_OK);
        CHECK(sh == sd && sh > 0);   /* the host's chunks and order: the same bits */
        CHECK(zl_grad_scale(h, 3, 0.7) == ZL_OK && zl_grad_scale(d, 3, 0.7) == ZL_OK);
        for (int i = 0; i < 3; i++) check_dev_bits(h[i], d[i], "grad_scale");
        CHECK_ERR(zl_grad_scale(d + 3, 1, 2.0), "grad_scale: tensor 0 of the list is a strided view on " DEV_NAME);
        zl_tensor *inf = zl_tensor_scalar(ZL_DTYPE_F32, INFINITY), *dinf = to_dev(inf);
        zl_tensor *dl[2] = {d[2], dinf}, *mixed[2] = {d[2], h[2]};
        CHECK(zl_grad_nonfinite(dl, 2, &fd) == ZL_OK && fd);
        CHECK_ERR(zl_grad_nonfinite(mixed, 2, &fd), "grad_nonfinite: tensor 1 of the list is on cpu and tensor 0 on " DEV_NAME);
        zl_tensor *objs[] = {dinf, inf, h[3], d[3], h[2], d[2], h[1], d[1], h[0], d[0]};
        for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
    }
}

/* An fp16 run's boundary on both sides: overflow check, loss scaler, global
 * norm, clipping folded into the step's grad_scale, the step itself. An
 * overflowed step is skipped and halves the scale; a clean one steps. */
TEST(a_loss_scaled_clipped_step_matches_the_host)
{
    exact_kernel();
    zl_loss_scaler_config cfg = zl_loss_scaler_defaults();
    cfg.hysteresis = 1;
    zl_loss_scaler *ls[2] = {zl_loss_scaler_new(&cfg), zl_loss_scaler_new(&cfg)};
    sets x[2];
    sets_make(&x[0], &x[1], ZL_DTYPE_F16);
    for (int s = 1; s <= 3; s++) {
        sets_grad(&x[0], &x[1], ZL_DTYPE_F16, s);
        if (s == 2) {   /* an overflow in the half gradients */
            zl_tensor_set(x[0].g[2], 17, INFINITY);
            zl_tensor_release(x[1].g[2]);
            x[1].g[2] = x[1].t[2].g = to_dev(x[0].g[2]);
        }
        for (int side = 0; side < 2; side++) {
            zl_tensor *g[NSETS] = {x[side].g[0], x[side].g[1], x[side].g[2]};
            double scale = zl_loss_scaler_scale(ls[side]);
            bool overflow = false;
            CHECK(zl_grad_nonfinite(g, NSETS, &overflow) == ZL_OK);
            CHECK(overflow == (s == 2));
            CHECK(zl_loss_scaler_update(ls[side], overflow) == ZL_OK);
            if (overflow) continue;
            double sq = 0;
            CHECK(zl_grad_norm_sq(g, NSETS, &sq) == ZL_OK);
            double coef = zl_grad_clip_coef(sqrt(sq) / scale, 1e-3);
            CHECK(coef < 1);
            zl_optim_adam hp = zl_optim_adam_defaults();
            hp.step = s, hp.grad_scale = coef / scale;
            CHECK(zl_optim_adam_tensors(&hp, x[side].t, NSETS) == ZL_OK);
        }
        CHECK(zl_loss_scaler_scale(ls[0]) == zl_loss_scaler_scale(ls[1]));
    }
    CHECK(zl_loss_scaler_scale(ls[1]) == 32768.0);   /* 2^16 halved once */
    sets_check(&x[0], &x[1], "loss-scaled step");
    sets_free(&x[0]);
    sets_free(&x[1]);
    zl_loss_scaler_free(ls[0]);
    zl_loss_scaler_free(ls[1]);
    zl_optim_set_kernel(NULL);
}
