/* The core's process-wide engine bindings: memory statistics per category,
 * random seeds and generator objects, thread count, version, and the fault
 * injection the tests use. */
#include <time.h>
#include <unistd.h>
#include "binding.h"

static int memory(lua_State *L)
{
    lua_createtable(L, 0, ZL_MEM_COUNT);
    for (int c = 0; c < ZL_MEM_COUNT; c++) {
        zl_mem_stats s = zl_mem_stats_of((zl_mem_category)c);
        lua_createtable(L, 0, 2);
        lua_pushinteger(L, s.current);
        lua_setfield(L, -2, "current");
        lua_pushinteger(L, s.peak);
        lua_setfield(L, -2, "peak");
        lua_setfield(L, -2, zl_mem_category_name((zl_mem_category)c));
    }
    return 1;
}

/* set_memory_release(bytes): blocks this large go back to the kernel when freed (0: never). */
static int set_memory_release(lua_State *L)
{
    lua_Integer n = luaL_checkinteger(L, 1);
    luaL_argcheck(L, n >= 0, 1, "a byte count >= 0");
    zl_mem_set_release_threshold((size_t)n);
    return 0;
}

/* memory_cache(): {cached, hits, misses, limit} of the block cache. */
static int memory_cache(lua_State *L)
{
    zl_mem_cache_stats s = zl_mem_cache_info();
    lua_createtable(L, 0, 4);
    lua_pushinteger(L, s.cached);
    lua_setfield(L, -2, "cached");
    lua_pushinteger(L, s.hits);
    lua_setfield(L, -2, "hits");
    lua_pushinteger(L, s.misses);
    lua_setfield(L, -2, "misses");
    lua_pushinteger(L, s.limit);
    lua_setfield(L, -2, "limit");
    return 1;
}

/* memory_limit() -> bytes, where the limit comes from (zl_mem_limit). */
static int memory_limit(lua_State *L)
{
    const char *source = NULL;
    lua_pushinteger(L, zl_mem_limit(&source));
    lua_pushstring(L, source);
    return 2;
}

static int empty_cache(lua_State *L)
{
    lua_pushinteger(L, (lua_Integer)zl_mem_empty_cache());
    return 1;
}

/* set_cache_limit(bytes | nil): nil restores the default, 0 turns the cache off. */
static int set_cache_limit(lua_State *L)
{
    if (lua_isnoneornil(L, 1)) {
        zl_mem_set_cache_limit(SIZE_MAX);
        return 0;
    }
    lua_Integer n = luaL_checkinteger(L, 1);
    luaL_argcheck(L, n >= 0, 1, "a byte count >= 0, or nil for the default");
    zl_mem_set_cache_limit((size_t)n);
    return 0;
}

static int reset_peak(lua_State *L)
{
    (void)L;
    zl_mem_reset_peak();
    return 0;
}

/* Testing: the n-th engine allocation from now fails (0 disables). */
static int mem_fail_after(lua_State *L)
{
    zl_mem_fail_after(luaL_checkinteger(L, 1));
    return 0;
}

static int manual_seed(lua_State *L)
{
    zl_manual_seed((uint64_t)luaL_checkinteger(L, 1));
    return 0;
}

/* Seconds on a monotonic clock: for step timers (os.clock is CPU time, summed
 * over threads). */
static int now(lua_State *L)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    lua_pushnumber(L, (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9);
    return 1;
}

/* Seconds since the epoch, with a fraction: monitors' wall time. */
static int wall_time(lua_State *L)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    lua_pushnumber(L, (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9);
    return 1;
}

/* getpid(): names temporary files and folders apart from other processes'. */
static int get_pid(lua_State *L)
{
    lua_pushinteger(L, (lua_Integer)getpid());
    return 1;
}

/* isatty(fd): whether a progress bar makes sense on that stream. */
static int is_tty(lua_State *L)
{
    lua_pushboolean(L, isatty((int)luaL_checkinteger(L, 1)));
    return 1;
}

/* ---- generators: a userdata owning one zl_generator ---- */

typedef struct zlb_generator {
    zl_generator *g;
} zlb_generator;

zl_generator *zlb_opt_generator(lua_State *L, int idx)
{
    if (lua_isnoneornil(L, idx)) return NULL;
    zlb_generator *u = luaL_checkudata(L, idx, ZLB_GENERATOR_MT);
    if (!u->g) luaL_argerror(L, idx, "generator was freed");
    return u->g;
}

static int generator_new(lua_State *L)
{
    uint64_t seed = (uint64_t)luaL_checkinteger(L, 1);
    zlb_generator *u = lua_newuserdatauv(L, sizeof *u, 0);
    u->g = NULL;
    luaL_setmetatable(L, ZLB_GENERATOR_MT);
    u->g = zl_generator_new(seed);
    if (!u->g) return zlb_raise(L);
    return 1;
}

static int generator_gc(lua_State *L)
{
    zlb_generator *u = luaL_testudata(L, 1, ZLB_GENERATOR_MT);
    if (!u) return 0;   /* the metamethod called by hand on something else */
    zl_generator_free(u->g);
    u->g = NULL;
    return 0;
}

static int generator_seed(lua_State *L)
{
    zl_generator *g = zlb_opt_generator(L, 1);
    zl_generator_seed(g, (uint64_t)luaL_checkinteger(L, 2));
    return 0;
}

static int generator_state(lua_State *L)
{
    zl_generator *g = zlb_opt_generator(L, 1);
    lua_pushinteger(L, (lua_Integer)zl_generator_get_seed(g));
    lua_pushinteger(L, (lua_Integer)zl_generator_get_offset(g));
    return 2;
}

static int generator_set_offset(lua_State *L)
{
    zl_generator *g = zlb_opt_generator(L, 1);
    zl_generator_set_offset(g, (uint64_t)luaL_checkinteger(L, 2));
    return 0;
}

static int randint(lua_State *L)
{
    lua_Integer n = luaL_checkinteger(L, 1);
    luaL_argcheck(L, n > 0, 1, "must be > 0");
    lua_pushinteger(L, zl_generator_randint(zlb_opt_generator(L, 2), n));
    return 1;
}

static int set_num_threads(lua_State *L)
{
    lua_Integer n = luaL_checkinteger(L, 1);
    luaL_argcheck(L, n > 0, 1, "must be > 0");
    zl_set_num_threads((int)n);
    return 0;
}

static int get_num_threads(lua_State *L)
{
    lua_pushinteger(L, zl_get_num_threads());
    return 1;
}

static int bf16_dot_products(lua_State *L)
{
    lua_pushboolean(L, zl_bf16_dot_products());
    return 1;
}

void zlb_open_engine(lua_State *L)
{
    static const luaL_Reg fns[] = {
        {"now", now}, {"wall_time", wall_time}, {"isatty", is_tty}, {"getpid", get_pid},
        {"memory", memory}, {"reset_peak", reset_peak}, {"set_memory_release", set_memory_release}, {"mem_fail_after", mem_fail_after},
        {"memory_cache", memory_cache}, {"memory_limit", memory_limit}, {"empty_cache", empty_cache},
        {"set_cache_limit", set_cache_limit},
        {"manual_seed", manual_seed}, {"generator_new", generator_new},
        {"generator_seed", generator_seed}, {"generator_state", generator_state},
        {"generator_set_offset", generator_set_offset}, {"randint", randint},
        {"set_num_threads", set_num_threads}, {"get_num_threads", get_num_threads},
        {"bf16_dot_products", bf16_dot_products},
        {NULL, NULL},
    };
    zlb_setfuncs(L, fns);
    lua_pushstring(L, zl_version());
    lua_setfield(L, -2, "version");
    luaL_newmetatable(L, ZLB_GENERATOR_MT);
    lua_pushcfunction(L, generator_gc);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, generator_gc);
    lua_setfield(L, -2, "__close");
    lua_setfield(L, -2, "Generator");
}
