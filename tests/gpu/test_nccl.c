/* The "nccl" communicator at one rank on cuda:0: every collective and
 * reduction on f32/bf16/f16 device tensors against the values put in,
 * blocking and async, the device and argument checks, and a timeout. Exits 77
 * (CTest's skip) with the reason when there is no CUDA device or no NCCL. */
#include <stdlib.h>
#include "harness.h"

__attribute__((constructor(200))) static void skip_without_gpu(void)
{
    /* One rank of its own, whatever launched the test. */
    const char *vars[] = {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                          "RANK", "WORLD_SIZE", "LOCAL_RANK", "ZLUA_NCCL_ID_FILE", "ZLUA_COMM_TIMEOUT"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) unsetenv(vars[i]);
    if (zl_device_count(ZL_DEVICE_CUDA) > 0) {
        zl_comm *c = NULL;
        if (zl_comm_open("nccl", &c) == ZL_OK || !strstr(zl_last_error(), "built without NCCL")) {
            zl_comm_close(c);
            return;
        }
    }
    printf("skipped: %s\n", zl_last_error());
    exit(77);
}

static const zl_dtype float_dtypes[] = {ZL_DTYPE_F32, ZL_DTYPE_BF16, ZL_DTYPE_F16};
static const zl_comm_op ops[] = {ZL_COMM_SUM, ZL_COMM_MAX, ZL_COMM_MIN, ZL_COMM_AVG};

static zl_comm *open_nccl(void)
{
    zl_comm *c = NULL;
    CHECK(zl_comm_open("nccl", &c) == ZL_OK);
    return c;
}

/* i * 0.25 - 3 (exact in every float dtype) on the host, in dtype dt. */
static zl_tensor *ramp(zl_dtype dt, int64_t n)
{
    zl_tensor *t = zl_tensor_new(dt, 1, &n, ZL_MEM_OTHER);
    for (int64_t i = 0; t && i < n; i++) zl_tensor_set(t, i, (double)i * 0.25 - 3.0);
    return t;
}

static zl_tensor *on_gpu(zl_tensor *h)
{
    zl_tensor *d = zl_tensor_to_device(h, ZL_DEVICE_CUDA, 0);
    CHECK(d != NULL);
    return d;
}

/* The device tensor d, brought back, equals the host tensor want element for element. */
static void check_same(zl_tensor *d, const zl_tensor *want, const char *what)
{
    zl_tensor *h = zl_tensor_to_device(d, ZL_DEVICE_CPU, 0);
    CHECK(h != NULL);
    if (!h) return;
    for (int64_t i = 0; i < zl_tensor_numel(want); i++)
        if (zl_tensor_get(h, i) != zl_tensor_get(want, i)) {
            zt_fail(__FILE__, __LINE__, "%s %s: element %lld = %g, expected %g", what,
                    zl_dtype_name(zl_tensor_dtype(want)), (long long)i, zl_tensor_get(h, i), zl_tensor_get(want, i));
            break;
        }
    zl_tensor_release(h);
}

TEST(open_and_query)
{
    zl_comm *c = open_nccl();
    CHECK(zl_comm_rank(c) == 0 && zl_comm_size(c) == 1 && zl_comm_local_rank(c) == 0);
    CHECK(strcmp(zl_comm_backend(c), "nccl") == 0);
    zl_comm_close(c);
}

TEST(allreduce_every_op_and_dtype)
{
    zl_comm *c = open_nccl();
    for (size_t k = 0; k < 3; k++)
        for (size_t o = 0; o < 4; o++) {
            zl_tensor *h = ramp(float_dtypes[k], 1000);
            zl_tensor *d = on_gpu(h);
            CHECK(zl_comm_allreduce(c, d, ops[o]) == ZL_OK);
            check_same(d, h, "allreduce");
            zl_tensor_release(d);
            zl_tensor_release(h);
        }
    zl_comm_close(c);
}

TEST(reduce_scatter_allgather_broadcast)
{
    zl_comm *c = open_nccl();
    for (size_t k = 0; k < 3; k++) {
        zl_tensor *h = ramp(float_dtypes[k], 517);
        zl_tensor *in = on_gpu(h);
        for (size_t o = 0; o < 4; o++) {
            zl_tensor *out = zl_tensor_zeros_on(float_dtypes[k], SHAPE(517), ZL_DEVICE_CUDA, 0);
            CHECK(zl_comm_reduce_scatter(c, in, out, ops[o]) == ZL_OK);
            check_same(out, h, "reduce_scatter");
            zl_tensor_release(out);
        }
        zl_tensor *out = zl_tensor_zeros_on(float_dtypes[k], SHAPE(517), ZL_DEVICE_CUDA, 0);
        CHECK(zl_comm_allgather(c, in, out) == ZL_OK);
        check_same(out, h, "allgather");
        CHECK(zl_comm_broadcast(c, in, 0) == ZL_OK);
        check_same(in, h, "broadcast");
        zl_tensor_release(out);
        zl_tensor_release(in);
        zl_tensor_release(h);
    }
    /* allgather and broadcast move any dtype. */
    zl_tensor *f = ramp(ZL_DTYPE_F32, 33);
    zl_tensor *h = zl_tensor_to(f, ZL_DTYPE_I64);
    zl_tensor_release(f);
    zl_tensor *in = on_gpu(h);
    zl_tensor *out = zl_tensor_zeros_on(ZL_DTYPE_I64, SHAPE(33), ZL_DEVICE_CUDA, 0);
    CHECK(zl_comm_allgather(c, in, out) == ZL_OK);
    check_same(out, h, "allgather");
    CHECK(zl_comm_barrier(c) == ZL_OK);
    zl_tensor *empty = zl_tensor_zeros_on(ZL_DTYPE_BF16, SHAPE(0), ZL_DEVICE_CUDA, 0);
    CHECK(zl_comm_allreduce(c, empty, ZL_COMM_SUM) == ZL_OK);
    zl_tensor_release(empty);
    zl_tensor_release(out);
    zl_tensor_release(in);
    zl_tensor_release(h);
    zl_comm_close(c);
}

TEST(async_requests_waited_in_any_order)
{
    zl_comm *c = open_nccl();
    zl_tensor *h = ramp(ZL_DTYPE_BF16, 1 << 20);
    zl_tensor *a = on_gpu(h), *b = on_gpu(h);
    zl_tensor *g = zl_tensor_zeros_on(ZL_DTYPE_BF16, SHAPE(1 << 20), ZL_DEVICE_CUDA, 0);
    zl_comm_request *ra = zl_comm_allreduce_async(c, a, ZL_COMM_AVG);
    zl_comm_request *rb = zl_comm_allreduce_async(c, b, ZL_COMM_SUM);
    zl_comm_request *rg = zl_comm_allgather_async(c, a, g);
    zl_comm_request *rz = zl_comm_barrier_async(c);
    CHECK(ra && rb && rg && rz);
    /* Closing with requests live keeps the communicator until they are waited on. */
    zl_comm_close(c);
    CHECK(zl_comm_wait(rz) == ZL_OK);
    CHECK(zl_comm_wait(rg) == ZL_OK);
    CHECK(zl_comm_wait(rb) == ZL_OK);
    CHECK(zl_comm_wait(ra) == ZL_OK);
    check_same(a, h, "async allreduce");
    check_same(b, h, "async allreduce");
    check_same(g, h, "async allgather");
    zl_tensor_release(g);
    zl_tensor_release(b);
    zl_tensor_release(a);
    zl_tensor_release(h);
}

TEST(argument_errors)
{
    zl_comm *c = open_nccl();
    zl_tensor *h = ramp(ZL_DTYPE_F32, 12);
    zl_tensor *d = on_gpu(h);
    CHECK_ERR(zl_comm_allreduce(c, h, ZL_COMM_SUM),
              "allreduce on rank 0: tensor is on cpu, but backend nccl takes tensors on cuda:0");
    CHECK_ERR(zl_comm_allgather(c, d, h), "allgather on rank 0: out is on cpu, but backend nccl takes tensors on cuda:0");
    zl_tensor *m = zl_tensor_reshape(d, SHAPE(3, 4));
    zl_tensor *t = zl_tensor_transpose(m, 0, 1);
    CHECK_ERR(zl_comm_allreduce(c, t, ZL_COMM_SUM), "allreduce on rank 0: tensor [4, 3] is not contiguous");
    zl_tensor *i = zl_tensor_zeros_on(ZL_DTYPE_I32, SHAPE(12), ZL_DEVICE_CUDA, 0);
    CHECK_ERR(zl_comm_allreduce(c, i, ZL_COMM_SUM), "reductions take f32, f16 or bf16");
    CHECK_ERR(zl_comm_broadcast(c, d, 1), "broadcast on rank 0: root 1 out of range [0, 1)");
    if (zl_device_count(ZL_DEVICE_CUDA) > 1) {
        zl_tensor *d1 = zl_tensor_to_device(h, ZL_DEVICE_CUDA, 1);
        CHECK_ERR(zl_comm_allreduce(c, d1, ZL_COMM_SUM), "tensor is on cuda:1, but backend nccl takes tensors on cuda:0");
        zl_tensor_release(d1);
    }
    zl_tensor *objs[] = {i, t, m, d, h};
    for (size_t k = 0; k < sizeof objs / sizeof *objs; k++) zl_tensor_release(objs[k]);
    zl_comm_close(c);
}

/* A gigabyte gathered under a nanosecond's timeout is still on the device at
 * the first poll: the wait gives up naming it, the communicator is then
 * unusable, and closing lets the copy finish before freeing. */
TEST(timeout_makes_the_communicator_unusable)
{
    zl_comm *c = open_nccl();
    zl_tensor *in = zl_tensor_zeros_on(ZL_DTYPE_F32, SHAPE(256 << 20), ZL_DEVICE_CUDA, 0);
    zl_tensor *out = zl_tensor_zeros_on(ZL_DTYPE_F32, SHAPE(256 << 20), ZL_DEVICE_CUDA, 0);
    CHECK(zl_comm_set_timeout(c, 1e-9) == ZL_OK);
    CHECK_ERR(zl_comm_allgather(c, in, out), "allgather timed out after 1e-09 s on rank 0");
    CHECK_ERR(zl_comm_barrier(c), "barrier on rank 0: the communicator is unusable: allgather timed out");
    zl_tensor_release(out);
    zl_tensor_release(in);
    zl_comm_close(c);
}
