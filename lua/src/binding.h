/* Private to the binding: the tensor userdata, the helpers every lua/src/<area>.c
 * uses to check and push tensors and to turn engine errors into Lua errors, and
 * the per-state runtime that hooks and the memory-pressure handler call back into.
 * The binding keeps no process-global state: what is per state lives in the
 * runtime (the registry) and its engine context. Only the executable's files
 * (zlua.c, repl.c, launch.c) keep some, for the process's one REPL and its signals. */
#ifndef ZLB_BINDING_H
#define ZLB_BINDING_H

#include <pthread.h>
#include <lua.h>
#include <lauxlib.h>
#include "zlua/zlua.h"

#define ZLB_TENSOR_MT "zlua.Tensor"
#define ZLB_GENERATOR_MT "zlua.Generator"

/* A tensor userdata holds exactly one engine reference, or NULL once released
 * (or before the engine call that fills it has returned). */
typedef struct zlb_tensor {
    zl_tensor *t;
} zlb_tensor;

/* Push a new, empty tensor userdata and return its slot. Call it BEFORE the
 * engine call and store the result in the slot: if Lua runs out of memory
 * making the box, nothing has been allocated by the engine yet. */
zl_tensor **zlb_new_tensor(lua_State *L);
/* Push a userdata owning `t` (a new reference); on a Lua memory error while
 * boxing, `t` is released before the error propagates. NULL pushes nil. */
void zlb_push_tensor(lua_State *L, zl_tensor *t);
/* The tensor at `idx`, in host memory: one metatable compare; raises a Lua
 * argument error for anything else, "tensor was released" for a released one,
 * and one naming the device for a tensor on a device (every op the binding
 * reaches through it runs on the CPU). */
zl_tensor *zlb_check_tensor(lua_State *L, int idx);
/* The same on any device: for what reads only the header (shape, dtype,
 * device), moves the tensor between devices, or calls an op, which runs on
 * the tensor's device or refuses it by name (engine/ops/device_kernels.h). */
zl_tensor *zlb_check_tensor_any(lua_State *L, int idx);
/* As zlb_check_tensor, but nil or none gives NULL. */
zl_tensor *zlb_opt_tensor(lua_State *L, int idx);
/* As zlb_opt_tensor, on any device. */
zl_tensor *zlb_opt_tensor_any(lua_State *L, int idx);
/* End a binding whose result was stored into the box on top of the stack:
 * raises when `t` is NULL, otherwise lets memory growth drive the collector.
 * Returns 1 (the box). */
int zlb_result(lua_State *L, zl_tensor *t);
/* Raise a Lua error carrying zl_last_error(). Never returns. */
int zlb_raise(lua_State *L);
/* luaL_error, but the position named is the innermost frame outside zlua's own
 * modules (chunks "@zlua/..."): the script's line, not a wrapper's. */
int zlb_error(lua_State *L, const char *fmt, ...);
/* A dtype argument by name ("f32", "bf16", ...); `def` when nil or none. */
zl_dtype zlb_opt_dtype(lua_State *L, int idx, zl_dtype def);
/* A shape given as a Lua table of sizes (a raw, already normalised list). */
int zlb_check_shape(lua_State *L, int idx, int64_t *shape);
/* The string at idx, which reaches C as a C string (a path, a tensor name
 * written into a file): one holding a NUL byte is refused, naming `what` and
 * the byte, since C would cut it there and so name another file or tensor.
 * Raises a Lua argument error for a non-string. */
const char *zlb_check_cstring(lua_State *L, int idx, const char *op, const char *what);
/* A generator argument (nil or none: the default generator). */
zl_generator *zlb_opt_generator(lua_State *L, int idx);

/* The state's runtime: its engine context (RNG, thread count, memory
 * accounting and pressure handler, none shared with another state), a thread
 * kept for calling back into Lua from engine frames (hooks, the pressure
 * handler), and the collector's bookkeeping. Counted by the registry sentinel
 * and by every hook, so a hook that outlives its state finds `alive` false. */
typedef struct zlb_runtime {
    zl_context *ctx;
    lua_State *cb;
    int refs;
    int alive;
    pthread_t owner;      /* the OS thread that opened the state */
    int64_t gc_base;      /* the context's bytes after the last collection (see tensor.c) */
    int64_t gc_step;
    int64_t gc_most;            /* the growth that always collects: a sixteenth of a memory limit, if any */
} zlb_runtime;

zlb_runtime *zlb_runtime_of(lua_State *L);
void zlb_runtime_retain(zlb_runtime *rt);
void zlb_runtime_release(zlb_runtime *rt);
/* The state's context starts routing its memory pressure to the collector;
 * detach stops it when the state closes. */
void zlb_memory_attach(zlb_runtime *rt);
void zlb_memory_detach(zlb_runtime *rt);

/* The aio block at idx (nil: DeepSpeed's defaults) checked into *c. */
void zlb_aio_config(lua_State *L, int idx, zl_aio_config *c);
/* The translated config zlua.zero.state's c_config returns, at idx, into *c;
 * its strings are borrowed from the table. Shared by core.zero_new and the
 * C hosts' reader (ds_config.c), so both translate alike. */
void zlb_zero_config(lua_State *L, int idx, zl_zero_config *c);
/* A param group's table (an optimizer's param_groups entry) at idx into *h. */
void zlb_zero_hparams(lua_State *L, int idx, zl_zero_hparams *h);
/* The ZeRO engine at idx (zero.c's userdata); NULL for nil. */
zl_zero *zlb_opt_zero(lua_State *L, int idx);
/* A DeepSpeed fp16 block at idx into *c, as core.loss_scaler_new reads it. */
void zlb_loss_scaler_config(lua_State *L, int idx, zl_loss_scaler_config *c);
/* The schedule of a core.lr_schedule userdata at idx (zlua.lr's objects keep
 * one as .c); it and its groups are borrowed while the userdata lives. */
const zl_lr_schedule *zlb_lr_schedule_of(lua_State *L, int idx);
/* The state's communicator (opened on first use). */
zl_comm *zlb_comm_of(lua_State *L);
/* luaL_setfuncs for the binding: each function is wrapped so that it runs
 * with the state's context current (see init.c). The functions must not use
 * upvalues of their own. */
void zlb_setfuncs(lua_State *L, const luaL_Reg *fns);
/* luaL_newlib through zlb_setfuncs (method tables). */
void zlb_newlib(lua_State *L, const luaL_Reg *fns);

/* Each area adds its functions to the core table on top of the stack. */
void zlb_open_tensor(lua_State *L);
void zlb_open_ops(lua_State *L);
void zlb_open_autograd(lua_State *L);
void zlb_open_engine(lua_State *L);
void zlb_open_io(lua_State *L);
void zlb_open_checkpoint(lua_State *L);
void zlb_open_optim(lua_State *L);
void zlb_open_optimizer(lua_State *L);
void zlb_open_lr(lua_State *L);
void zlb_open_dist(lua_State *L);
void zlb_open_amp(lua_State *L);
void zlb_open_aio(lua_State *L);
void zlb_open_zero(lua_State *L);
void zlb_open_zero_ckpt(lua_State *L);
void zlb_open_device(lua_State *L);

#endif
