/* Two ranks of the "nccl" communicator, one GPU each (tests/gpu/test_nccl_2rank.sh
 * starts them, one test per run, named as the harness's filter): every
 * collective and reduction in f32/bf16/f16 against values computed here, async
 * requests, a rank that never joins; device_count tells the script whether to run. */
#include <stdlib.h>
#include <unistd.h>
#include "harness.h"

static const zl_dtype float_dtypes[] = {ZL_DTYPE_F32, ZL_DTYPE_BF16, ZL_DTYPE_F16};
static const zl_comm_op ops[] = {ZL_COMM_SUM, ZL_COMM_MAX, ZL_COMM_MIN, ZL_COMM_AVG};
static int g_rank, g_dev;

/* Rank r's element i: small multiples of 1/4, so sums, maxima, minima and the
 * average of two ranks are exact in every float dtype. */
static double value(int r, int64_t i) { return (double)(i % 64) * 0.25 - 4.0 + (double)r * 0.5 * (double)(i % 3 == 0 ? 1 : -1); }

static double reduced(zl_comm_op op, int64_t i)
{
    double a = value(0, i), b = value(1, i);
    switch (op) {
    case ZL_COMM_SUM: return a + b;
    case ZL_COMM_MAX: return a > b ? a : b;
    case ZL_COMM_MIN: return a < b ? a : b;
    case ZL_COMM_AVG: return (a + b) / 2;
    }
    return 0;
}

static zl_tensor *filled(zl_dtype dt, int64_t n, int r)
{
    zl_tensor *h = zl_tensor_new(dt, 1, &n, ZL_MEM_OTHER);
    for (int64_t i = 0; i < n; i++) zl_tensor_set(h, i, value(r, i));
    zl_tensor *d = zl_tensor_to_device(h, ZL_DEVICE_CUDA, g_dev);
    zl_tensor_release(h);
    CHECK(d != NULL);
    return d;
}

/* A host tensor to hold the expected values. */
static zl_tensor *expected(zl_dtype dt, int64_t n) { return zl_tensor_new(dt, 1, &n, ZL_MEM_OTHER); }

/* The device tensor d, brought back, equals want element for element; want is released. */
static void check_same(zl_tensor *d, zl_tensor *want, const char *what)
{
    zl_tensor *h = zl_tensor_to_device(d, ZL_DEVICE_CPU, 0);
    CHECK(h != NULL);
    for (int64_t i = 0; h && i < zl_tensor_numel(want); i++)
        if (zl_tensor_get(h, i) != zl_tensor_get(want, i)) {
            zt_fail(__FILE__, __LINE__, "rank %d %s %s: element %lld = %g, expected %g", g_rank, what,
                    zl_dtype_name(zl_tensor_dtype(want)), (long long)i, zl_tensor_get(h, i), zl_tensor_get(want, i));
            break;
        }
    zl_tensor_release(h);
    zl_tensor_release(want);
}

static zl_comm *open2(void)
{
    zl_comm *c = NULL;
    CHECK(zl_comm_open("nccl", &c) == ZL_OK);
    if (!c) return NULL;
    g_rank = zl_comm_rank(c);
    g_dev = zl_comm_local_rank(c);
    CHECK(zl_comm_size(c) == 2);
    return c;
}

/* Prints the visible devices, or why there are none, for the script. */
TEST(device_count)
{
    int n = zl_device_count(ZL_DEVICE_CUDA);
    printf("devices: %d%s%s\n", n, n ? "" : ": ", n ? "" : zl_last_error());
}

TEST(collectives)
{
    zl_comm *c = open2();
    if (!c) return;
    const int64_t n = 1000;
    for (size_t k = 0; k < 3; k++) {
        zl_dtype dt = float_dtypes[k];
        for (size_t o = 0; o < 4; o++) {
            zl_tensor *t = filled(dt, n, g_rank);
            CHECK(zl_comm_allreduce(c, t, ops[o]) == ZL_OK);
            zl_tensor *want = expected(dt, n);
            for (int64_t i = 0; i < n; i++) zl_tensor_set(want, i, reduced(ops[o], i));
            check_same(t, want, "allreduce");
            zl_tensor_release(t);
            zl_tensor *in = filled(dt, 2 * n, g_rank);
            zl_tensor *out = zl_tensor_zeros_on(dt, 1, &n, ZL_DEVICE_CUDA, g_dev);
            CHECK(zl_comm_reduce_scatter(c, in, out, ops[o]) == ZL_OK);
            want = expected(dt, n);
            for (int64_t i = 0; i < n; i++) zl_tensor_set(want, i, reduced(ops[o], g_rank * n + i));
            check_same(out, want, "reduce_scatter");
            zl_tensor_release(out);
            zl_tensor_release(in);
        }
        zl_tensor *in = filled(dt, n, g_rank);
        int64_t n2 = 2 * n;
        zl_tensor *out = zl_tensor_zeros_on(dt, 1, &n2, ZL_DEVICE_CUDA, g_dev);
        CHECK(zl_comm_allgather(c, in, out) == ZL_OK);
        zl_tensor *want = expected(dt, n2);
        for (int64_t i = 0; i < n2; i++) zl_tensor_set(want, i, value((int)(i / n), i % n));
        check_same(out, want, "allgather");
        CHECK(zl_comm_broadcast(c, in, 1) == ZL_OK);
        want = expected(dt, n);
        for (int64_t i = 0; i < n; i++) zl_tensor_set(want, i, value(1, i));
        check_same(in, want, "broadcast");
        zl_tensor_release(out);
        zl_tensor_release(in);
    }
    CHECK(zl_comm_barrier(c) == ZL_OK);
    /* Several in flight on the stream at once, waited on out of order. */
    zl_tensor *a = filled(ZL_DTYPE_BF16, 1 << 20, g_rank), *b = filled(ZL_DTYPE_F32, 1 << 20, g_rank);
    zl_comm_request *ra = zl_comm_allreduce_async(c, a, ZL_COMM_SUM);
    zl_comm_request *rb = zl_comm_allreduce_async(c, b, ZL_COMM_MAX);
    zl_comm_request *rz = zl_comm_barrier_async(c);
    CHECK(ra && rb && rz);
    CHECK(zl_comm_wait(rb) == ZL_OK);
    CHECK(zl_comm_wait(rz) == ZL_OK);
    CHECK(zl_comm_wait(ra) == ZL_OK);
    zl_tensor *wa = expected(ZL_DTYPE_BF16, 1 << 20), *wb = expected(ZL_DTYPE_F32, 1 << 20);
    for (int64_t i = 0; i < (1 << 20); i++) {
        zl_tensor_set(wa, i, reduced(ZL_COMM_SUM, i));
        zl_tensor_set(wb, i, reduced(ZL_COMM_MAX, i));
    }
    check_same(a, wa, "async allreduce");
    check_same(b, wb, "async allreduce");
    zl_tensor_release(b);
    zl_tensor_release(a);
    zl_comm_close(c);
}

/* Rank 1 never joins the second allreduce: rank 0 gives up after 2 s naming
 * it, and its close aborts NCCL instead of waiting. */
TEST(rank_never_joins)
{
    zl_comm *c = open2();
    if (!c) return;
    zl_tensor *t = filled(ZL_DTYPE_F32, 256, g_rank);
    CHECK(zl_comm_allreduce(c, t, ZL_COMM_SUM) == ZL_OK);
    CHECK(zl_comm_set_timeout(c, 2.0) == ZL_OK);
    if (g_rank == 0) {
        CHECK_ERR(zl_comm_allreduce(c, t, ZL_COMM_SUM), "allreduce timed out after 2 s on rank 0");
        printf("rank 0: %s\n", zl_last_error());
    } else {
        sleep(4);
    }
    zl_tensor_release(t);
    zl_comm_close(c);
}
