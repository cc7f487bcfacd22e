/* Lua code under libFuzzer (tests/fuzz): a zlua state (zlua/embed.h, the
 * modules as compiled in) whose harness chunk returns the function each input
 * is given to. libFuzzer's instrumentation sees only C, so a line hook feeds
 * it the Lua lines each input runs: inputs that reach new Lua code are kept. */
#ifndef ZLUA_FUZZ_LUA_H
#define ZLUA_FUZZ_LUA_H

#include <stddef.h>
#include <stdint.h>

/* Open the state and run `chunk` (named `name` in messages) with `arg` as its
 * one argument (NULL: none); it must return a function. Once per process. */
void fuzz_lua_open(const char *name, const char *chunk, const char *arg);

/* Call that function with the input as a Lua string. The function checks
 * what the code under test did and raises on anything wrong; a raise is a
 * finding: its message and traceback are printed and the process aborts. */
void fuzz_lua_run(const uint8_t *data, size_t size);

#endif
