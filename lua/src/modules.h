/* The Lua modules compiled into the binding (generated from lua/zlua by
 * cmake/embed_lua.cmake) and the function that registers them as preloads. */
#ifndef ZLB_MODULES_H
#define ZLB_MODULES_H

#include <stddef.h>

typedef struct zlb_module {
    const char *name;     /* "zlua", "zlua.nn", ... */
    const char *chunk;    /* "@zlua/nn.lua": the chunk name tracebacks show */
    const char *source;
    size_t len;
} zlb_module;

/* Terminated by an entry whose name is NULL. */
extern const zlb_module zlb_modules[];

#endif
