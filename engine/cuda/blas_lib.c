/* cuBLASLt's functions looked up at run time (blas_lib.h says why): the
 * library the build found (ZLUA_CUBLASLT_FILE), else the loader's search for
 * the major version the headers describe. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include "../core/tensor_impl.h"
#include "blas_lib.h"

#define STR_(x) #x
#define STR(x) STR_(x)
#define LT_SONAME "libcublasLt.so." STR(CUBLAS_VER_MAJOR)

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static zli_lt_api g_api;
static bool g_ok;
static char g_why[512];

static void open_lt(void)
{
    const char *tried[2] = {
#ifdef ZLUA_CUBLASLT_FILE
        ZLUA_CUBLASLT_FILE,
#else
        NULL,
#endif
        LT_SONAME};
    void *lib = NULL;
    for (int i = 0; i < 2 && !lib; i++)
        if (tried[i] && !(lib = dlopen(tried[i], RTLD_NOW | RTLD_LOCAL)))
            snprintf(g_why, sizeof g_why, "%s", dlerror());
    if (!lib) return;
#define LT_LOOKUP(f)                                                                    \
    if (!(*(void **)&g_api.f = dlsym(lib, #f))) {                                       \
        snprintf(g_why, sizeof g_why, "%s has no %s: %s", LT_SONAME, #f, dlerror()); \
        return;                                                                         \
    }
    ZLI_LT_FUNCTIONS(LT_LOOKUP)
#undef LT_LOOKUP
    g_ok = true;
}

const zli_lt_api *zli_lt_api_get(void)
{
    pthread_once(&g_once, open_lt);
    if (g_ok) return &g_api;
    zl_error(ZL_EDEVICE, "cuBLASLt (%s), which device GEMMs need, did not load: %s", LT_SONAME, g_why);
    return NULL;
}
