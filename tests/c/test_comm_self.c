/* The communicator's "self" backend (one rank): every collective in every float
 * dtype, blocking and async, against values computed here, and each bad argument
 * against its message. Multi-rank behaviour is in tests/dist/test_comm_mpi.c. */
#include <stdlib.h>
#include "harness.h"

static const zl_dtype float_dtypes[] = {ZL_DTYPE_F32, ZL_DTYPE_BF16, ZL_DTYPE_F16};

static zl_comm *open_self(void)
{
    zl_comm *c = NULL;
    CHECK(zl_comm_open("self", &c) == ZL_OK);
    return c;
}

/* A tensor of dtype dt holding i * 0.25 - 3 (exact in every float dtype). */
static zl_tensor *ramp(zl_dtype dt, int64_t n)
{
    zl_tensor *t = zl_tensor_new(dt, 1, &n, ZL_MEM_OTHER);
    for (int64_t i = 0; t && i < n; i++) zl_tensor_set(t, i, (double)i * 0.25 - 3.0);
    return t;
}

static void check_ramp(const zl_tensor *t, int64_t n, const char *what)
{
    for (int64_t i = 0; i < n; i++)
        if (zl_tensor_get(t, i) != (double)i * 0.25 - 3.0) {
            zt_fail(__FILE__, __LINE__, "%s %s: element %lld = %g, expected %g", what,
                    zl_dtype_name(zl_tensor_dtype(t)), (long long)i, zl_tensor_get(t, i), (double)i * 0.25 - 3.0);
            return;
        }
}

TEST(open_and_query)
{
    zl_comm *c = open_self();
    CHECK(zl_comm_rank(c) == 0);
    CHECK(zl_comm_size(c) == 1);
    CHECK(zl_comm_local_rank(c) == 0);
    CHECK(strcmp(zl_comm_backend(c), "self") == 0);
    CHECK(zl_comm_timeout(c) == 1800.0);
    CHECK(zl_comm_set_timeout(c, 2.5) == ZL_OK);
    CHECK(zl_comm_timeout(c) == 2.5);
    zl_comm_close(c);
    zl_comm_close(NULL);
}

TEST(open_errors)
{
    zl_comm *c = (zl_comm *)1;
    CHECK_ERR(zl_comm_open("gloo", &c), "comm_open: unknown backend 'gloo' (expected \"self\", \"mpi\" or \"nccl\")");
    CHECK(c == NULL);
    CHECK_ERR(zl_comm_open(NULL, &c), "unknown backend '(null)'");
    CHECK_ERR(zl_comm_open("self", NULL), "comm_open: out is NULL");
    setenv("ZLUA_COMM_TIMEOUT", "soon", 1);
    CHECK_ERR(zl_comm_open("self", &c), "ZLUA_COMM_TIMEOUT must be a positive number of seconds, got 'soon'");
    setenv("ZLUA_COMM_TIMEOUT", "-3", 1);
    CHECK(zl_comm_open("self", &c) == ZL_EINVAL);
    setenv("ZLUA_COMM_TIMEOUT", "7.5", 1);
    CHECK(zl_comm_open("self", &c) == ZL_OK);
    CHECK(zl_comm_timeout(c) == 7.5);
    unsetenv("ZLUA_COMM_TIMEOUT");
    CHECK_ERR(zl_comm_set_timeout(c, 0), "comm_set_timeout: seconds must be > 0, got 0");
    CHECK_ERR(zl_comm_set_timeout(NULL, 1), "comm_set_timeout: comm is NULL");
    CHECK(zl_comm_timeout(c) == 7.5);
    zl_comm_close(c);
}

TEST(allreduce_every_op_and_dtype)
{
    zl_comm *c = open_self();
    const zl_comm_op ops[] = {ZL_COMM_SUM, ZL_COMM_MAX, ZL_COMM_MIN, ZL_COMM_AVG};
    for (size_t d = 0; d < 3; d++)
        for (size_t o = 0; o < 4; o++) {
            zl_tensor *t = ramp(float_dtypes[d], 37);
            int64_t before = zl_mem_stats_of(ZL_MEM_COMM).current;
            CHECK(zl_comm_allreduce(c, t, ops[o]) == ZL_OK);
            check_ramp(t, 37, "allreduce");
            zl_comm_request *r = zl_comm_allreduce_async(c, t, ops[o]);
            CHECK(r != NULL);
            CHECK(zl_comm_wait(r) == ZL_OK);
            check_ramp(t, 37, "allreduce_async");
            CHECK(zl_mem_stats_of(ZL_MEM_COMM).current == before);
            zl_tensor_release(t);
        }
    zl_comm_close(c);
}

TEST(half_buffers_are_charged_to_comm)
{
    zl_comm *c = open_self();
    zl_tensor *t = ramp(ZL_DTYPE_BF16, 100);
    zl_mem_reset_peak();
    int64_t before = zl_mem_stats_of(ZL_MEM_COMM).current;
    zl_comm_request *r = zl_comm_allreduce_async(c, t, ZL_COMM_SUM);
    CHECK(zl_mem_stats_of(ZL_MEM_COMM).current == before + 100 * 4);
    CHECK(zl_comm_wait(r) == ZL_OK);
    CHECK(zl_mem_stats_of(ZL_MEM_COMM).current == before);
    CHECK(zl_mem_stats_of(ZL_MEM_COMM).peak >= before + 400);
    zl_tensor_release(t);
    zl_comm_close(c);
}

TEST(reduce_scatter_and_allgather_copy)
{
    zl_comm *c = open_self();
    for (size_t d = 0; d < 3; d++) {
        zl_dtype dt = float_dtypes[d];
        zl_tensor *in = ramp(dt, 24);
        zl_tensor *out = zl_tensor_zeros(dt, SHAPE(4, 6));
        CHECK(zl_comm_reduce_scatter(c, in, out, ZL_COMM_AVG) == ZL_OK);
        check_ramp(out, 24, "reduce_scatter");
        zl_tensor_fill(out, 0);
        CHECK(zl_comm_wait(zl_comm_reduce_scatter_async(c, in, out, ZL_COMM_MAX)) == ZL_OK);
        check_ramp(out, 24, "reduce_scatter_async");
        zl_tensor_fill(out, 0);
        CHECK(zl_comm_allgather(c, in, out) == ZL_OK);
        check_ramp(out, 24, "allgather");
        zl_tensor_fill(out, 0);
        CHECK(zl_comm_wait(zl_comm_allgather_async(c, in, out)) == ZL_OK);
        check_ramp(out, 24, "allgather_async");
        zl_tensor_release(in);
        zl_tensor_release(out);
    }
    /* allgather moves any dtype */
    zl_tensor *a = zl_tensor_arange(ZL_DTYPE_I64, 5), *b = zl_tensor_zeros(ZL_DTYPE_I64, SHAPE(5));
    CHECK(zl_comm_allgather(c, a, b) == ZL_OK);
    for (int64_t i = 0; i < 5; i++) CHECK(zl_tensor_get(b, i) == (double)i);
    /* and so does the coalesced form, each pair into its own output */
    zl_tensor *f = ramp(ZL_DTYPE_BF16, 24), *g = zl_tensor_zeros(ZL_DTYPE_BF16, SHAPE(24));
    const zl_tensor *ins[2] = {a, f};
    zl_tensor *outs[2] = {b, g};
    zl_tensor_fill(b, 0);
    CHECK(zl_comm_allgather_coalesced(c, 2, ins, outs) == ZL_OK);
    for (int64_t i = 0; i < 5; i++) CHECK(zl_tensor_get(b, i) == (double)i);
    check_ramp(g, 24, "allgather_coalesced");
    zl_tensor_release(f);
    zl_tensor_release(g);
    zl_tensor_release(a);
    zl_tensor_release(b);
    zl_comm_close(c);
}

TEST(broadcast_and_barrier)
{
    zl_comm *c = open_self();
    for (size_t d = 0; d < 3; d++) {
        zl_tensor *t = ramp(float_dtypes[d], 9);
        CHECK(zl_comm_broadcast(c, t, 0) == ZL_OK);
        check_ramp(t, 9, "broadcast");
        CHECK(zl_comm_wait(zl_comm_broadcast_async(c, t, 0)) == ZL_OK);
        check_ramp(t, 9, "broadcast_async");
        zl_tensor_release(t);
    }
    CHECK(zl_comm_barrier(c) == ZL_OK);
    CHECK(zl_comm_wait(zl_comm_barrier_async(c)) == ZL_OK);
    zl_tensor *e = zl_tensor_zeros(ZL_DTYPE_F32, SHAPE(0));
    CHECK(zl_comm_allreduce(c, e, ZL_COMM_SUM) == ZL_OK);
    zl_tensor_release(e);
    zl_comm_close(c);
}

TEST(argument_errors)
{
    zl_comm *c = open_self();
    zl_tensor *i32 = zl_tensor_zeros(ZL_DTYPE_I32, SHAPE(4));
    zl_tensor *m = zl_tensor_zeros(ZL_DTYPE_F32, SHAPE(3, 4));
    zl_tensor *mt = zl_tensor_transpose(m, 0, 1);
    zl_tensor *f6 = zl_tensor_zeros(ZL_DTYPE_F32, SHAPE(6));
    zl_tensor *f5 = zl_tensor_zeros(ZL_DTYPE_F32, SHAPE(5));
    zl_tensor *h6 = zl_tensor_zeros(ZL_DTYPE_BF16, SHAPE(2, 3));
    zl_tensor *f6v = zl_tensor_view(f6, SHAPE(2, 3));
    CHECK_ERR(zl_comm_allreduce(NULL, f6, ZL_COMM_SUM), "allreduce: comm is NULL");
    CHECK_ERR(zl_comm_allreduce(c, NULL, ZL_COMM_SUM), "allreduce on rank 0: tensor is NULL");
    CHECK_ERR(zl_comm_allreduce(c, i32, ZL_COMM_SUM),
              "allreduce on rank 0: tensor has dtype i32; reductions take f32, f16 or bf16");
    CHECK(zl_comm_allreduce(c, i32, ZL_COMM_SUM) == ZL_EDTYPE);
    CHECK_ERR(zl_comm_allreduce(c, mt, ZL_COMM_SUM), "allreduce on rank 0: tensor [4, 3] is not contiguous");
    CHECK_ERR(zl_comm_allreduce(c, f6, (zl_comm_op)9), "allreduce on rank 0: unknown reduction 9");
    CHECK(zl_comm_allreduce_async(c, mt, ZL_COMM_SUM) == NULL);
    CHECK_ERR(zl_comm_reduce_scatter(c, f6, f5, ZL_COMM_SUM),
              "reduce_scatter on rank 0: in [6] has 6 elements, expected size 1 x out [5] = 5");
    CHECK(zl_comm_reduce_scatter(c, f6, f5, ZL_COMM_SUM) == ZL_ESHAPE);
    CHECK_ERR(zl_comm_reduce_scatter(c, f6, h6, ZL_COMM_SUM),
              "reduce_scatter on rank 0: in is f32 [6] but out is bf16 [2, 3]");
    CHECK_ERR(zl_comm_reduce_scatter(c, f6, f6v, ZL_COMM_SUM), "reduce_scatter on rank 0: in and out share storage");
    CHECK_ERR(zl_comm_reduce_scatter(c, i32, i32, ZL_COMM_SUM), "reduce_scatter on rank 0: in has dtype i32");
    CHECK_ERR(zl_comm_allgather(c, f6, f5), "allgather on rank 0: out [5] has 5 elements, expected size 1 x in [6] = 6");
    CHECK_ERR(zl_comm_allgather(c, h6, f6), "allgather on rank 0: in is bf16 [2, 3] but out is f32 [6]");
    CHECK_ERR(zl_comm_allgather(c, mt, f5), "allgather on rank 0: in [4, 3] is not contiguous");
    CHECK_ERR(zl_comm_allgather(c, f6, NULL), "allgather on rank 0: out is NULL");
    CHECK_ERR(zl_comm_broadcast(c, f6, 1), "broadcast on rank 0: root 1 out of range [0, 1)");
    CHECK_ERR(zl_comm_broadcast(c, f6, -1), "broadcast on rank 0: root -1 out of range");
    CHECK_ERR(zl_comm_barrier(NULL), "barrier: comm is NULL");
    CHECK_ERR(zl_comm_wait(NULL), "comm_wait: request is NULL");
    zl_tensor_release(i32);
    zl_tensor_release(mt);
    zl_tensor_release(m);
    zl_tensor_release(f6v);
    zl_tensor_release(f6);
    zl_tensor_release(f5);
    zl_tensor_release(h6);
    zl_comm_close(c);
}

TEST(close_waits_for_live_requests)
{
    zl_comm *c = open_self();
    zl_tensor *t = ramp(ZL_DTYPE_F16, 8);
    zl_comm_request *r = zl_comm_allreduce_async(c, t, ZL_COMM_SUM);
    zl_comm_close(c);
    CHECK_ERR(zl_comm_barrier(c), "barrier on rank 0: the communicator is closed");
    CHECK(zl_comm_wait(r) == ZL_OK);
    check_ramp(t, 8, "allreduce after close");
    zl_tensor_release(t);
}

TEST(allocation_failure_leaks_nothing)
{
    zl_comm *c = open_self();
    zl_tensor *in = ramp(ZL_DTYPE_BF16, 8), *out = zl_tensor_zeros(ZL_DTYPE_BF16, SHAPE(8));
    int64_t before = zl_mem_stats_of(ZL_MEM_COMM).current;
    zl_mem_fail_after(2);
    CHECK(zl_comm_reduce_scatter(c, in, out, ZL_COMM_SUM) == ZL_ENOMEM);
    zl_mem_fail_after(0);
    CHECK(zl_mem_stats_of(ZL_MEM_COMM).current == before);
    CHECK(zl_comm_reduce_scatter(c, in, out, ZL_COMM_SUM) == ZL_OK);
    check_ramp(out, 8, "reduce_scatter after a failed one");
    zl_tensor_release(in);
    zl_tensor_release(out);
    zl_comm_close(c);
}

/* "self" is in every build; a build without MPI (or NCCL) refuses it saying so. */
TEST(backends_of_this_build)
{
    CHECK(zl_comm_unavailable("self") == NULL);
    CHECK(strstr(zl_comm_unavailable("gloo"), "unknown backend") != NULL);
    const char *nccl = zl_comm_unavailable("nccl");   /* NULL where the build has NCCL */
    if (nccl) CHECK(strstr(nccl, "built without NCCL") != NULL);
    const char *why = zl_comm_unavailable("mpi");
    if (why == NULL) return;   /* opening it is tests/dist's */
    CHECK(strstr(why, "install libopenmpi-dev") != NULL);
    zl_comm *c = NULL;
    CHECK_ERR(zl_comm_open("mpi", &c), why);
    CHECK(c == NULL);
}
