/* Finding a device kind's backend: the CPU's is here; CUDA's is the module
 * libzlua_cuda.so, opened once, on the first call that needs it, so a
 * process that never touches a GPU never maps the CUDA runtime; a context
 * may have a backend registered for the kind in its place. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend.h"
#include "dl.h"
#include "context_impl.h"
#include "memory_impl.h"

#define CUDA_MODULE "libzlua_cuda.so"

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static const zli_backend *g_cuda;
static char g_why[2048];

#ifdef ZLUA_HAVE_CUDA
static const zli_core_api core_api = {
    .abi = ZLI_BACKEND_ABI, .error = zl_error, .last_error = zl_last_error, .last_code = zli_last_code,
    .interrupt_pending = zl_interrupt_pending, .dtype_name = zl_dtype_name, .dtype_size = zl_dtype_size,
    .dtype_traits_of = zl_dtype_traits_of, .mem_category_name = zl_mem_category_name,
    .mem_pressure = zli_mem_pressure, .tensor_data = zl_tensor_data, .tensor_is_contiguous = zl_tensor_is_contiguous,
    .tensor_numel = zl_tensor_numel, .tensor_new = zl_tensor_new, .tensor_release = zl_tensor_release,
    .tensor_on_device = zli_tensor_on_device, .tensor_on_pinned = zli_tensor_on_pinned,
};

/* The folder of the file holding this code: libzlua.so, or the program a
 * static libzlua is linked into; "" when the loader cannot say. */
static void own_dir(char *dir, size_t n)
{
    Dl_info info;
    char path[PATH_MAX];
    dir[0] = '\0';
    if (!dladdr((void *)&own_dir, &info) || !info.dli_fname || !realpath(info.dli_fname, path)) return;
    const char *slash = strrchr(path, '/');
    if (slash) snprintf(dir, n, "%.*s", (int)(slash - path), path);
}

/* The module is looked for where it is installed beside libzlua (the same
 * folder, or lib/ beside a program's bin/), in the library folder this
 * build installs to, and, for a program inside this build's tree, where
 * the build puts it; ZLUA_CUDA_MODULE names the file instead. */
static void open_cuda(void)
{
    char dir[1024], paths[4][1200];
    const char *list[4] = {0};
    int n = 0;
    const char *env = getenv("ZLUA_CUDA_MODULE");
    if (env && *env) {
        list[n++] = env;
    } else {
        own_dir(dir, sizeof dir);
        if (dir[0]) {
            snprintf(paths[n], sizeof paths[n], "%s/" CUDA_MODULE, dir);
            list[n] = paths[n], n++;
            snprintf(paths[n], sizeof paths[n], "%s/../" ZLUA_MODULE_RELDIR "/" CUDA_MODULE, dir);
            list[n] = paths[n], n++;
        }
        snprintf(paths[n], sizeof paths[n], "%s/" CUDA_MODULE, ZLUA_MODULE_DIR);
        list[n] = paths[n], n++;
        size_t bl = strlen(ZLUA_BUILD_DIR);
        if (dir[0] && !strncmp(dir, ZLUA_BUILD_DIR, bl) && (dir[bl] == '/' || dir[bl] == '\0')) {
            snprintf(paths[n], sizeof paths[n], "%s/" CUDA_MODULE, ZLUA_MODULE_BUILD_DIR);
            list[n] = paths[n], n++;
        }
    }
    char why[1600];
    void *lib = zli_dl_open_first(list, n, why, sizeof why);
    if (!lib) {
        snprintf(g_why, sizeof g_why, "no CUDA device: the CUDA backend (" CUDA_MODULE ") did not load: %s%s", why,
                 env && *env ? "" : "; ZLUA_CUDA_MODULE may name the file");
        return;
    }
    zli_backend_entry entry;
    if (!zli_dl_sym(lib, CUDA_MODULE, "zlua_cuda_backend", (void **)&entry, why, sizeof why)) {
        snprintf(g_why, sizeof g_why, "no CUDA device: %s", why);
        return;
    }
    const zli_backend *be = entry(&core_api, why, sizeof why);
    if (!be || be->abi != ZLI_BACKEND_ABI || be->kind != ZL_DEVICE_CUDA) {
        snprintf(g_why, sizeof g_why, "no CUDA device: the CUDA backend (" CUDA_MODULE ") cannot serve this zlua: %s",
                 be ? "it was built from another zlua; rebuild and reinstall both" : why);
        return;
    }
    __atomic_store_n(&g_cuda, be, __ATOMIC_RELEASE);
}
#else
static void open_cuda(void)
{
    snprintf(g_why, sizeof g_why, "no CUDA device: this zlua was built without CUDA (CMake found no CUDA toolkit, "
             "or was told -DZLUA_CUDA=OFF); install the toolkit (nvcc) and rebuild");
}
#endif

zl_status zli_backend_register(zl_device kind, const zli_backend *b)
{
    if (kind != ZL_DEVICE_CUDA || (b && b->kind != kind))
        return zl_error(ZL_EINVAL, "backend_register: device kind %d cannot take another backend", (int)kind);
    atomic_store(&zl_context_current()->cuda_backend, b);
    return ZL_OK;
}

const zli_backend *zli_backend_of(const char *op, zl_device kind)
{
    if (kind == ZL_DEVICE_CPU) return &zli_cpu_backend;
    if (!zli_backend_known(kind)) {
        zl_error(ZL_EINVAL, "%s: unknown device kind %d", op, (int)kind);
        return NULL;
    }
    const zli_backend *r = atomic_load(&zl_context_current()->cuda_backend);
    if (r) return r;
    pthread_once(&g_once, open_cuda);
    if (!g_cuda) zl_error(ZL_EDEVICE, "%s", g_why);
    return g_cuda;
}

bool zli_backend_known(zl_device kind) { return kind == ZL_DEVICE_CPU || kind == ZL_DEVICE_CUDA; }

const zli_backend *zli_backend_opened(zl_device kind)
{
    if (kind == ZL_DEVICE_CPU) return &zli_cpu_backend;
    if (kind != ZL_DEVICE_CUDA) return NULL;
    const zli_backend *r = atomic_load(&zl_context_current()->cuda_backend);
    return r ? r : __atomic_load_n(&g_cuda, __ATOMIC_ACQUIRE);
}
