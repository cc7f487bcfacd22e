/* Libraries opened at run time (dl.h). */
#include <dlfcn.h>
#include <stdio.h>
#include "dl.h"

void *zli_dl_open_first(const char *const *paths, int n, char *why, size_t size)
{
    size_t used = 0;
    if (size) why[0] = '\0';
    for (int i = 0; i < n; i++) {
        if (!paths[i]) continue;
        void *lib = dlopen(paths[i], RTLD_NOW | RTLD_LOCAL);
        if (lib) return lib;
        if (used + 1 >= size) continue;
        int k = snprintf(why + used, size - used, "%s%s", used ? "; " : "", dlerror());
        if (k > 0) used += (size_t)k < size - used ? (size_t)k : size - used - 1;
    }
    return NULL;
}

bool zli_dl_sym(void *lib, const char *libname, const char *sym, void **slot, char *why, size_t size)
{
    if ((*slot = dlsym(lib, sym))) return true;
    snprintf(why, size, "%s has no %s: %s", libname, sym, dlerror());
    return false;
}
