/* cuBLASLt's functions looked up at run time (blas_lib.h says why): the
 * library the build found (ZLUA_CUBLASLT_FILE), else the loader's search for
 * the major version the headers describe. */
#include <pthread.h>
#include "../core/dl.h"
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
    void *lib = zli_dl_open_first(tried, 2, g_why, sizeof g_why);
    if (!lib) return;
#define LT_LOOKUP(f) \
    if (!zli_dl_sym(lib, LT_SONAME, #f, (void **)&g_api.f, g_why, sizeof g_why)) return;
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
