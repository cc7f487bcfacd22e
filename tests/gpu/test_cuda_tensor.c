/* CUDA tensors on a real GPU: moves both ways for each dtype and for strided
 * views, the caching allocator's reuse and accounting, and host ops refusing
 * device tensors by name. Exits 77 (CTest's skip) with the reason when the
 * machine has no CUDA device. */
#include <stdlib.h>
#include "harness.h"
#include "core/tensor_impl.h"
#include "core/backend.h"

__attribute__((constructor(200))) static void skip_without_gpu(void)
{
    if (zl_device_count(ZL_DEVICE_CUDA) > 0) return;
    printf("skipped: %s\n", zl_last_error());
    exit(77);
}

static void check_same(const zl_tensor *a, const zl_tensor *b)
{
    int64_t n = zl_tensor_numel(a);
    CHECK(n == zl_tensor_numel(b) && zl_tensor_dtype(a) == zl_tensor_dtype(b));
    for (int64_t i = 0; i < n; i++)
        if (zl_tensor_get(a, i) != zl_tensor_get(b, i)) {
            zt_fail(__FILE__, __LINE__, "element %lld differs: %g vs %g", (long long)i, zl_tensor_get(a, i),
                    zl_tensor_get(b, i));
            return;
        }
}

TEST(round_trip_every_dtype)
{
    const zl_dtype dts[] = {ZL_DTYPE_F32, ZL_DTYPE_BF16, ZL_DTYPE_F16, ZL_DTYPE_I64, ZL_DTYPE_I32, ZL_DTYPE_U8};
    for (size_t k = 0; k < sizeof dts / sizeof *dts; k++) {
        zl_tensor *f = zt_randn(SHAPE(37, 5));
        zl_tensor *h = zl_tensor_to(f, dts[k]);
        zl_tensor *d = zl_tensor_to_device(h, ZL_DEVICE_CUDA, 0);
        CHECK(d && zl_tensor_device(d) == ZL_DEVICE_CUDA && zl_tensor_device_index(d) == 0);
        zl_tensor *back = d ? zl_tensor_to_device(d, ZL_DEVICE_CPU, 0) : NULL;
        CHECK(back && zl_tensor_device(back) == ZL_DEVICE_CPU);
        if (back) check_same(h, back);
        zl_tensor_release(back);
        zl_tensor_release(d);
        zl_tensor_release(h);
        zl_tensor_release(f);
    }
}

TEST(strided_views_move_as_their_elements)
{
    zl_tensor *h = zt_randn(SHAPE(6, 7));
    zl_tensor *ht = zl_tensor_transpose(h, 0, 1);
    zl_tensor *d = zl_tensor_to_device(ht, ZL_DEVICE_CUDA, 0);   /* host view -> contiguous device copy */
    zl_tensor *back = zl_tensor_to_device(d, ZL_DEVICE_CPU, 0);
    check_same(ht, back);
    zl_tensor *dd = zl_tensor_to_device(h, ZL_DEVICE_CUDA, 0);
    zl_tensor *dv = zl_tensor_transpose(dd, 0, 1);               /* device view -> host */
    zl_tensor *back2 = zl_tensor_to_device(dv, ZL_DEVICE_CPU, 0);
    check_same(ht, back2);
    zl_tensor *z = zl_tensor_zeros_on(ZL_DTYPE_BF16, SHAPE(3, 3), ZL_DEVICE_CUDA, 0);
    zl_tensor *zb = zl_tensor_to_device(z, ZL_DEVICE_CPU, 0);
    for (int i = 0; i < 9; i++) CHECK(zl_tensor_get(zb, i) == 0.0);
    zl_tensor *objs[] = {zb, z, back2, dv, dd, back, d, ht, h};
    for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
}

TEST(caching_allocator_reuses_and_accounts)
{
    CHECK(zl_device_empty_cache(ZL_DEVICE_CUDA, 0) == ZL_OK);
    int64_t base = zl_device_mem_stats(ZL_DEVICE_CUDA, 0, ZL_MEM_PARAMS).current;
    zl_tensor *a = zl_tensor_new_on(ZL_DTYPE_F32, SHAPE(1 << 20), ZL_MEM_PARAMS, ZL_DEVICE_CUDA, 0);
    CHECK(a != NULL);
    int64_t charged = zl_device_mem_stats(ZL_DEVICE_CUDA, 0, ZL_MEM_PARAMS).current - base;
    CHECK(charged >= (int64_t)4 << 20 && charged < ((int64_t)4 << 20) + ((int64_t)2 << 20));
    void *first = zl_tensor_data(a);
    int64_t reserved = zl_device_mem_reserved(ZL_DEVICE_CUDA, 0);
    zl_tensor_release(a);
    CHECK(zl_device_mem_stats(ZL_DEVICE_CUDA, 0, ZL_MEM_PARAMS).current == base);
    CHECK(zl_device_mem_reserved(ZL_DEVICE_CUDA, 0) == reserved);   /* kept in the cache */
    zl_tensor *b = zl_tensor_new_on(ZL_DTYPE_F32, SHAPE(1 << 20), ZL_MEM_GRADS, ZL_DEVICE_CUDA, 0);
    CHECK(b && zl_tensor_data(b) == first);                         /* the same block again */
    CHECK(zl_device_mem_reserved(ZL_DEVICE_CUDA, 0) == reserved);
    zl_tensor_set_category(b, ZL_MEM_OPTIMIZER);
    CHECK(zl_device_mem_stats(ZL_DEVICE_CUDA, 0, ZL_MEM_OPTIMIZER).current >= (int64_t)4 << 20);
    zl_tensor_release(b);
    CHECK(zl_device_empty_cache(ZL_DEVICE_CUDA, 0) == ZL_OK);
    CHECK(zl_device_mem_reserved(ZL_DEVICE_CUDA, 0) < reserved);
    CHECK(zl_device_mem_stats(ZL_DEVICE_CUDA, 0, ZL_MEM_COUNT).peak >= (int64_t)4 << 20);
}

/* Ones in t's shape, on t's device. */
static zl_tensor *ones_like(zl_tensor *t)
{
    zl_tensor *h = zl_tensor_full(ZL_DTYPE_F32, zl_tensor_ndim(t), zl_tensor_shape(t), 1.0);
    zl_tensor *d = zl_tensor_to_device(h, zl_tensor_device(t), zl_tensor_device_index(t));
    zl_tensor_release(h);
    return d;
}

/* t on the device, moved back: the host tensor it holds. */
static zl_tensor *host_copy(zl_tensor *t) { return zl_tensor_to_device(t, ZL_DEVICE_CPU, 0); }

TEST(core_primitives_on_the_device)
{
    zl_tensor *h = zt_randn(SHAPE(4, 6));
    zl_tensor *d = zl_tensor_to_device(h, ZL_DEVICE_CUDA, 0);
    /* to and clone of a strided view run on the device and match the host's. */
    zl_tensor *hv = zl_tensor_transpose(h, 0, 1), *dv = zl_tensor_transpose(d, 0, 1);
    zl_tensor *hb = zl_tensor_to(hv, ZL_DTYPE_BF16), *db = zl_tensor_to(dv, ZL_DTYPE_BF16);
    CHECK(db && zl_tensor_device(db) == ZL_DEVICE_CUDA);
    zl_tensor *back = db ? host_copy(db) : NULL;
    if (back) check_same(hb, back);
    zl_tensor *dc = zl_tensor_clone(dv), *backc = dc ? host_copy(dc) : NULL;
    if (backc) check_same(hv, backc);
    /* fill, copy_ (broadcast) and add_ (broadcast) into device tensors. */
    CHECK(zl_tensor_fill(d, 2.5) == ZL_OK);
    zl_tensor *row = zt_randn(SHAPE(6));
    zl_tensor *drow = zl_tensor_to_device(row, ZL_DEVICE_CUDA, 0);
    CHECK(zl_tensor_add_(d, drow, -2.0) == ZL_OK);
    zl_tensor *expect = zl_tensor_full(ZL_DTYPE_F32, 2, (int64_t[]){4, 6}, 2.5);
    CHECK(zl_tensor_add_(expect, row, -2.0) == ZL_OK);
    zl_tensor *got = host_copy(d);
    check_same(expect, got);
    CHECK(zl_tensor_copy_(d, drow) == ZL_OK);
    zl_tensor *got2 = host_copy(d);
    for (int64_t i = 0; i < 24; i++) CHECK(zl_tensor_get(got2, i) == zl_tensor_get(row, i % 6));
    CHECK_ERR(zl_tensor_copy_(d, row), "copy_: one tensor is on cuda:0 and the other on cpu");
    /* copy_ into a strided view (the transpose's narrowed rows), converting to bf16. */
    zl_tensor *hs = zt_randn(SHAPE(2, 4)), *ds = zl_tensor_to_device(hs, ZL_DEVICE_CUDA, 0);
    zl_tensor *he = zl_tensor_to(expect, ZL_DTYPE_BF16), *de = zl_tensor_to_device(he, ZL_DEVICE_CUDA, 0);
    zl_tensor *hn = zl_tensor_transpose(he, 0, 1), *dn = zl_tensor_transpose(de, 0, 1);
    zl_tensor *hsl = zl_tensor_narrow(hn, 0, 3, 2), *dsl = zl_tensor_narrow(dn, 0, 3, 2);
    CHECK(zl_tensor_copy_(hsl, hs) == ZL_OK && zl_tensor_copy_(dsl, ds) == ZL_OK);
    zl_tensor *got3 = host_copy(de);
    if (got3) check_same(he, got3);
    zl_tensor *strided[] = {got3, dsl, hsl, dn, hn, de, he, ds, hs};
    for (size_t i = 0; i < sizeof strided / sizeof *strided; i++) zl_tensor_release(strided[i]);
    zl_tensor *objs[] = {got2, got, expect, drow, row, backc, dc, back, db, hb, dv, hv, d, h};
    for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
}

/* Backward through ops core runs on the device (views, to, clone): the leaf's
 * gradient lands on the device and equals the host run's. */
TEST(autograd_through_device_views)
{
    zl_tensor *results[2];
    zl_tensor *h = zt_randn(SHAPE(3, 4)), *gh = zt_randn(SHAPE(2, 3));
    for (int dev = 0; dev < 2; dev++) {
        zl_tensor *x = dev ? zl_tensor_to_device(h, ZL_DEVICE_CUDA, 0) : zl_tensor_retain(h);
        zl_tensor_set_requires_grad(x, true);
        zl_tensor *t = zl_tensor_transpose(x, 0, 1);
        zl_tensor *b = zl_tensor_to(t, ZL_DTYPE_BF16);
        zl_tensor *n = zl_tensor_narrow(b, 0, 1, 2);
        zl_tensor *c = zl_tensor_clone(n);
        zl_tensor *g = dev ? zl_tensor_to_device(gh, ZL_DEVICE_CUDA, 0) : zl_tensor_retain(gh);
        CHECK(zl_backward(c, g, false) == ZL_OK);
        zl_tensor *gx = zl_tensor_grad(x);
        CHECK(gx && zl_tensor_device(gx) == (dev ? ZL_DEVICE_CUDA : ZL_DEVICE_CPU));
        results[dev] = gx ? host_copy(gx) : NULL;
        zl_tensor *objs[] = {g, c, n, b, t, x};
        for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
    }
    if (results[0] && results[1]) check_same(results[0], results[1]);
    zl_tensor_release(gh);
    zl_tensor_release(h);
    zl_tensor_release(results[0]);
    zl_tensor_release(results[1]);
}

/* Equal values (infinities too) or within tol. */
static void check_close_dev(const zl_tensor *h, zl_tensor *d, double tol, const char *what)
{
    zl_tensor *b = d ? host_copy(d) : NULL;
    CHECK(b && zl_tensor_numel(b) == zl_tensor_numel(h));
    for (int64_t i = 0; b && i < zl_tensor_numel(h); i++) {
        double vh = zl_tensor_get(h, i), vb = zl_tensor_get(b, i);
        if (vh != vb && !(fabs(vh - vb) <= tol * (1 + fabs(vh)))) {
            zt_fail(__FILE__, __LINE__, "%s: element %lld is %.9g on the GPU, %.9g on the CPU", what, (long long)i,
                    vb, vh);
            break;
        }
    }
    zl_tensor_release(b);
}

/* An MLP-like chain on the GPU against the CPU, forward and backward: the
 * elementwise kernels (a few ulp of libm apart) and cuBLASLt (strict f32). */
TEST(ops_and_backward_match_the_cpu)
{
    zl_tensor *xh = zt_randn(SHAPE(8, 16)), *wh = zt_randn(SHAPE(16, 12)), *bh = zt_randn(SHAPE(12));
    zl_tensor *out[2], *gw[2], *gx[2], *gb[2];
    for (int dev = 0; dev < 2; dev++) {
        zl_tensor *x = dev ? zl_tensor_to_device(xh, ZL_DEVICE_CUDA, 0) : zl_tensor_clone(xh);
        zl_tensor *w = dev ? zl_tensor_to_device(wh, ZL_DEVICE_CUDA, 0) : zl_tensor_clone(wh);
        zl_tensor *b = dev ? zl_tensor_to_device(bh, ZL_DEVICE_CUDA, 0) : zl_tensor_clone(bh);
        zl_tensor_set_requires_grad(x, true);
        zl_tensor_set_requires_grad(w, true);
        zl_tensor_set_requires_grad(b, true);   /* broadcast: its gradient is summed down on the device */
        zl_tensor *h = zl_matmul(x, w), *hb = h ? zl_add(h, b) : NULL, *a = hb ? zl_gelu(hb, true) : NULL;
        zl_tensor *y = a ? zl_tanh(a) : NULL;
        zl_tensor *g = y ? ones_like(y) : NULL;
        CHECK(y && g && zl_backward(y, g, false) == ZL_OK);
        out[dev] = zl_tensor_retain(y);
        gw[dev] = zl_tensor_retain(zl_tensor_grad(w));
        gx[dev] = zl_tensor_retain(zl_tensor_grad(x));
        gb[dev] = zl_tensor_retain(zl_tensor_grad(b));
        zl_tensor *objs[] = {g, y, a, hb, h, b, w, x};
        for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
    }
    check_close_dev(out[0], out[1], 1e-5, "forward");
    check_close_dev(gw[0], gw[1], 1e-5, "gradient of w");
    check_close_dev(gx[0], gx[1], 1e-5, "gradient of x");
    check_close_dev(gb[0], gb[1], 1e-5, "gradient of the bias");
    zl_tensor *objs[] = {out[0], out[1], gw[0], gw[1], gx[0], gx[1], gb[0], gb[1], bh, wh, xh};
    for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
}

static zl_tensor *on_gpu(zl_tensor *h) { return zl_tensor_to_device(h, ZL_DEVICE_CUDA, 0); }

/* h on the host (dev 0) or on the GPU (dev 1), requiring grad. */
static zl_tensor *leaf(zl_tensor *h, int dev)
{
    zl_tensor *t = dev ? on_gpu(h) : zl_tensor_clone(h);
    zl_tensor_set_requires_grad(t, true);
    return t;
}

static void release_all(zl_tensor **ts, size_t n)
{
    for (size_t i = 0; i < n; i++) zl_tensor_release(ts[i]);
}

/* A block of a bf16 (and f16) model on the GPU, its kernels reading and
 * writing the half-precision tensors as they are: layer norm, a residual
 * add, GELU, softmax and cross-entropy, forward and backward, against the
 * CPU to their rounding. */
TEST(half_elementwise_kernels_match_the_cpu)
{
    const zl_dtype dts[] = {ZL_DTYPE_BF16, ZL_DTYPE_F16};
    zl_tensor *xr = zt_randn(SHAPE(6, 40)), *wr = zt_randn(SHAPE(40));
    int64_t tv[6] = {1, 39, 0, 7, 7, 20};
    zl_tensor *th = zl_tensor_from_data(ZL_DTYPE_I64, 1, (int64_t[]){6}, tv);
    for (int k = 0; k < 2; k++) {
        zl_tensor *loss[2], *gx[2], *gw[2];
        for (int dev = 0; dev < 2; dev++) {
            zl_tensor *xh = zl_tensor_to(xr, dts[k]), *wh = zl_tensor_to(wr, dts[k]);
            zl_tensor *x = dev ? zl_tensor_to_device(xh, ZL_DEVICE_CUDA, 0) : zl_tensor_clone(xh);
            zl_tensor *w = dev ? zl_tensor_to_device(wh, ZL_DEVICE_CUDA, 0) : zl_tensor_clone(wh);
            zl_tensor *t = dev ? zl_tensor_to_device(th, ZL_DEVICE_CUDA, 0) : zl_tensor_retain(th);
            zl_tensor_set_requires_grad(x, true);
            zl_tensor_set_requires_grad(w, true);
            zl_tensor *n = zl_layer_norm(x, 1, w, NULL, 1e-5), *r = n ? zl_add(n, x) : NULL;
            zl_tensor *a = r ? zl_gelu(r, false) : NULL, *s = a ? zl_softmax(a, -1) : NULL;
            zl_tensor *m = s ? zl_mul(s, a) : NULL;
            loss[dev] = m ? zl_cross_entropy(m, t, -100, ZL_REDUCE_MEAN) : NULL;
            CHECK(loss[dev] && zl_backward(loss[dev], NULL, false) == ZL_OK);
            gx[dev] = zl_tensor_retain(zl_tensor_grad(x));
            gw[dev] = zl_tensor_retain(zl_tensor_grad(w));
            zl_tensor *objs[] = {m, s, a, r, n, t, w, x, wh, xh};
            release_all(objs, 10);
        }
        check_close_dev(loss[0], loss[1], 1e-2, "half block's loss");
        check_close_dev(gx[0], gx[1], 2e-2, "half block's gradient of x");
        check_close_dev(gw[0], gw[1], 2e-2, "half block's gradient of the norm's weight");
        zl_tensor *objs[] = {loss[0], loss[1], gx[0], gx[1], gw[0], gw[1]};
        release_all(objs, 6);
    }
    zl_tensor *objs[] = {th, wr, xr};
    release_all(objs, 3);
}

/* The device's result moved back, bit for bit with the host's, but for a
 * NaN's payload: the CPU passes on its operand's NaN, the GPU's arithmetic
 * writes its canonical one. */
static void check_bits_dev(zl_tensor *h, zl_tensor *d, const char *what)
{
    zl_tensor *b = d ? host_copy(d) : NULL, *hc = zl_tensor_contiguous(h);
    CHECK(b && zl_tensor_dtype(b) == zl_tensor_dtype(hc) && zl_tensor_numel(b) == zl_tensor_numel(hc));
    size_t es = zl_dtype_size(zl_tensor_dtype(hc));
    const char *pb = b ? zl_tensor_data(b) : NULL, *ph = zl_tensor_data(hc);
    for (int64_t i = 0; b && i < zl_tensor_numel(hc); i++) {
        if (!memcmp(pb + i * es, ph + i * es, es) || (isnan(zl_tensor_get(b, i)) && isnan(zl_tensor_get(hc, i))))
            continue;
        zt_fail(__FILE__, __LINE__, "%s: the GPU's bits differ from the CPU's at element %lld (%.9g vs %.9g)", what,
                (long long)i, zl_tensor_get(b, i), zl_tensor_get(hc, i));
        break;
    }
    zl_tensor_release(hc);
    zl_tensor_release(b);
}

/* f over three leaves (the last may be NULL) made from h on the CPU (dev 0)
 * and the GPU (dev 1), then backward from gh: y[dev] [out] and each leaf's
 * gradient gr[dev][i] [out] (NULL where there is none). */
typedef zl_tensor *(*op3)(zl_tensor *a, zl_tensor *b, zl_tensor *c, bool flag);

static void run3(op3 f, bool flag, zl_tensor *const h[3], zl_tensor *gh, zl_tensor *y[2], zl_tensor *gr[2][3])
{
    for (int dev = 0; dev < 2; dev++) {
        zl_tensor *in[3] = {0}, *g = dev ? on_gpu(gh) : zl_tensor_retain(gh);
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

/* linear (cuBLASLt, the bias added by beta) and attention (batched GEMMs,
 * the softmax kernels; rows long enough to span warps), forward and every
 * gradient, against the CPU; the bias's gradient (rows in order) exactly. */
TEST(linear_and_attention_match_the_cpu)
{
    static const char *const names[2][4] = {{"linear", "linear's gradient of x", "linear's gradient of w", ""},
                                            {"attention", "attention's gradient of q", "attention's gradient of k",
                                             "attention's gradient of v"}};
    zl_tensor *lh[3] = {zt_randn(SHAPE(4, 9, 32)), zt_randn(SHAPE(24, 32)), zt_randn(SHAPE(24))};
    zl_tensor *ah[3] = {zt_randn(SHAPE(2, 4, 70, 16)), zt_randn(SHAPE(2, 4, 70, 16)), zt_randn(SHAPE(2, 4, 70, 12))};
    zl_tensor *lg = zt_randn(SHAPE(4, 9, 24)), *ag = zt_randn(SHAPE(2, 4, 70, 12));
    for (int c = 0; c < 3; c++) {
        int att = c > 0;
        zl_tensor *y[2], *gr[2][3];
        run3(att ? attention3 : linear3, c == 2, att ? ah : lh, att ? ag : lg, y, gr);
        check_close_dev(y[0], y[1], 1e-5, names[att][0]);
        for (int i = 0; i < 3; i++) {
            /* The bias's gradient, a column sum, adds lanes of rows in double. */
            if (!att && i == 2) check_close_dev(gr[0][2], gr[1][2], 1e-5, "linear's gradient of the bias");
            else check_close_dev(gr[0][i], gr[1][i], 1e-5, names[att][i + 1]);
        }
        zl_tensor *objs[] = {y[0], y[1], gr[0][0], gr[0][1], gr[0][2], gr[1][0], gr[1][1], gr[1][2]};
        release_all(objs, 8);
    }
    zl_tensor *objs[] = {lh[0], lh[1], lh[2], ah[0], ah[1], ah[2], lg, ag};
    release_all(objs, 8);
}

/* cuBLASLt's plan for a shape refused (NOT_SUPPORTED, forced): the GEMM
 * runs on the fallback (cuBLASLt's own choice, no workspace) and gives the
 * CPU's result, in f32 and bf16, on aligned and odd shapes. */
TEST(a_refused_gemm_plan_falls_back)
{
    const int64_t shapes[2][3] = {{40, 48, 24}, {23, 17, 9}};   /* rows, in, out */
    for (int s = 0; s < 2; s++)
        for (int half = 0; half < 2; half++) {
            int64_t rows = shapes[s][0], in = shapes[s][1], out = shapes[s][2];
            zl_dtype dt = half ? ZL_DTYPE_BF16 : ZL_DTYPE_F32;
            zl_tensor *xr = zt_randn(SHAPE(rows, in)), *wr = zt_randn(SHAPE(out, in));
            zl_tensor *xh = zl_tensor_to(xr, dt), *wh = zl_tensor_to(wr, dt);
            zl_tensor *xd = on_gpu(xh), *wd = on_gpu(wh);
            zl_tensor *want = zl_linear(xh, wh, NULL);
            const zli_backend *cuda = zli_backend_of("test", ZL_DEVICE_CUDA);
            int64_t before = cuda->blas_fallbacks();
            cuda->blas_refuse_plans(true);
            zl_tensor *got = xd && wd ? zl_linear(xd, wd, NULL) : NULL;
            cuda->blas_refuse_plans(false);
            CHECK(got && cuda->blas_fallbacks() > before);
            if (got) check_close_dev(want, got, half ? 1e-2 : 1e-5, "a GEMM on the fallback");
            zl_tensor *objs[] = {got, want, wd, xd, wh, xh, wr, xr};
            release_all(objs, 8);
        }
}

/* linear with bf16 and f16 x and w: cuBLASLt multiplies them as they are
 * into f32 (tensor cores), against the CPU to their rounding, on aligned
 * shapes and on odd ones (leading dimensions not a multiple of 8). */
TEST(half_linear_matches_the_cpu)
{
    const zl_dtype dts[] = {ZL_DTYPE_BF16, ZL_DTYPE_F16};
    const int64_t shapes[2][3] = {{36, 32, 24}, {21, 13, 11}};   /* rows, in, out */
    for (int s = 0; s < 2; s++)
        for (int k = 0; k < 2; k++) {
            int64_t rows = shapes[s][0], in = shapes[s][1], out = shapes[s][2];
            zl_tensor *xr = zt_randn(SHAPE(rows, in)), *wr = zt_randn(SHAPE(out, in)), *b = zt_randn(SHAPE(out));
            zl_tensor *g = zt_randn(SHAPE(rows, out));
            zl_tensor *h[3] = {zl_tensor_to(xr, dts[k]), zl_tensor_to(wr, dts[k]), b};
            zl_tensor *y[2], *gr[2][3];
            run3(linear3, false, h, g, y, gr);
            CHECK(zl_tensor_dtype(y[0]) == dts[k] && zl_tensor_dtype(y[1]) == dts[k]);
            check_close_dev(y[0], y[1], 1e-2, "half linear");
            check_close_dev(gr[0][0], gr[1][0], 1e-2, "half linear's gradient of x");
            check_close_dev(gr[0][1], gr[1][1], 1e-2, "half linear's gradient of w");
            check_close_dev(gr[0][2], gr[1][2], 1e-5, "half linear's gradient of the bias");
            zl_tensor *objs[] = {y[0], y[1], gr[0][0], gr[0][1], gr[0][2], gr[1][0], gr[1][1], gr[1][2],
                                 h[0], h[1], g, b, wr, xr};
            release_all(objs, 14);
        }
}

/* attention with bf16 and f16 q, k and v: all six products on tensor cores
 * (P, g and dS rounded to the inputs' dtype), the softmax and its backward
 * in f32, against the CPU's f32 computation to their rounding; causal rows
 * longer than a warp, and an odd head width. */
TEST(half_attention_matches_the_cpu)
{
    const zl_dtype dts[] = {ZL_DTYPE_BF16, ZL_DTYPE_F16};
    const int64_t shapes[2][3] = {{70, 16, 12}, {37, 13, 11}};   /* T, head width of q/k, of v */
    for (int s = 0; s < 2; s++)
        for (int k = 0; k < 2; k++) {
            int64_t t = shapes[s][0], d = shapes[s][1], dv = shapes[s][2];
            zl_tensor *r[3] = {zt_randn(SHAPE(2, 3, t, d)), zt_randn(SHAPE(2, 3, t, d)), zt_randn(SHAPE(2, 3, t, dv))};
            zl_tensor *g = zt_randn(SHAPE(2, 3, t, dv)), *h[3], *y[2], *gr[2][3];
            for (int i = 0; i < 3; i++) h[i] = zl_tensor_to(r[i], dts[k]);
            run3(attention3, s == 0, h, g, y, gr);
            CHECK(zl_tensor_dtype(y[1]) == dts[k]);
            check_close_dev(y[0], y[1], 2e-2, "half attention");
            check_close_dev(gr[0][0], gr[1][0], 2e-2, "half attention's gradient of q");
            check_close_dev(gr[0][1], gr[1][1], 2e-2, "half attention's gradient of k");
            check_close_dev(gr[0][2], gr[1][2], 2e-2, "half attention's gradient of v");
            zl_tensor *objs[] = {y[0], y[1], gr[0][0], gr[0][1], gr[0][2], gr[1][0], gr[1][1], gr[1][2],
                                 h[0], h[1], h[2], g, r[0], r[1], r[2]};
            release_all(objs, 15);
        }
}

/* Attention at the flash kernels' widths (64 and 128, bf16 and f16; grouped
 * queries, causal over key tiles' edges) against the CPU, and its
 * gradients the same bits on a second run: no atomics. */
TEST(flash_attention_matches_the_cpu)
{
    const zl_dtype dts[] = {ZL_DTYPE_BF16, ZL_DTYPE_F16};
    for (int w = 0; w < 2; w++)
        for (int k = 0; k < 2; k++) {
            int64_t d = w ? 128 : 64, t = 130;
            zl_tensor *r[3] = {zt_randn(SHAPE(2, 4, t, d)), zt_randn(SHAPE(2, 2, t, d)), zt_randn(SHAPE(2, 2, t, d))};
            zl_tensor *g = zt_randn(SHAPE(2, 4, t, d)), *h[3], *y[2], *gr[2][3], *y2[2], *gr2[2][3];
            for (int i = 0; i < 3; i++) h[i] = zl_tensor_to(r[i], dts[k]);
            run3(attention3, true, h, g, y, gr);
            run3(attention3, true, h, g, y2, gr2);
            CHECK(zl_tensor_dtype(y[1]) == dts[k]);
            check_close_dev(y[0], y[1], 2e-2, "flash attention");
            for (int i = 0; i < 3; i++) {
                check_close_dev(gr[0][i], gr[1][i], 3e-2, "flash attention's gradient");
                zl_tensor *a = zl_tensor_to_device(gr[1][i], ZL_DEVICE_CPU, 0);
                zl_tensor *b = zl_tensor_to_device(gr2[1][i], ZL_DEVICE_CPU, 0);
                CHECK(a && b && !memcmp(zl_tensor_data(a), zl_tensor_data(b), (size_t)zl_tensor_numel(a) * 4));
                zl_tensor_release(a);
                zl_tensor_release(b);
            }
            zl_tensor *objs[] = {y[0], y[1], gr[0][0], gr[0][1], gr[0][2], gr[1][0], gr[1][1], gr[1][2],
                                 y2[0], y2[1], gr2[0][0], gr2[0][1], gr2[0][2], gr2[1][0], gr2[1][1], gr2[1][2],
                                 h[0], h[1], h[2], g, r[0], r[1], r[2]};
            release_all(objs, 23);
        }
}

/* An embedding index, a cross-entropy target and a gather index out of
 * range are checked in the kernels: the ops return, and the next copy to
 * the host fails with each op's message, once. */
TEST(bad_indices_are_reported_at_the_next_copy)
{
    zl_tensor *wh = zt_randn(SHAPE(10, 8)), *w = on_gpu(wh);
    zl_tensor *ih = zl_tensor_from_data(ZL_DTYPE_I64, 1, (int64_t[]){2}, (int64_t[]){2, 70000}), *idx = on_gpu(ih);
    zl_tensor *y = zl_embedding(w, idx);
    CHECK(y != NULL);
    CHECK_ERR(zl_tensor_to_device(y, ZL_DEVICE_CPU, 0), "embedding: index 70000 at position 1 is out of range for "
              "a weight of 10 rows (expected 0..9; found on cuda:0 after the op was queued)");
    zl_tensor *yh = zl_tensor_to_device(y, ZL_DEVICE_CPU, 0);
    CHECK(yh && zl_tensor_get(yh, 8) == 0.0 && zl_tensor_get(yh, 0) == zl_tensor_get(wh, 16));
    zl_tensor *xh = zt_randn(SHAPE(3, 10)), *x = on_gpu(xh);
    zl_tensor *th = zl_tensor_from_data(ZL_DTYPE_I64, 1, (int64_t[]){3}, (int64_t[]){1, 12, 3}), *t = on_gpu(th);
    zl_tensor *l = zl_cross_entropy(x, t, -100, ZL_REDUCE_MEAN);
    CHECK(l != NULL);
    CHECK_ERR(zl_tensor_to_device(l, ZL_DEVICE_CPU, 0), "cross_entropy: target 12 at position 1 is out of range");
    zl_tensor *lh = zl_tensor_to_device(l, ZL_DEVICE_CPU, 0);
    CHECK(lh && isfinite(zl_tensor_get(lh, 0)));
    zl_tensor *gi = zl_tensor_from_data(ZL_DTYPE_I64, 2, (int64_t[]){3, 1}, (int64_t[]){0, 10, 9}), *dgi = on_gpu(gi);
    zl_tensor *picked = zl_gather(x, 1, dgi);
    CHECK(picked != NULL);
    CHECK_ERR(zl_tensor_to_device(picked, ZL_DEVICE_CPU, 0), "gather: index 10 at position 1 is out of range");
    zl_tensor *objs[] = {picked, dgi, gi, lh, l, t, th, x, xh, yh, y, idx, ih, w, wh};
    release_all(objs, 15);
}

static zl_tensor *matmul3(zl_tensor *a, zl_tensor *b, zl_tensor *unused, bool flag)
{
    (void)unused;
    (void)flag;
    return zl_matmul(a, b);
}

/* matmul with bf16 and f16 operands on the GPU (the batch in one cuBLASLt
 * call, tensor cores) against the CPU, forward and both gradients, to their
 * rounding. */
TEST(half_batched_matmul_matches_the_cpu)
{
    const zl_dtype dts[] = {ZL_DTYPE_BF16, ZL_DTYPE_F16};
    for (int k = 0; k < 2; k++) {
        zl_tensor *ar = zt_randn(SHAPE(3, 20, 16)), *br = zt_randn(SHAPE(3, 16, 24)), *g = zt_randn(SHAPE(3, 20, 24));
        zl_tensor *h[3] = {zl_tensor_to(ar, dts[k]), zl_tensor_to(br, dts[k]), NULL};
        zl_tensor *y[2], *gr[2][3];
        run3(matmul3, false, h, g, y, gr);
        check_close_dev(y[0], y[1], 1e-2, "half matmul");
        check_close_dev(gr[0][0], gr[1][0], 1e-2, "half matmul's gradient of a");
        check_close_dev(gr[0][1], gr[1][1], 1e-2, "half matmul's gradient of b");
        zl_tensor *objs[] = {y[0], y[1], gr[0][0], gr[0][1], gr[1][0], gr[1][1], h[0], h[1], g, br, ar};
        release_all(objs, 11);
    }
}

/* dropout on the GPU keeps the CPU's mask for the same generator state, and
 * uniform_ fills a GPU tensor with the CPU's bits; normal_ goes through the
 * GPU's logf and cosf, a few ulp from the CPU's. */
TEST(generator_on_the_gpu_draws_the_cpus_numbers)
{
    zl_tensor *xh = zt_randn(SHAPE(300, 77)), *gh = zt_randn(SHAPE(300, 77));
    zl_tensor *y[2], *gx[2];
    for (int dev = 0; dev < 2; dev++) {
        zl_generator *gen = zl_generator_new(2024);
        zl_tensor *x = leaf(xh, dev), *g = dev ? on_gpu(gh) : zl_tensor_retain(gh);
        y[dev] = zl_dropout(x, 0.2, true, gen);
        CHECK(y[dev] && zl_backward(y[dev], g, false) == ZL_OK);
        gx[dev] = zl_tensor_retain(zl_tensor_grad(x));
        CHECK(zl_generator_get_offset(gen) == 300 * 77);
        zl_generator_free(gen);
        zl_tensor_release(g);
        zl_tensor_release(x);
    }
    check_bits_dev(y[0], y[1], "dropout");
    check_bits_dev(gx[0], gx[1], "dropout's gradient");
    zl_tensor *objs[] = {y[0], y[1], gx[0], gx[1], gh, xh};
    release_all(objs, 6);
    const zl_dtype dts[] = {ZL_DTYPE_F32, ZL_DTYPE_BF16};
    for (int k = 0; k < 2; k++) {
        zl_tensor *h = zl_tensor_new(dts[k], SHAPE(1000, 33), ZL_MEM_OTHER);
        zl_tensor *d = zl_tensor_new_on(dts[k], SHAPE(1000, 33), ZL_MEM_OTHER, ZL_DEVICE_CUDA, 0);
        zl_generator *a = zl_generator_new(9), *b = zl_generator_new(9);
        CHECK(zl_tensor_uniform_(h, -1.0, 2.0, a) == ZL_OK && zl_tensor_uniform_(d, -1.0, 2.0, b) == ZL_OK);
        check_bits_dev(h, d, "uniform_");
        CHECK(zl_tensor_normal_(h, 0.0, 1.0, a) == ZL_OK && zl_tensor_normal_(d, 0.0, 1.0, b) == ZL_OK);
        check_close_dev(h, d, dts[k] == ZL_DTYPE_F32 ? 1e-5 : 1e-2, "normal_");
        CHECK(zl_generator_get_offset(a) == zl_generator_get_offset(b));
        zl_generator_free(b);
        zl_generator_free(a);
        zl_tensor_release(d);
        zl_tensor_release(h);
    }
}

typedef zl_tensor *(*reduce_fn)(zl_tensor *x, int dim, bool keepdim);

/* sum, mean, max, argmax over each dim (a long last one: max split over a
 * block) and over all, with ties and a NaN: the CPU's bits, both ways. */
TEST(reductions_match_the_cpu_bit_for_bit)
{
    zl_tensor *r = zt_randn(SHAPE(6, 50, 300));
    zl_tensor *xh = zl_tensor_new(ZL_DTYPE_F32, SHAPE(6, 50, 300), ZL_MEM_OTHER);
    float *p = zl_tensor_data(xh);
    for (int64_t i = 0; i < 90000; i++) p[i] = floorf((float)zl_tensor_get(r, i) * 3.0f) * 0.5f;
    p[777] = NAN;
    reduce_fn fs[] = {zl_sum, zl_mean, zl_max, zl_argmax};
    const int dims[] = {0, 1, 2, ZL_ALL_DIMS};
    for (int k = 0; k < 4; k++)
        for (int di = 0; di < 4; di++) {
            zl_tensor *y[2], *gx[2] = {0}, *gh = NULL;
            for (int dev = 0; dev < 2; dev++) {
                zl_tensor *x = leaf(xh, dev);
                y[dev] = fs[k](x, dims[di], false);
                CHECK(y[dev] && zl_tensor_device(y[dev]) == (dev ? ZL_DEVICE_CUDA : ZL_DEVICE_CPU));
                if (y[dev] && k < 3) {
                    if (!gh) gh = zt_randn(zl_tensor_ndim(y[dev]), zl_tensor_shape(y[dev]));
                    zl_tensor *g = dev ? on_gpu(gh) : zl_tensor_retain(gh);
                    CHECK(zl_backward(y[dev], g, false) == ZL_OK);
                    gx[dev] = zl_tensor_retain(zl_tensor_grad(x));
                    zl_tensor_release(g);
                }
                zl_tensor_release(x);
            }
            char what[48];
            snprintf(what, sizeof what, "reduction %d over dim %d", k, dims[di]);
            if (y[0] && y[1]) check_bits_dev(y[0], y[1], what);
            if (gx[0] && gx[1]) check_bits_dev(gx[0], gx[1], what);
            zl_tensor *objs[] = {y[0], y[1], gx[0], gx[1], gh};
            release_all(objs, 5);
        }
    zl_tensor_release(xh);
    zl_tensor_release(r);
}

/* where with a condition compared on the GPU, masked_fill with a causal
 * mask as GPT builds it (arange compared on the host, moved over): bits and
 * gradients. */
TEST(where_and_masked_fill_match_the_cpu)
{
    zl_tensor *ah = zt_randn(SHAPE(8, 8)), *bh = zt_randn(SHAPE(8)), *gh = zt_randn(SHAPE(8, 8));
    zl_tensor *ar = zl_tensor_arange(ZL_DTYPE_I64, 8);
    zl_tensor *row = zl_tensor_reshape(ar, 2, (int64_t[]){1, 8}), *col = zl_tensor_reshape(ar, 2, (int64_t[]){8, 1});
    zl_tensor *future = zl_gt(row, col);
    for (int c = 0; c < 2; c++) {
        zl_tensor *y[2], *ga[2], *gb[2];
        for (int dev = 0; dev < 2; dev++) {
            zl_tensor *a = leaf(ah, dev), *b = leaf(bh, dev), *g = dev ? on_gpu(gh) : zl_tensor_retain(gh);
            zl_tensor *cond = c == 0 ? zl_gt(a, b) : dev ? on_gpu(future) : zl_tensor_retain(future);
            y[dev] = c == 0 ? zl_where(cond, a, b) : zl_masked_fill(a, cond, -INFINITY);
            CHECK(y[dev] && zl_tensor_device(y[dev]) == (dev ? ZL_DEVICE_CUDA : ZL_DEVICE_CPU));
            CHECK(y[dev] && zl_backward(y[dev], g, false) == ZL_OK);
            ga[dev] = zl_tensor_retain(zl_tensor_grad(a));
            gb[dev] = zl_tensor_retain(zl_tensor_grad(b));
            zl_tensor *objs[] = {cond, g, b, a};
            release_all(objs, 4);
        }
        check_bits_dev(y[0], y[1], c ? "masked_fill" : "where");
        if (ga[0] && ga[1]) check_bits_dev(ga[0], ga[1], "the gradient of a");
        if (gb[0] && gb[1]) check_close_dev(gb[0], gb[1], 1e-5, "where's gradient of b (a column sum)");
        CHECK((gb[0] != NULL) == (gb[1] != NULL));
        zl_tensor *objs[] = {y[0], y[1], ga[0], ga[1], gb[0], gb[1]};
        release_all(objs, 6);
    }
    zl_tensor *objs[] = {future, col, row, ar, gh, bh, ah};
    release_all(objs, 7);
}

/* f(inputs) and backward (seed g, or none), on the CPU and on the GPU: the
 * outputs and every float input's gradient within tol. */
typedef zl_tensor *(*opn)(zl_tensor *const *in, int n);

static void check_op_on_gpu(const char *what, opn f, zl_tensor *const *hin, int n, zl_tensor *gh, double tol)
{
    zl_tensor *out[2] = {0}, *grads[2][4] = {{0}};
    for (int dev = 0; dev < 2; dev++) {
        zl_tensor *in[4];
        for (int i = 0; i < n; i++) {
            in[i] = dev ? zl_tensor_to_device(hin[i], ZL_DEVICE_CUDA, 0) : zl_tensor_clone(hin[i]);
            zl_tensor_set_requires_grad(in[i], zl_dtype_traits_of(zl_tensor_dtype(in[i]))->is_float);
        }
        out[dev] = f(in, n);
        CHECK(out[dev] && zl_tensor_device(out[dev]) == (dev ? ZL_DEVICE_CUDA : ZL_DEVICE_CPU));
        if (out[dev] && gh) {
            zl_tensor *g = dev ? zl_tensor_to_device(gh, ZL_DEVICE_CUDA, 0) : zl_tensor_retain(gh);
            CHECK(zl_backward(out[dev], g, false) == ZL_OK);
            zl_tensor_release(g);
            for (int i = 0; i < n; i++) grads[dev][i] = zl_tensor_retain(zl_tensor_grad(in[i]));
        }
        for (int i = 0; i < n; i++) zl_tensor_release(in[i]);
    }
    char w[96];
    if (out[0] && out[1]) check_close_dev(out[0], out[1], tol, what);
    for (int i = 0; gh && i < n; i++) {
        snprintf(w, sizeof w, "%s: gradient of input %d", what, i);
        CHECK(!grads[0][i] == !grads[1][i]);
        if (grads[0][i] && grads[1][i]) check_close_dev(grads[0][i], grads[1][i], tol, w);
        zl_tensor_release(grads[0][i]);
        zl_tensor_release(grads[1][i]);
    }
    zl_tensor_release(out[0]);
    zl_tensor_release(out[1]);
}

static zl_tensor *cat1(zl_tensor *const *in, int n) { return zl_cat(in, n, 1); }
static zl_tensor *stack0(zl_tensor *const *in, int n) { return zl_stack(in, n, 0); }

static zl_tensor *select_mid(zl_tensor *const *in, int n)
{
    (void)n;
    int64_t m = 6;
    zl_tensor *ih = zl_tensor_from_data(ZL_DTYPE_I64, 1, &m, (int64_t[]){4, 0, 4, 2, 4, 1});
    zl_tensor *i = zl_tensor_to_device(ih, zl_tensor_device(in[0]), 0);
    zl_tensor *y = zl_index_select(in[0], 1, i);
    zl_tensor_release(i);
    zl_tensor_release(ih);
    return y;
}

/* Copies and sums in index order: the GPU gives the CPU's bits. */
TEST(structure_ops_match_the_cpu)
{
    zl_tensor *a = zt_randn(SHAPE(3, 4)), *b = zt_randn(SHAPE(3, 2)), *a2 = zt_randn(SHAPE(3, 4));
    zl_tensor *x = zt_randn(SHAPE(3, 5, 40));
    zl_tensor *g36 = zt_randn(SHAPE(3, 6)), *g234 = zt_randn(SHAPE(2, 3, 4)), *g3640 = zt_randn(SHAPE(3, 6, 40));
    check_op_on_gpu("cat", cat1, (zl_tensor *[]){a, b}, 2, g36, 0);
    check_op_on_gpu("stack", stack0, (zl_tensor *[]){a, a2}, 2, g234, 0);
    check_op_on_gpu("index_select", select_mid, &x, 1, g3640, 0);
    zl_tensor *objs[] = {g3640, g234, g36, x, a2, b, a};
    for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
}

static zl_tensor *mse_mean(zl_tensor *const *in, int n) { (void)n; return zl_mse_loss(in[0], in[1], ZL_REDUCE_MEAN); }
static zl_tensor *mse_none(zl_tensor *const *in, int n) { (void)n; return zl_mse_loss(in[0], in[1], ZL_REDUCE_NONE); }

/* Exactly rounded elementwise math and the sum on the host: the CPU's bits. */
TEST(mse_loss_matches_the_cpu)
{
    zl_tensor *x = zt_randn(SHAPE(300, 70)), *t = zt_randn(SHAPE(300, 70)), *g = zt_randn(SHAPE(300, 70));
    zl_tensor *g0 = zl_tensor_scalar(ZL_DTYPE_F32, 0.5);
    check_op_on_gpu("mse_loss mean", mse_mean, (zl_tensor *[]){x, t}, 2, g0, 0);
    check_op_on_gpu("mse_loss none", mse_none, (zl_tensor *[]){x, t}, 2, g, 0);
    zl_tensor *objs[] = {g0, g, t, x};
    for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
}

static zl_tensor *pool(zl_tensor *const *in, int n) { (void)n; return zl_max_pool2d(in[0], 3, 3, 2, 2, 1, 1); }
static zl_tensor *conv(zl_tensor *const *in, int n) { (void)n; return zl_conv2d(in[0], in[1], in[2], 2, 1, 1, 2); }
static zl_tensor *conv1x1(zl_tensor *const *in, int n) { (void)n; return zl_conv2d(in[0], in[1], NULL, 1, 1, 0, 0); }

/* max_pool2d (comparisons and sums in the CPU's order: its bits) and conv2d
 * (cuBLASLt's strict-f32 GEMM around im2col/col2im, sums of up to 648 terms: to 1e-4). */
TEST(pool_and_conv_match_the_cpu)
{
    zl_tensor *x = zt_randn(SHAPE(4, 8, 17, 15)), *gp = zt_randn(SHAPE(4, 8, 9, 8));
    check_op_on_gpu("max_pool2d", pool, &x, 1, gp, 0);
    zl_tensor *w = zt_randn(SHAPE(6, 8, 3, 2)), *b = zt_randn(SHAPE(6)), *w1 = zt_randn(SHAPE(6, 8, 1, 1));
    zl_tensor *gc = zt_randn(SHAPE(4, 6, 9, 18)), *gc1 = zt_randn(SHAPE(4, 6, 17, 15));
    check_op_on_gpu("conv2d", conv, (zl_tensor *[]){x, w, b}, 3, gc, 1e-4);
    check_op_on_gpu("conv2d 1x1", conv1x1, (zl_tensor *[]){x, w1}, 2, gc1, 1e-4);
    zl_tensor *objs[] = {gc1, gc, w1, b, w, gp, x};
    for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
}

static zl_tensor *int_add(zl_tensor *const *in, int n) { (void)n; return zl_add(in[0], in[1]); }
static zl_tensor *int_div(zl_tensor *const *in, int n) { (void)n; return zl_div(in[0], in[1]); }
static zl_tensor *int_lt(zl_tensor *const *in, int n) { (void)n; return zl_lt(in[0], in[1]); }

/* Integer operands in double on the GPU: exact, the CPU's bytes. */
TEST(integer_binary_ops_match_the_cpu)
{
    zl_tensor *fa = zt_randn(SHAPE(40, 30)), *fb = zt_randn(SHAPE(30));
    zl_tensor *sa = zl_affine(fa, 1e9, 0.0), *sb = zl_affine(fb, 100.0, 0.0);
    zl_tensor *a = zl_tensor_to(sa, ZL_DTYPE_I64), *b = zl_tensor_to(sb, ZL_DTYPE_I32);
    check_op_on_gpu("i64 + i32", int_add, (zl_tensor *[]){a, b}, 2, NULL, 0);
    check_op_on_gpu("i64 / i32", int_div, (zl_tensor *[]){a, b}, 2, NULL, 0);
    check_op_on_gpu("i64 < i32", int_lt, (zl_tensor *[]){a, b}, 2, NULL, 0);
    zl_tensor *objs[] = {b, a, sb, sa, fb, fa};
    for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
}

static zl_tensor *softmax_first(zl_tensor *const *in, int n) { (void)n; return zl_softmax(in[0], 0); }
static zl_tensor *log_softmax_mid(zl_tensor *const *in, int n) { (void)n; return zl_log_softmax(in[0], 1); }

/* Rows whose elements lie apart, one GPU thread each: libm's expf and CUDA's
 * differ by an ulp, so to 1e-5. */
TEST(softmax_over_any_dim_matches_the_cpu)
{
    zl_tensor *x = zt_randn(SHAPE(7, 300, 33)), *g = zt_randn(SHAPE(7, 300, 33));
    check_op_on_gpu("softmax dim 0", softmax_first, &x, 1, g, 1e-5);
    check_op_on_gpu("log_softmax dim 1", log_softmax_mid, &x, 1, g, 1e-5);
    zl_tensor_release(g);
    zl_tensor_release(x);
}

TEST(host_ops_refuse_device_tensors)
{
    zl_tensor *d = zl_tensor_zeros_on(ZL_DTYPE_F32, SHAPE(4), ZL_DEVICE_CUDA, 0);
    zl_tensor *h = zt_randn(SHAPE(4));
    CHECK_ERR(zl_tensor_set(d, 0, 1.0), "set: the tensor is on cuda:0");
    CHECK_ERR(zl_tensor_add_(d, h, 1.0), "add_: one tensor is on cuda:0 and the other on cpu");
    CHECK(isnan(zl_tensor_get(d, 0)));
    CHECK_ERR(zl_add(h, d), "add: one tensor is on cuda:0 and the other on cpu");
    zl_tensor *v = zl_tensor_reshape(d, 2, (int64_t[]){2, 2});   /* a view: the header only */
    CHECK(v && zl_tensor_device(v) == ZL_DEVICE_CUDA && zl_tensor_shares_storage(v, d));
    zl_tensor_release(v);
    CHECK_ERR(zl_tensor_to_device(d, ZL_DEVICE_CUDA, 4096), "cuda:4096: no such device");
    zl_tensor_release(h);
    zl_tensor_release(d);
}

/* The copy stream (cuda/stream.c) against kernels on the default stream,
 * with enough work queued ahead that a missing order shows: a copy to host
 * memory after a fill reads the fill's values, and an add ordered after a
 * copy to the device (the host not waiting) reads the copied values. */
TEST(copy_stream_orders_against_the_compute)
{
    int64_t n = 1 << 22;
    zl_tensor *d = zl_tensor_zeros_on(ZL_DTYPE_F32, 1, &n, ZL_DEVICE_CUDA, 0);
    const zli_device_ops *dev = d ? d->storage->dev : NULL;
    CHECK(dev && dev->streams && dev->alloc_pinned);
    if (!dev || !dev->streams) {
        zl_tensor_release(d);
        return;
    }
    const zli_copy_stream *cs = dev->streams;
    zl_tensor *pin = dev->alloc_pinned(ZL_DTYPE_F32, 1, &n, ZL_MEM_OTHER, 0);
    zl_tensor *one = zl_tensor_zeros_on(ZL_DTYPE_F32, 1, &n, ZL_DEVICE_CUDA, 0);
    CHECK(pin && one && zl_tensor_fill(one, 1.0) == ZL_OK);
    float *h = zl_tensor_data(pin);
    size_t bytes = (size_t)n * 4;
    for (int r = 1; r <= 4; r++) {
        for (int k = 0; k < 8; k++) CHECK(zl_tensor_add_(d, one, 1.0) == ZL_OK);   /* d = 8r, queued */
        void *ev = NULL, *done = NULL;
        CHECK(cs->mark(0, &ev) == ZL_OK);
        CHECK(cs->start(0, r % 2 ? ev : NULL, h, zl_tensor_data(d), bytes, true, &done) == ZL_OK);
        CHECK(cs->wait(0, done, true) == ZL_OK);
        cs->drop(done);
        cs->drop(ev);
        CHECK(h[0] == 8.0f * (float)r && h[n - 1] == 8.0f * (float)r);
    }
    for (int64_t i = 0; i < n; i++) h[i] = 7.0f;
    void *done = NULL;
    CHECK(cs->start(0, NULL, zl_tensor_data(d), h, bytes, false, &done) == ZL_OK);
    CHECK(cs->wait(0, done, false) == ZL_OK);
    CHECK(zl_tensor_add_(d, one, 1.0) == ZL_OK);
    CHECK(cs->wait(0, done, true) == ZL_OK);   /* the host's buffer is free again */
    cs->drop(done);
    zl_tensor *back = zl_tensor_to_device(d, ZL_DEVICE_CPU, 0);
    CHECK(back && zl_tensor_get(back, 0) == 8.0 && zl_tensor_get(back, n - 1) == 8.0);
    zl_tensor *objs[] = {back, one, pin, d};
    for (size_t i = 0; i < sizeof objs / sizeof *objs; i++) zl_tensor_release(objs[i]);
}
