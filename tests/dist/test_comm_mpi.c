/* The "mpi" communicator backend under mpirun (2 or 3 ranks): each rank feeds
 * rank-dependent inputs to every collective, blocking and async, in every float
 * dtype, and checks the result against values it computes itself; then a
 * collective that one rank skips must time out with a message naming it. With
 * every rank on one machine the reductions go through shared memory, which
 * must fold in rank order at any size (ZLUA_COMM_SHM=0 runs MPI's own). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include "harness.h"

static zl_comm *g_world;

static void close_world(void) { zl_comm_close(g_world); }

static zl_comm *world(void)
{
    if (!g_world) {
        if (zl_comm_open("mpi", &g_world) != ZL_OK) {
            fprintf(stderr, "cannot open the mpi communicator: %s\n", zl_last_error());
            exit(2);
        }
        atexit(close_world);
    }
    return g_world;
}

/* Rank r's element i: multiples of 0.25 below 8, exact in bf16 and f16, and
 * ordered differently on each rank so MAX and MIN pick different ranks. */
static double val(int r, int64_t i) { return (r + 1) * 0.5 + (double)((i * (r + 3)) % 7) * 0.25; }

static zl_tensor *filled(zl_dtype dt, int64_t n, int r)
{
    zl_tensor *t = zl_tensor_new(dt, 1, &n, ZL_MEM_OTHER);
    for (int64_t i = 0; t && i < n; i++) zl_tensor_set(t, i, val(r, i));
    return t;
}

static double reduce_ref(zl_comm_op op, int size, int64_t i)
{
    double acc = val(0, i);
    for (int r = 1; r < size; r++) {
        double v = val(r, i);
        if (op == ZL_COMM_MAX) acc = v > acc ? v : acc;
        else if (op == ZL_COMM_MIN) acc = v < acc ? v : acc;
        else acc += v;
    }
    return op == ZL_COMM_AVG ? acc / size : acc;
}

static double tol_of(zl_dtype dt) { return dt == ZL_DTYPE_F32 ? 1e-6 : dt == ZL_DTYPE_F16 ? 1e-3 : 8e-3; }

static const zl_dtype dtypes[] = {ZL_DTYPE_F32, ZL_DTYPE_BF16, ZL_DTYPE_F16};
static const zl_comm_op ops[] = {ZL_COMM_SUM, ZL_COMM_MAX, ZL_COMM_MIN, ZL_COMM_AVG};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

TEST(ranks)
{
    zl_comm *c = world();
    const char *size = getenv("OMPI_COMM_WORLD_SIZE"), *rank = getenv("OMPI_COMM_WORLD_RANK");
    const char *local = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    CHECK(zl_comm_size(c) >= 2);
    CHECK(size && zl_comm_size(c) == atoi(size));
    CHECK(rank && zl_comm_rank(c) == atoi(rank));
    CHECK(local && zl_comm_local_rank(c) == atoi(local));
    CHECK(strcmp(zl_comm_backend(c), "mpi") == 0);
}

TEST(allreduce)
{
    zl_comm *c = world();
    int rank = zl_comm_rank(c), size = zl_comm_size(c);
    for (size_t d = 0; d < 3; d++)
        for (size_t o = 0; o < 4; o++) {
            zl_tensor *t = filled(dtypes[d], 1000, rank);
            CHECK(zl_comm_allreduce(c, t, ops[o]) == ZL_OK);
            for (int64_t i = 0; i < 1000 && !zt_failures_in_current(); i++) CHECK_CLOSE(zl_tensor_get(t, i), reduce_ref(ops[o], size, i), tol_of(dtypes[d]));
            zl_tensor_release(t);
        }
}

TEST(reduce_scatter)
{
    zl_comm *c = world();
    int rank = zl_comm_rank(c), size = zl_comm_size(c);
    const int64_t n = 37;
    for (size_t d = 0; d < 3; d++)
        for (size_t o = 0; o < 4; o++) {
            zl_tensor *in = filled(dtypes[d], n * size, rank);
            zl_tensor *out = zl_tensor_full(dtypes[d], SHAPE(n), -100.0);
            CHECK(zl_comm_reduce_scatter(c, in, out, ops[o]) == ZL_OK);
            for (int64_t j = 0; j < n && !zt_failures_in_current(); j++)
                CHECK_CLOSE(zl_tensor_get(out, j), reduce_ref(ops[o], size, rank * n + j), tol_of(dtypes[d]));
            CHECK_CLOSE(zl_tensor_get(in, 3), val(rank, 3), 0);
            zl_tensor_release(in);
            zl_tensor_release(out);
        }
}

TEST(allgather)
{
    zl_comm *c = world();
    int rank = zl_comm_rank(c), size = zl_comm_size(c);
    const zl_dtype all[] = {ZL_DTYPE_F32, ZL_DTYPE_BF16, ZL_DTYPE_F16, ZL_DTYPE_I64, ZL_DTYPE_U8};
    for (size_t d = 0; d < 5; d++) {
        zl_tensor *in = filled(all[d], 13, rank);
        if (all[d] == ZL_DTYPE_I64 || all[d] == ZL_DTYPE_U8)
            for (int64_t i = 0; i < 13; i++) zl_tensor_set(in, i, (double)(rank * 13 + i));
        zl_tensor *out = zl_tensor_zeros(all[d], SHAPE(size, 13));
        CHECK(zl_comm_allgather(c, in, out) == ZL_OK);
        for (int r = 0; r < size; r++)
            for (int64_t i = 0; i < 13; i++) {
                double want = all[d] == ZL_DTYPE_I64 || all[d] == ZL_DTYPE_U8 ? (double)(r * 13 + i) : val(r, i);
                CHECK_CLOSE(zl_tensor_get(out, r * 13 + i), want, 0);
            }
        zl_tensor_release(in);
        zl_tensor_release(out);
    }
}

/* Pieces of several sizes (an empty one, one element, one past the initial
 * shared-memory staging, runs of small ones packed together and large ones
 * alone on MPI's path, runs cut inside on the shared-memory one) and dtypes,
 * each received into its own output, blocking and async, with a plain
 * allgather started between. */
TEST(allgather_coalesced)
{
    zl_comm *c = world();
    int rank = zl_comm_rank(c), size = zl_comm_size(c);
    enum { N = 11 };
    const zl_dtype dt[N] = {ZL_DTYPE_F32, ZL_DTYPE_I64, ZL_DTYPE_BF16, ZL_DTYPE_U8, ZL_DTYPE_F16, ZL_DTYPE_F32,
                            ZL_DTYPE_F32, ZL_DTYPE_F32, ZL_DTYPE_BF16, ZL_DTYPE_F32, ZL_DTYPE_F32};
    const int64_t len[N] = {13, 0, 1, 200, 7, 300000, 3000, 20000, 50000, 3000, 5};
    for (int pass = 0; pass < 2; pass++) {
        zl_tensor *in[N], *out[N];
        for (int i = 0; i < N; i++) {
            in[i] = zl_tensor_new(dt[i], 1, &len[i], ZL_MEM_OTHER);
            for (int64_t j = 0; j < len[i]; j++) zl_tensor_set(in[i], j, (double)((rank * 31 + i * 7 + j) % 97));
            out[i] = zl_tensor_full(dt[i], SHAPE(size * len[i]), 99.0);
        }
        zl_tensor *ag_in = filled(ZL_DTYPE_F32, 5, rank), *ag_out = zl_tensor_zeros(ZL_DTYPE_F32, SHAPE(size, 5));
        if (pass == 0) {
            CHECK(zl_comm_allgather_coalesced(c, N, (const zl_tensor *const *)in, out) == ZL_OK);
        } else {
            zl_comm_request *r = zl_comm_allgather_coalesced_async(c, N, (const zl_tensor *const *)in, out);
            zl_comm_request *r2 = zl_comm_allgather_async(c, ag_in, ag_out);
            CHECK(r && r2);
            CHECK(zl_comm_wait(r2) == ZL_OK);
            CHECK(zl_comm_wait(r) == ZL_OK);
            for (int q = 0; q < size; q++) CHECK_CLOSE(zl_tensor_get(ag_out, q * 5 + 2), val(q, 2), 0);
        }
        for (int i = 0; i < N; i++) {
            for (int q = 0; q < size; q++)
                for (int64_t j = 0; j < len[i] && !zt_failures_in_current(); j++)
                    CHECK_CLOSE(zl_tensor_get(out[i], q * len[i] + j), (double)((q * 31 + i * 7 + j) % 97), 0);
            zl_tensor_release(in[i]);
            zl_tensor_release(out[i]);
        }
        zl_tensor_release(ag_in);
        zl_tensor_release(ag_out);
    }
}

TEST(broadcast)
{
    zl_comm *c = world();
    int rank = zl_comm_rank(c), size = zl_comm_size(c);
    for (int root = 0; root < size; root++)
        for (size_t d = 0; d < 3; d++) {
            zl_tensor *t = filled(dtypes[d], 21, rank);
            CHECK(zl_comm_broadcast(c, t, root) == ZL_OK);
            for (int64_t i = 0; i < 21; i++) CHECK_CLOSE(zl_tensor_get(t, i), val(root, i), 0);
            zl_tensor_release(t);
        }
    CHECK(zl_comm_barrier(c) == ZL_OK);
}

TEST(async_overlap)
{
    /* Several collectives in flight at once, waited on in reverse order. */
    zl_comm *c = world();
    int rank = zl_comm_rank(c), size = zl_comm_size(c);
    zl_tensor *a = filled(ZL_DTYPE_BF16, 500, rank);
    zl_tensor *in = filled(ZL_DTYPE_F32, 8, rank), *out = zl_tensor_zeros(ZL_DTYPE_F32, SHAPE(size * 8));
    zl_tensor *rs_in = filled(ZL_DTYPE_F16, 4 * size, rank), *rs_out = zl_tensor_zeros(ZL_DTYPE_F16, SHAPE(4));
    zl_tensor *b = filled(ZL_DTYPE_F32, 6, rank);
    zl_comm_request *r1 = zl_comm_allreduce_async(c, a, ZL_COMM_AVG);
    zl_comm_request *r2 = zl_comm_allgather_async(c, in, out);
    zl_comm_request *r3 = zl_comm_reduce_scatter_async(c, rs_in, rs_out, ZL_COMM_SUM);
    zl_comm_request *r4 = zl_comm_broadcast_async(c, b, 1);
    zl_comm_request *r5 = zl_comm_barrier_async(c);
    CHECK(r1 && r2 && r3 && r4 && r5);
    CHECK(zl_comm_wait(r5) == ZL_OK);
    CHECK(zl_comm_wait(r4) == ZL_OK);
    CHECK(zl_comm_wait(r3) == ZL_OK);
    CHECK(zl_comm_wait(r2) == ZL_OK);
    CHECK(zl_comm_wait(r1) == ZL_OK);
    for (int64_t i = 0; i < 500 && !zt_failures_in_current(); i++) CHECK_CLOSE(zl_tensor_get(a, i), reduce_ref(ZL_COMM_AVG, size, i), 8e-3);
    for (int r = 0; r < size; r++)
        for (int64_t i = 0; i < 8; i++) CHECK_CLOSE(zl_tensor_get(out, r * 8 + i), val(r, i), 0);
    for (int64_t j = 0; j < 4; j++) CHECK_CLOSE(zl_tensor_get(rs_out, j), reduce_ref(ZL_COMM_SUM, size, rank * 4 + j), 1e-3);
    for (int64_t i = 0; i < 6; i++) CHECK_CLOSE(zl_tensor_get(b, i), val(1, i), 0);
    zl_tensor_release(a);
    zl_tensor_release(in);
    zl_tensor_release(out);
    zl_tensor_release(rs_in);
    zl_tensor_release(rs_out);
    zl_tensor_release(b);
}

/* Rank r's element i for the order test: floats of many magnitudes, so
 * that a sum rounds differently in another order. */
static float scattered(int r, int64_t i)
{
    uint64_t h = ((uint64_t)(r + 1) * 0x9E3779B97F4A7C15u) ^ ((uint64_t)i * 0xC2B2AE3D27D4EB4Fu);
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9u;
    h ^= h >> 32;
    return ldexpf((float)((int64_t)(h % 2000001) - 1000000), (int)(h >> 40) % 24 - 12);
}

static float folded(int size, int64_t i)
{
    float acc = scattered(0, i);
    for (int r = 1; r < size; r++) acc += scattered(r, i);
    return acc;
}

static zl_tensor *scattered_tensor(int64_t n, int r)
{
    zl_tensor *t = zl_tensor_new(ZL_DTYPE_F32, 1, &n, ZL_MEM_OTHER);
    float *p = t ? zl_tensor_data(t) : NULL;
    for (int64_t i = 0; p && i < n; i++) p[i] = scattered(r, i);
    return t;
}

/* Buffers far past the shared path's first staging size (it must grow while
 * other collectives are queued behind), counts that do not divide by the
 * ranks, and sums that come out the same bits as r0 + r1 + r2 ... in that
 * order, the all-reduce equal to the reduce-scatter's parts. */
TEST(large_in_rank_order)
{
    zl_comm *c = world();
    int rank = zl_comm_rank(c), size = zl_comm_size(c);
    const char *shm = getenv("ZLUA_COMM_SHM");
    bool ordered = !(shm && strcmp(shm, "0") == 0) || size == 2;
    const int64_t n = 1000003, total = n * size, bytes = 3 * 1048576 + 5;
    zl_tensor *ar = scattered_tensor(total + 1, rank), *rs_in = scattered_tensor(total, rank);
    zl_tensor *rs_out = zl_tensor_zeros(ZL_DTYPE_F32, SHAPE(n)), *small = filled(ZL_DTYPE_F32, 3, rank);
    zl_tensor *ag_in = zl_tensor_zeros(ZL_DTYPE_U8, SHAPE(bytes)), *ag_out = zl_tensor_zeros(ZL_DTYPE_U8, SHAPE(size * bytes));
    CHECK(ar && rs_in && rs_out && small && ag_in && ag_out);
    uint8_t *in8 = zl_tensor_data(ag_in);
    for (int64_t i = 0; i < bytes; i++) in8[i] = (uint8_t)(i * 7 + rank * 31);
    zl_comm_request *r1 = zl_comm_allreduce_async(c, small, ZL_COMM_SUM);
    zl_comm_request *r2 = zl_comm_allreduce_async(c, ar, ZL_COMM_SUM);
    zl_comm_request *r3 = zl_comm_reduce_scatter_async(c, rs_in, rs_out, ZL_COMM_SUM);
    zl_comm_request *r4 = zl_comm_allgather_async(c, ag_in, ag_out);
    CHECK(r1 && r2 && r3 && r4);
    CHECK(zl_comm_wait(r4) == ZL_OK);
    CHECK(zl_comm_wait(r3) == ZL_OK);
    CHECK(zl_comm_wait(r2) == ZL_OK);
    CHECK(zl_comm_wait(r1) == ZL_OK);
    for (int64_t i = 0; i < 3; i++) CHECK_CLOSE(zl_tensor_get(small, i), reduce_ref(ZL_COMM_SUM, size, i), 1e-6);
    const float *a = zl_tensor_data(ar), *b = zl_tensor_data(rs_out);
    int64_t wrong = 0, unequal = 0;
    for (int64_t i = 0; i <= total; i++) wrong += ordered ? a[i] != folded(size, i) : fabsf(a[i] - folded(size, i)) > 1e-3f * fabsf(a[i]) + 1e-6f;
    for (int64_t j = 0; j < n; j++) unequal += ordered ? b[j] != a[rank * n + j] : fabsf(b[j] - a[rank * n + j]) > 1e-3f * fabsf(b[j]) + 1e-6f;
    CHECK(wrong == 0);
    CHECK(unequal == 0);
    const uint8_t *out8 = zl_tensor_data(ag_out);
    int64_t lost = 0;
    for (int r = 0; r < size; r++)
        for (int64_t i = 0; i < bytes; i++) lost += out8[r * bytes + i] != (uint8_t)(i * 7 + r * 31);
    CHECK(lost == 0);
    zl_tensor *t[] = {ar, rs_in, rs_out, small, ag_in, ag_out};
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) zl_tensor_release(t[i]);
}

TEST(errors_name_the_rank)
{
    zl_comm *c = world();
    char want[160];
    int rank = zl_comm_rank(c), size = zl_comm_size(c);
    zl_tensor *in = zl_tensor_zeros(ZL_DTYPE_F32, SHAPE(10)), *out = zl_tensor_zeros(ZL_DTYPE_F32, SHAPE(4));
    snprintf(want, sizeof want, "reduce_scatter on rank %d: in [10] has 10 elements, expected size %d x out [4] = %d",
             rank, size, 4 * size);
    CHECK_ERR(zl_comm_reduce_scatter(c, in, out, ZL_COMM_SUM), want);
    snprintf(want, sizeof want, "allgather on rank %d: out [4] has 4 elements, expected size %d x in [10]", rank, size);
    CHECK_ERR(zl_comm_allgather(c, in, out), want);
    snprintf(want, sizeof want, "broadcast on rank %d: root %d out of range [0, %d)", rank, size, size);
    CHECK_ERR(zl_comm_broadcast(c, in, size), want);
    zl_tensor *wide = zl_tensor_zeros(ZL_DTYPE_F32, SHAPE(size * 10));
    const zl_tensor *ins[2] = {in, in};
    zl_tensor *outs[2] = {wide, wide};
    snprintf(want, sizeof want, "allgather_coalesced on rank %d: out[0] and out[1] share storage", rank);
    CHECK_ERR(zl_comm_allgather_coalesced(c, 2, ins, outs), want);
    outs[1] = out;
    snprintf(want, sizeof want, "allgather_coalesced on rank %d: out[1] [4] has 4 elements, expected size %d x in[1] [10]",
             rank, size);
    CHECK_ERR(zl_comm_allgather_coalesced(c, 2, ins, outs), want);
    snprintf(want, sizeof want, "allgather_coalesced on rank %d: n must be at least 1", rank);
    CHECK_ERR(zl_comm_allgather_coalesced(c, 0, ins, outs), want);
    zl_tensor_release(wide);
    zl_tensor_release(in);
    zl_tensor_release(out);
    CHECK(zl_comm_barrier(c) == ZL_OK);
}

/* Rank 0 enters a collective the others skip: it must time out (or stop on
 * Ctrl-C) and leave its communicator unusable. The others then join late, so
 * the abandoned collectives finish and every rank closes cleanly. */
TEST(timeout_and_interrupt)
{
    zl_comm *c = world(), *slow = NULL, *intr = NULL;
    int rank = zl_comm_rank(c);
    CHECK(zl_comm_open("mpi", &slow) == ZL_OK);
    CHECK(zl_comm_open("mpi", &intr) == ZL_OK);
    CHECK(zl_comm_set_timeout(slow, 2) == ZL_OK);
    zl_tensor *t = filled(ZL_DTYPE_BF16, 16, rank), *u = filled(ZL_DTYPE_F32, 16, rank);
    if (rank == 0) {
        double t0 = now_s();
        CHECK_ERR(zl_comm_allreduce(slow, t, ZL_COMM_SUM), "allreduce timed out after 2 s on rank 0");
        double took = now_s() - t0;
        CHECK(took >= 1.9 && took < 10.0);
        CHECK_ERR(zl_comm_barrier(slow), "barrier on rank 0: the communicator is unusable: allreduce timed out");
        zl_interrupt_set(1);
        CHECK(zl_comm_allreduce(intr, u, ZL_COMM_MAX) == ZL_EINTERRUPT);
        CHECK(strstr(zl_last_error(), "allreduce interrupted on rank 0") != NULL);
        zl_interrupt_set(0);
        CHECK(zl_comm_barrier(c) == ZL_OK);
    } else {
        CHECK(zl_comm_barrier(c) == ZL_OK);
        CHECK(zl_comm_allreduce(slow, t, ZL_COMM_SUM) == ZL_OK);
        CHECK(zl_comm_allreduce(intr, u, ZL_COMM_MAX) == ZL_OK);
    }
    zl_comm_close(slow);
    zl_comm_close(intr);
    CHECK(zl_comm_barrier(c) == ZL_OK);
    zl_tensor_release(t);
    zl_tensor_release(u);
}
