/* Devices without a GPU (zlua/device.h): names both ways, the CPU as device
 * 0, and every CUDA request answered by the reason there is no device, never
 * a crash. CUDA_VISIBLE_DEVICES is emptied first, so a GPU machine checks the
 * same path; tests/gpu/ checks the device itself. */
#include <stdlib.h>
#include "harness.h"

__attribute__((constructor(101))) static void hide_gpus(void) { setenv("CUDA_VISIBLE_DEVICES", "", 1); }

TEST(device_names)
{
    zl_device k;
    int i;
    char buf[32];
    CHECK(zl_device_parse("cpu", &k, &i) == ZL_OK && k == ZL_DEVICE_CPU && i == 0);
    CHECK(zl_device_parse("cuda", &k, &i) == ZL_OK && k == ZL_DEVICE_CUDA && i == 0);
    CHECK(zl_device_parse("cuda:3", &k, &i) == ZL_OK && k == ZL_DEVICE_CUDA && i == 3);
    CHECK(!strcmp(zl_device_str(ZL_DEVICE_CUDA, 3, buf, sizeof buf), "cuda:3"));
    CHECK(!strcmp(zl_device_str(ZL_DEVICE_CPU, 0, buf, sizeof buf), "cpu"));
    CHECK_ERR(zl_device_parse("gpu", &k, &i), "device: 'gpu' is not a device (expected cpu, cuda or cuda:N)");
    CHECK_ERR(zl_device_parse("cuda:", &k, &i), "'cuda:' is not a device");
    CHECK_ERR(zl_device_parse("cuda:-1", &k, &i), "'cuda:-1' is not a device");
    CHECK_ERR(zl_device_parse("cuda:1x", &k, &i), "'cuda:1x' is not a device");
    CHECK_ERR(zl_device_parse("cudax", &k, &i), "'cudax' is not a device");
    CHECK_ERR(zl_device_parse(NULL, &k, &i), "device: no name given");
}

TEST(cpu_is_device_zero)
{
    CHECK(zl_device_count(ZL_DEVICE_CPU) == 1);
    CHECK(zl_device_check(ZL_DEVICE_CPU, 0) == ZL_OK);
    CHECK_ERR(zl_device_check(ZL_DEVICE_CPU, 1), "cpu:1: no such device");
    zl_tensor *t = zt_randn(SHAPE(3, 4));
    zl_tensor *same = zl_tensor_to_device(t, ZL_DEVICE_CPU, 0);
    CHECK(same == t);
    CHECK(zl_tensor_device(t) == ZL_DEVICE_CPU && zl_tensor_device_index(t) == 0);
    zl_tensor_release(same);
    zl_tensor *z = zl_tensor_zeros_on(ZL_DTYPE_F32, SHAPE(2, 2), ZL_DEVICE_CPU, 0);
    CHECK(z && zl_tensor_get(z, 3) == 0.0 && zl_tensor_device(z) == ZL_DEVICE_CPU);
    zl_tensor_release(z);
    zl_tensor_release(t);
    CHECK(zl_device_synchronize(ZL_DEVICE_CPU, 0) == ZL_OK && zl_device_empty_cache(ZL_DEVICE_CPU, 0) == ZL_OK);
}

TEST(no_cuda_device_is_an_error_naming_why)
{
    zl_clear_error();
    CHECK(zl_device_count(ZL_DEVICE_CUDA) == 0);
    CHECK(!strncmp(zl_last_error(), "no CUDA device: ", 16));
    char why[1024];
    snprintf(why, sizeof why, "%s", zl_last_error());
    zl_tensor *t = zt_randn(SHAPE(3, 4));
    zl_clear_error();
    CHECK(zl_tensor_to_device(t, ZL_DEVICE_CUDA, 0) == NULL);
    CHECK(!strcmp(zl_last_error(), why));
    CHECK(zl_device_check(ZL_DEVICE_CUDA, 0) == ZL_EDEVICE);
    CHECK(zl_tensor_new_on(ZL_DTYPE_F32, SHAPE(2), ZL_MEM_PARAMS, ZL_DEVICE_CUDA, 0) == NULL);
    CHECK(zl_tensor_zeros_on(ZL_DTYPE_F32, SHAPE(2), ZL_DEVICE_CUDA, 1) == NULL);
    CHECK(!strncmp(zl_last_error(), "no CUDA device: ", 16));
    CHECK(zl_device_synchronize(ZL_DEVICE_CUDA, 0) == ZL_EDEVICE);
    CHECK(zl_device_mem_stats(ZL_DEVICE_CUDA, 0, ZL_MEM_PARAMS).current == 0);
    CHECK(zl_device_mem_reserved(ZL_DEVICE_CUDA, 0) == 0);
    CHECK_ERR(zl_device_count((zl_device)7), "device_count: unknown device kind 7");
    zl_tensor_release(t);
}

/* The CUDA module is opened once per process, so a module named by
 * ZLUA_CUDA_MODULE is tried by a run of its own (tests/CMakeLists.txt):
 * one that is not there, and a library without the module's entry. Each
 * is refused naming the file and what went wrong, never crashed on. */
static const char *module_named(void)
{
    const char *m = getenv("ZLUA_CUDA_MODULE");
    if (!m || !*m) zt_skip("run by CTest with ZLUA_CUDA_MODULE naming a module");
    return m && *m ? m : NULL;
}

TEST(a_missing_cuda_module_is_named)
{
    const char *m = module_named();
    if (!m) return;
    CHECK(zl_device_count(ZL_DEVICE_CUDA) == 0);
#ifdef ZLUA_HAVE_CUDA
    CHECK(strstr(zl_last_error(), "no CUDA device: the CUDA backend (libzlua_cuda.so) did not load: ") != NULL);
    CHECK(strstr(zl_last_error(), m) != NULL && strstr(zl_last_error(), "No such file") != NULL);
#else
    CHECK(strstr(zl_last_error(), "this zlua was built without CUDA") != NULL);
#endif
    zl_comm *c = NULL;
    CHECK(zl_comm_open("nccl", &c) == ZL_EDEVICE && c == NULL);
    CHECK(strstr(zl_last_error(), "no CUDA device: ") != NULL || strstr(zl_last_error(), "without NCCL") != NULL);
}

TEST(a_library_without_the_entry_is_refused)
{
    const char *m = module_named();
    if (!m) return;
    CHECK(zl_device_count(ZL_DEVICE_CUDA) == 0);
#ifdef ZLUA_HAVE_CUDA
    CHECK_ERR(zl_device_check(ZL_DEVICE_CUDA, 0), "no CUDA device: libzlua_cuda.so has no zlua_cuda_backend");
#else
    CHECK(strstr(zl_last_error(), "this zlua was built without CUDA") != NULL);
#endif
}
