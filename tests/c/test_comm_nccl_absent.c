/* The communicator's device rules without a GPU: "nccl" refused with the
 * reason (no CUDA device, or a build without NCCL) and a bad launcher
 * environment named, and "self" refusing device tensors as it always has. */
#include <stdlib.h>
#include "harness.h"
#include "../../engine/core/tensor_impl.h"

static void host_free(zl_storage *s) { free(s->data); }
static void no_recharge(const zl_storage *s, zl_mem_category to) { (void)s; (void)to; }

/* Host bytes labelled as cuda:0: what comm.c sees of a device tensor, without a GPU. */
static const zli_device_ops fake_cuda = {.kind = ZL_DEVICE_CUDA, .free = host_free, .recharge = no_recharge};

static zl_tensor *fake_device_tensor(zl_dtype dt, int64_t n)
{
    size_t bytes = (size_t)n * zl_dtype_size(dt);
    return zli_tensor_on_device(dt, 1, &n, ZL_MEM_OTHER, &fake_cuda, 0, calloc(1, bytes), bytes);
}

static bool has_gpu(void)
{
    if (zl_device_count(ZL_DEVICE_CUDA) == 0) return false;
    printf("note: a CUDA device is visible; tests/gpu/test_nccl.c covers nccl here\n");
    return true;
}

TEST(nccl_without_a_gpu)
{
    if (has_gpu()) return;
    zl_comm *c = (zl_comm *)1;
    zl_status st = zl_comm_open("nccl", &c);
    CHECK(st == ZL_EDEVICE);
    CHECK(c == NULL);
    const char *msg = zl_last_error();
    if (!strstr(msg, "no CUDA device: ") && !strstr(msg, "this zlua was built without NCCL"))
        zt_fail(__FILE__, __LINE__, "unexpected reason: %s", msg);
}

/* Checked before the device, so a wrong launcher is named even here. */
TEST(nccl_names_a_bad_launcher_environment)
{
    if (has_gpu()) return;
    zl_comm *c = NULL;
    zl_comm_open("nccl", &c);
    if (strstr(zl_last_error(), "built without NCCL")) return;
    setenv("RANK", "2", 1);
    setenv("WORLD_SIZE", "2", 1);
    CHECK_ERR(zl_comm_open("nccl", &c), "comm nccl: RANK='2' and WORLD_SIZE='2' are not a rank and a world size");
    setenv("WORLD_SIZE", "two", 1);
    CHECK_ERR(zl_comm_open("nccl", &c), "RANK='2' and WORLD_SIZE='two'");
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    CHECK(c == NULL);
}

TEST(self_refuses_device_tensors_as_before)
{
    zl_comm *c = NULL;
    CHECK(zl_comm_open("self", &c) == ZL_OK);
    zl_tensor *d = fake_device_tensor(ZL_DTYPE_F32, 8);
    zl_tensor *d4 = fake_device_tensor(ZL_DTYPE_F32, 8);
    zl_tensor *h = zl_tensor_zeros(ZL_DTYPE_F32, SHAPE(8));
    CHECK(d && zl_tensor_device(d) == ZL_DEVICE_CUDA);
    CHECK_ERR(zl_comm_allreduce(c, d, ZL_COMM_SUM), "allreduce on rank 0: tensor must be a CPU tensor for backend self");
    CHECK_ERR(zl_comm_reduce_scatter(c, d, h, ZL_COMM_SUM),
              "reduce_scatter on rank 0: in must be a CPU tensor for backend self");
    CHECK_ERR(zl_comm_reduce_scatter(c, h, d4, ZL_COMM_SUM),
              "reduce_scatter on rank 0: out must be a CPU tensor for backend self");
    CHECK_ERR(zl_comm_allgather(c, h, d), "allgather on rank 0: out must be a CPU tensor for backend self");
    CHECK_ERR(zl_comm_broadcast(c, d, 0), "broadcast on rank 0: tensor must be a CPU tensor for backend self");
    CHECK(zl_comm_allreduce_async(c, d, ZL_COMM_AVG) == NULL);
    CHECK(strstr(zl_last_error(), "must be a CPU tensor for backend self") != NULL);
    zl_tensor_release(h);
    zl_tensor_release(d4);
    zl_tensor_release(d);
    zl_comm_close(c);
}
