/* The binding of checkpoint files: safetensors saved, loaded and listed in one
 * call, an open file read by name or element range, a streaming writer, and
 * atomic replacement of small files. Engine messages name the file and offset. */
#include <stdlib.h>
#include <string.h>
#include "binding.h"

#define FILE_MT "zlua.SafetensorsFile"
#define WRITER_MT "zlua.SafetensorsWriter"

typedef struct named {
    const char *name;      /* a Lua string anchored by an argument table */
    zl_tensor *t;
} named;

static int named_cmp(const void *a, const void *b) { return strcmp(((const named *)a)->name, ((const named *)b)->name); }

static int meta_cmp(const void *a, const void *b)
{
    return strcmp(((const zl_safetensors_meta *)a)->key, ((const zl_safetensors_meta *)b)->key);
}

/* Scratch memory the collector frees, even when a later check raises. */
static void *scratch(lua_State *L, size_t n) { return lua_newuserdatauv(L, n ? n : 1, 0); }

/* The metadata table at idx (nil: none) as pairs sorted by key, so a file's
 * bytes do not depend on the table's iteration order. */
static zl_safetensors_meta *check_meta(lua_State *L, int idx, const char *op, int *n)
{
    *n = 0;
    if (lua_isnoneornil(L, idx)) return NULL;
    if (!lua_istable(L, idx))
        zlb_error(L, "%s: metadata must be a table of strings, got %s", op, luaL_typename(L, idx));
    int count = 0;
    for (lua_pushnil(L); lua_next(L, idx); lua_pop(L, 1)) count++;
    zl_safetensors_meta *m = scratch(L, (size_t)count * sizeof *m);
    for (lua_pushnil(L); lua_next(L, idx); lua_pop(L, 1)) {
        if (lua_type(L, -2) != LUA_TSTRING)
            zlb_error(L, "%s: metadata keys must be strings, got a %s key", op, luaL_typename(L, -2));
        if (lua_type(L, -1) != LUA_TSTRING)
            zlb_error(L, "%s: metadata must map strings to strings; key '%s' has a %s value", op,
                      lua_tostring(L, -2), luaL_typename(L, -1));
        m[*n].key = zlb_check_cstring(L, -2, op, "metadata key");
        m[*n].value = zlb_check_cstring(L, -1, op, "metadata value");
        (*n)++;
    }
    qsort(m, (size_t)*n, sizeof *m, meta_cmp);
    return m;
}

/* The tensors at idx: an array of {name, tensor} pairs kept in order, or a
 * table name -> tensor taken in name order. */
static named *check_named(lua_State *L, int idx, const char *op, int *n)
{
    if (!lua_istable(L, idx))
        zlb_error(L, "%s: tensors must be a table {name = tensor} or a list of {name, tensor}, got %s", op,
                  luaL_typename(L, idx));
    size_t len = lua_rawlen(L, idx);
    int count = 0;
    if (len == 0)
        for (lua_pushnil(L); lua_next(L, idx); lua_pop(L, 1)) count++;
    else
        count = (int)len;
    named *v = scratch(L, (size_t)count * sizeof *v);
    *n = 0;
    if (len) {
        for (int i = 1; i <= count; i++) {
            lua_rawgeti(L, idx, i);
            if (!lua_istable(L, -1)) zlb_error(L, "%s: entry %d must be a pair {name, tensor}, got %s", op, i, luaL_typename(L, -1));
            lua_rawgeti(L, -1, 1);
            lua_rawgeti(L, -2, 2);
            if (lua_type(L, -2) != LUA_TSTRING)
                zlb_error(L, "%s: entry %d: the name must be a string, got %s", op, i, luaL_typename(L, -2));
            if (!luaL_testudata(L, -1, ZLB_TENSOR_MT))
                zlb_error(L, "%s: entry %d ('%s'): expected a tensor, got %s", op, i, lua_tostring(L, -2), luaL_typename(L, -1));
            v[*n].name = zlb_check_cstring(L, -2, op, "tensor name");
            v[*n].t = zlb_check_tensor(L, lua_gettop(L));
            (*n)++;
            lua_pop(L, 3);
        }
        return v;
    }
    for (lua_pushnil(L); lua_next(L, idx); lua_pop(L, 1)) {
        if (lua_type(L, -2) != LUA_TSTRING)
            zlb_error(L, "%s: tensor names must be strings, got a %s key (a list takes {name, tensor} pairs)", op,
                      luaL_typename(L, -2));
        if (!luaL_testudata(L, -1, ZLB_TENSOR_MT))
            zlb_error(L, "%s: '%s' must be a tensor, got %s", op, lua_tostring(L, -2), luaL_typename(L, -1));
        v[*n].name = zlb_check_cstring(L, -2, op, "tensor name");
        v[*n].t = zlb_check_tensor(L, lua_gettop(L));
        (*n)++;
    }
    qsort(v, (size_t)*n, sizeof *v, named_cmp);
    return v;
}

/* save_safetensors(path, tensors [, metadata]) */
static int l_save(lua_State *L)
{
    const char *path = zlb_check_cstring(L, 1, "save_safetensors", "path");
    lua_settop(L, 3);   /* scratch pushed from here on must not pose as an argument */
    int n, nmeta;
    named *v = check_named(L, 2, "save_safetensors", &n);
    zl_safetensors_meta *m = check_meta(L, 3, "save_safetensors", &nmeta);
    const char **names = scratch(L, (size_t)n * sizeof *names);
    zl_tensor **ts = scratch(L, (size_t)n * sizeof *ts);
    for (int i = 0; i < n; i++) {
        names[i] = v[i].name;
        ts[i] = v[i].t;
    }
    if (zl_safetensors_save(path, n, names, ts, nmeta, m)) return zlb_raise(L);
    return 0;
}

/* ---- the open file ---- */

typedef struct lfile {
    zl_safetensors *f;
} lfile;

static int file_gc(lua_State *L)
{
    lfile *u = luaL_checkudata(L, 1, FILE_MT);
    zl_safetensors_close(u->f);
    u->f = NULL;
    return 0;
}

static zl_safetensors *check_file(lua_State *L, int idx)
{
    lfile *u = luaL_checkudata(L, idx, FILE_MT);
    if (!u->f) zlb_error(L, "the safetensors file was closed");
    return u->f;
}

/* Close the file of the userdata at idx now rather than at collection. */
static void close_file(lua_State *L, int idx)
{
    lfile *u = lua_touserdata(L, idx);
    zl_safetensors_close(u->f);
    u->f = NULL;
}

/* Open path into a new file userdata left on the stack; its __gc closes the
 * file if a later error unwinds. */
static zl_safetensors *push_open(lua_State *L, const char *path)
{
    lfile *u = lua_newuserdatauv(L, sizeof *u, 0);
    u->f = NULL;
    luaL_setmetatable(L, FILE_MT);
    if (!(u->f = zl_safetensors_open(path))) zlb_raise(L);
    return u->f;
}

static void push_metadata(lua_State *L, zl_safetensors *f)
{
    int n = zl_safetensors_metadata_count(f);
    lua_createtable(L, 0, n);
    for (int i = 0; i < n; i++) {
        const zl_safetensors_meta *m = zl_safetensors_metadata_at(f, i);
        lua_pushstring(L, m->value);
        lua_setfield(L, -2, m->key);
    }
}

/* A list of {name=, dtype=, shape=, numel=} in data order; dtype is zlua's
 * name, or the file's for a dtype zlua lacks ("F64"). */
static void push_info(lua_State *L, zl_safetensors *f)
{
    int n = zl_safetensors_count(f);
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        const zl_safetensors_entry *e = zl_safetensors_entry_at(f, i);
        lua_createtable(L, 0, 4);
        lua_pushstring(L, e->name);
        lua_setfield(L, -2, "name");
        lua_pushstring(L, e->dtype == ZL_DTYPE_COUNT ? e->dtype_name : zl_dtype_name(e->dtype));
        lua_setfield(L, -2, "dtype");
        lua_createtable(L, e->ndim, 0);
        for (int d = 0; d < e->ndim; d++) {
            lua_pushinteger(L, e->shape[d]);
            lua_rawseti(L, -2, d + 1);
        }
        lua_setfield(L, -2, "shape");
        lua_pushinteger(L, e->numel);
        lua_setfield(L, -2, "numel");
        lua_rawseti(L, -2, i + 1);
    }
}

static void read_into_table(lua_State *L, zl_safetensors *f, const char *name, int result)
{
    zl_tensor **slot = zlb_new_tensor(L);
    *slot = zl_safetensors_read(f, name, ZL_MEM_OTHER);
    zlb_result(L, *slot);
    lua_setfield(L, result, name);
}

/* load_safetensors(path [, names]) -> {name = tensor}, metadata */
static int l_load(lua_State *L)
{
    const char *path = zlb_check_cstring(L, 1, "load_safetensors", "path");
    if (!lua_isnoneornil(L, 2) && !lua_istable(L, 2))
        return zlb_error(L, "load_safetensors: names must be a list of strings, got %s", luaL_typename(L, 2));
    lua_settop(L, 2);
    zl_safetensors *f = push_open(L, path);
    int file = lua_gettop(L);
    lua_newtable(L);
    int result = lua_gettop(L);
    if (lua_isnil(L, 2)) {
        for (int i = 0; i < zl_safetensors_count(f); i++) read_into_table(L, f, zl_safetensors_entry_at(f, i)->name, result);
    } else {
        lua_Integer n = (lua_Integer)lua_rawlen(L, 2);
        for (lua_Integer i = 1; i <= n; i++) {
            if (lua_rawgeti(L, 2, i) != LUA_TSTRING)
                return zlb_error(L, "load_safetensors: name %d must be a string, got %s", (int)i, luaL_typename(L, -1));
            read_into_table(L, f, zlb_check_cstring(L, -1, "load_safetensors", "tensor name"), result);
            lua_pop(L, 1);
        }
    }
    push_metadata(L, f);
    close_file(L, file);
    return 2;
}

/* safetensors_info(path) -> list of {name=, dtype=, shape=, numel=}, metadata */
static int l_info(lua_State *L)
{
    const char *path = zlb_check_cstring(L, 1, "safetensors_info", "path");
    zl_safetensors *f = push_open(L, path);
    int file = lua_gettop(L);
    push_info(L, f);
    push_metadata(L, f);
    close_file(L, file);
    return 2;
}

/* safetensors_open(path) -> file */
static int l_open(lua_State *L)
{
    push_open(L, zlb_check_cstring(L, 1, "safetensors_open", "path"));
    return 1;
}

static int file_info(lua_State *L)
{
    push_info(L, check_file(L, 1));
    return 1;
}

static int file_metadata(lua_State *L)
{
    push_metadata(L, check_file(L, 1));
    return 1;
}

/* file:read(name): the whole tensor. file:read(name, offset [, count]): count
 * elements (default: the rest) after skipping `offset`, in row-major order, as
 * a 1-d tensor. */
static int file_read(lua_State *L)
{
    zl_safetensors *f = check_file(L, 1);
    const char *name = zlb_check_cstring(L, 2, "read", "tensor name");
    lua_settop(L, 4);
    zl_tensor **slot = zlb_new_tensor(L);
    if (lua_isnoneornil(L, 3)) {
        *slot = zl_safetensors_read(f, name, ZL_MEM_OTHER);
        return zlb_result(L, *slot);
    }
    lua_Integer offset = luaL_checkinteger(L, 3);
    const zl_safetensors_entry *e = zl_safetensors_find(f, name);
    if (!e || e->dtype == ZL_DTYPE_COUNT) {
        zl_safetensors_read_into(f, name, 0, NULL);   /* the engine's message for a missing or foreign tensor */
        return zlb_raise(L);
    }
    if (offset < 0 || offset > e->numel)
        return zlb_error(L, "%s: offset %I is out of range for tensor '%s' of %I elements", zl_safetensors_path(f),
                         offset, name, (lua_Integer)e->numel);
    lua_Integer count = lua_isnoneornil(L, 4) ? e->numel - offset : luaL_checkinteger(L, 4);
    if (count < 0 || count > e->numel - offset)
        return zlb_error(L, "%s: %I elements from offset %I are out of range for tensor '%s' of %I elements",
                         zl_safetensors_path(f), count, offset, name, (lua_Integer)e->numel);
    int64_t n = count;
    *slot = zl_tensor_new(e->dtype, 1, &n, ZL_MEM_OTHER);
    if (*slot && zl_safetensors_read_into(f, name, offset, *slot)) {
        zl_tensor_release(*slot);
        *slot = NULL;
    }
    return zlb_result(L, *slot);
}

static int file_tostring(lua_State *L)
{
    lfile *u = luaL_checkudata(L, 1, FILE_MT);
    if (!u->f) lua_pushliteral(L, "zlua.SafetensorsFile (closed)");
    else lua_pushfstring(L, "zlua.SafetensorsFile('%s', %d tensors)", zl_safetensors_path(u->f), zl_safetensors_count(u->f));
    return 1;
}

/* ---- the writer ---- */

typedef struct lwriter {
    zl_safetensors_writer *w;
} lwriter;

static int writer_gc(lua_State *L)
{
    lwriter *u = luaL_checkudata(L, 1, WRITER_MT);
    zl_safetensors_writer_abort(u->w);
    u->w = NULL;
    return 0;
}

static zl_safetensors_writer *check_writer(lua_State *L)
{
    lwriter *u = luaL_checkudata(L, 1, WRITER_MT);
    if (!u->w) zlb_error(L, "the safetensors writer was already committed or aborted");
    return u->w;
}

/* safetensors_writer(path, entries [, metadata]) -> writer, where entries is a
 * list of {name=, dtype=, shape=} (as safetensors_info gives). */
static int l_writer(lua_State *L)
{
    const char *path = zlb_check_cstring(L, 1, "safetensors_writer", "path");
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_settop(L, 3);
    int n = (int)lua_rawlen(L, 2), nmeta;
    zl_safetensors_entry *e = scratch(L, (size_t)n * sizeof *e);
    for (int i = 0; i < n; i++) {
        lua_rawgeti(L, 2, i + 1);
        int at = lua_gettop(L);
        if (!lua_istable(L, at)) zlb_error(L, "safetensors_writer: entry %d must be a table {name=, dtype=, shape=}", i + 1);
        memset(&e[i], 0, sizeof e[i]);
        if (lua_getfield(L, at, "name") != LUA_TSTRING)
            zlb_error(L, "safetensors_writer: entry %d: name must be a string, got %s", i + 1, luaL_typename(L, -1));
        e[i].name = zlb_check_cstring(L, -1, "safetensors_writer", "tensor name");
        if (lua_getfield(L, at, "dtype") != LUA_TSTRING)
            zlb_error(L, "safetensors_writer: entry %d ('%s'): dtype must be a string, got %s", i + 1, e[i].name,
                      luaL_typename(L, -1));
        e[i].dtype = zlb_opt_dtype(L, lua_gettop(L), ZL_DTYPE_F32);
        if (lua_getfield(L, at, "shape") != LUA_TTABLE)
            zlb_error(L, "safetensors_writer: entry %d ('%s'): shape must be a table of sizes, got %s", i + 1, e[i].name,
                      luaL_typename(L, -1));
        e[i].ndim = zlb_check_shape(L, lua_gettop(L), e[i].shape);
        lua_settop(L, at - 1);   /* the name stays anchored by the argument table */
    }
    zl_safetensors_meta *m = check_meta(L, 3, "safetensors_writer", &nmeta);
    lwriter *u = lua_newuserdatauv(L, sizeof *u, 0);
    u->w = NULL;
    luaL_setmetatable(L, WRITER_MT);
    if (!(u->w = zl_safetensors_writer_open(path, n, e, nmeta, m))) return zlb_raise(L);
    return 1;
}

/* writer:write(t) -> writer: t's elements, in row-major order, continue the
 * data; a device tensor's through a host copy. */
static int writer_write(lua_State *L)
{
    zl_safetensors_writer *w = check_writer(L);
    zl_tensor *h = zl_tensor_to_device(zlb_check_tensor_any(L, 2), ZL_DEVICE_CPU, 0);
    bool ok = h && zl_safetensors_writer_append(w, h) == ZL_OK;
    zl_tensor_release(h);
    if (!ok) return zlb_raise(L);
    lua_settop(L, 1);
    return 1;
}

static int writer_commit(lua_State *L)
{
    zl_safetensors_writer *w = check_writer(L);
    ((lwriter *)lua_touserdata(L, 1))->w = NULL;
    if (zl_safetensors_writer_commit(w)) return zlb_raise(L);
    return 0;
}

/* write_file_atomic(path, bytes) */
static int l_write_file_atomic(lua_State *L)
{
    const char *path = zlb_check_cstring(L, 1, "write_file_atomic", "path");
    size_t n;
    const char *bytes = luaL_checklstring(L, 2, &n);
    if (zl_file_write_atomic(path, bytes, n)) return zlb_raise(L);
    return 0;
}

static void new_class(lua_State *L, const char *mt, const luaL_Reg *methods, lua_CFunction gc, lua_CFunction tostring)
{
    luaL_newmetatable(L, mt);
    lua_newtable(L);
    zlb_setfuncs(L, methods);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, gc);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, gc);
    lua_setfield(L, -2, "__close");
    if (tostring) {
        lua_pushcfunction(L, tostring);
        lua_setfield(L, -2, "__tostring");
    }
    lua_pop(L, 1);
}

/* Adds the checkpoint functions to the core table on top of the stack. */
void zlb_open_checkpoint(lua_State *L)
{
    static const luaL_Reg file_methods[] = {
        {"info", file_info}, {"metadata", file_metadata}, {"read", file_read}, {"close", file_gc}, {NULL, NULL},
    };
    static const luaL_Reg writer_methods[] = {
        {"write", writer_write}, {"commit", writer_commit}, {"abort", writer_gc}, {NULL, NULL},
    };
    new_class(L, FILE_MT, file_methods, file_gc, file_tostring);
    new_class(L, WRITER_MT, writer_methods, writer_gc, NULL);
    static const luaL_Reg fns[] = {
        {"save_safetensors", l_save},       {"load_safetensors", l_load},   {"safetensors_info", l_info},
        {"safetensors_open", l_open},       {"safetensors_writer", l_writer},
        {"write_file_atomic", l_write_file_atomic}, {NULL, NULL},
    };
    zlb_setfuncs(L, fns);
}
