/* Private to the engine: a library opened at run time instead of linked
 * (cuBLASLt, NCCL), its functions looked up into a table, and why not when
 * it does not load, for the caller's error. */
#ifndef ZL_CORE_DL_H
#define ZL_CORE_DL_H

#include <stdbool.h>
#include <stddef.h>

#ifndef ZLI_HIDDEN
#define ZLI_HIDDEN __attribute__((visibility("hidden")))
#endif

/* The first of paths[0..n) that opens (NULL entries skipped), or NULL with
 * each failure's reason in why, "; " between them. */
ZLI_HIDDEN void *zli_dl_open_first(const char *const *paths, int n, char *why, size_t size);

/* *slot = lib's function named sym; false with why naming it and the library
 * (libname) that lacks it. */
ZLI_HIDDEN bool zli_dl_sym(void *lib, const char *libname, const char *sym, void **slot, char *why, size_t size);

#endif
