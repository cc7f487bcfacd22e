/* NCCL's functions looked up at run time (nccl_lib.h says why): the library
 * the build found (ZLUA_NCCL_FILE), else the loader's search for the major
 * version the header describes (LD_LIBRARY_PATH, as with PyTorch's wheel). */
#include <pthread.h>
#include "../core/dl.h"
#include "../core/tensor_impl.h"
#include "nccl_lib.h"

#define STR_(x) #x
#define STR(x) STR_(x)
#define NCCL_SONAME "libnccl.so." STR(NCCL_MAJOR)

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static zli_nccl_api g_api;
static bool g_ok;
static char g_why[768];

static void open_nccl(void)
{
    const char *tried[2] = {
#ifdef ZLUA_NCCL_FILE
        ZLUA_NCCL_FILE,
#else
        NULL,
#endif
        NCCL_SONAME};
    void *lib = zli_dl_open_first(tried, 2, g_why, sizeof g_why);
    if (!lib) return;
#define NCCL_LOOKUP(f) \
    if (!zli_dl_sym(lib, NCCL_SONAME, #f, (void **)&g_api.f, g_why, sizeof g_why)) return;
    ZLI_NCCL_FUNCTIONS(NCCL_LOOKUP)
#undef NCCL_LOOKUP
    g_ok = true;
}

const zli_nccl_api *zli_nccl_api_get(void)
{
    pthread_once(&g_once, open_nccl);
    if (g_ok) return &g_api;
    zl_error(ZL_EDEVICE, "NCCL (%s), which the nccl backend needs, did not load: %s", NCCL_SONAME, g_why);
    return NULL;
}
