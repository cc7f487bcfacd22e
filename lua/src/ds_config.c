/* zlua_ds_config_* (zlua/ds_config.h): a DeepSpeed config read for a C host
 * by the Lua layer's own code, zlua.config and the steps zlua.initialize
 * takes from its result to the engine's structs, run in a private state
 * whose results are copied into the object before the state is closed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "binding.h"
#include "zlua/context.h"
#include "zlua/ds_config.h"
#include "zlua/embed.h"

typedef struct lines {
    char **v;
    int n, cap;
} lines;

struct zlua_ds_config {
    zl_zero_config zero;
    char *nvme_path[2];           /* what zero.offload_optimizer and zero.offload_param point at */
    char *optimizer;              /* NULL: the config has none */
    zl_zero_hparams hparams;
    zlua_ds_training training;
    bool scheduled;
    zl_lr_schedule schedule;
    zl_lr_group *groups;          /* schedule.groups */
    int64_t start;
    lines warnings, notices;
};

/* One read. `code` is what an error raised from here on means: it moves
 * from ZL_EIO (reading the file) to ZL_EFORMAT (parsing it) to ZL_EINVAL
 * (checking and translating it), so the Lua layer's message keeps its words
 * and the caller still learns which kind of failure it was. */
typedef struct job {
    const char *path;
    int world_size;
    zlua_ds_config *c;
    zl_status code;
} job;

/* Every allocation is stored into the object at once, so an error raised
 * later leaves nothing that zlua_ds_config_free does not find. */
static char *keep(lua_State *L, job *j, const char *s)
{
    char *d = strdup(s);
    if (!d) {
        j->code = ZL_ENOMEM;
        luaL_error(L, "zlua_ds_config_read: out of memory");
    }
    return d;
}

static void add_line(lua_State *L, job *j, lines *ls, const char *s)
{
    if (ls->n == ls->cap) {
        int cap = ls->cap ? 2 * ls->cap : 8;
        char **v = realloc(ls->v, (size_t)cap * sizeof *v);
        if (!v) {
            j->code = ZL_ENOMEM;
            luaL_error(L, "zlua_ds_config_read: out of memory");
        }
        ls->v = v;
        ls->cap = cap;
    }
    ls->v[ls->n] = keep(L, j, s);
    ls->n++;
}

/* zlua.config's warn option: each warning becomes a line of the object. */
static int collect_warning(lua_State *L)
{
    job *j = lua_touserdata(L, lua_upvalueindex(1));
    add_line(L, j, &j->c->warnings, luaL_checkstring(L, 1));
    return 0;
}

/* Pushes require(module)[fn]. */
static void push_function(lua_State *L, const char *module, const char *fn)
{
    lua_getglobal(L, "require");
    lua_pushstring(L, module);
    lua_call(L, 1, 1);
    lua_getfield(L, -1, fn);
    lua_remove(L, -2);
}

/* Field `key` of the table at t (a checked config: the type is known). */
static int64_t integer_at(lua_State *L, int t, const char *key)
{
    lua_getfield(L, t, key);
    int64_t v = (int64_t)lua_tointeger(L, -1);
    lua_pop(L, 1);
    return v;
}

static bool enabled(lua_State *L, int cfg, const char *section)
{
    lua_getfield(L, cfg, section);
    lua_getfield(L, -1, "enabled");
    bool on = lua_toboolean(L, -1);
    lua_pop(L, 2);
    return on;
}

/* The batch triple, clipping, the step log and precision, with the fp16 loss
 * scaler read and checked as zlua.engine.precision makes it. */
static void read_training(lua_State *L, int cfg, zlua_ds_training *t)
{
    t->world_size = (int)integer_at(L, cfg, "world_size");
    t->train_batch_size = integer_at(L, cfg, "train_batch_size");
    t->micro_batch = integer_at(L, cfg, "train_micro_batch_size_per_gpu");
    t->gradient_accumulation_steps = integer_at(L, cfg, "gradient_accumulation_steps");
    lua_getfield(L, cfg, "gradient_clipping");
    t->gradient_clipping = lua_tonumber(L, -1);
    lua_pop(L, 1);
    t->steps_per_print = integer_at(L, cfg, "steps_per_print");
    t->fp16 = enabled(L, cfg, "fp16");
    t->bf16 = enabled(L, cfg, "bf16");
    t->loss_scaler = zl_loss_scaler_defaults();
    if (!t->fp16) return;
    lua_getfield(L, cfg, "fp16");
    zlb_loss_scaler_config(L, -1, &t->loss_scaler);
    lua_pop(L, 1);
    zl_loss_scaler *ls = zl_loss_scaler_new(&t->loss_scaler);
    if (!ls) zlb_raise(L);
    zl_loss_scaler_free(ls);
}

/* The optimizer zlua.initialize builds from the section, over no parameters:
 * its one param group holds the defaults every group starts from. Leaves
 * the optimizer (or nil) on the stack. */
static void read_optimizer(lua_State *L, job *j, int cfg)
{
    zlua_ds_config *c = j->c;
    c->hparams = zl_zero_hparams_defaults();
    if (lua_getfield(L, cfg, "optimizer") != LUA_TTABLE) return;
    lua_getfield(L, -1, "type");
    c->optimizer = keep(L, j, lua_tostring(L, -1));
    lua_pop(L, 1);
    push_function(L, "zlua.engine.Engine", "optimizer_from_config");
    lua_insert(L, -2);
    lua_newtable(L);
    lua_call(L, 2, 1);
    lua_getfield(L, -1, "param_groups");
    lua_rawgeti(L, -1, 1);
    zlb_zero_hparams(L, lua_gettop(L), &c->hparams);
    lua_pop(L, 2);
}

/* zlua.zero.state's c_config for the optimizer at opt (or nil) and the
 * config's precision, through the reader core.zero_new uses. */
static void read_zero(lua_State *L, job *j, int cfg, int opt)
{
    zlua_ds_config *c = j->c;
    push_function(L, "zlua.zero.state", "c_config");
    lua_pushvalue(L, cfg);
    if (lua_isnil(L, opt)) {
        lua_pushnil(L);
    } else {
        push_function(L, "zlua.zero.state", "kind");
        lua_getfield(L, opt, "__name");
        lua_call(L, 1, 1);
    }
    push_function(L, "zlua.engine.precision", "half");
    lua_pushvalue(L, cfg);
    lua_call(L, 1, 1);
    lua_call(L, 3, 1);
    zlb_zero_config(L, lua_gettop(L), &c->zero);
    zl_zero_offload *off[2] = {&c->zero.offload_optimizer, &c->zero.offload_param};
    for (int i = 0; i < 2; i++)
        if (off[i]->nvme_path) off[i]->nvme_path = c->nvme_path[i] = keep(L, j, off[i]->nvme_path);
    lua_pop(L, 1);
}

/* zlua.lr's schedule over the optimizer at opt, as zlua.initialize creates
 * it, copied out of its userdata. */
static void read_schedule(lua_State *L, job *j, int cfg, int opt)
{
    zlua_ds_config *c = j->c;
    if (lua_getfield(L, cfg, "scheduler") != LUA_TTABLE) {
        lua_pop(L, 1);
        return;
    }
    if (lua_isnil(L, opt))
        luaL_error(L, "%s: the config has a scheduler but no optimizer for it to schedule", j->path);
    int sc = lua_gettop(L);
    push_function(L, "zlua.lr", "create");
    lua_getfield(L, sc, "type");
    lua_pushvalue(L, opt);
    lua_getfield(L, sc, "params");
    lua_call(L, 3, 1);
    c->start = integer_at(L, -1, "last_batch_iteration");
    lua_getfield(L, -1, "c");
    const zl_lr_schedule *s = zlb_lr_schedule_of(L, -1);
    c->groups = calloc((size_t)(s->ngroups > 0 ? s->ngroups : 1), sizeof *c->groups);
    if (!c->groups) {
        j->code = ZL_ENOMEM;
        luaL_error(L, "zlua_ds_config_read: out of memory");
    }
    if (s->ngroups > 0) memcpy(c->groups, s->groups, (size_t)s->ngroups * sizeof *c->groups);
    c->schedule = *s;
    c->schedule.groups = c->groups;
    c->scheduled = true;
    lua_pop(L, 3);
}

/* The steps of a read, in zlua.initialize's order, so that a config wrong
 * in two ways is refused for the same one. */
static int read_protected(lua_State *L)
{
    job *j = lua_touserdata(L, 1);
    zlua_ds_config *c = j->c;
    j->code = ZL_EIO;
    push_function(L, "zlua.config", "read");
    lua_pushstring(L, j->path);
    lua_call(L, 1, 1);
    int text = lua_gettop(L);

    j->code = ZL_EFORMAT;
    push_function(L, "zlua.json", "decode");
    lua_pushvalue(L, text);
    lua_pushstring(L, j->path);
    lua_call(L, 2, 0);

    j->code = ZL_EINVAL;
    push_function(L, "zlua.config", "parse");
    lua_pushvalue(L, text);
    lua_createtable(L, 0, 3);
    lua_pushstring(L, j->path);
    lua_setfield(L, -2, "name");
    lua_pushinteger(L, j->world_size);
    lua_setfield(L, -2, "world_size");
    lua_pushlightuserdata(L, j);
    lua_pushcclosure(L, collect_warning, 1);
    lua_setfield(L, -2, "warn");
    lua_call(L, 2, 1);
    int cfg = lua_gettop(L);

    lua_getfield(L, cfg, "notices");
    for (lua_Integer i = 1; lua_rawgeti(L, -1, i) == LUA_TSTRING; i++) {
        add_line(L, j, &c->notices, lua_tostring(L, -1));
        lua_pop(L, 1);
    }
    lua_pop(L, 2);
    read_training(L, cfg, &c->training);
    read_optimizer(L, j, cfg);
    int opt = lua_gettop(L);
    read_zero(L, j, cfg, opt);
    read_schedule(L, j, cfg, opt);
    return 0;
}

zl_status zlua_ds_config_read(const char *path, int world_size, zlua_ds_config **out)
{
    if (out) *out = NULL;
    if (!path || !out) return zl_error(ZL_EINVAL, "zlua_ds_config_read: %s is NULL", path ? "out" : "path");
    if (world_size < 1)
        return zl_error(ZL_EINVAL, "zlua_ds_config_read: world_size must be at least 1, got %d", world_size);
    zlua_ds_config *c = calloc(1, sizeof *c);
    if (!c) return zl_error(ZL_ENOMEM, "zlua_ds_config_read: out of memory");
    /* The binding makes the private state's context current as it runs;
     * the caller's comes back whatever happens. */
    zl_context *prev = zl_context_current();
    zlua_state *s = zlua_open();
    if (!s) {
        free(c);
        return ZL_ENOMEM;   /* with zlua_open's message */
    }
    lua_State *L = zlua_lua(s);
    job j = {.path = path, .world_size = world_size, .c = c, .code = ZL_EINVAL};
    lua_pushcfunction(L, read_protected);
    lua_pushlightuserdata(L, &j);
    int status = lua_pcall(L, 1, 0, 0);
    zl_status code = status == LUA_ERRMEM ? ZL_ENOMEM : j.code;
    char *msg = status == LUA_OK ? NULL : strdup(lua_isstring(L, -1) ? lua_tostring(L, -1) : "(no message)");
    zlua_close(s);
    zl_context_set_current(prev);
    if (status == LUA_OK) {
        *out = c;
        return ZL_OK;
    }
    zlua_ds_config_free(c);
    zl_status st = msg ? zl_error(code, "%s", msg) : zl_error(ZL_ENOMEM, "zlua_ds_config_read: out of memory");
    free(msg);
    return st;
}

static void free_lines(lines *ls)
{
    for (int i = 0; i < ls->n; i++) free(ls->v[i]);
    free(ls->v);
}

void zlua_ds_config_free(zlua_ds_config *c)
{
    if (!c) return;
    free(c->nvme_path[0]);
    free(c->nvme_path[1]);
    free(c->optimizer);
    free(c->groups);
    free_lines(&c->warnings);
    free_lines(&c->notices);
    free(c);
}

const zl_zero_config *zlua_ds_config_zero(const zlua_ds_config *c) { return &c->zero; }
const char *zlua_ds_config_optimizer(const zlua_ds_config *c) { return c->optimizer; }
zl_zero_hparams zlua_ds_config_hparams(const zlua_ds_config *c) { return c->hparams; }
zlua_ds_training zlua_ds_config_training(const zlua_ds_config *c) { return c->training; }

const zl_lr_schedule *zlua_ds_config_schedule(const zlua_ds_config *c, int64_t *start)
{
    if (start) *start = c->scheduled ? c->start : -1;
    return c->scheduled ? &c->schedule : NULL;
}

static const char *line_at(const lines *ls, int i) { return i >= 0 && i < ls->n ? ls->v[i] : NULL; }

const char *zlua_ds_config_warning(const zlua_ds_config *c, int i) { return line_at(&c->warnings, i); }
const char *zlua_ds_config_notice(const zlua_ds_config *c, int i) { return line_at(&c->notices, i); }

void zlua_ds_config_print_notes(const zlua_ds_config *c, int rank)
{
    for (int i = 0; i < c->warnings.n; i++) fprintf(stderr, "zlua.config: warning: %s\n", c->warnings.v[i]);
    for (int i = 0; rank == 0 && i < c->notices.n; i++) fprintf(stderr, "zlua: note: %s\n", c->notices.v[i]);
}
