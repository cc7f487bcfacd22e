/* The binding of engine/comm for zlua.dist: one process-wide communicator per
 * Lua state, opened by dist_init with a named backend or on first use (the MPI
 * backend when the process was started by mpirun, the self backend otherwise),
 * and the collectives on tensors, blocking or as a request userdata to wait on. */
#include <stdlib.h>
#include <string.h>
#include "binding.h"

#define ZLB_COMM_MT "zlua.Comm"             /* the metatable */
#define ZLB_COMM_KEY "zlua.comm.default"     /* the registry slot of the communicator */
#define ZLB_REQUEST_MT "zlua.CommRequest"    /* the metatable of a request */

typedef struct zlb_comm {
    zl_comm *c;
} zlb_comm;

static int comm_gc(lua_State *L)
{
    zlb_comm *u = luaL_testudata(L, 1, ZLB_COMM_MT);
    if (u && u->c) {
        zl_comm_close(u->c);
        u->c = NULL;
    }
    return 0;
}

static const char *default_backend(void)
{
    return getenv("OMPI_COMM_WORLD_SIZE") ? "mpi" : "self";
}

/* The state's communicator, or NULL before one is opened. */
static zl_comm *comm_opened(lua_State *L)
{
    zl_comm *c = NULL;
    if (lua_getfield(L, LUA_REGISTRYINDEX, ZLB_COMM_KEY) == LUA_TUSERDATA) c = ((zlb_comm *)lua_touserdata(L, -1))->c;
    lua_pop(L, 1);
    return c;
}

/* Open the state's communicator on `backend`: kept in the registry, closed
 * with the state. */
static zl_comm *comm_open(lua_State *L, const char *backend)
{
    zlb_comm *u = lua_newuserdatauv(L, sizeof *u, 0);
    u->c = NULL;
    if (luaL_newmetatable(L, ZLB_COMM_MT)) {
        lua_pushcfunction(L, comm_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_setmetatable(L, -2);
    if (zl_comm_open(backend, &u->c)) zlb_raise(L);
    lua_setfield(L, LUA_REGISTRYINDEX, ZLB_COMM_KEY);
    return u->c;
}

zl_comm *zlb_comm_of(lua_State *L)
{
    zl_comm *c = comm_opened(L);
    return c ? c : comm_open(L, default_backend());
}

/* dist_init([backend]): open the communicator on backend ("self", "mpi" or
 * "nccl"; nil: as on first use). Once open, asking again for the same backend
 * does nothing and another one is an error naming both. */
static int l_init(lua_State *L)
{
    const char *backend = luaL_optstring(L, 1, NULL);
    zl_comm *c = comm_opened(L);
    if (!c) {
        comm_open(L, backend ? backend : default_backend());
        return 0;
    }
    if (backend && strcmp(backend, zl_comm_backend(c)) != 0)
        return zlb_error(L, "dist: the communicator is already open with backend '%s'; cannot open '%s' as well",
                         zl_comm_backend(c), backend);
    return 0;
}

static zl_comm_op check_op(lua_State *L, int idx)
{
    static const char *const names[] = {"sum", "max", "min", "avg", NULL};
    static const zl_comm_op ops[] = {ZL_COMM_SUM, ZL_COMM_MAX, ZL_COMM_MIN, ZL_COMM_AVG};
    return ops[luaL_checkoption(L, idx, "sum", names)];
}

static int status(lua_State *L, zl_status st)
{
    if (st) return zlb_raise(L);
    return 0;
}

static int l_rank(lua_State *L) { lua_pushinteger(L, zl_comm_rank(zlb_comm_of(L))); return 1; }
static int l_size(lua_State *L) { lua_pushinteger(L, zl_comm_size(zlb_comm_of(L))); return 1; }
static int l_local_rank(lua_State *L) { lua_pushinteger(L, zl_comm_local_rank(zlb_comm_of(L))); return 1; }
static int l_backend(lua_State *L) { lua_pushstring(L, zl_comm_backend(zlb_comm_of(L))); return 1; }

/* comm_unavailable(backend): nil, or why this build lacks the backend. */
static int l_unavailable(lua_State *L)
{
    const char *why = zl_comm_unavailable(luaL_checkstring(L, 1));
    if (why) lua_pushstring(L, why);
    else lua_pushnil(L);
    return 1;
}

static int l_device(lua_State *L)
{
    int index;
    zl_device kind = zl_comm_device(zlb_comm_of(L), &index);
    char where[32];
    lua_pushstring(L, zl_device_str(kind, index, where, sizeof where));
    return 1;
}
static int l_barrier(lua_State *L) { return status(L, zl_comm_barrier(zlb_comm_of(L))); }

static int l_allreduce(lua_State *L)
{
    zl_comm *c = zlb_comm_of(L);
    return status(L, zl_comm_allreduce(c, zlb_check_tensor(L, 1), check_op(L, 2)));
}

static int l_reduce_scatter(lua_State *L)
{
    zl_comm *c = zlb_comm_of(L);
    return status(L, zl_comm_reduce_scatter(c, zlb_check_tensor(L, 1), zlb_check_tensor(L, 2), check_op(L, 3)));
}

static int l_allgather(lua_State *L)
{
    zl_comm *c = zlb_comm_of(L);
    return status(L, zl_comm_allgather(c, zlb_check_tensor(L, 1), zlb_check_tensor(L, 2)));
}

static int l_broadcast(lua_State *L)
{
    zl_comm *c = zlb_comm_of(L);
    return status(L, zl_comm_broadcast(c, zlb_check_tensor(L, 1), (int)luaL_optinteger(L, 2, 0)));
}

static int l_set_timeout(lua_State *L) { return status(L, zl_comm_set_timeout(zlb_comm_of(L), luaL_checknumber(L, 1))); }

/* ---- requests ----
 * A request userdata owns its engine request until it is waited on. One that
 * is collected unwaited is waited on by __gc, since MPI may still be writing
 * into its tensors (which the engine keeps alive until then); an error there
 * has nowhere to go and is dropped. */

typedef struct zlb_request {
    zl_comm_request *r;   /* NULL once waited on (or before the engine call) */
    const char *what;     /* the collective, for messages */
} zlb_request;

static int request_gc(lua_State *L)
{
    zlb_request *u = luaL_testudata(L, 1, ZLB_REQUEST_MT);
    if (u && u->r) {
        zl_comm_request *r = u->r;
        u->r = NULL;
        zl_comm_wait(r);
    }
    return 0;
}

/* req:wait(): true once the collective has completed; raises its error. */
static int request_wait(lua_State *L)
{
    zlb_request *u = luaL_checkudata(L, 1, ZLB_REQUEST_MT);
    if (!u->r) return zlb_error(L, "%s request was already waited on", u->what);
    zl_comm_request *r = u->r;
    u->r = NULL;
    if (zl_comm_wait(r)) return zlb_raise(L);
    lua_pushboolean(L, 1);
    return 1;
}

static int request_tostring(lua_State *L)
{
    zlb_request *u = luaL_checkudata(L, 1, ZLB_REQUEST_MT);
    lua_pushfstring(L, "%s request (%s)", u->what, u->r ? "not waited on" : "waited on");
    return 1;
}

/* Push an empty request box; call it before the engine call (as
 * zlb_new_tensor), after the arguments are checked. */
static zlb_request *new_request(lua_State *L, const char *what)
{
    zlb_request *u = lua_newuserdatauv(L, sizeof *u, 0);
    u->r = NULL;
    u->what = what;
    if (luaL_newmetatable(L, ZLB_REQUEST_MT)) {
        static const luaL_Reg methods[] = {{"wait", request_wait}, {NULL, NULL}};
        zlb_newlib(L, methods);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, request_gc);
        lua_setfield(L, -2, "__gc");
        lua_pushcfunction(L, request_tostring);
        lua_setfield(L, -2, "__tostring");
    }
    lua_setmetatable(L, -2);
    return u;
}

/* The request box on top of the stack, or the engine's error. */
static int started(lua_State *L, zlb_request *u, zl_comm_request *r)
{
    if (!r) return zlb_raise(L);
    u->r = r;
    return 1;
}

static int l_barrier_async(lua_State *L)
{
    zl_comm *c = zlb_comm_of(L);
    zlb_request *u = new_request(L, "barrier");
    return started(L, u, zl_comm_barrier_async(c));
}

static int l_allreduce_async(lua_State *L)
{
    zl_comm *c = zlb_comm_of(L);
    zl_tensor *t = zlb_check_tensor(L, 1);
    zl_comm_op op = check_op(L, 2);
    zlb_request *u = new_request(L, "allreduce");
    return started(L, u, zl_comm_allreduce_async(c, t, op));
}

static int l_reduce_scatter_async(lua_State *L)
{
    zl_comm *c = zlb_comm_of(L);
    zl_tensor *in = zlb_check_tensor(L, 1), *out = zlb_check_tensor(L, 2);
    zl_comm_op op = check_op(L, 3);
    zlb_request *u = new_request(L, "reduce_scatter");
    return started(L, u, zl_comm_reduce_scatter_async(c, in, out, op));
}

static int l_allgather_async(lua_State *L)
{
    zl_comm *c = zlb_comm_of(L);
    zl_tensor *in = zlb_check_tensor(L, 1), *out = zlb_check_tensor(L, 2);
    zlb_request *u = new_request(L, "allgather");
    return started(L, u, zl_comm_allgather_async(c, in, out));
}

static int l_broadcast_async(lua_State *L)
{
    zl_comm *c = zlb_comm_of(L);
    zl_tensor *t = zlb_check_tensor(L, 1);
    int root = (int)luaL_optinteger(L, 2, 0);
    zlb_request *u = new_request(L, "broadcast");
    return started(L, u, zl_comm_broadcast_async(c, t, root));
}

/* Adds the dist functions to the core table on top of the stack. */
void zlb_open_dist(lua_State *L)
{
    static const luaL_Reg fns[] = {
        {"dist_rank", l_rank},           {"dist_world_size", l_size},      {"dist_local_rank", l_local_rank},
        {"dist_backend", l_backend},     {"dist_device", l_device},        {"dist_barrier", l_barrier},
        {"dist_allreduce", l_allreduce}, {"comm_unavailable", l_unavailable},
        {"dist_reduce_scatter", l_reduce_scatter}, {"dist_allgather", l_allgather},
        {"dist_broadcast", l_broadcast}, {"dist_set_timeout", l_set_timeout}, {"dist_init", l_init},
        {"dist_barrier_async", l_barrier_async},   {"dist_allreduce_async", l_allreduce_async},
        {"dist_reduce_scatter_async", l_reduce_scatter_async}, {"dist_allgather_async", l_allgather_async},
        {"dist_broadcast_async", l_broadcast_async}, {NULL, NULL},
    };
    zlb_setfuncs(L, fns);
}
