/* Core's device table (zli_device_ops) driven by the stand-in device
 * (stand_in.c), whose memory is the host's and whose primitives are the CUDA
 * kernels' element functions (engine/math) in plain loops: every path that
 * routes a device tensor through core and autograd (to, clone, fill, copy_,
 * add_, views, backward accumulation) runs here without a GPU and must give
 * the host's results bit for bit. tests/gpu repeats the checks on a GPU. */
#include <stdlib.h>
#include "stand_in_kernels.h"
#include "math/reduce.h"

/* reduce.c's kinds and chunk are the math header's. */
_Static_assert(ZLI_SUM_CHUNK == ZLM_SUM_CHUNK, "the full sum's chunk differs between the host and the kernels");

/* The stand-in runs these kernels in this program. */
__attribute__((constructor(200))) static void use_kernels(void) { fake_use_kernels(&stand_in_kernels); }

TEST(to_and_clone_of_views_run_on_the_device)
{
    zl_tensor *h = zt_randn(SHAPE(4, 6));
    zl_tensor *d = to_fake(h);
    CHECK(zl_tensor_device(d) == ZL_DEVICE_CUDA && zl_tensor_device_index(d) == FAKE_INDEX);
    zl_tensor *hv = zl_tensor_transpose(h, 0, 1), *dv = zl_tensor_transpose(d, 0, 1);
    CHECK(dv && zl_tensor_device(dv) == ZL_DEVICE_CUDA);
    for (int k = 0; k < ZL_DTYPE_COUNT; k++) {
        zl_tensor *hb = zl_tensor_to(hv, (zl_dtype)k), *db = zl_tensor_to(dv, (zl_dtype)k);
        CHECK(db && zl_tensor_device(db) == ZL_DEVICE_CUDA);
        if (db) check_bits(hb, db, zl_dtype_name((zl_dtype)k));
        zl_tensor_release(db);
        zl_tensor_release(hb);
    }
    zl_tensor *hc = zl_tensor_contiguous(hv), *dc = zl_tensor_contiguous(dv);
    CHECK(dc && zl_tensor_device(dc) == ZL_DEVICE_CUDA);
    if (dc) check_bits(hc, dc, "contiguous");
    zl_tensor *hr = zl_tensor_reshape(hv, 1, (int64_t[]){24}), *dr = zl_tensor_reshape(dv, 1, (int64_t[]){24});
    if (dr) check_bits(hr, dr, "reshape copying a strided view");
    zl_tensor *objs[] = {dr, hr, dc, hc, dv, hv, d, h};
    for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
}

TEST(fill_copy_add_on_the_device)
{
    const zl_dtype dts[] = {ZL_DTYPE_F32, ZL_DTYPE_BF16, ZL_DTYPE_F16};
    for (int k = 0; k < 3; k++) {
        zl_tensor *r = zt_randn(SHAPE(5, 6));
        zl_tensor *h = zl_tensor_to(r, dts[k]);
        zl_tensor *d = to_fake(h);
        zl_tensor *row = zt_randn(SHAPE(6)), *drow = to_fake(row);
        CHECK(zl_tensor_add_(h, row, -1.25) == ZL_OK && zl_tensor_add_(d, drow, -1.25) == ZL_OK);
        check_bits(h, d, "add_ broadcast");
        zl_tensor *ht = zl_tensor_transpose(h, 0, 1), *dt = zl_tensor_transpose(d, 0, 1);
        zl_tensor *col = zl_tensor_view(row, 2, (int64_t[]){6, 1}), *dcol = zl_tensor_view(drow, 2, (int64_t[]){6, 1});
        CHECK(zl_tensor_add_(ht, col, 0.5) == ZL_OK && zl_tensor_add_(dt, dcol, 0.5) == ZL_OK);
        check_bits(h, d, "add_ into a transposed view");
        CHECK(zl_tensor_copy_(h, row) == ZL_OK && zl_tensor_copy_(d, drow) == ZL_OK);
        check_bits(h, d, "copy_ broadcast");
        CHECK(zl_tensor_fill(h, -3.5) == ZL_OK && zl_tensor_fill(d, -3.5) == ZL_OK);
        check_bits(h, d, "fill");
        CHECK_ERR(zl_tensor_copy_(d, row), "copy_: one tensor is on cuda:7 and the other on cpu");
        CHECK(zl_tensor_copy_(ht, col) == ZL_OK && zl_tensor_copy_(dt, dcol) == ZL_OK);
        check_bits(h, d, "copy_ into a transposed view");
        zl_tensor *he = zl_tensor_expand(drow, 2, (int64_t[]){5, 6});
        CHECK_ERR(zl_tensor_copy_(he, d), "copy_: the destination (shape [5, 6]) is an expanded view");
        zl_tensor_release(he);
        zl_tensor *objs[] = {dcol, col, dt, ht, drow, row, d, h, r};
        for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
    }
}

/* transpose, to bf16, narrow, select, expand-free views and clone, then
 * backward: the gradient lands on the device, equal to the host's. */
TEST(backward_through_device_ops)
{
    zl_tensor *grads[2];
    zl_tensor *h = zt_randn(SHAPE(3, 4)), *gh = zt_randn(SHAPE(2, 3)), *gs = zt_randn(SHAPE(4));
    for (int dev = 0; dev < 2; dev++) {
        zl_tensor *x = dev ? to_fake(h) : zl_tensor_retain(h);
        zl_tensor_set_requires_grad(x, true);
        zl_tensor *t = zl_tensor_transpose(x, 0, 1);
        zl_tensor *b = zl_tensor_to(t, ZL_DTYPE_BF16);
        zl_tensor *n = zl_tensor_narrow(b, 0, 1, 2);
        zl_tensor *c = zl_tensor_clone(n);
        zl_tensor *s = zl_tensor_select(x, 0, 2);   /* a second path into x: its gradient accumulates */
        zl_tensor *g = dev ? to_fake(gh) : zl_tensor_retain(gh);
        zl_tensor *g2 = dev ? to_fake(gs) : zl_tensor_retain(gs);
        CHECK(zl_backward(c, g, false) == ZL_OK);
        CHECK(zl_backward(s, g2, false) == ZL_OK);
        zl_tensor *gx = zl_tensor_grad(x);
        CHECK(gx && zl_tensor_device(gx) == (dev ? ZL_DEVICE_CUDA : ZL_DEVICE_CPU));
        grads[dev] = gx ? (dev ? zl_tensor_retain(gx) : zl_tensor_contiguous(gx)) : NULL;
        zl_tensor *objs[] = {g2, g, s, c, n, b, t, x};
        for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
    }
    if (grads[0] && grads[1]) check_bits(grads[0], grads[1], "the leaf's gradient");
    zl_tensor_release(gs);
    zl_tensor_release(gh);
    zl_tensor_release(h);
    zl_tensor_release(grads[0]);
    zl_tensor_release(grads[1]);
}

static void release_all(zl_tensor **ts, size_t n)
{
    for (size_t i = 0; i < n; i++) zl_tensor_release(ts[i]);
}

/* f(x) then backward, on the host and on the device: the same bits, for the
 * unary and binary ops (broadcast and host scalars included) and a chain. */
typedef zl_tensor *(*op2)(zl_tensor *a, zl_tensor *b);

static zl_tensor *chain(zl_tensor *a, zl_tensor *b)
{
    /* gelu(a * b + a) / (exp(b) + 2), tanh-gelu, with a scalar from the host */
    zl_tensor *two = zl_tensor_scalar(ZL_DTYPE_F32, 2.0);
    zl_tensor *m = zl_mul(a, b), *s = zl_add(m, a), *g = zl_gelu(s, true);
    zl_tensor *e = zl_exp(b), *d = zl_add(e, two), *q = zl_div(g, d);
    zl_tensor *objs[] = {two, m, s, g, e, d};
    for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
    return q;
}

static zl_tensor *sub_(zl_tensor *a, zl_tensor *b) { return zl_sub(a, b); }
static zl_tensor *pow_(zl_tensor *a, zl_tensor *b) { return zl_pow(a, b); }
static zl_tensor *lt_(zl_tensor *a, zl_tensor *b) { return zl_lt(a, b); }
static zl_tensor *tanh_(zl_tensor *a, zl_tensor *b) { (void)b; return zl_tanh(a); }
static zl_tensor *sigmoid_(zl_tensor *a, zl_tensor *b) { (void)b; return zl_sigmoid(a); }
static zl_tensor *affine_(zl_tensor *a, zl_tensor *b) { (void)b; return zl_affine(a, -1.5, 0.25); }
static zl_tensor *softmax_(zl_tensor *a, zl_tensor *b) { (void)b; return zl_softmax(a, -1); }
static zl_tensor *log_softmax_(zl_tensor *a, zl_tensor *b)
{
    zl_tensor *s = zl_mul(a, b), *y = zl_log_softmax(s, 1);   /* b's gradient goes through too */
    zl_tensor_release(s);
    return y;
}

TEST(elementwise_ops_and_their_backward_on_the_device)
{
    struct { const char *name; op2 f; bool grad; } cases[] = {
        {"chain", chain, true}, {"sub", sub_, true}, {"pow", pow_, true}, {"lt", lt_, false},
        {"tanh", tanh_, true}, {"sigmoid", sigmoid_, true}, {"affine", affine_, true},
        {"softmax", softmax_, true}, {"log_softmax", log_softmax_, true},
    };
    zl_tensor *ah = zt_randn(SHAPE(3, 5)), *bh = zt_randn(SHAPE(3, 5)), *gh = zt_randn(SHAPE(3, 5));
    zl_tensor *pa = zl_abs(ah);   /* pow wants a positive base */
    /* In bf16 and f16 the kernels read and write the tensors as they are
     * (no f32 copies): still the host's bits, and counted. */
    const zl_dtype dts[] = {ZL_DTYPE_F32, ZL_DTYPE_BF16, ZL_DTYPE_F16};
    for (int k = 0; k < 3; k++)
        for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
            zl_tensor *out[2] = {0}, *ga[2] = {0}, *gb[2] = {0};
            int halves = stand_in_calls.half_operands;
            for (int dev = 0; dev < 2; dev++) {
                zl_tensor *a0 = zl_tensor_to(cases[c].f == pow_ ? pa : ah, dts[k]), *b0 = zl_tensor_to(bh, dts[k]);
                zl_tensor *g0 = zl_tensor_to(gh, dts[k]);
                zl_tensor *a = dev ? to_fake(a0) : zl_tensor_clone(a0), *b = dev ? to_fake(b0) : zl_tensor_clone(b0);
                zl_tensor *g = dev ? to_fake(g0) : zl_tensor_retain(g0);
                zl_tensor_set_requires_grad(a, cases[c].grad);
                zl_tensor_set_requires_grad(b, cases[c].grad);
                zl_tensor *y = cases[c].f(a, b);
                CHECK(y && zl_tensor_device(y) == (dev ? ZL_DEVICE_CUDA : ZL_DEVICE_CPU));
                if (y && cases[c].grad) CHECK(zl_backward(y, g, false) == ZL_OK);
                out[dev] = y;
                if (cases[c].grad) {
                    ga[dev] = zl_tensor_retain(zl_tensor_grad(a));
                    gb[dev] = zl_tensor_retain(zl_tensor_grad(b));
                }
                zl_tensor *objs[] = {g, b, a, g0, b0, a0};
                release_all(objs, 6);
            }
            if ((stand_in_calls.half_operands > halves) != (k > 0))
                zt_fail(__FILE__, __LINE__, "%s (%s): %d kernel calls took bf16/f16 operands", cases[c].name,
                        zl_dtype_name(dts[k]), stand_in_calls.half_operands - halves);
            if (out[0] && out[1]) check_bits(out[0], out[1], cases[c].name);
            if (ga[0] && ga[1]) check_bits(ga[0], ga[1], cases[c].name);
            if (gb[0] && gb[1] && cases[c].f != tanh_ && cases[c].f != sigmoid_ && cases[c].f != affine_ &&
                cases[c].f != softmax_)
                check_bits(gb[0], gb[1], cases[c].name);
            for (int d = 0; d < 2; d++) {
                zl_tensor_release(out[d]);
                zl_tensor_release(ga[d]);
                zl_tensor_release(gb[d]);
            }
        }
    /* Broadcasting, forward and backward (the gradient summed down on the device). */
    zl_tensor *row = zt_randn(SHAPE(5)), *hrow = zl_tensor_clone(row), *drow = to_fake(row), *da = to_fake(ah);
    zl_tensor_set_requires_grad(hrow, true);
    zl_tensor_set_requires_grad(drow, true);
    zl_tensor *hs = zl_mul(ah, hrow), *ds = zl_mul(da, drow), *dg = to_fake(gh);
    if (ds) check_bits(hs, ds, "mul broadcast");
    CHECK(zl_backward(hs, gh, false) == ZL_OK && zl_backward(ds, dg, false) == ZL_OK);
    if (zl_tensor_grad(drow)) check_bits(zl_tensor_grad(hrow), zl_tensor_grad(drow), "broadcast operand's gradient");
    zl_tensor *objs[] = {dg, ds, hs, da, drow, hrow, row, pa, gh, bh, ah};
    for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
}

static void check_close_host(const zl_tensor *a, const zl_tensor *dev, double tol, const char *what)
{
    zl_tensor *b = from_fake(dev);
    CHECK(zl_tensor_numel(a) == zl_tensor_numel(b));
    for (int64_t i = 0; i < zl_tensor_numel(a); i++)
        if (!(fabs(zl_tensor_get(a, i) - zl_tensor_get(b, i)) <= tol * (1 + fabs(zl_tensor_get(a, i))))) {
            zt_fail(__FILE__, __LINE__, "%s: element %lld is %.9g on the device, %.9g on the host", what,
                    (long long)i, zl_tensor_get(b, i), zl_tensor_get(a, i));
            break;
        }
    zl_tensor_release(b);
}

/* matmul forward and backward for the layouts the GEMM sees: plain, a
 * transposed operand, batched (in one call where the batches lie evenly,
 * one by one under a broadcast), batch rows folded into one GEMM, bf16 and
 * f16 inputs (the device's half-precision GEMM, as they are). */
TEST(matmul_and_its_backward_on_the_device)
{
    struct { int64_t as[4], bs[4]; int na, nb; bool trans_b; zl_dtype dt; bool one_call; } cases[] = {
        {{4, 6}, {6, 5}, 2, 2, false, ZL_DTYPE_F32, false},
        {{4, 6}, {5, 6}, 2, 2, true, ZL_DTYPE_F32, false},
        {{3, 4, 6}, {3, 6, 5}, 3, 3, false, ZL_DTYPE_F32, true},
        {{3, 4, 6}, {6, 5}, 3, 2, false, ZL_DTYPE_F32, false},
        {{2, 3, 4, 6}, {3, 6, 5}, 4, 3, false, ZL_DTYPE_F32, false},
        {{4, 6}, {6, 5}, 2, 2, false, ZL_DTYPE_BF16, false},
        {{3, 4, 6}, {3, 5, 6}, 3, 3, true, ZL_DTYPE_BF16, false},
        {{4, 6}, {6, 5}, 2, 2, false, ZL_DTYPE_F16, false},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        zl_tensor *ar = zl_tensor_new(ZL_DTYPE_F32, cases[c].na, cases[c].as, ZL_MEM_OTHER);
        zl_tensor *br = zl_tensor_new(ZL_DTYPE_F32, cases[c].nb, cases[c].bs, ZL_MEM_OTHER);
        zl_tensor_normal_(ar, 0, 1, NULL);
        zl_tensor_normal_(br, 0, 1, NULL);
        zl_tensor *ah = zl_tensor_to(ar, cases[c].dt), *bh = zl_tensor_to(br, cases[c].dt);
        zl_tensor *y[2] = {0}, *ga[2] = {0}, *gb[2] = {0};
        int halves = stand_in_calls.half_gemms[ZLM_BF16] + stand_in_calls.half_gemms[ZLM_F16], batched = stand_in_calls.batched_gemms;
        for (int dev = 0; dev < 2; dev++) {
            zl_tensor *a = dev ? to_fake(ah) : zl_tensor_clone(ah), *b = dev ? to_fake(bh) : zl_tensor_clone(bh);
            zl_tensor_set_requires_grad(a, true);
            zl_tensor_set_requires_grad(b, true);
            zl_tensor *bt = cases[c].trans_b ? zl_tensor_transpose(b, -1, -2) : zl_tensor_retain(b);
            y[dev] = zl_matmul(a, bt);
            CHECK(y[dev] && zl_tensor_device(y[dev]) == (dev ? ZL_DEVICE_CUDA : ZL_DEVICE_CPU));
            zl_tensor *s = y[dev] ? zl_tensor_to(y[dev], ZL_DTYPE_F32) : NULL;
            zl_tensor *gh = s ? zl_tensor_full(ZL_DTYPE_F32, s->ndim, s->shape, 0.5) : NULL;
            zl_tensor *g = !gh ? NULL : dev ? to_fake(gh) : zl_tensor_retain(gh);
            CHECK(g && zl_backward(s, g, false) == ZL_OK);
            ga[dev] = zl_tensor_retain(zl_tensor_grad(a));
            gb[dev] = zl_tensor_retain(zl_tensor_grad(b));
            zl_tensor *objs[] = {g, gh, s, bt, b, a};
            for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
        }
        /* forward and the two gradients */
        CHECK(stand_in_calls.half_gemms[ZLM_BF16] + stand_in_calls.half_gemms[ZLM_F16] - halves >= (cases[c].dt != ZL_DTYPE_F32 ? 3 : 0));
        CHECK(stand_in_calls.half_gemms[ZLM_BF16] + stand_in_calls.half_gemms[ZLM_F16] == halves || cases[c].dt != ZL_DTYPE_F32);
        if (cases[c].one_call) CHECK(stand_in_calls.batched_gemms - batched >= 3);
        /* the host's bf16 GEMM (f32 for f16) and the device's half one agree to bf16's rounding */
        double tol = cases[c].dt != ZL_DTYPE_F32 ? 1e-2 : 1e-5;
        if (y[0] && y[1]) check_close_host(y[0], y[1], tol, "matmul");
        if (ga[0] && ga[1]) check_close_host(ga[0], ga[1], tol, "matmul's gradient of a");
        if (gb[0] && gb[1]) check_close_host(gb[0], gb[1], tol, "matmul's gradient of b");
        zl_tensor *objs[] = {y[0], y[1], ga[0], ga[1], gb[0], gb[1], bh, ah, br, ar};
        for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
    }
}

/* The loss a language model ends in: cross-entropy with an ignored row, each
 * reduction, forward and backward, the targets on the device too: checked
 * and counted by the device's kernels, with nothing read back to the host.
 * A target out of range is noted: its row counts as ignored, and the
 * device's next copy to the host fails with the op's message. */
TEST(cross_entropy_on_the_device)
{
    zl_tensor *xr = zt_randn(SHAPE(6, 10));
    int64_t tv[6] = {3, 0, -100, 9, 3, 7};
    zl_tensor *th = zl_tensor_from_data(ZL_DTYPE_I64, 1, (int64_t[]){6}, tv);
    const zl_reduction reds[] = {ZL_REDUCE_MEAN, ZL_REDUCE_SUM, ZL_REDUCE_NONE};
    /* bf16 logits are read by the kernels as they are */
    for (int r = 0; r < 4; r++) {
        zl_tensor *loss[2] = {0}, *grad[2] = {0}, *xh = zl_tensor_to(xr, r == 3 ? ZL_DTYPE_BF16 : ZL_DTYPE_F32);
        int halves = stand_in_calls.half_operands;
        for (int dev = 0; dev < 2; dev++) {
            zl_tensor *x = dev ? to_fake(xh) : zl_tensor_clone(xh), *t = dev ? to_fake(th) : zl_tensor_retain(th);
            zl_tensor_set_requires_grad(x, true);
            int reads = fake_to_hosts;
            zl_tensor *l = zl_cross_entropy(x, t, -100, reds[r % 3]);
            CHECK(fake_to_hosts == reads);
            CHECK(l && zl_tensor_device(l) == (dev ? ZL_DEVICE_CUDA : ZL_DEVICE_CPU));
            zl_tensor *gh = l ? zl_tensor_full(ZL_DTYPE_F32, l->ndim, l->shape, 0.75) : NULL;
            zl_tensor *g = !gh ? NULL : dev ? to_fake(gh) : zl_tensor_retain(gh);
            CHECK(g && zl_backward(l, g, false) == ZL_OK);
            loss[dev] = l;
            grad[dev] = zl_tensor_retain(zl_tensor_grad(x));
            zl_tensor *objs[] = {g, gh, t, x};
            for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
        }
        CHECK((stand_in_calls.half_operands > halves) == (r == 3));
        if (loss[0] && loss[1]) check_bits(loss[0], loss[1], "cross_entropy");
        if (grad[0] && grad[1]) check_bits(grad[0], grad[1], "cross_entropy's gradient");
        for (int d = 0; d < 2; d++) {
            zl_tensor_release(loss[d]);
            zl_tensor_release(grad[d]);
        }
        zl_tensor_release(xh);
    }
    int64_t badv[6] = {0, 1, 2, 10, 4, 5}, asif[6] = {0, 1, 2, -100, 4, 5};
    zl_tensor *dx = to_fake(xr), *bad = zl_tensor_from_data(ZL_DTYPE_I64, 1, (int64_t[]){6}, badv);
    zl_tensor *dbad = to_fake(bad), *ignored = zl_tensor_from_data(ZL_DTYPE_I64, 1, (int64_t[]){6}, asif);
    zl_tensor *l = zl_cross_entropy(dx, dbad, -100, ZL_REDUCE_MEAN);
    zl_tensor *want = zl_cross_entropy(xr, ignored, -100, ZL_REDUCE_MEAN);
    CHECK(l != NULL);
    CHECK_ERR(zl_tensor_to_device(l, ZL_DEVICE_CPU, 0), "cross_entropy: target 10 at position 3 is out of range for "
              "10 classes (expected 0..9, or ignore_index -100; found on cuda:7 after the op was queued)");
    if (l && want) check_bits(want, l, "cross_entropy with a bad target ignored");
    zl_tensor *back = zl_tensor_to_device(dbad, ZL_DEVICE_CPU, 0);
    CHECK(back && zl_tensor_get(back, 3) == 10.0);
    zl_tensor *objs[] = {back, want, l, ignored, dbad, bad, dx, th, xr};
    for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
}

/* Layer norm with and without weight and bias, forward and every gradient.
 * Helper-5 measured the fused y*w + b differing from the CPU's separate loops
 * by an ulp, so values compare to 1e-6 rather than bit for bit. */
TEST(layer_norm_on_the_device)
{
    zl_tensor *xr = zt_randn(SHAPE(4, 3, 8)), *wh = zt_randn(SHAPE(8)), *bh = zt_randn(SHAPE(8));
    zl_tensor *gr = zt_randn(SHAPE(4, 3, 8));
    /* case 2: bf16 x and g (f32 weight and bias), read by the kernels as they are */
    for (int c = 0; c < 3; c++) {
        int affine = c > 0;
        zl_dtype dt = c == 2 ? ZL_DTYPE_BF16 : ZL_DTYPE_F32;
        zl_tensor *xh = zl_tensor_to(xr, dt), *gh = zl_tensor_to(gr, dt);
        zl_tensor *y[2] = {0}, *gx[2] = {0}, *gw[2] = {0}, *gb[2] = {0};
        int halves = stand_in_calls.half_operands;
        for (int dev = 0; dev < 2; dev++) {
            zl_tensor *x = dev ? to_fake(xh) : zl_tensor_clone(xh), *g = dev ? to_fake(gh) : zl_tensor_retain(gh);
            zl_tensor *w = !affine ? NULL : dev ? to_fake(wh) : zl_tensor_clone(wh);
            zl_tensor *b = !affine ? NULL : dev ? to_fake(bh) : zl_tensor_clone(bh);
            zl_tensor_set_requires_grad(x, true);
            if (w) zl_tensor_set_requires_grad(w, true);
            if (b) zl_tensor_set_requires_grad(b, true);
            y[dev] = zl_layer_norm(x, 1, w, b, 1e-5);
            CHECK(y[dev] && zl_tensor_device(y[dev]) == (dev ? ZL_DEVICE_CUDA : ZL_DEVICE_CPU));
            CHECK(y[dev] && zl_backward(y[dev], g, false) == ZL_OK);
            gx[dev] = zl_tensor_retain(zl_tensor_grad(x));
            if (w) gw[dev] = zl_tensor_retain(zl_tensor_grad(w));
            if (b) gb[dev] = zl_tensor_retain(zl_tensor_grad(b));
            zl_tensor *objs[] = {b, w, g, x};
            for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
        }
        CHECK((stand_in_calls.half_operands > halves) == (c == 2));
        if (y[0] && y[1]) check_close_host(y[0], y[1], dt == ZL_DTYPE_F32 ? 1e-6 : 1e-2, "layer_norm");
        if (gx[0] && gx[1]) check_close_host(gx[0], gx[1], 1e-6, "layer_norm's gradient of x");
        if (affine) {
            CHECK(gw[0] && gw[1] && gb[0] && gb[1]);
            if (gw[0] && gw[1]) check_bits(gw[0], gw[1], "layer_norm's gradient of the weight");
            if (gb[0] && gb[1]) check_bits(gb[0], gb[1], "layer_norm's gradient of the bias");
        }
        zl_tensor *objs[] = {y[0], y[1], gx[0], gx[1], gw[0], gw[1], gb[0], gb[1], gh, xh};
        for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
    }
    zl_tensor *objs[] = {gr, bh, wh, xr};
    for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
}

/* Embedding rows gathered on the device (bf16 weight: bytes as they are),
 * and the weight's gradient with a repeated index, bit for bit, with no
 * index read back to the host. An index out of range is noted by the
 * kernel: its row is zeros, the backward leaves it out, and the device's
 * next copy to the host fails with the op's message, once. */
TEST(embedding_on_the_device)
{
    zl_tensor *wr = zt_randn(SHAPE(7, 5)), *gh = zt_randn(SHAPE(2, 3, 5));
    int64_t iv[6] = {3, 0, 6, 3, 1, 3};
    zl_tensor *ih = zl_tensor_from_data(ZL_DTYPE_I64, 2, (int64_t[]){2, 3}, iv);
    const zl_dtype dts[] = {ZL_DTYPE_F32, ZL_DTYPE_BF16};
    for (int k = 0; k < 2; k++) {
        zl_tensor *wh = zl_tensor_to(wr, dts[k]);
        zl_tensor *y[2] = {0}, *gw[2] = {0};
        for (int dev = 0; dev < 2; dev++) {
            zl_tensor *w = dev ? to_fake(wh) : zl_tensor_clone(wh), *i = dev ? to_fake(ih) : zl_tensor_retain(ih);
            zl_tensor *g = dev ? to_fake(gh) : zl_tensor_retain(gh);
            zl_tensor_set_requires_grad(w, true);
            int reads = fake_to_hosts;
            y[dev] = zl_embedding(w, i);
            CHECK(y[dev] && zl_tensor_device(y[dev]) == (dev ? ZL_DEVICE_CUDA : ZL_DEVICE_CPU));
            CHECK(y[dev] && zl_backward(y[dev], g, false) == ZL_OK);
            CHECK(fake_to_hosts == reads);
            gw[dev] = zl_tensor_retain(zl_tensor_grad(w));
            zl_tensor *objs[] = {g, i, w};
            for (size_t j = 0; j < sizeof objs / sizeof *objs; j++) zl_tensor_release(objs[j]);
        }
        if (y[0] && y[1]) check_bits(y[0], y[1], "embedding");
        if (gw[0] && gw[1]) check_bits(gw[0], gw[1], "embedding's gradient");
        zl_tensor *objs[] = {y[0], y[1], gw[0], gw[1], wh};
        for (size_t j = 0; j < sizeof objs / sizeof *objs; j++) zl_tensor_release(objs[j]);
    }
    zl_tensor *dw = to_fake(wr), *bad = zl_tensor_from_data(ZL_DTYPE_I64, 1, (int64_t[]){3}, (int64_t[]){2, 7, -1});
    zl_tensor *dbad = to_fake(bad), *g3 = zt_randn(SHAPE(3, 5)), *dg3 = to_fake(g3);
    zl_tensor_set_requires_grad(dw, true);
    zl_tensor *y = zl_embedding(dw, dbad);
    CHECK(y && zl_backward(y, dg3, false) == ZL_OK);
    CHECK_ERR(zl_tensor_to_device(y, ZL_DEVICE_CPU, 0), "embedding: index 7 at position 1 is out of range for a "
              "weight of 7 rows (expected 0..6; found on cuda:7 after the op was queued)");
    zl_tensor *yh = zl_tensor_to_device(y, ZL_DEVICE_CPU, 0);
    zl_tensor *gwh = zl_tensor_to_device(zl_tensor_grad(dw), ZL_DEVICE_CPU, 0);
    CHECK(yh && gwh);
    for (int64_t j = 0; yh && gwh && j < 35; j++) {
        if (j < 15) CHECK(zl_tensor_get(yh, j) == (j < 5 ? zl_tensor_get(wr, 10 + j) : 0.0));
        CHECK(zl_tensor_get(gwh, j) == (j >= 10 && j < 15 ? zl_tensor_get(g3, j - 10) : 0.0));
    }
    zl_tensor *objs[] = {gwh, yh, y, dg3, g3, dbad, bad, dw, ih, gh, wr};
    for (size_t j = 0; j < sizeof objs / sizeof *objs; j++) zl_tensor_release(objs[j]);
}

/* gather on the device (log-probabilities picked from logits, the last dim;
 * repeated indices along dim 0), and scatter_add and scatter with repeated
 * indices: the host's bits forward and backward, with no index read back to
 * the host; an index out of range is reported at the next copy to the host. */
TEST(gather_on_the_device)
{
    zl_tensor *xh = zt_randn(SHAPE(3, 4, 6));
    int64_t last[12] = {5, 0, 2, 2, 1, 3, 4, 0, 5, 5, 1, 2}, first[8] = {2, 0, 2, 1, 2, 2, 0, 1};
    zl_tensor *ih[2] = {zl_tensor_from_data(ZL_DTYPE_I64, 3, (int64_t[]){3, 4, 1}, last),
                        zl_tensor_from_data(ZL_DTYPE_I64, 3, (int64_t[]){2, 2, 2}, first)};
    const int dims[2] = {2, 0};
    for (int c = 0; c < 2; c++) {
        zl_tensor *y[2] = {0}, *gx[2] = {0}, *gh = zt_randn(zl_tensor_ndim(ih[c]), zl_tensor_shape(ih[c]));
        for (int dev = 0; dev < 2; dev++) {
            zl_tensor *x = dev ? to_fake(xh) : zl_tensor_clone(xh), *i = dev ? to_fake(ih[c]) : zl_tensor_retain(ih[c]);
            zl_tensor *g = dev ? to_fake(gh) : zl_tensor_retain(gh);
            zl_tensor_set_requires_grad(x, true);
            int reads = fake_to_hosts;
            y[dev] = zl_gather(x, dims[c], i);
            CHECK(y[dev] && zl_backward(y[dev], g, false) == ZL_OK);
            CHECK(!dev || fake_to_hosts == reads);
            gx[dev] = zl_tensor_retain(zl_tensor_grad(x));
            zl_tensor *objs[] = {g, i, x};
            release_all(objs, 3);
        }
        if (y[0] && y[1]) check_bits(y[0], y[1], "gather");
        if (gx[0] && gx[1]) check_bits(gx[0], gx[1], "gather's gradient");
        zl_tensor *objs[] = {y[0], y[1], gx[0], gx[1], gh};
        release_all(objs, 5);
    }
    zl_tensor *srch = zt_randn(SHAPE(2, 2, 2)), *gh = zt_randn(SHAPE(3, 4, 6));
    for (int add = 0; add < 2; add++) {
        zl_tensor *y[2] = {0}, *gx[2] = {0}, *gs[2] = {0};
        for (int dev = 0; dev < 2; dev++) {
            zl_tensor *x = dev ? to_fake(xh) : zl_tensor_clone(xh), *s = dev ? to_fake(srch) : zl_tensor_clone(srch);
            zl_tensor *i = dev ? to_fake(ih[1]) : zl_tensor_retain(ih[1]), *g = dev ? to_fake(gh) : zl_tensor_retain(gh);
            zl_tensor_set_requires_grad(x, true);
            zl_tensor_set_requires_grad(s, true);
            int reads = fake_to_hosts;
            y[dev] = add ? zl_scatter_add(x, 0, i, s) : zl_scatter(x, 0, i, s);
            CHECK(y[dev] && zl_backward(y[dev], g, false) == ZL_OK);
            CHECK(!dev || fake_to_hosts == reads);
            gx[dev] = zl_tensor_retain(zl_tensor_grad(x));
            gs[dev] = zl_tensor_retain(zl_tensor_grad(s));
            zl_tensor *objs[] = {g, i, s, x};
            release_all(objs, 4);
        }
        if (y[0] && y[1]) check_bits(y[0], y[1], add ? "scatter_add" : "scatter");
        if (gx[0] && gx[1]) check_bits(gx[0], gx[1], "scatter's gradient of x");
        if (gs[0] && gs[1]) check_bits(gs[0], gs[1], "scatter's gradient of src");
        zl_tensor *objs[] = {y[0], y[1], gx[0], gx[1], gs[0], gs[1]};
        release_all(objs, 6);
    }
    zl_tensor_release(srch);
    zl_tensor_release(gh);
    zl_tensor *dx = to_fake(xh), *bad = zl_tensor_from_data(ZL_DTYPE_I64, 3, (int64_t[]){1, 1, 2}, (int64_t[]){1, 6});
    zl_tensor *dbad = to_fake(bad), *y = zl_gather(dx, 2, dbad);
    CHECK(y != NULL);
    CHECK_ERR(zl_tensor_to_device(y, ZL_DEVICE_CPU, 0), "gather: index 6 at position 1 is out of range for dimension "
              "2 of size 6 (found on cuda:7 after the op was queued)");
    zl_tensor *objs[] = {y, dbad, bad, dx, ih[0], ih[1], xh};
    release_all(objs, 7);
}

/* A host tensor and its copy on the stand-in device, requiring grad. */
static zl_tensor *leaf(zl_tensor *h, int dev)
{
    zl_tensor *t = dev ? to_fake(h) : zl_tensor_clone(h);
    zl_tensor_set_requires_grad(t, true);
    return t;
}

/* f over three leaves (the last may be NULL) made from h on the host (dev 0)
 * and the stand-in device (dev 1), then backward from gh: y[dev] [out] and
 * each leaf's gradient gr[dev][i] [out] (NULL where there is none). */
typedef zl_tensor *(*op3)(zl_tensor *a, zl_tensor *b, zl_tensor *c, bool flag);

static void run3(op3 f, bool flag, zl_tensor *const h[3], zl_tensor *gh, zl_tensor *y[2], zl_tensor *gr[2][3])
{
    for (int dev = 0; dev < 2; dev++) {
        zl_tensor *in[3] = {0}, *g = dev ? to_fake(gh) : zl_tensor_retain(gh);
        for (int i = 0; i < 3; i++) in[i] = h[i] ? leaf(h[i], dev) : NULL;
        y[dev] = f(in[0], in[1], in[2], flag);
        CHECK(y[dev] && zl_tensor_device(y[dev]) == (dev ? ZL_DEVICE_CUDA : ZL_DEVICE_CPU));
        CHECK(y[dev] && zl_backward(y[dev], g, false) == ZL_OK);
        for (int i = 0; i < 3; i++) gr[dev][i] = in[i] ? zl_tensor_retain(zl_tensor_grad(in[i])) : NULL;
        zl_tensor *objs[] = {g, in[0], in[1], in[2]};
        release_all(objs, 4);
    }
}

static zl_tensor *linear3(zl_tensor *x, zl_tensor *w, zl_tensor *b, bool flag)
{
    (void)flag;
    return zl_linear(x, w, b);
}

static zl_tensor *attention3(zl_tensor *q, zl_tensor *k, zl_tensor *v, bool causal)
{
    return zl_attention(q, k, v, causal, 0);
}

static void release_run(zl_tensor *y[2], zl_tensor *gr[2][3])
{
    zl_tensor *objs[] = {y[0], y[1], gr[0][0], gr[0][1], gr[0][2], gr[1][0], gr[1][1], gr[1][2]};
    release_all(objs, 8);
}

/* run3's device results against the host's within tol, then released. */
static void check_run(zl_tensor *y[2], zl_tensor *gr[2][3], double tol, const char *what, const char *grad)
{
    if (y[0] && y[1]) check_close_host(y[0], y[1], tol, what);
    for (int i = 0; i < 3; i++)
        if (gr[0][i] && gr[1][i]) check_close_host(gr[0][i], gr[1][i], tol, grad);
    release_run(y, gr);
}

/* linear with and without a bias, x of 3 dims, f32, bf16 and f16: the GEMMs
 * to a tolerance (another summation order; bf16 rounds differently on the
 * host's bf16 GEMM, and the device rounds g to f16 for its f16 GEMMs), the
 * bias's gradient (rows added in order) bit for bit. bf16 and f16 x and w
 * go to the device as they are: linear_half forward (its output in their
 * dtype, the bias added before the one rounding) and the half GEMM for gx
 * and gw, or the half GEMM three times when linear_half declines. */
TEST(linear_on_the_device)
{
    zl_tensor *xr = zt_randn(SHAPE(2, 3, 6)), *wr = zt_randn(SHAPE(5, 6)), *bh = zt_randn(SHAPE(5));
    zl_tensor *gh = zt_randn(SHAPE(2, 3, 5));
    const zl_dtype dts[] = {ZL_DTYPE_F32, ZL_DTYPE_BF16, ZL_DTYPE_F16};
    for (int c = 0; c < 12; c++) {
        int k = c % 3, bias = c / 3 % 2;
        stand_in_calls.linear_half_declines = c >= 6;
        zl_tensor *h[3] = {zl_tensor_to(xr, dts[k]), zl_tensor_to(wr, dts[k]), bias ? bh : NULL};
        zl_tensor *y[2], *gr[2][3];
        int before[3] = {stand_in_calls.half_gemms[0], stand_in_calls.half_gemms[1], stand_in_calls.half_gemms[2]}, lh = stand_in_calls.linear_halfs;
        run3(linear3, false, h, gh, y, gr);
        bool fused = k > 0 && !stand_in_calls.linear_half_declines;
        for (int d = 0; d < 3; d++)
            CHECK(stand_in_calls.half_gemms[d] - before[d] == (d == (int)dts[k] && k > 0 ? (fused ? 2 : 3) : 0));
        CHECK(stand_in_calls.linear_halfs - lh == (fused ? 1 : 0));
        CHECK(y[0] && y[1] && zl_tensor_dtype(y[0]) == dts[k] && zl_tensor_dtype(y[1]) == dts[k]);
        double tol = dts[k] == ZL_DTYPE_F32 ? 1e-5 : 1e-2;
        if (y[0] && y[1]) check_close_host(y[0], y[1], tol, "linear");
        if (gr[0][0] && gr[1][0]) check_close_host(gr[0][0], gr[1][0], tol, "linear's gradient of x");
        if (gr[0][1] && gr[1][1]) check_close_host(gr[0][1], gr[1][1], tol, "linear's gradient of w");
        if (bias) CHECK(gr[0][2] && gr[1][2]);
        if (gr[0][2] && gr[1][2]) check_bits(gr[0][2], gr[1][2], "linear's gradient of the bias");
        release_run(y, gr);
        zl_tensor_release(h[1]);
        zl_tensor_release(h[0]);
    }
    stand_in_calls.linear_half_declines = false;
    zl_tensor *objs[] = {gh, bh, wr, xr};
    release_all(objs, 4);
}

/* attention, causal and not, more keys than queries, value width apart from
 * the key width: every gradient; GEMMs to a tolerance. q, k and v in bf16 or
 * f16 take the half-precision GEMM for all six products (the host computes
 * in f32; the device rounds P, g and dS to the inputs' dtype); mixed dtypes
 * take the f32 one. */
TEST(attention_on_the_device)
{
    struct { int64_t tq, tk; bool causal; } cases[] = {{4, 4, true}, {3, 5, false}};
    const char *what[4] = {"attention", "attention's gradient of q", "attention's gradient of k",
                           "attention's gradient of v"};
    const zl_dtype dts[] = {ZL_DTYPE_F32, ZL_DTYPE_BF16, ZL_DTYPE_F16};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
        for (int k = 0; k < 4; k++) {
            zl_tensor *r[3] = {zt_randn(SHAPE(2, 3, cases[c].tq, 6)), zt_randn(SHAPE(2, 3, cases[c].tk, 6)),
                               zt_randn(SHAPE(2, 3, cases[c].tk, 5))};
            /* k 3: q and k bf16, v f32 */
            zl_dtype dt = dts[k % 3 + (k == 3)];
            zl_tensor *h[3];
            for (int i = 0; i < 3; i++) h[i] = zl_tensor_to(r[i], k == 3 && i == 2 ? ZL_DTYPE_F32 : dt);
            zl_tensor *gh = zt_randn(SHAPE(2, 3, cases[c].tq, 5)), *y[2], *gr[2][3];
            int before[3] = {stand_in_calls.half_gemms[0], stand_in_calls.half_gemms[1], stand_in_calls.half_gemms[2]};
            run3(attention3, cases[c].causal, h, gh, y, gr);
            bool half = k == 1 || k == 2;
            for (int d = 0; d < 3; d++) CHECK(stand_in_calls.half_gemms[d] - before[d] == (half && d == (int)dt ? 6 : 0));
            double tol = k == 0 ? 1e-5 : 2e-2;
            if (y[0] && y[1]) check_close_host(y[0], y[1], tol, what[0]);
            for (int i = 0; i < 3; i++)
                if (gr[0][i] && gr[1][i]) check_close_host(gr[0][i], gr[1][i], tol, what[i + 1]);
            release_run(y, gr);
            zl_tensor *objs[] = {gh, h[2], h[1], h[0], r[2], r[1], r[0]};
            release_all(objs, 7);
        }
}

/* Attention whose keys and values have one width goes to the stand-in's
 * flash kernels (math/flash.h: no P written, each row's lse kept) for bf16
 * and f16: causal across a key tile's edge, causal with more keys than
 * queries, grouped queries, not causal; against the host within the half
 * dtype's tolerance, with no GEMM of the composed path called. A query alone
 * wanting its gradient gets it from the same backward. */
TEST(flash_attention_on_the_device)
{
    struct { int64_t tq, tk, hkv; bool causal; } cases[] = {{70, 70, 4, true}, {5, 9, 2, true}, {3, 70, 1, false}};
    const zl_dtype dts[] = {ZL_DTYPE_BF16, ZL_DTYPE_F16};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
        for (int k = 0; k < 2; k++) {
            zl_tensor *r[3] = {zt_randn(SHAPE(2, 4, cases[c].tq, 8)), zt_randn(SHAPE(2, cases[c].hkv, cases[c].tk, 8)),
                               zt_randn(SHAPE(2, cases[c].hkv, cases[c].tk, 8))};
            zl_tensor *h[3];
            for (int i = 0; i < 3; i++) h[i] = zl_tensor_to(r[i], dts[k]);
            zl_tensor *gh = zt_randn(SHAPE(2, 4, cases[c].tq, 8)), *y[2], *gr[2][3];
            int before[2] = {stand_in_calls.flash[0], stand_in_calls.flash[1]};
            int gemms = stand_in_calls.half_gemms[dts[k]];
            run3(attention3, cases[c].causal, h, gh, y, gr);
            CHECK(stand_in_calls.flash[0] - before[0] == 1 && stand_in_calls.flash[1] - before[1] == 1);
            CHECK(stand_in_calls.half_gemms[dts[k]] == gemms);
            CHECK(y[0] && y[1] && zl_tensor_dtype(y[1]) == dts[k]);
            if (y[0] && y[1]) check_close_host(y[0], y[1], 2e-2, "flash attention");
            for (int i = 0; i < 3; i++)
                if (gr[0][i] && gr[1][i]) check_close_host(gr[0][i], gr[1][i], 3e-2, "flash attention's gradient");
            release_run(y, gr);
            zl_tensor *objs[] = {gh, h[2], h[1], h[0], r[2], r[1], r[0]};
            release_all(objs, 7);
        }
    zl_tensor *qh = zt_randn(SHAPE(1, 2, 3, 8)), *kh = zt_randn(SHAPE(1, 2, 3, 8));
    zl_tensor *qb = zl_tensor_to(qh, ZL_DTYPE_BF16), *kb = zl_tensor_to(kh, ZL_DTYPE_BF16);
    zl_tensor *q = leaf(qb, 1), *kd = to_fake(kb), *g = to_fake(qh), *y = zl_attention(q, kd, kd, true, 0);
    CHECK(y && zl_backward(y, g, false) == ZL_OK && zl_tensor_grad(q) && !zl_tensor_grad(kd));
    zl_tensor *objs[] = {y, g, kd, q, kb, qb, kh, qh};
    release_all(objs, 8);
}

static zl_tensor *rms_norm3(zl_tensor *x, zl_tensor *w, zl_tensor *unused, bool two_dims)
{
    (void)unused;
    return zl_rms_norm(x, two_dims ? 2 : 1, w, 1e-6);
}

/* rotary's tables, [2, 1, 5, 8], on the host; rotary3 moves them where x is. */
static zl_tensor *rotary_tables[2];

static zl_tensor *rotary3(zl_tensor *x, zl_tensor *unused1, zl_tensor *unused2, bool flag)
{
    (void)unused1, (void)unused2, (void)flag;
    bool on = zl_tensor_device(x) == ZL_DEVICE_CUDA;
    zl_tensor *c = on ? to_fake(rotary_tables[0]) : zl_tensor_retain(rotary_tables[0]);
    zl_tensor *s = on ? to_fake(rotary_tables[1]) : zl_tensor_retain(rotary_tables[1]);
    zl_tensor *y = zl_rotary(x, c, s);
    zl_tensor *objs[] = {c, s};
    release_all(objs, 2);
    return y;
}

/* A LLaMA block's ops on the device: grouped-query attention (4 query heads
 * on 2 or 1 key/value heads, their gradients summed in the GEMMs; causal with
 * more keys than queries), rms_norm and rotary by the device's kernels,
 * f32 and bf16, against the host. */
TEST(transformer_ops_on_the_device)
{
    const zl_dtype dts[] = {ZL_DTYPE_F32, ZL_DTYPE_BF16};
    for (int c = 0; c < 8; c++) {
        int64_t hkv = c % 2 + 1, tk = c / 2 % 2 ? 7 : 6;
        zl_tensor *r[3] = {zt_randn(SHAPE(2, 4, 5, 6)), zt_randn(SHAPE(2, hkv, tk, 6)), zt_randn(SHAPE(2, hkv, tk, 3))};
        zl_tensor *h[3], *gh = zt_randn(SHAPE(2, 4, 5, 3)), *y[2], *gr[2][3];
        for (int i = 0; i < 3; i++) h[i] = zl_tensor_to(r[i], dts[c / 4]);
        run3(attention3, tk == 7, h, gh, y, gr);
        check_run(y, gr, c < 4 ? 1e-5 : 2e-2, "grouped-query attention", "grouped-query attention's gradient");
        zl_tensor *objs[] = {gh, h[2], h[1], h[0], r[2], r[1], r[0]};
        release_all(objs, 7);
    }
    rotary_tables[0] = zt_randn(SHAPE(2, 1, 5, 8));
    rotary_tables[1] = zt_randn(SHAPE(2, 1, 5, 8));
    for (int c = 0; c < 6; c++) {
        bool rot = c >= 4, two = c % 2;
        zl_tensor *xr = rot ? zt_randn(SHAPE(2, 3, 5, 8)) : zt_randn(SHAPE(3, 4, 8));
        zl_tensor *w = rot ? NULL : two ? zt_randn(SHAPE(4, 8)) : zt_randn(SHAPE(8));
        zl_tensor *h[3] = {zl_tensor_to(xr, dts[rot ? two : c / 2]), w, NULL};
        zl_tensor *gh = zt_randn(zl_tensor_ndim(xr), zl_tensor_shape(xr)), *y[2], *gr[2][3];
        run3(rot ? rotary3 : rms_norm3, two, h, gh, y, gr);
        double tol = zl_tensor_dtype(h[0]) == ZL_DTYPE_F32 ? 1e-5 : 2e-2;
        CHECK(y[0] && y[1] && zl_tensor_dtype(y[0]) == zl_tensor_dtype(y[1]));
        if (y[0] && y[1]) check_close_host(y[0], y[1], tol, rot ? "rotary" : "rms_norm");
        for (int i = 0; i < 2; i++)
            if (gr[0][i] && gr[1][i]) check_close_host(gr[0][i], gr[1][i], tol, rot ? "rotary's gradient" : "rms_norm's gradient");
        release_run(y, gr);
        zl_tensor *objs[] = {gh, h[0], w, xr};
        release_all(objs, 4);
    }
    zl_tensor *objs[] = {rotary_tables[0], rotary_tables[1]};
    release_all(objs, 2);
}

/* A padding mask [2, 1, 1, 7] (each sequence's keys from its first real
 * position on, as left-padded prompts have; broadcast over heads and
 * queries), causal and not, in host memory or on the device. */
static zl_tensor *padding_mask;

static zl_tensor *masked3(zl_tensor *q, zl_tensor *k, zl_tensor *v, bool causal)
{
    bool on = zl_tensor_device(q) == ZL_DEVICE_CUDA && !causal;
    zl_tensor *m = on ? to_fake(padding_mask) : zl_tensor_retain(padding_mask);
    zl_tensor *y = zl_attention_masked(q, k, v, m, causal, 0);
    zl_tensor_release(m);
    return y;
}

/* Masked attention on a device: the composed softmax leaves out the keys the
 * mask hides (a row that sees none is all 0, as on the CPU), f32 and bf16,
 * forward and every gradient, against the host. */
TEST(masked_attention_on_the_device)
{
    uint8_t mv[14] = {0, 0, 0, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1};
    padding_mask = zl_tensor_from_data(ZL_DTYPE_BOOL, 4, (int64_t[]){2, 1, 1, 7}, mv);
    const zl_dtype dts[] = {ZL_DTYPE_F32, ZL_DTYPE_BF16};
    for (int c = 0; c < 4; c++) {
        bool causal = c % 2;
        zl_tensor *r[3] = {zt_randn(SHAPE(2, 4, causal ? 5 : 7, 6)), zt_randn(SHAPE(2, 2, 7, 6)),
                           zt_randn(SHAPE(2, 2, 7, 6))};
        zl_tensor *h[3], *gh = zt_randn(SHAPE(2, 4, causal ? 5 : 7, 6)), *y[2], *gr[2][3];
        for (int i = 0; i < 3; i++) h[i] = zl_tensor_to(r[i], dts[c / 2]);
        run3(masked3, causal, h, gh, y, gr);
        check_run(y, gr, c < 2 ? 1e-5 : 2e-2, "masked attention", "masked attention's gradient");
        zl_tensor *objs[] = {gh, h[2], h[1], h[0], r[2], r[1], r[0]};
        release_all(objs, 7);
    }
    zl_tensor_release(padding_mask);
}

/* dropout draws the host's mask from the same generator state and moves the
 * generator on as the host does: output and gradient bit for bit, for a
 * generator of its own and for the context's. */
TEST(dropout_on_the_device)
{
    zl_tensor *xh = zt_randn(SHAPE(6, 70)), *gh = zt_randn(SHAPE(6, 70));
    const double ps[] = {0.3, 1.0};
    for (int own = 0; own < 2; own++)
        for (int k = 0; k < 2; k++) {
            zl_tensor *y[2] = {0}, *gx[2] = {0};
            uint64_t after[2] = {0};
            for (int dev = 0; dev < 2; dev++) {
                zl_generator *gen = own ? zl_generator_new(77) : NULL;
                if (own) zl_generator_set_offset(gen, 1000);
                else zl_manual_seed(77);
                zl_tensor *x = leaf(xh, dev), *g = dev ? to_fake(gh) : zl_tensor_retain(gh);
                y[dev] = zl_dropout(x, ps[k], true, gen);
                CHECK(y[dev] && zl_tensor_device(y[dev]) == (dev ? ZL_DEVICE_CUDA : ZL_DEVICE_CPU));
                CHECK(y[dev] && zl_backward(y[dev], g, false) == ZL_OK);
                gx[dev] = zl_tensor_retain(zl_tensor_grad(x));
                after[dev] = zl_generator_get_offset(gen);
                zl_generator_free(gen);
                zl_tensor_release(g);
                zl_tensor_release(x);
            }
            CHECK(after[0] == after[1] && after[0] == (own ? 1000u : 0u) + 420u);
            if (y[0] && y[1]) check_bits(y[0], y[1], "dropout");
            if (gx[0] && gx[1]) check_bits(gx[0], gx[1], "dropout's gradient");
            zl_tensor *objs[] = {y[0], y[1], gx[0], gx[1]};
            release_all(objs, 4);
        }
    zl_tensor_release(gh);
    zl_tensor_release(xh);
}

/* uniform_ and normal_ into device tensors: the host's values for the same
 * seed and offset, in each float dtype, and the generator moved on alike. */
TEST(random_fills_on_the_device)
{
    const zl_dtype dts[] = {ZL_DTYPE_F32, ZL_DTYPE_BF16, ZL_DTYPE_F16};
    for (int k = 0; k < 3; k++) {
        zl_tensor *h = zl_tensor_new(dts[k], SHAPE(33, 9), ZL_MEM_OTHER);
        zl_tensor *d = fake_new(dts[k], 2, (int64_t[]){33, 9}, ZL_MEM_OTHER);
        zl_generator *gh = zl_generator_new(5), *gd = zl_generator_new(5);
        CHECK(zl_tensor_uniform_(h, -0.5, 3.0, gh) == ZL_OK && zl_tensor_uniform_(d, -0.5, 3.0, gd) == ZL_OK);
        check_bits(h, d, "uniform_");
        CHECK(zl_tensor_normal_(h, 0.25, 2.0, gh) == ZL_OK && zl_tensor_normal_(d, 0.25, 2.0, gd) == ZL_OK);
        check_bits(h, d, "normal_");
        CHECK(zl_generator_get_offset(gh) == 2 * 33 * 9 && zl_generator_get_offset(gd) == 2 * 33 * 9);
        zl_generator_free(gd);
        zl_generator_free(gh);
        zl_tensor_release(d);
        zl_tensor_release(h);
    }
}

/* Values with ties (max takes the first) and a NaN (max takes it, sum
 * carries it) in one row. */
static zl_tensor *reduce_input(void)
{
    zl_tensor *r = zt_randn(SHAPE(3, 5, 7));
    zl_tensor *t = zl_tensor_new(ZL_DTYPE_F32, SHAPE(3, 5, 7), ZL_MEM_OTHER);
    float *p = zl_tensor_data(t);
    for (int64_t i = 0; i < 105; i++) p[i] = floorf((float)zl_tensor_get(r, i) * 2.0f) * 0.75f;
    p[40] = NAN;
    zl_tensor_release(r);
    return t;
}

typedef zl_tensor *(*reduce_fn)(zl_tensor *x, int dim, bool keepdim);

/* sum, mean, max over each dim and over all, keepdim or not, and argmax:
 * forward and backward bit for bit, as the host adds and scans. */
TEST(reductions_on_the_device)
{
    struct { const char *name; reduce_fn f; bool grad; } kinds[] = {
        {"sum", zl_sum, true}, {"mean", zl_mean, true}, {"max", zl_max, true}, {"argmax", zl_argmax, false},
    };
    zl_tensor *xh = reduce_input();
    const int dims[] = {0, 1, 2, -1, ZL_ALL_DIMS};
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++)
        for (size_t di = 0; di < sizeof dims / sizeof *dims; di++)
            for (int keep = 0; keep < 2; keep++) {
                zl_tensor *y[2] = {0}, *gx[2] = {0}, *gh = NULL;
                for (int dev = 0; dev < 2; dev++) {
                    zl_tensor *x = leaf(xh, dev);
                    y[dev] = kinds[k].f(x, dims[di], keep);
                    CHECK(y[dev] && zl_tensor_device(y[dev]) == (dev ? ZL_DEVICE_CUDA : ZL_DEVICE_CPU));
                    if (y[dev] && kinds[k].grad) {
                        if (!gh) gh = zt_randn(zl_tensor_ndim(y[dev]), zl_tensor_shape(y[dev]));
                        zl_tensor *g = dev ? to_fake(gh) : zl_tensor_retain(gh);
                        CHECK(zl_backward(y[dev], g, false) == ZL_OK);
                        gx[dev] = zl_tensor_retain(zl_tensor_grad(x));
                        zl_tensor_release(g);
                    }
                    zl_tensor_release(x);
                }
                zl_tensor_release(gh);
                char what[64];
                snprintf(what, sizeof what, "%s over dim %d%s", kinds[k].name, dims[di], keep ? ", keepdim" : "");
                if (y[0] && y[1]) check_bits(y[0], y[1], what);
                if (gx[0] && gx[1]) check_bits(gx[0], gx[1], what);
                zl_tensor *objs[] = {y[0], y[1], gx[0], gx[1]};
                release_all(objs, 4);
            }
    /* Over all of several chunks, whose order shows (a large chunk cancels
     * a later one); integers (sum in i64, max in their dtype). */
    zl_tensor *big = zl_tensor_new(ZL_DTYPE_F32, SHAPE(3 * 4096 + 17), ZL_MEM_OTHER);
    float *pb = zl_tensor_data(big);
    for (int64_t i = 0; i < 3 * 4096 + 17; i++) pb[i] = i < 4096 ? 1e16f : i < 8192 ? 0.3f : i < 12288 ? -1e16f : 0.7f;
    zl_tensor *dbig = to_fake(big);
    zl_tensor *ih = zl_tensor_to(xh, ZL_DTYPE_I32), *di = to_fake(ih);
    zl_tensor *hs[] = {zl_sum(big, ZL_ALL_DIMS, false), zl_mean(big, ZL_ALL_DIMS, false), zl_sum(ih, 1, false),
                       zl_max(ih, ZL_ALL_DIMS, true)};
    zl_tensor *ds[] = {zl_sum(dbig, ZL_ALL_DIMS, false), zl_mean(dbig, ZL_ALL_DIMS, false), zl_sum(di, 1, false),
                       zl_max(di, ZL_ALL_DIMS, true)};
    for (int i = 0; i < 4; i++)
        if (hs[i] && ds[i]) check_bits(hs[i], ds[i], "a reduction of many chunks or of integers");
    zl_tensor *empty = zl_tensor_new(ZL_DTYPE_F32, SHAPE(2, 0), ZL_MEM_OTHER), *dempty = to_fake(empty);
    CHECK_ERR(zl_max(dempty, 1, false), "max: cannot reduce over an empty dimension");
    zl_tensor *me = zl_mean(dempty, 1, false), *hme = zl_mean(empty, 1, false);   /* 0 / 0 */
    if (me && hme) check_bits(hme, me, "mean over an empty dimension");
    release_all(hs, 4);
    release_all(ds, 4);
    zl_tensor *objs[] = {hme, me, dempty, empty, di, ih, dbig, big, xh};
    release_all(objs, 9);
}

/* where with a condition a comparison made on the device, a broadcast row
 * and a host scalar; masked_fill with a broadcast mask in f32 and bf16;
 * outputs and gradients bit for bit. */
TEST(where_and_masked_fill_on_the_device)
{
    zl_tensor *ah = zt_randn(SHAPE(4, 5)), *bh = zt_randn(SHAPE(5)), *gh = zt_randn(SHAPE(4, 5));
    zl_tensor *sh = zl_tensor_scalar(ZL_DTYPE_F32, -2.5), *mh = zl_gt(bh, sh);   /* [5] bool */
    for (int c = 0; c < 4; c++) {
        zl_tensor *y[2] = {0}, *ga[2] = {0}, *gb[2] = {0};
        for (int dev = 0; dev < 2; dev++) {
            zl_tensor *a = leaf(ah, dev), *b = leaf(bh, dev), *g = dev ? to_fake(gh) : zl_tensor_retain(gh);
            zl_tensor *cond = zl_gt(a, b);
            CHECK(cond && zl_tensor_dtype(cond) == ZL_DTYPE_BOOL);
            zl_tensor *a16 = c == 3 ? zl_tensor_to(a, ZL_DTYPE_BF16) : zl_tensor_retain(a);
            zl_tensor *m = dev ? to_fake(mh) : zl_tensor_retain(mh);
            y[dev] = c == 0 ? zl_where(cond, a, b)
                     : c == 1 ? zl_where(cond, sh, a)
                              : zl_masked_fill(a16, m, c == 2 ? -INFINITY : 7.25);
            CHECK(y[dev] && zl_tensor_device(y[dev]) == (dev ? ZL_DEVICE_CUDA : ZL_DEVICE_CPU));
            zl_tensor *yf = y[dev] ? zl_tensor_to(y[dev], ZL_DTYPE_F32) : NULL;
            CHECK(yf && zl_backward(yf, g, false) == ZL_OK);
            ga[dev] = zl_tensor_retain(zl_tensor_grad(a));
            gb[dev] = zl_tensor_retain(zl_tensor_grad(b));
            zl_tensor *objs[] = {yf, m, a16, cond, g, b, a};
            release_all(objs, 7);
        }
        if (y[0] && y[1]) check_bits(y[0], y[1], "where / masked_fill");
        if (ga[0] && ga[1]) check_bits(ga[0], ga[1], "where / masked_fill's gradient of a");
        if (gb[0] && gb[1]) check_bits(gb[0], gb[1], "where's gradient of b (summed to its shape)");
        CHECK((ga[0] != NULL) == (ga[1] != NULL) && (gb[0] != NULL) == (gb[1] != NULL));
        zl_tensor *objs[] = {y[0], y[1], ga[0], ga[1], gb[0], gb[1]};
        release_all(objs, 6);
    }
    zl_tensor *objs[] = {sh, mh, gh, bh, ah};
    release_all(objs, 5);
}

/* The stand-in with core's primitives but no kernels and no generator: the
 * ops and the random fills refuse it by name. */
TEST(a_device_without_kernels_refuses_by_name)
{
    fake_use_kernels(NULL);
    fake_use_rand(false);
    zl_tensor *t = fake_new(ZL_DTYPE_F32, 1, (int64_t[]){4}, ZL_MEM_OTHER);
    CHECK_ERR(zl_tensor_normal_(t, 0, 1, NULL), "normal_: the tensor is on cuda:7");
    CHECK_ERR(zl_tensor_uniform_(t, 0, 1, NULL), "uniform_: the tensor is on cuda:7");
    CHECK_ERR(zl_sum(t, 0, false), "sum: cuda:7 runs no ops");
    CHECK_ERR(zl_dropout(t, 0.5, true, NULL), "dropout: cuda:7 runs no ops");
    CHECK_ERR(zl_masked_fill(t, t, 0), "masked_fill: cuda:7 runs no ops");
    CHECK_ERR(zl_linear(t, t, NULL), "linear: cuda:7 runs no ops");
    zl_tensor_release(t);
    fake_use_rand(true);
    fake_use_kernels(&stand_in_kernels);
}

/* f(inputs) and backward with gradient seed g, on the host and on the device:
 * the outputs and every input's gradient the same bits (tol 0), or within tol. */
typedef zl_tensor *(*opn)(zl_tensor *const *in, int n);

static void check_same_or_close(const zl_tensor *h, const zl_tensor *dev, double tol, const char *what)
{
    if (tol == 0) check_bits(h, dev, what);
    else check_close_host(h, dev, tol, what);
}

static void check_op_tol(const char *what, opn f, zl_tensor *const *hin, int n, const zl_tensor *gh, double tol)
{
    zl_tensor *out[2] = {0}, *grads[2][4] = {{0}};
    for (int dev = 0; dev < 2; dev++) {
        zl_tensor *in[4];
        for (int i = 0; i < n; i++) {
            in[i] = dev ? to_fake(hin[i]) : zl_tensor_clone(hin[i]);
            zl_tensor_set_requires_grad(in[i], zl_dtype_traits_of(zl_tensor_dtype(in[i]))->is_float);
        }
        out[dev] = f(in, n);
        CHECK(out[dev] && zl_tensor_device(out[dev]) == (dev ? ZL_DEVICE_CUDA : ZL_DEVICE_CPU));
        if (out[dev] && gh) {
            zl_tensor *g = dev ? to_fake((zl_tensor *)gh) : zl_tensor_retain((zl_tensor *)gh);
            CHECK(zl_backward(out[dev], g, false) == ZL_OK);
            zl_tensor_release(g);
            for (int i = 0; i < n; i++) {
                zl_tensor *gi = zl_tensor_grad(in[i]);
                grads[dev][i] = gi ? (dev ? zl_tensor_retain(gi) : zl_tensor_contiguous(gi)) : NULL;
            }
        }
        for (int i = 0; i < n; i++) zl_tensor_release(in[i]);
    }
    char w[96];
    if (out[0] && out[1]) check_same_or_close(out[0], out[1], tol, what);
    for (int i = 0; gh && i < n; i++) {
        snprintf(w, sizeof w, "%s: gradient of input %d", what, i);
        CHECK(!grads[0][i] == !grads[1][i]);
        if (grads[0][i] && grads[1][i]) check_same_or_close(grads[0][i], grads[1][i], tol, w);
        zl_tensor_release(grads[0][i]);
        zl_tensor_release(grads[1][i]);
    }
    zl_tensor_release(out[0]);
    zl_tensor_release(out[1]);
}

static void check_op_on_both(const char *what, opn f, zl_tensor *const *hin, int n, const zl_tensor *gh)
{
    check_op_tol(what, f, hin, n, gh, 0);
}

static zl_tensor *cat1(zl_tensor *const *in, int n) { return zl_cat(in, n, 1); }
static zl_tensor *cat0(zl_tensor *const *in, int n) { return zl_cat(in, n, 0); }
static zl_tensor *stack1(zl_tensor *const *in, int n) { return zl_stack(in, n, -2); }
/* A transposed (strided) input on its way in. */
static zl_tensor *cat_transposed(zl_tensor *const *in, int n)
{
    zl_tensor *t = zl_tensor_transpose(in[0], 0, 1), *both[2] = {t, in[1]};
    zl_tensor *y = n == 2 ? zl_cat(both, 2, 0) : NULL;
    zl_tensor_release(t);
    return y;
}

static zl_tensor *select_with(zl_tensor *x, int dim, int64_t m, const int64_t *idx)
{
    zl_tensor *ih = zl_tensor_from_data(ZL_DTYPE_I64, 1, &m, idx);
    zl_tensor *i = x->storage->dev ? to_fake(ih) : zl_tensor_retain(ih);
    zl_tensor *y = zl_index_select(x, dim, i);
    zl_tensor_release(i);
    zl_tensor_release(ih);
    return y;
}

static zl_tensor *sel_mid(zl_tensor *const *in, int n)
{
    (void)n;
    return select_with(in[0], 1, 6, (int64_t[]){4, 0, 4, 2, 4, 1});
}

static zl_tensor *sel_first(zl_tensor *const *in, int n)
{
    (void)n;
    return select_with(in[0], 0, 3, (int64_t[]){2, 0, 2});
}

static zl_tensor *sel_last(zl_tensor *const *in, int n)
{
    (void)n;
    return select_with(in[0], -1, 3, (int64_t[]){3, 0, 3});
}

/* cat, stack and index_select: any dtype forward (promotion on the way),
 * gradients as views of the output's gradient or sums in index order. */
TEST(structure_ops_on_the_device)
{
    zl_tensor *a = zt_randn(SHAPE(3, 4)), *b32 = zt_randn(SHAPE(3, 2)), *b = zl_tensor_to(b32, ZL_DTYPE_BF16);
    zl_tensor *c = zt_randn(SHAPE(2, 4)), *a2 = zt_randn(SHAPE(3, 4)), *at = zt_randn(SHAPE(4, 3));
    zl_tensor *g36 = zt_randn(SHAPE(3, 6)), *g54 = zt_randn(SHAPE(5, 4)), *g324 = zt_randn(SHAPE(3, 2, 4));
    zl_tensor *g54b = zt_randn(SHAPE(5, 4));
    check_op_on_both("cat dim 1, f32 and bf16", cat1, (zl_tensor *[]){a, b}, 2, g36);
    check_op_on_both("cat dim 0", cat0, (zl_tensor *[]){a, c}, 2, g54);
    check_op_on_both("stack", stack1, (zl_tensor *[]){a, a2}, 2, g324);
    check_op_on_both("cat of a transposed view", cat_transposed, (zl_tensor *[]){at, c}, 2, g54b);
    zl_tensor *ia = zl_tensor_to(a, ZL_DTYPE_I64), *ic = zl_tensor_to(c, ZL_DTYPE_I32);
    check_op_on_both("cat of integers", cat0, (zl_tensor *[]){ia, ic}, 2, NULL);

    zl_tensor *x = zt_randn(SHAPE(3, 5, 4)), *xb = zl_tensor_to(x, ZL_DTYPE_BF16);
    zl_tensor *gm = zt_randn(SHAPE(3, 6, 4)), *gf = zt_randn(SHAPE(3, 5, 4)), *gl = zt_randn(SHAPE(3, 5, 3));
    check_op_on_both("index_select dim 1, repeated indices", sel_mid, &x, 1, gm);
    check_op_on_both("index_select dim 0", sel_first, &x, 1, gf);
    check_op_on_both("index_select dim -1", sel_last, &x, 1, gl);
    check_op_on_both("index_select bf16", sel_mid, &xb, 1, NULL);

    zl_tensor *da = to_fake(a), *dx = to_fake(x);
    CHECK_ERR(zl_cat((zl_tensor *[]){da, c}, 2, 0), "cat: one tensor is on cuda:7 and the other on cpu");
    zl_tensor *bad = zl_tensor_from_data(ZL_DTYPE_I64, 1, (int64_t[]){2}, (int64_t[]){1, 5}), *dbad = to_fake(bad);
    zl_tensor *sel = zl_index_select(dx, 1, dbad);
    CHECK(sel != NULL);
    CHECK_ERR(zl_tensor_to_device(sel, ZL_DEVICE_CPU, 0), "index_select: index 5 at position 1 is out of range for "
              "dimension 1 of size 5 (found on cuda:7 after the op was queued)");
    zl_tensor_release(sel);
    zl_tensor *one = zl_tensor_from_data(ZL_DTYPE_I64, 1, (int64_t[]){1}, (int64_t[]){3});
    CHECK_ERR(zl_index_select(one, 0, dbad), "index_select: one tensor is on cpu and the other on cuda:7");
    zl_tensor *objs[] = {one, dbad, bad, dx, da, gl, gf, gm, xb, x, ic, ia, g54b, g324, g54, g36, at, a2, c, b, b32, a};
    for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
}

static zl_tensor *mse_mean(zl_tensor *const *in, int n) { (void)n; return zl_mse_loss(in[0], in[1], ZL_REDUCE_MEAN); }
static zl_tensor *mse_sum(zl_tensor *const *in, int n) { (void)n; return zl_mse_loss(in[0], in[1], ZL_REDUCE_SUM); }
static zl_tensor *mse_none(zl_tensor *const *in, int n) { (void)n; return zl_mse_loss(in[0], in[1], ZL_REDUCE_NONE); }

/* mse_loss, each reduction: the sums in the CPU's order, both gradients. */
TEST(mse_loss_on_the_device)
{
    zl_tensor *x = zt_randn(SHAPE(70, 90)), *t = zt_randn(SHAPE(70, 90)), *g = zt_randn(SHAPE(70, 90));
    zl_tensor *g0 = zl_tensor_scalar(ZL_DTYPE_F32, 0.75), *tb = zl_tensor_to(t, ZL_DTYPE_BF16);
    check_op_on_both("mse_loss mean", mse_mean, (zl_tensor *[]){x, t}, 2, g0);
    check_op_on_both("mse_loss sum", mse_sum, (zl_tensor *[]){x, t}, 2, g0);
    check_op_on_both("mse_loss none", mse_none, (zl_tensor *[]){x, t}, 2, g);
    check_op_on_both("mse_loss, a bf16 target", mse_mean, (zl_tensor *[]){x, tb}, 2, g0);
    zl_tensor *dx = to_fake(x), *bad = zt_randn(SHAPE(70, 91)), *dbad = to_fake(bad);
    CHECK_ERR(zl_mse_loss(dx, t, ZL_REDUCE_MEAN), "mse_loss: one tensor is on cuda:7 and the other on cpu");
    CHECK_ERR(zl_mse_loss(dx, dbad, ZL_REDUCE_MEAN), "mse_loss: input and target must have the same shape");
    zl_tensor *objs[] = {dbad, bad, dx, tb, g0, g, t, x};
    for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
}

static zl_tensor *pool_3s2p1(zl_tensor *const *in, int n) { (void)n; return zl_max_pool2d(in[0], 3, 3, 2, 2, 1, 1); }
static zl_tensor *pool_2x3(zl_tensor *const *in, int n) { (void)n; return zl_max_pool2d(in[0], 2, 3, 1, 3, 0, 1); }

/* max_pool2d: overlapping windows (one pixel the maximum of several, its
 * gradient summed in window order), ties, padding, a NaN: the same bits. */
TEST(max_pool2d_on_the_device)
{
    zl_tensor *x = zt_randn(SHAPE(2, 3, 9, 8));
    for (int64_t i = 0; i < 20; i++) zl_tensor_set(x, i, 1.0);   /* ties: the first maximum wins */
    zl_tensor_set(x, 100, NAN);
    zl_tensor *g1 = zt_randn(SHAPE(2, 3, 5, 4)), *g2 = zt_randn(SHAPE(2, 3, 8, 3));
    zl_tensor *xb = zl_tensor_to(x, ZL_DTYPE_BF16);
    check_op_on_both("max_pool2d 3x3 stride 2 padding 1", pool_3s2p1, &x, 1, g1);
    check_op_on_both("max_pool2d 2x3 stride (1, 3) padding (0, 1)", pool_2x3, &x, 1, g2);
    check_op_on_both("max_pool2d bf16", pool_3s2p1, &xb, 1, g1);
    zl_tensor *dx = to_fake(x);
    CHECK_ERR(zl_max_pool2d(dx, 3, 3, 1, 1, 2, 2), "max_pool2d: padding (2, 2) must be at most half");
    zl_tensor *objs[] = {dx, xb, g2, g1, x};
    for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
}

static zl_tensor *conv_bias(zl_tensor *const *in, int n) { (void)n; return zl_conv2d(in[0], in[1], in[2], 2, 1, 1, 2); }
static zl_tensor *conv_plain(zl_tensor *const *in, int n) { (void)n; return zl_conv2d(in[0], in[1], NULL, 1, 1, 0, 0); }

/* conv2d: padding and stride, the 1x1 shortcut, every gradient, to 1e-5: the
 * stand-in's GEMM adds in another order than OpenBLAS (im2col, col2im and the
 * bias's sum are checked against the CPU in test_cuda_math). */
TEST(conv2d_on_the_device)
{
    zl_tensor *x = zt_randn(SHAPE(3, 4, 7, 6)), *w = zt_randn(SHAPE(5, 4, 3, 2)), *b = zt_randn(SHAPE(5));
    zl_tensor *w1 = zt_randn(SHAPE(5, 4, 1, 1));
    zl_tensor *g = zt_randn(SHAPE(3, 5, 4, 9)), *g1 = zt_randn(SHAPE(3, 5, 7, 6));
    check_op_tol("conv2d 3x2 stride (2, 1) padding (1, 2), bias", conv_bias, (zl_tensor *[]){x, w, b}, 3, g, 1e-5);
    check_op_tol("conv2d 1x1", conv_plain, (zl_tensor *[]){x, w1}, 2, g1, 1e-5);
    zl_tensor *dx = to_fake(x);
    CHECK_ERR(zl_conv2d(dx, w, NULL, 1, 1, 0, 0), "conv2d: one tensor is on cuda:7 and the other on cpu");
    zl_tensor *objs[] = {dx, g1, g, w1, b, w, x};
    for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
}

static zl_tensor *ce_opts_mean(zl_tensor *const *in, int n)
{
    return zl_cross_entropy_ex(in[0], in[1], n > 2 ? in[2] : NULL, 1, 0.2, ZL_REDUCE_MEAN, ZL_DTYPE_F32);
}
static zl_tensor *ce_opts_none(zl_tensor *const *in, int n)
{
    return zl_cross_entropy_ex(in[0], in[1], n > 2 ? in[2] : NULL, 1, 0.0, ZL_REDUCE_NONE, ZL_DTYPE_F32);
}
static zl_tensor *emb_pad(zl_tensor *const *in, int n) { (void)n; return zl_embedding_padded(in[0], in[1], 3); }
static zl_tensor *avg_pad(zl_tensor *const *in, int n)
{
    (void)n;
    return zl_avg_pool2d(in[0], 3, 2, 2, 1, 1, 1, false);
}
static zl_tensor *conv_ex(zl_tensor *const *in, int n)
{
    return zl_conv2d_ex(in[0], in[1], n > 2 ? in[2] : NULL, 2, 1, 2, 1, 2, 3, 2);
}

/* torch's options of the nn ops on the device's kernels, bit for bit:
 * cross_entropy's weight and smoothing, embedding's padding row, avg_pool2d;
 * conv2d's dilation and groups to 1e-5 (its GEMMs add in another order). */
TEST(nn_options_on_the_device)
{
    zl_tensor *x = zt_randn(SHAPE(5, 6)), *w = zt_randn(SHAPE(6)), *g5 = zt_randn(SHAPE(5)), *g0 = zt_randn(SHAPE(1));
    zl_tensor *t = zl_tensor_from_data(ZL_DTYPE_I64, 1, (int64_t[]){5}, (int64_t[]){3, 1, 0, 5, 1});
    zl_tensor *gs = zl_tensor_reshape(g0, 0, NULL);
    check_op_on_both("cross_entropy weight and smoothing", ce_opts_mean, (zl_tensor *[]){x, t, w}, 3, gs);
    check_op_on_both("cross_entropy smoothing", ce_opts_mean, (zl_tensor *[]){x, t}, 2, gs);
    check_op_on_both("cross_entropy weight, none", ce_opts_none, (zl_tensor *[]){x, t, w}, 3, g5);
    zl_tensor *ew = zt_randn(SHAPE(7, 4)), *eg = zt_randn(SHAPE(2, 3, 4));
    zl_tensor *ei = zl_tensor_from_data(ZL_DTYPE_I64, 2, (int64_t[]){2, 3}, (int64_t[]){3, 0, 6, 3, 1, 3});
    check_op_on_both("embedding padding_idx 3", emb_pad, (zl_tensor *[]){ew, ei}, 2, eg);
    zl_tensor *px = zt_randn(SHAPE(2, 3, 7, 6)), *pg = zt_randn(SHAPE(2, 3, 4, 7));
    check_op_on_both("avg_pool2d 3x2 stride (2, 1) padding 1", avg_pad, &px, 1, pg);
    zl_tensor *cx = zt_randn(SHAPE(2, 4, 9, 8)), *cw = zt_randn(SHAPE(6, 2, 3, 2)), *cb = zt_randn(SHAPE(6));
    zl_tensor *cg = zt_randn(SHAPE(2, 6, 5, 7));
    check_op_tol("conv2d dilation (2, 3), 2 groups", conv_ex, (zl_tensor *[]){cx, cw, cb}, 3, cg, 1e-5);
    zl_tensor *dx = to_fake(x);
    CHECK_ERR(zl_cross_entropy_ex(dx, t, w, -100, 0.1, ZL_REDUCE_MEAN, ZL_DTYPE_F32),
              "cross_entropy: one tensor is on cuda:7 and the other on cpu");
    zl_tensor *objs[] = {dx, cg, cb, cw, cx, pg, px, ei, eg, ew, gs, t, g0, g5, w, x};
    for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
}

static zl_tensor *int_add(zl_tensor *const *in, int n) { (void)n; return zl_add(in[0], in[1]); }
static zl_tensor *int_div(zl_tensor *const *in, int n) { (void)n; return zl_div(in[0], in[1]); }
static zl_tensor *int_pow(zl_tensor *const *in, int n) { (void)n; return zl_pow(in[0], in[1]); }
static zl_tensor *int_eq(zl_tensor *const *in, int n) { (void)n; return zl_eq(in[0], in[1]); }
static zl_tensor *int_lt_transposed(zl_tensor *const *in, int n)
{
    (void)n;
    zl_tensor *t = zl_tensor_transpose(in[0], 0, 1), *y = zl_lt(t, in[1]);
    zl_tensor_release(t);
    return y;
}

/* Random normals times scale, converted to the integer dtype dt. */
static zl_tensor *ints_of(zl_dtype dt, int ndim, const int64_t *shape, double scale)
{
    zl_tensor *f = zl_tensor_new(ZL_DTYPE_F32, ndim, shape, ZL_MEM_OTHER);
    zl_tensor_normal_(f, 0, 1, NULL);
    zl_tensor *s = zl_affine(f, scale, 0.0), *t = zl_tensor_to(s, dt);
    zl_tensor_release(s);
    zl_tensor_release(f);
    return t;
}

/* Integer operands (indices, counts): in double, stored as core converts;
 * mixed widths, broadcasting, a strided view, bool and f32 results. */
TEST(integer_binary_ops_on_the_device)
{
    zl_tensor *a = ints_of(ZL_DTYPE_I64, SHAPE(4, 5), 1e6), *b = ints_of(ZL_DTYPE_I32, SHAPE(5), 50.0);
    zl_tensor *small = ints_of(ZL_DTYPE_I32, SHAPE(5), 3.0), *bl = ints_of(ZL_DTYPE_BOOL, SHAPE(5), 1.0);
    zl_tensor *big = ints_of(ZL_DTYPE_I64, SHAPE(4, 5), 1e12);
    check_op_on_both("i64 + i32, broadcast", int_add, (zl_tensor *[]){a, b}, 2, NULL);
    check_op_on_both("i64 + i64 past 2^32", int_add, (zl_tensor *[]){big, a}, 2, NULL);
    check_op_on_both("i64 / i32 (f32)", int_div, (zl_tensor *[]){a, b}, 2, NULL);
    check_op_on_both("i32 ^ i32", int_pow, (zl_tensor *[]){small, small}, 2, NULL);
    check_op_on_both("i32 == bool", int_eq, (zl_tensor *[]){small, bl}, 2, NULL);
    zl_tensor *at = ints_of(ZL_DTYPE_I64, SHAPE(5, 4), 10.0), *col = ints_of(ZL_DTYPE_I32, SHAPE(4, 1), 10.0);
    check_op_on_both("i64 transposed < i32", int_lt_transposed, (zl_tensor *[]){at, col}, 2, NULL);
    /* A host scalar goes along with a device tensor. */
    zl_tensor *da = to_fake(a), *two = zl_tensor_scalar(ZL_DTYPE_I64, 2.0);
    zl_tensor *hy = zl_mul(a, two), *dy = zl_mul(da, two);
    CHECK(dy && zl_tensor_device(dy) == ZL_DEVICE_CUDA);
    if (dy) check_bits(hy, dy, "i64 * a host scalar");
    zl_tensor *objs[] = {dy, hy, two, da, col, at, big, bl, small, b, a};
    for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
}

static zl_tensor *softmax_first(zl_tensor *const *in, int n) { (void)n; return zl_softmax(in[0], 0); }
static zl_tensor *softmax_mid(zl_tensor *const *in, int n) { (void)n; return zl_softmax(in[0], 1); }
static zl_tensor *log_softmax_mid(zl_tensor *const *in, int n) { (void)n; return zl_log_softmax(in[0], -2); }

/* softmax over a dim that is not the last: rows whose elements lie apart,
 * in the CPU's order (the same bits). */
TEST(softmax_over_any_dim_on_the_device)
{
    zl_tensor *x = zt_randn(SHAPE(3, 5, 4)), *g = zt_randn(SHAPE(3, 5, 4)), *xb = zl_tensor_to(x, ZL_DTYPE_BF16);
    zl_tensor *xt = zl_tensor_transpose(x, 0, 2);   /* a strided input */
    check_op_on_both("softmax dim 0", softmax_first, &x, 1, g);
    check_op_on_both("softmax dim 1", softmax_mid, &x, 1, g);
    check_op_on_both("log_softmax dim -2", log_softmax_mid, &x, 1, g);
    check_op_on_both("log_softmax dim -2, bf16", log_softmax_mid, &xb, 1, NULL);
    zl_tensor *gt = zt_randn(SHAPE(4, 5, 3));
    check_op_on_both("softmax dim 1 of a transposed view", softmax_mid, &xt, 1, gt);
    zl_tensor *objs[] = {gt, xt, xb, g, x};
    for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
}

static int64_t fake_bytes_all(void)
{
    int64_t n = 0;
    for (int c = 0; c < ZL_MEM_COUNT; c++) n += fake_bytes((zl_mem_category)c);
    return n;
}

/* A one-element host tensor beside device ones: cross_entropy uploads a host
 * target (kept for backward, the stand-in holds its 8 bytes more than for a
 * target already there), layer_norm and embedding refuse a host weight or
 * bias by name, where they would hand its host memory to a kernel. */
/* Registered as CUDA's backend in the current context, the stand-in is what
 * the public device calls reach there: a tensor moved to cuda:7 lands on it
 * and its ops run on the stand-in's kernels with the host's bits; in another
 * context, or unregistered, the kind is its own module's (no device here, a
 * GPU's on a GPU machine). */
TEST(the_stand_in_is_a_registered_backend)
{
    fake_register(true);
    CHECK(zl_device_count(ZL_DEVICE_CUDA) == FAKE_INDEX + 1);
    CHECK_ERR(zl_device_check(ZL_DEVICE_CUDA, 0), "cuda:0: the stand-in device is cuda:7");
    zl_tensor *x = zt_randn(SHAPE(3, 5)), *want = zl_softmax(x, -1);
    zl_tensor *d = zl_tensor_to_device(x, ZL_DEVICE_CUDA, FAKE_INDEX);
    CHECK(d && zl_tensor_device(d) == ZL_DEVICE_CUDA && zl_tensor_device_index(d) == FAKE_INDEX);
    zl_tensor *y = d ? zl_softmax(d, -1) : NULL, *back = y ? zl_tensor_to_device(y, ZL_DEVICE_CPU, 0) : NULL;
    CHECK(back != NULL);
    if (back) check_bits(want, y, "softmax on the registered stand-in");
    CHECK(zl_device_mem_in_use(ZL_DEVICE_CUDA) >= 2 * 15 * 4);
    const zli_device_ops *stand_in = d ? d->storage->dev : NULL;
    zl_context *other = zl_context_new(), *prev = zl_context_set_current(other);
    zl_tensor *elsewhere = zl_tensor_to_device(x, ZL_DEVICE_CUDA, FAKE_INDEX);
    CHECK(!elsewhere || elsewhere->storage->dev != stand_in);
    zl_tensor_release(elsewhere);
    zl_context_set_current(prev);
    zl_context_free(other);
    fake_register(false);
    zl_tensor *again = zl_tensor_to_device(x, ZL_DEVICE_CUDA, FAKE_INDEX);
    CHECK(!again || again->storage->dev != stand_in);
    zl_tensor *objs[] = {again, back, y, d, want, x};
    for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
}

TEST(one_element_host_operands_are_uploaded_or_refused)
{
    zl_tensor *xh = zt_randn(SHAPE(1, 5)), *th = zl_tensor_from_data(ZL_DTYPE_I64, 1, (int64_t[]){1}, (int64_t[]){3});
    zl_tensor *x = to_fake(xh), *td = to_fake(th), *want = zl_cross_entropy(xh, th, -100, ZL_REDUCE_NONE);
    zl_tensor_set_requires_grad(x, true);
    int64_t delta[2];
    for (int host = 0; host < 2; host++) {
        int64_t before = fake_bytes_all();
        zl_tensor *l = zl_cross_entropy(x, host ? th : td, -100, ZL_REDUCE_NONE);
        CHECK(l != NULL);
        delta[host] = fake_bytes_all() - before;
        if (l) check_bits(want, l, host ? "cross_entropy, host target" : "cross_entropy, device target");
        zl_tensor_release(l);
    }
    /* uploaded from the host, or copied for the kernels to check: one copy either way */
    CHECK(delta[1] == delta[0]);
    zl_tensor *w1 = zt_randn(SHAPE(1)), *x1h = zt_randn(SHAPE(3, 1)), *x1 = to_fake(x1h);
    CHECK_ERR(zl_layer_norm(x1, 1, w1, NULL, 1e-5), "layer_norm: one tensor is on cuda:7 and the other on cpu");
    CHECK_ERR(zl_layer_norm(x1, 1, NULL, w1, 1e-5), "layer_norm: one tensor is on cuda:7 and the other on cpu");
    zl_tensor *emb = zt_randn(SHAPE(1, 1)), *ih = zl_tensor_zeros(ZL_DTYPE_I64, 1, (int64_t[]){4}), *idx = to_fake(ih);
    CHECK_ERR(zl_embedding(emb, idx), "embedding: one tensor is on cuda:7 and the other on cpu");
    zl_tensor *objs[] = {idx, ih, emb, x1, x1h, w1, want, td, x, th, xh};
    for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
}

TEST(host_only_paths_name_the_device)
{
    zl_tensor *h = zt_randn(SHAPE(4));
    zl_tensor *d = to_fake(h);
    CHECK(isnan(zl_tensor_get(d, 0)));
    CHECK(strstr(zl_last_error(), "get: the tensor is on cuda:7"));
    CHECK_ERR(zl_tensor_set(d, 0, 1.0), "set: the tensor is on cuda:7, and set runs on the CPU here");
    CHECK_ERR(zl_add(h, d), "add: one tensor is on cuda:7 and the other on cpu");
    zl_tensor *e = zl_tensor_expand(d, 2, (int64_t[]){3, 4});   /* a view: fine; its backward sums on the host */
    CHECK(e != NULL);
    zl_tensor_release(e);
    zl_tensor_release(d);
    zl_tensor_release(h);
}
