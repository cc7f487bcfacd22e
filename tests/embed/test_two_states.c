/* Two Lua states in one process: each trains a small
 * MLP with dropout and AdamW on data drawn from its own RNG, one step of one
 * then one step of the other, and every loss equals, bit for bit, that of the
 * same run alone in a fresh state. Their RNG, thread count and memory
 * accounting stay their own, and the host's context sees none of it. */
#include <stdlib.h>
#include <lua.h>
#include "harness.h"
#include "zlua/embed.h"

#define STEPS 30

/* Globals of the chunk: setup(seed, threads) builds the model; step() trains
 * once and appends the loss, printed exactly, to `losses`. */
static const char *const trainer =
    "local nn, optim = require 'zlua.nn', require 'zlua.optim'\n"
    "function setup(seed, threads)\n"
    "  zl.set_num_threads(threads)\n"
    "  zl.manual_seed(seed)\n"
    "  net = nn.Sequential(nn.Linear(12, 48), nn.ReLU(), nn.Dropout(0.25), nn.Linear(48, 48),\n"
    "                      nn.ReLU(), nn.Dropout(0.25), nn.Linear(48, 3))\n"
    "  opt = optim.AdamW(net:parameters(), {lr = 1e-2, weight_decay = 0.05})\n"
    "  criterion = nn.MSELoss()\n"
    "  losses = {}\n"
    "end\n"
    "function step()\n"
    "  local x, y = zl.randn(32, 12), zl.randn(32, 3)\n"
    "  opt:zero_grad()\n"
    "  local loss = criterion(net(x), y)\n"
    "  loss:backward()\n"
    "  opt:step()\n"
    "  losses[#losses + 1] = string.format('%.17g', loss:item())\n"
    "end\n"
    "function bytes()\n"
    "  collectgarbage()\n"
    "  local n = 0\n"
    "  for _, s in pairs(zl.memory()) do n = n + s.current end\n"
    "  return n\n"
    "end\n";

typedef struct run {
    zlua_state *s;
    int seed, threads;
    char *losses[STEPS];
} run;

static bool open_run(run *r, int seed, int threads)
{
    char call[64];
    r->seed = seed;
    r->threads = threads;
    r->s = zlua_open();
    CHECK(r->s != NULL);
    if (!r->s) return false;
    snprintf(call, sizeof call, "setup(%d, %d)", seed, threads);
    CHECK(zlua_dostring(r->s, trainer, "trainer") == ZL_OK);
    CHECK(zlua_dostring(r->s, call, "setup") == ZL_OK);
    return true;
}

static void step(run *r) { CHECK(zlua_dostring(r->s, "step()", "step") == ZL_OK); }

/* A global number of the state, through the Lua C API. */
static lua_Number global_number(run *r, const char *chunk)
{
    CHECK(zlua_dostring(r->s, chunk, "query") == ZL_OK);
    lua_State *L = zlua_lua(r->s);
    lua_getglobal(L, "answer");
    lua_Number v = lua_tonumber(L, -1);
    lua_pop(L, 1);
    return v;
}

static void collect(run *r)
{
    lua_State *L = zlua_lua(r->s);
    lua_getglobal(L, "losses");
    CHECK(lua_rawlen(L, -1) == STEPS);
    for (int i = 0; i < STEPS; i++) {
        lua_rawgeti(L, -1, i + 1);
        const char *v = lua_tostring(L, -1);
        r->losses[i] = strdup(v ? v : "(none)");
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
}

static void close_run(run *r)
{
    zlua_close(r->s);
    r->s = NULL;
}

static void free_losses(run *r)
{
    for (int i = 0; i < STEPS; i++) free(r->losses[i]);
}

static void alone(run *r, int seed, int threads)
{
    if (!open_run(r, seed, threads)) return;
    for (int i = 0; i < STEPS; i++) step(r);
    collect(r);
    close_run(r);
}

static void check_same(const run *got, const run *want, const char *name)
{
    for (int i = 0; i < STEPS; i++)
        if (strcmp(got->losses[i], want->losses[i]) != 0)
            zt_fail(__FILE__, __LINE__, "state %s, step %d: loss %s interleaved, %s alone", name, i + 1,
                    got->losses[i], want->losses[i]);
}

TEST(interleaved_states_train_as_alone)
{
    int64_t host_bytes = 0;
    for (int c = 0; c < ZL_MEM_COUNT; c++) host_bytes += zl_mem_stats_of((zl_mem_category)c).current;
    zl_manual_seed(7);
    uint64_t host_offset = zl_generator_get_offset(NULL);
    int host_threads = zl_get_num_threads();

    run a1 = {0}, b1 = {0}, a = {0}, b = {0};
    alone(&a1, 1, 1);
    alone(&b1, 2, 2);
    /* The losses differ between the two runs: were one state to draw from the
     * other's generator, or run with its thread count, it would show. */
    CHECK(strcmp(a1.losses[0], b1.losses[0]) != 0);

    if (!open_run(&a, 1, 1) || !open_run(&b, 2, 2)) return;
    for (int i = 0; i < STEPS; i++) {
        step(&a);
        step(&b);
    }
    collect(&a);
    collect(&b);
    check_same(&a, &a1, "A");
    check_same(&b, &b1, "B");

    /* Each state's thread count is its own, and the host's is untouched. */
    CHECK(global_number(&a, "answer = zl.get_num_threads()") == 1);
    CHECK(global_number(&b, "answer = zl.get_num_threads()") == 2);
    CHECK(global_number(&a, "answer = zl.get_num_threads()") == 1);
    CHECK(zl_get_num_threads() == host_threads);

    /* A's accounting does not count B's tensors, nor the reverse. */
    lua_Number a_bytes = global_number(&a, "answer = bytes()");
    lua_Number b_bytes = global_number(&b, "answer = bytes()");
    CHECK(a_bytes > 0 && b_bytes > 0);
    CHECK(zlua_dostring(b.s, "big = zl.zeros(1000, 1000)", "big") == ZL_OK);
    CHECK(global_number(&b, "answer = bytes()") == b_bytes + 4e6);
    CHECK(global_number(&a, "answer = bytes()") == a_bytes);
    CHECK(zlua_dostring(b.s, "big = nil", "drop") == ZL_OK);
    CHECK(global_number(&b, "answer = bytes()") == b_bytes);

    /* The host's own context saw no tensor and no draw of either state. */
    int64_t now = 0;
    for (int c = 0; c < ZL_MEM_COUNT; c++) now += zl_mem_stats_of((zl_mem_category)c).current;
    CHECK(now == host_bytes);
    CHECK(zl_generator_get_seed(NULL) == 7 && zl_generator_get_offset(NULL) == host_offset);
    CHECK(zl_context_current() == zl_context_default());

    /* Closing one state leaves the other training as before. */
    close_run(&a);
    CHECK(zlua_dostring(b.s, "step()", "after") == ZL_OK);
    close_run(&b);
    free_losses(&a1);
    free_losses(&b1);
    free_losses(&a);
    free_losses(&b);
}
