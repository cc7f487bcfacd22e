/* Private to the zlua executable: the REPL (repl.c), the interruptible call it
 * borrows from the executable's main (zlua.c), and the message handler that
 * zlua.c shares with the embedding API (embed.c). */
#ifndef ZLB_REPL_H
#define ZLB_REPL_H

#include <lua.h>

/* A lua_pcall message handler: turns the error object into a string (its
 * __tostring, or a note of its type) and appends a traceback. */
int zlb_traceback(lua_State *L);

/* Calls the function below its narg arguments on the stack in protected mode
 * with zlb_traceback. Ctrl-C during the call raises "interrupted!" in Lua and
 * sets the engine's interrupt flag, both cleared when the call returns; the
 * SIGINT handler in place before the call is put back after it.
 * Returns the lua_pcall status, the message on the stack on error. */
int zlx_docall(lua_State *L, int narg, int nres);

/* Reads, evaluates and prints until end of input: readline with history and
 * completion when stdin is a terminal, plain lines without prompts otherwise. */
void zlx_repl(lua_State *L);

#endif
