/* The binding of zlua/optimizer.h: an optimizer as a userdata owning one
 * zl_optimizer, its hyperparameters read from and written to Lua tables
 * under zlua.optim's names, its state handed out as tensors sharing the
 * engine's buffers. zlua.optim.Optimizer holds one. */
#include <stddef.h>
#include <string.h>
#include "fields.h"

#define ZLB_OPTIMIZER_MT "zlua.Optimizer"

typedef struct zlb_optimizer {
    zl_optimizer *o;
    zl_optimizer_kind kind;
} zlb_optimizer;

enum { NUM, BOOL, BETAS, ONLY_FALSE };

#define K(kind) (1u << (kind))
#define ADAMS (K(ZL_OPTIMIZER_ADAM) | K(ZL_OPTIMIZER_ADAMW))
#define BETA_KINDS (ADAMS | K(ZL_OPTIMIZER_LAMB))
#define ALL (BETA_KINDS | K(ZL_OPTIMIZER_SGD))
#define H(f) offsetof(zl_optimizer_hparams, f)

/* zlua.optim's option names (DeepSpeed's and torch's), the kinds that take
 * each, and where each goes. betas is the pair {beta1, beta2}; amsgrad,
 * which DeepSpeed's configs carry, is accepted only as false. */
static const struct hp_field {
    const char *key;
    unsigned kinds;
    int type;
    size_t offset;
} fields[] = {
    {"lr", ALL, NUM, H(lr)},
    {"betas", BETA_KINDS, BETAS, H(beta1)},
    {"eps", BETA_KINDS, NUM, H(eps)},
    {"weight_decay", ALL, NUM, H(weight_decay)},
    {"adam_w_mode", ADAMS, BOOL, H(adamw_mode)},
    {"bias_correction", BETA_KINDS, BOOL, H(bias_correction)},
    {"amsgrad", ADAMS, ONLY_FALSE, 0},
    {"max_coeff", K(ZL_OPTIMIZER_LAMB), NUM, H(max_coeff)},
    {"min_coeff", K(ZL_OPTIMIZER_LAMB), NUM, H(min_coeff)},
    {"momentum", K(ZL_OPTIMIZER_SGD), NUM, H(momentum)},
    {"dampening", K(ZL_OPTIMIZER_SGD), NUM, H(dampening)},
    {"nesterov", K(ZL_OPTIMIZER_SGD), BOOL, H(nesterov)},
};
#define NFIELDS (sizeof fields / sizeof fields[0])

#undef K
#undef ADAMS
#undef BETA_KINDS
#undef ALL
#undef H

static zlb_optimizer *check_box(lua_State *L, int idx)
{
    zlb_optimizer *u = luaL_checkudata(L, idx, ZLB_OPTIMIZER_MT);
    if (!u->o) zlb_error(L, "optimizer was freed");
    return u;
}

static zl_optimizer_kind check_kind(lua_State *L, int idx)
{
    const char *name = luaL_checkstring(L, idx);
    for (int k = 0; zl_optimizer_kind_name((zl_optimizer_kind)k); k++)
        if (!strcmp(zl_optimizer_kind_name((zl_optimizer_kind)k), name)) return (zl_optimizer_kind)k;
    zlb_error(L, "optimizer: unknown kind '%s' (expected Adam, AdamW, Lamb or SGD)", name);
    return ZL_OPTIMIZER_ADAM;
}

/* The value on top of the stack into field f of *hp. */
static void read_field(lua_State *L, const struct hp_field *f, const char *where, zl_optimizer_hparams *hp)
{
    char *at = (char *)hp + f->offset;
    switch (f->type) {
    case NUM: *(double *)at = zlb_number_at(L, -1, where, f->key); break;
    case BOOL: *(bool *)at = zlb_boolean_at(L, -1, where, f->key); break;
    case BETAS: {
        if (!lua_istable(L, -1) || lua_rawlen(L, -1) != 2)
            zlb_error(L, "%s: betas must be a pair {beta1, beta2}, got a %s", where, luaL_typename(L, -1));
        lua_rawgeti(L, -1, 1);
        hp->beta1 = zlb_number_at(L, -1, where, "betas[1]");
        lua_rawgeti(L, -2, 2);
        hp->beta2 = zlb_number_at(L, -1, where, "betas[2]");
        lua_pop(L, 2);
        break;
    }
    default:
        if (lua_toboolean(L, -1))
            zlb_error(L, "%s: %s is not supported (DeepSpeed's CPU Adam has none either)", where, f->key);
    }
}

/* The table at idx over *hp: the options a kind takes, by name; skip, when
 * not NULL, is a key passed over (a param group's "params"). */
static void read_hparams(lua_State *L, int idx, zl_optimizer_kind kind, const char *where, const char *skip,
                         zl_optimizer_hparams *hp)
{
    idx = lua_absindex(L, idx);
    luaL_checktype(L, idx, LUA_TTABLE);
    for (lua_pushnil(L); lua_next(L, idx); lua_pop(L, 1)) {
        const char *key = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "";
        if (skip && !strcmp(key, skip)) continue;
        size_t f = 0;
        while (f < NFIELDS && (strcmp(fields[f].key, key) || !(fields[f].kinds & (1u << kind)))) f++;
        if (f == NFIELDS) zlb_error(L, "%s: unknown option '%s'", where, luaL_tolstring(L, -2, NULL));
        read_field(L, &fields[f], where, hp);
    }
}

/* optimizer_defaults(kind) -> the kind's options and their defaults */
static int optimizer_defaults(lua_State *L)
{
    zl_optimizer_kind kind = check_kind(L, 1);
    zl_optimizer_hparams hp = zl_optimizer_defaults(kind);
    lua_newtable(L);
    for (size_t f = 0; f < NFIELDS; f++) {
        if (!(fields[f].kinds & (1u << kind))) continue;
        const char *at = (const char *)&hp + fields[f].offset;
        switch (fields[f].type) {
        case NUM: lua_pushnumber(L, *(const double *)at); break;
        case BOOL: lua_pushboolean(L, *(const bool *)at); break;
        case BETAS:
            lua_createtable(L, 2, 0);
            lua_pushnumber(L, hp.beta1);
            lua_rawseti(L, -2, 1);
            lua_pushnumber(L, hp.beta2);
            lua_rawseti(L, -2, 2);
            break;
        default: lua_pushboolean(L, false);
        }
        lua_setfield(L, -2, fields[f].key);
    }
    return 1;
}

/* optimizer_new(kind, defaults) -> an optimizer without param groups;
 * defaults (absent options: the kind's) checked by the engine */
static int optimizer_new(lua_State *L)
{
    zl_optimizer_kind kind = check_kind(L, 1);
    const char *name = zl_optimizer_kind_name(kind);
    zl_optimizer_hparams hp = zl_optimizer_defaults(kind);
    read_hparams(L, 2, kind, name, NULL, &hp);
    zlb_optimizer *u = lua_newuserdatauv(L, sizeof *u, 0);
    u->o = NULL;
    u->kind = kind;
    luaL_setmetatable(L, ZLB_OPTIMIZER_MT);
    if (!(u->o = zl_optimizer_new(kind, &hp))) return zlb_raise(L);
    return 1;
}

static int opt_free(lua_State *L)
{
    zlb_optimizer *u = luaL_checkudata(L, 1, ZLB_OPTIMIZER_MT);
    zl_optimizer_free(u->o);
    u->o = NULL;
    return 0;
}

/* o:add_group({tensors}, group): group's options (absent ones: the kind's
 * defaults; its "params" key is passed over) */
static int opt_add_group(lua_State *L)
{
    zlb_optimizer *u = check_box(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    char where[64];
    snprintf(where, sizeof where, "%s in param group %d", zl_optimizer_kind_name(u->kind),
             zl_optimizer_group_count(u->o) + 1);
    zl_optimizer_hparams hp = zl_optimizer_defaults(u->kind);
    read_hparams(L, 3, u->kind, where, "params", &hp);
    size_t n = lua_rawlen(L, 2);
    if (n > INT32_MAX) zlb_error(L, "%s: too many parameters", where);
    zl_tensor **ps = lua_newuserdatauv(L, (n ? n : 1) * sizeof *ps, 0);
    for (size_t i = 0; i < n; i++) {
        lua_rawgeti(L, 2, (lua_Integer)i + 1);
        ps[i] = zlb_check_tensor_any(L, -1);
        lua_pop(L, 1);
    }
    if (zl_optimizer_add_group(u->o, ps, (int)n, &hp)) return zlb_raise(L);
    return 0;
}

/* o:set_group(g (1-based), group): the group's options from the table,
 * those it lacks kept. Its params are those add_group was given: a list
 * that has grown or shrunk since is an error, not a change. */
static int opt_set_group(lua_State *L)
{
    zlb_optimizer *u = check_box(L, 1);
    int g = (int)luaL_checkinteger(L, 2) - 1;
    zl_optimizer_hparams hp;
    if (zl_optimizer_get_hparams(u->o, g, &hp)) return zlb_raise(L);
    char where[64];
    snprintf(where, sizeof where, "%s in param group %d", zl_optimizer_kind_name(u->kind), g + 1);
    luaL_checktype(L, 3, LUA_TTABLE);
    int n = zl_optimizer_param_count(u->o, g);
    if (lua_getfield(L, 3, "params") == LUA_TTABLE && lua_rawlen(L, -1) != (size_t)n)
        zlb_error(L, "%s: params now holds %d tensors, the group was made with %d (add parameters with "
                  "add_param_group)", where, (int)lua_rawlen(L, -1), n);
    lua_pop(L, 1);
    read_hparams(L, 3, u->kind, where, "params", &hp);
    if (zl_optimizer_set_hparams(u->o, g, &hp)) return zlb_raise(L);
    return 0;
}

/* o:step([grad_scale]) */
static int opt_step(lua_State *L)
{
    zlb_optimizer *u = check_box(L, 1);
    if (zl_optimizer_step(u->o, luaL_optnumber(L, 2, 1.0))) return zlb_raise(L);
    return 0;
}

static int opt_zero_grad(lua_State *L)
{
    if (zl_optimizer_zero_grad(check_box(L, 1)->o)) return zlb_raise(L);
    return 0;
}

/* The parameter named at idx (a tensor, or its id from t:id()): true and its
 * place, or false when it is not one of o's parameters. */
static bool place_of(lua_State *L, zl_optimizer *o, int idx, int *g, int *i)
{
    const zl_tensor *p = lua_islightuserdata(L, idx) ? lua_touserdata(L, idx)
                         : luaL_testudata(L, idx, ZLB_TENSOR_MT) ? zlb_check_tensor_any(L, idx) : NULL;
    if (!p) return false;
    bool found = zl_optimizer_find(o, p, g, i) == ZL_OK;
    zl_clear_error();
    return found;
}

static void need_place(lua_State *L, zlb_optimizer *u, int idx, int *g, int *i, const char *what)
{
    if (!place_of(L, u->o, idx, g, i))
        zlb_error(L, "%s: %s: the tensor is not one of its parameters", zl_optimizer_kind_name(u->kind), what);
}

/* o:set_half(p, half): half (bf16 or f16) gets p rounded after each step; nil stops it */
static int opt_set_half(lua_State *L)
{
    zlb_optimizer *u = check_box(L, 1);
    int g, i;
    need_place(L, u, 2, &g, &i, "set_half");
    if (zl_optimizer_set_half(u->o, g, i, zlb_opt_tensor_any(L, 3))) return zlb_raise(L);
    return 0;
}

/* o:state(p or id) -> {step=, <key>=tensor, ..., lamb_coeff= (Lamb)}, the
 * tensors sharing the engine's buffers; nil when p has no state or is not
 * a parameter */
static int opt_state(lua_State *L)
{
    zlb_optimizer *u = check_box(L, 1);
    int g, i;
    if (!place_of(L, u->o, 2, &g, &i)) return 0;
    const char *const *keys = zl_optimizer_state_keys(u->kind);
    zl_tensor *t;
    int64_t step;
    if (zl_optimizer_get_state(u->o, g, i, keys[0], &t) || zl_optimizer_get_step(u->o, g, i, &step))
        return zlb_raise(L);
    if (!t) return 0;
    lua_newtable(L);
    lua_pushinteger(L, step);
    lua_setfield(L, -2, "step");
    for (int k = 0; keys[k]; k++) {
        if (zl_optimizer_get_state(u->o, g, i, keys[k], &t)) return zlb_raise(L);
        zl_tensor **box = zlb_new_tensor(L);
        *box = zl_tensor_retain(t);
        lua_setfield(L, -2, keys[k]);
    }
    if (u->kind == ZL_OPTIMIZER_LAMB) {
        double coeff;
        if (zl_optimizer_lamb_coeff(u->o, g, i, &coeff)) return zlb_raise(L);
        lua_pushnumber(L, coeff);
        lua_setfield(L, -2, "lamb_coeff");
    }
    return 1;
}

/* Whether `key` is a state tensor of the kind. */
static bool state_key(zl_optimizer_kind kind, const char *key)
{
    for (const char *const *k = zl_optimizer_state_keys(kind); k && *k; k++)
        if (!strcmp(*k, key)) return true;
    return false;
}

/* o:load_state(p, st [, check_only]): p's state from st (as o:state gives it;
 * lamb_coeff, the last step's result, is passed over), or dropped when st is
 * nil. check_only raises what loading would raise and changes nothing, so a
 * whole state dict is checked before any of it is loaded. */
static int opt_load_state(lua_State *L)
{
    zlb_optimizer *u = check_box(L, 1);
    int g, i;
    need_place(L, u, 2, &g, &i, "load_state");
    bool check_only = lua_toboolean(L, 4);
    if (lua_isnoneornil(L, 3)) {
        if (!check_only && zl_optimizer_reset_state(u->o, g, i)) return zlb_raise(L);
        return 0;
    }
    luaL_checktype(L, 3, LUA_TTABLE);
    const char *name = zl_optimizer_kind_name(u->kind);
    int64_t n = zl_tensor_numel(zl_optimizer_param(u->o, g, i));
    for (lua_pushnil(L); lua_next(L, 3); lua_pop(L, 1)) {
        const char *key = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "";
        zl_status st = ZL_OK;
        if (!strcmp(key, "step")) {
            int64_t step = zlb_integer_at(L, -1, name, "load_state: step");
            if (step < 0) zlb_error(L, "%s: load_state: step must be >= 0, got %I", name, (lua_Integer)step);
            if (!check_only) st = zl_optimizer_set_step(u->o, g, i, step);
        } else if (strcmp(key, "lamb_coeff") || u->kind != ZL_OPTIMIZER_LAMB) {
            if (!luaL_testudata(L, -1, ZLB_TENSOR_MT))
                zlb_error(L, "%s: load_state: state \"%s\" is a %s, not a tensor", name, key, luaL_typename(L, -1));
            zl_tensor *src = zlb_check_tensor_any(L, -1);
            if (!state_key(u->kind, key))
                zlb_error(L, "%s: load_state: %s keeps no state \"%s\"", name, name, key);
            if (zl_tensor_numel(src) != n)
                zlb_error(L, "%s: load_state: state \"%s\" has %I elements, the parameter %I", name, key,
                          (lua_Integer)zl_tensor_numel(src), (lua_Integer)n);
            if (!check_only) st = zl_optimizer_set_state(u->o, g, i, key, src);
        }
        if (st) return zlb_raise(L);
    }
    return 0;
}

/* Adds optimizer_defaults and optimizer_new to the core table on top of the stack. */
void zlb_open_optimizer(lua_State *L)
{
    static const luaL_Reg fns[] = {
        {"optimizer_defaults", optimizer_defaults}, {"optimizer_new", optimizer_new}, {NULL, NULL},
    };
    zlb_setfuncs(L, fns);
    static const luaL_Reg methods[] = {
        {"add_group", opt_add_group}, {"set_group", opt_set_group}, {"step", opt_step},
        {"zero_grad", opt_zero_grad}, {"set_half", opt_set_half}, {"state", opt_state},
        {"load_state", opt_load_state}, {"free", opt_free}, {NULL, NULL},
    };
    luaL_newmetatable(L, ZLB_OPTIMIZER_MT);
    zlb_newlib(L, methods);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, opt_free);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, opt_free);
    lua_setfield(L, -2, "__close");
    lua_pop(L, 1);
}
