/* zlua/embed.h — the Lua side of zlua for host applications: open a Lua state
 * with the engine's modules, run scripts, and the luaopen_zlua entry point for
 * a stock Lua interpreter. Link libzlua-lua (and libzlua). */
#ifndef ZLUA_EMBED_H
#define ZLUA_EMBED_H

#include "zlua/base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lua_State lua_State;
typedef struct zlua_state zlua_state;

/* `require 'zlua'` from a stock interpreter: registers every compiled-in module
 * (zlua.nn, ...) in package.preload and returns the zlua table.
 *
 * Each Lua state that opens zlua has its own engine context (zlua/context.h):
 * its RNG, thread count, memory accounting and pressure handler are its own,
 * so several states in one process, used alternately from one thread or each
 * from its own, never see each other's. Its C functions make that context
 * current on the calling thread; zlua_open, zlua_close, zlua_dofile and
 * zlua_dostring give the caller back the context that was current before. */
ZL_API int luaopen_zlua(lua_State *L);

/* A new Lua state with the standard libraries, the zlua modules preloaded and
 * the global `zl` set to require 'zlua'. NULL with zl_last_error() on failure. */
ZL_API zlua_state *zlua_open(void);
ZL_API void zlua_close(zlua_state *s);   /* NULL is a no-op */
/* The underlying Lua state (borrowed), for hosts that want the Lua C API. */
ZL_API lua_State *zlua_lua(zlua_state *s);
/* Run a script with the global `arg` set as the `lua` program does (arg[0] =
 * path, arg[1..argc] = argv). On failure zl_last_error() holds Lua's message
 * (with a traceback for an error the script raised) and the code says how it
 * failed: ZL_EFORMAT a syntax error, ZL_EIO a file that cannot be read,
 * ZL_ENOMEM no memory, ZL_ESCRIPT an error raised as it ran; ZL_EINVAL for
 * NULL arguments. */
ZL_API zl_status zlua_dofile(zlua_state *s, const char *path, int argc, const char *const *argv);
/* Run a chunk of Lua source; `name` names it in error messages. The codes
 * are zlua_dofile's. */
ZL_API zl_status zlua_dostring(zlua_state *s, const char *source, const char *name);

#ifdef __cplusplus
}
#endif
#endif
