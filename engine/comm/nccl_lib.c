/* NCCL's functions looked up at run time (nccl_lib.h says why): the library
 * the build found (ZLUA_NCCL_FILE), else the loader's search for the major
 * version the header describes (LD_LIBRARY_PATH, as with PyTorch's wheel). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
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
    void *lib = NULL;
    size_t used = 0;
    for (int i = 0; i < 2 && !lib; i++) {
        if (!tried[i] || (lib = dlopen(tried[i], RTLD_NOW | RTLD_LOCAL))) continue;
        int n = snprintf(g_why + used, sizeof g_why - used, "%s%s", used ? "; " : "", dlerror());
        if (n > 0) used += (size_t)n < sizeof g_why - used ? (size_t)n : sizeof g_why - used - 1;
    }
    if (!lib) return;
#define NCCL_LOOKUP(f)                                                                    \
    if (!(*(void **)&g_api.f = dlsym(lib, #f))) {                                         \
        snprintf(g_why, sizeof g_why, "%s has no %s: %s", NCCL_SONAME, #f, dlerror()); \
        return;                                                                           \
    }
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
