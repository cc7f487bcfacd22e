/* The optimizer object (zlua/optimizer.h) with its parameters on a device,
 * through the stand-in (stand_in.c): the state is made there, charged to the
 * optimizer category, and each kind's steps give the host twin's bits; state
 * set from host tensors lands on the device. */
#include "stand_in.h"

enum { NP = 2, STEPS = 3 };
static const int64_t sizes[NP] = {1040, 37};

/* The host's kernel whose multiply-adds are the device's (test_device_optim.c). */
static void exact_kernel(void) { CHECK(zl_optim_set_kernel("avx2") == ZL_OK); }

static void twin_steps(zl_optimizer_kind kind)
{
    zl_tensor *hp[NP], *dp[NP];
    for (int i = 0; i < NP; i++) hp[i] = zt_randn(1, &sizes[i]), dp[i] = to_fake(hp[i]);
    zl_optimizer_hparams h = zl_optimizer_defaults(kind);
    h.momentum = kind == ZL_OPTIMIZER_SGD ? 0.9 : 0;
    zl_optimizer *oh = zl_optimizer_new(kind, &h), *od = zl_optimizer_new(kind, &h);
    for (int i = 0; i < NP; i++) {
        h.lr = i ? 3e-3 : 1e-2;
        CHECK(zl_optimizer_add_group(oh, &hp[i], 1, &h) == ZL_OK);
        CHECK(zl_optimizer_add_group(od, &dp[i], 1, &h) == ZL_OK);
    }
    int64_t before = fake_bytes(ZL_MEM_OPTIMIZER);
    for (int s = 0; s < STEPS; s++) {
        for (int i = 0; i < NP; i++) {
            zl_tensor *g = zt_randn(1, &sizes[i]), *dg = to_fake(g);
            CHECK(zl_tensor_set_grad(hp[i], g) == ZL_OK && zl_tensor_set_grad(dp[i], dg) == ZL_OK);
            zl_tensor_release(g), zl_tensor_release(dg);
        }
        CHECK(zl_optimizer_step(oh, 0.5) == ZL_OK && zl_optimizer_step(od, 0.5) == ZL_OK);
    }
    const char *const *keys = zl_optimizer_state_keys(kind);
    int nkeys = keys[1] ? 2 : 1;
    CHECK(fake_bytes(ZL_MEM_OPTIMIZER) - before == nkeys * (sizes[0] + sizes[1]) * (int64_t)sizeof(float));
    for (int i = 0; i < NP; i++) {
        check_bits(hp[i], dp[i], zl_optimizer_kind_name(kind));
        for (int k = 0; k < nkeys; k++) {
            zl_tensor *sh = NULL, *sd = NULL;
            CHECK(zl_optimizer_get_state(oh, i, 0, keys[k], &sh) == ZL_OK);
            CHECK(zl_optimizer_get_state(od, i, 0, keys[k], &sd) == ZL_OK);
            CHECK(sd && zl_tensor_device(sd) == ZL_DEVICE_CUDA && zl_tensor_device_index(sd) == FAKE_INDEX);
            if (sh && sd) check_bits(sh, sd, keys[k]);
        }
    }
    /* a host tensor given as state is copied onto the device */
    zl_tensor *sh = NULL, *sd = NULL;
    CHECK(zl_optimizer_get_state(oh, 1, 0, keys[0], &sh) == ZL_OK);
    CHECK(zl_optimizer_reset_state(od, 1, 0) == ZL_OK && zl_optimizer_set_state(od, 1, 0, keys[0], sh) == ZL_OK);
    CHECK(zl_optimizer_get_state(od, 1, 0, keys[0], &sd) == ZL_OK && zl_tensor_device(sd) == ZL_DEVICE_CUDA);
    if (sh && sd) check_bits(sh, sd, "state set from the host");
    zl_optimizer_free(oh), zl_optimizer_free(od);
    for (int i = 0; i < NP; i++) zl_tensor_release(hp[i]), zl_tensor_release(dp[i]);
}

TEST(each_kind_steps_on_the_device_as_on_the_host)
{
    exact_kernel();
    for (int kind = ZL_OPTIMIZER_ADAM; kind <= ZL_OPTIMIZER_SGD; kind++) twin_steps((zl_optimizer_kind)kind);
    zl_optim_set_kernel(NULL);
}
