/* The binding of the mixed-precision parts of engine/optim: the passes over
 * gradient lists (overflow check, global sum of squares, scaling, the clip
 * coefficient) and the fp16 loss scaler as a userdata. zlua.engine uses them. */
#include <string.h>
#include "binding.h"

#define ZLB_LOSS_SCALER_MT "zlua.LossScaler"

/* The tensors of the list at idx, in a userdata array pushed on the stack (so
 * a Lua error frees it). Checked here, so positions are 1-based as in Lua. */
static zl_tensor **tensor_list(lua_State *L, int idx, const char *fn, int *n)
{
    luaL_checktype(L, idx, LUA_TTABLE);
    size_t len = lua_rawlen(L, idx);
    if (len > INT32_MAX) zlb_error(L, "%s: the list is too long", fn);
    zl_tensor **ts = lua_newuserdatauv(L, (len ? len : 1) * sizeof *ts, 0);
    for (size_t i = 0; i < len; i++) {
        lua_rawgeti(L, idx, (lua_Integer)i + 1);
        zlb_tensor *u = luaL_testudata(L, -1, ZLB_TENSOR_MT);
        if (!u) zlb_error(L, "%s: entry %d of the list is a %s, expected a tensor", fn, (int)i + 1, luaL_typename(L, -1));
        if (!u->t) zlb_error(L, "%s: entry %d of the list: tensor was released", fn, (int)i + 1);
        zl_dtype dt = zl_tensor_dtype(u->t);
        if (dt != ZL_DTYPE_F32 && dt != ZL_DTYPE_BF16 && dt != ZL_DTYPE_F16) {
            char shape[128];
            zlb_error(L, "%s: entry %d of the list (shape %s) is %s; gradients must be f32, bf16 or f16", fn,
                      (int)i + 1, zl_shape_str(zl_tensor_ndim(u->t), zl_tensor_shape(u->t), shape, sizeof shape),
                      zl_dtype_name(dt));
        }
        ts[i] = u->t;
        lua_pop(L, 1);
    }
    *n = (int)len;
    return ts;
}

/* grad_nonfinite({tensors}) -> true when any element is inf or NaN */
static int grad_nonfinite(lua_State *L)
{
    int n;
    zl_tensor **ts = tensor_list(L, 1, "grad_nonfinite", &n);
    bool found;
    if (zl_grad_nonfinite(ts, n, &found)) return zlb_raise(L);
    lua_pushboolean(L, found);
    return 1;
}

/* grad_norm_sq({tensors}) -> the sum of squares of every element */
static int grad_norm_sq(lua_State *L)
{
    int n;
    zl_tensor **ts = tensor_list(L, 1, "grad_norm_sq", &n);
    double sq;
    if (zl_grad_norm_sq(ts, n, &sq)) return zlb_raise(L);
    lua_pushnumber(L, sq);
    return 1;
}

/* grad_scale({tensors}, s): every element times s, in place */
static int grad_scale(lua_State *L)
{
    int n;
    double s = luaL_checknumber(L, 2);
    zl_tensor **ts = tensor_list(L, 1, "grad_scale", &n);
    if (zl_grad_scale(ts, n, s)) return zlb_raise(L);
    return 0;
}

/* grad_clip_coef(norm, max_norm) -> the factor that clips to max_norm (1: none) */
static int grad_clip_coef(lua_State *L)
{
    lua_pushnumber(L, zl_grad_clip_coef(luaL_checknumber(L, 1), luaL_checknumber(L, 2)));
    return 1;
}

/* ---- the loss scaler: a userdata owning one zl_loss_scaler ---- */

typedef struct zlb_loss_scaler {
    zl_loss_scaler *ls;
} zlb_loss_scaler;

static zl_loss_scaler *check_scaler(lua_State *L, int idx)
{
    zlb_loss_scaler *u = luaL_checkudata(L, idx, ZLB_LOSS_SCALER_MT);
    if (!u->ls) zlb_error(L, "loss scaler was freed");
    return u->ls;
}

/* The scaler's keys, then the rest of a DeepSpeed fp16 block, accepted and
 * not used, so that a config's fp16 section can be passed as it is. */
static const char *const config_keys[] = {"loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis",
                                          "consecutive_hysteresis", "min_loss_scale", "raise_error_at_min_scale",
                                          "enabled", "auto_cast", "fp16_master_weights_and_grads", NULL};

/* Field k of the table at idx as an integer (a float with an integral value
 * too, as JSON gives 1e3); def when absent. */
static int64_t int_field(lua_State *L, int idx, const char *fn, const char *k, int64_t def)
{
    int64_t v = def;
    if (lua_getfield(L, idx, k) != LUA_TNIL) {
        int ok;
        v = lua_tointegerx(L, -1, &ok);
        if (!ok) {
            if (lua_type(L, -1) == LUA_TNUMBER) zlb_error(L, "%s: %s must be an integer, got %s", fn, k, lua_tostring(L, -1));
            zlb_error(L, "%s: %s must be an integer, got a %s", fn, k, luaL_typename(L, -1));
        }
    }
    lua_pop(L, 1);
    return v;
}

static double num_field(lua_State *L, int idx, const char *fn, const char *k, double def)
{
    double v = def;
    if (lua_getfield(L, idx, k) != LUA_TNIL) {
        if (lua_type(L, -1) != LUA_TNUMBER) zlb_error(L, "%s: %s must be a number, got a %s", fn, k, luaL_typename(L, -1));
        v = lua_tonumber(L, -1);
    }
    lua_pop(L, 1);
    return v;
}

static bool bool_field(lua_State *L, int idx, const char *fn, const char *k, bool def)
{
    bool v = def;
    if (lua_getfield(L, idx, k) != LUA_TNIL) {
        if (!lua_isboolean(L, -1)) zlb_error(L, "%s: %s must be a boolean, got a %s", fn, k, luaL_typename(L, -1));
        v = lua_toboolean(L, -1);
    }
    lua_pop(L, 1);
    return v;
}

void zlb_loss_scaler_config(lua_State *L, int idx, zl_loss_scaler_config *c)
{
    const char *fn = "loss_scaler_new";
    idx = lua_absindex(L, idx);
    luaL_checktype(L, idx, LUA_TTABLE);
    for (lua_pushnil(L); lua_next(L, idx); lua_pop(L, 1)) {
        bool known = false;
        if (lua_type(L, -2) == LUA_TSTRING)
            for (int i = 0; config_keys[i] && !known; i++) known = !strcmp(lua_tostring(L, -2), config_keys[i]);
        if (!known) zlb_error(L, "%s: unknown key '%s'", fn, luaL_tolstring(L, -2, NULL));
    }
    *c = zl_loss_scaler_defaults();
    c->loss_scale = num_field(L, idx, fn, "loss_scale", c->loss_scale);
    int64_t power = int_field(L, idx, fn, "initial_scale_power", c->initial_scale_power);
    c->loss_scale_window = int_field(L, idx, fn, "loss_scale_window", c->loss_scale_window);
    int64_t hyst = int_field(L, idx, fn, "hysteresis", c->hysteresis);
    c->consecutive_hysteresis = bool_field(L, idx, fn, "consecutive_hysteresis", c->consecutive_hysteresis);
    c->min_loss_scale = num_field(L, idx, fn, "min_loss_scale", c->min_loss_scale);
    c->raise_error_at_min_scale = bool_field(L, idx, fn, "raise_error_at_min_scale", c->raise_error_at_min_scale);
    /* clamped to int: the engine then rejects it with the key's message */
    c->initial_scale_power = power < INT32_MIN ? INT32_MIN : power > INT32_MAX ? INT32_MAX : (int)power;
    c->hysteresis = hyst < INT32_MIN ? INT32_MIN : hyst > INT32_MAX ? INT32_MAX : (int)hyst;
}

/* loss_scaler_new{ loss_scale=, initial_scale_power=, loss_scale_window=,
 * hysteresis=, consecutive_hysteresis=, min_loss_scale=,
 * raise_error_at_min_scale= } (absent keys: DeepSpeed's fp16 defaults); a
 * config's whole fp16 block will do. */
static int loss_scaler_new(lua_State *L)
{
    lua_settop(L, 1);
    if (lua_isnil(L, 1)) {
        lua_newtable(L);
        lua_replace(L, 1);
    }
    zl_loss_scaler_config c;
    zlb_loss_scaler_config(L, 1, &c);
    zlb_loss_scaler *u = lua_newuserdatauv(L, sizeof *u, 0);
    u->ls = NULL;
    luaL_setmetatable(L, ZLB_LOSS_SCALER_MT);
    if (!(u->ls = zl_loss_scaler_new(&c))) return zlb_raise(L);
    return 1;
}

static int scaler_free(lua_State *L)
{
    zlb_loss_scaler *u = luaL_checkudata(L, 1, ZLB_LOSS_SCALER_MT);
    zl_loss_scaler_free(u->ls);
    u->ls = NULL;
    return 0;
}

/* scaler:update(overflow) -> the scale for the next step */
static int scaler_update(lua_State *L)
{
    zl_loss_scaler *ls = check_scaler(L, 1);
    luaL_checktype(L, 2, LUA_TBOOLEAN);
    if (zl_loss_scaler_update(ls, lua_toboolean(L, 2))) return zlb_raise(L);
    lua_pushnumber(L, zl_loss_scaler_scale(ls));
    return 1;
}

static int scaler_scale(lua_State *L)
{
    lua_pushnumber(L, zl_loss_scaler_scale(check_scaler(L, 1)));
    return 1;
}

static int scaler_is_dynamic(lua_State *L)
{
    lua_pushboolean(L, zl_loss_scaler_is_dynamic(check_scaler(L, 1)));
    return 1;
}

/* scaler:state() -> { cur_scale=, cur_iter=, last_overflow_iter=, cur_hysteresis= } */
static int scaler_state(lua_State *L)
{
    zl_loss_scaler_state s = zl_loss_scaler_get_state(check_scaler(L, 1));
    lua_createtable(L, 0, 4);
    lua_pushnumber(L, s.cur_scale);
    lua_setfield(L, -2, "cur_scale");
    lua_pushinteger(L, s.cur_iter);
    lua_setfield(L, -2, "cur_iter");
    lua_pushinteger(L, s.last_overflow_iter);
    lua_setfield(L, -2, "last_overflow_iter");
    lua_pushinteger(L, s.cur_hysteresis);
    lua_setfield(L, -2, "cur_hysteresis");
    return 1;
}

/* scaler:load(state): every field of state() is required */
static int scaler_load(lua_State *L)
{
    const char *fn = "loss scaler load";
    zl_loss_scaler *ls = check_scaler(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    static const char *const fields[] = {"cur_scale", "cur_iter", "last_overflow_iter", "cur_hysteresis"};
    for (int i = 0; i < 4; i++) {
        if (lua_getfield(L, 2, fields[i]) == LUA_TNIL) zlb_error(L, "%s: the state has no %s", fn, fields[i]);
        lua_pop(L, 1);
    }
    zl_loss_scaler_state s;
    s.cur_scale = num_field(L, 2, fn, "cur_scale", 0);
    s.cur_iter = int_field(L, 2, fn, "cur_iter", 0);
    s.last_overflow_iter = int_field(L, 2, fn, "last_overflow_iter", 0);
    int64_t h = int_field(L, 2, fn, "cur_hysteresis", 0);
    s.cur_hysteresis = h < INT32_MIN ? INT32_MIN : h > INT32_MAX ? INT32_MAX : (int)h;
    if (zl_loss_scaler_set_state(ls, &s)) return zlb_raise(L);
    return 0;
}

static int scaler_tostring(lua_State *L)
{
    zlb_loss_scaler *u = luaL_checkudata(L, 1, ZLB_LOSS_SCALER_MT);
    if (!u->ls) lua_pushliteral(L, "LossScaler(freed)");
    else lua_pushfstring(L, "LossScaler(%s, scale %f)", zl_loss_scaler_is_dynamic(u->ls) ? "dynamic" : "static",
                         zl_loss_scaler_scale(u->ls));
    return 1;
}

/* Adds the mixed-precision functions to the core table on top of the stack. */
void zlb_open_amp(lua_State *L)
{
    static const luaL_Reg fns[] = {
        {"grad_nonfinite", grad_nonfinite}, {"grad_norm_sq", grad_norm_sq}, {"grad_scale", grad_scale},
        {"grad_clip_coef", grad_clip_coef}, {"loss_scaler_new", loss_scaler_new}, {NULL, NULL},
    };
    zlb_setfuncs(L, fns);
    static const luaL_Reg methods[] = {
        {"update", scaler_update}, {"scale", scaler_scale}, {"is_dynamic", scaler_is_dynamic},
        {"state", scaler_state}, {"load", scaler_load}, {"free", scaler_free}, {NULL, NULL},
    };
    luaL_newmetatable(L, ZLB_LOSS_SCALER_MT);
    zlb_newlib(L, methods);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, scaler_free);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, scaler_free);
    lua_setfield(L, -2, "__close");
    lua_pushcfunction(L, scaler_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_setfield(L, -2, "LossScaler");
}
