/* The CUDA backend of a build made without the CUDA toolkit: there is no
 * device, every request says so and how to get one, and nothing crashes. */
#include "cuda_impl.h"

static zl_status absent(void)
{
    return zl_error(ZL_EDEVICE, "no CUDA device: this zlua was built without CUDA (CMake found no CUDA toolkit, "
                    "or was told -DZLUA_CUDA=OFF); install the toolkit (nvcc) and rebuild");
}

int zli_cuda_count(void) { absent(); return 0; }
zl_status zli_cuda_use(int index) { (void)index; return absent(); }

zl_tensor *zli_cuda_new(zl_dtype dt, int ndim, const int64_t *shape, zl_mem_category cat, int index)
{
    (void)dt; (void)ndim; (void)shape; (void)cat; (void)index;
    absent();
    return NULL;
}

zl_status zli_cuda_copy(void *dst, const void *src, size_t n, zli_copy_dir dir, int index)
{
    (void)dst; (void)src; (void)n; (void)dir; (void)index;
    return absent();
}

zl_status zli_cuda_copy_peer(void *dst, int to, const void *src, int from, size_t n)
{
    (void)dst; (void)to; (void)src; (void)from; (void)n;
    return absent();
}

zl_status zli_cuda_memset0(void *p, size_t n, int index) { (void)p; (void)n; (void)index; return absent(); }

zl_mem_stats zli_cuda_stats(int index, zl_mem_category cat)
{
    (void)index; (void)cat;
    return (zl_mem_stats){0, 0};
}

int64_t zli_cuda_reserved(int index) { (void)index; return 0; }
int64_t zli_cuda_in_use(void) { return 0; }
zl_status zli_cuda_empty_cache(int index) { (void)index; return absent(); }
zl_status zli_cuda_synchronize(int index) { (void)index; return absent(); }
void zli_cuda_blas_refuse_plans(bool on) { (void)on; }
int64_t zli_cuda_blas_fallbacks(void) { return 0; }
