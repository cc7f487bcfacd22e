/* The binding of engine/optim's kernels: one call per parameter, or per list
 * of them, running the fused Adam, Lamb or SGD kernel on (p, g, m, v), with
 * the hyperparameters read from a Lua table; and the kernel choice. The
 * optimizer objects zlua.optim is built on are optimizer.c's. */
#include "binding.h"

static double num_field(lua_State *L, int t, const char *k, double def)
{
    lua_getfield(L, t, k);
    double v = lua_isnil(L, -1) ? def : luaL_checknumber(L, -1);
    lua_pop(L, 1);
    return v;
}

static bool bool_field(lua_State *L, int t, const char *k, bool def)
{
    lua_getfield(L, t, k);
    bool v = lua_isnil(L, -1) ? def : lua_toboolean(L, -1);
    lua_pop(L, 1);
    return v;
}

/* The sets of a step and the index of the hyperparameter table. Either one
 * set as arguments, p, g, m, v, hp [, p_half], or a list of them,
 * {{p, g, m, v [, p_half]}, ...}, hp: the optimizers step a param group in
 * one call, on a device one launch. Tensors in host memory or on a device
 * (the engine steps them where they live). The array is a userdata on the
 * stack, so a Lua error frees it. */
static zl_optim_tensors *sets_of(lua_State *L, int *n, int *hp)
{
    if (lua_istable(L, 1)) {
        size_t len = lua_rawlen(L, 1);
        if (len > INT32_MAX) zlb_error(L, "optim: the list of tensor sets is too long");
        luaL_checktype(L, 2, LUA_TTABLE);
        zl_optim_tensors *t = lua_newuserdatauv(L, (len ? len : 1) * sizeof *t, 0);
        for (size_t i = 0; i < len; i++) {
            if (lua_rawgeti(L, 1, (lua_Integer)i + 1) != LUA_TTABLE)
                zlb_error(L, "optim: entry %d of the list is a %s, expected {p, g, m, v [, p_half]}", (int)i + 1,
                          luaL_typename(L, -1));
            int e = lua_gettop(L);
            zl_tensor **roles[5] = {&t[i].p, &t[i].g, &t[i].m, &t[i].v, &t[i].p_half};
            for (int k = 0; k < 5; k++) {
                lua_rawgeti(L, e, k + 1);
                *roles[k] = k < 2 ? zlb_check_tensor_any(L, -1) : zlb_opt_tensor_any(L, -1);
                lua_pop(L, 1);
            }
            lua_pop(L, 1);
        }
        *n = (int)len;
        *hp = 2;
        return t;
    }
    /* Read before the array's userdata is pushed, which would stand at index 6 when p_half is not given. */
    zl_optim_tensors one = {.p = zlb_check_tensor_any(L, 1), .g = zlb_check_tensor_any(L, 2),
                            .m = zlb_opt_tensor_any(L, 3), .v = zlb_opt_tensor_any(L, 4)};
    luaL_checktype(L, 5, LUA_TTABLE);
    one.p_half = zlb_opt_tensor_any(L, 6);
    zl_optim_tensors *t = lua_newuserdatauv(L, sizeof *t, 0);
    *t = one;
    *n = 1;
    *hp = 5;
    return t;
}

static int l_adam(lua_State *L)
{
    int n, h;
    zl_optim_tensors *t = sets_of(L, &n, &h);
    zl_optim_adam hp = zl_optim_adam_defaults();
    hp.lr = num_field(L, h, "lr", hp.lr);
    hp.beta1 = num_field(L, h, "beta1", hp.beta1);
    hp.beta2 = num_field(L, h, "beta2", hp.beta2);
    hp.eps = num_field(L, h, "eps", hp.eps);
    hp.weight_decay = num_field(L, h, "weight_decay", hp.weight_decay);
    hp.adamw_mode = bool_field(L, h, "adamw_mode", hp.adamw_mode);
    hp.bias_correction = bool_field(L, h, "bias_correction", hp.bias_correction);
    hp.step = (int64_t)num_field(L, h, "step", (double)hp.step);
    hp.grad_scale = num_field(L, h, "grad_scale", hp.grad_scale);
    if (zl_optim_adam_tensors(&hp, t, n)) return zlb_raise(L);
    return 0;
}

/* The trust ratio used: a number for one set, a list for a list. */
static int l_lamb(lua_State *L)
{
    int n, h;
    zl_optim_tensors *t = sets_of(L, &n, &h);
    zl_optim_lamb hp = zl_optim_lamb_defaults();
    hp.lr = num_field(L, h, "lr", hp.lr);
    hp.beta1 = num_field(L, h, "beta1", hp.beta1);
    hp.beta2 = num_field(L, h, "beta2", hp.beta2);
    hp.eps = num_field(L, h, "eps", hp.eps);
    hp.weight_decay = num_field(L, h, "weight_decay", hp.weight_decay);
    hp.max_coeff = num_field(L, h, "max_coeff", hp.max_coeff);
    hp.min_coeff = num_field(L, h, "min_coeff", hp.min_coeff);
    hp.bias_correction = bool_field(L, h, "bias_correction", hp.bias_correction);
    hp.step = (int64_t)num_field(L, h, "step", (double)hp.step);
    hp.grad_scale = num_field(L, h, "grad_scale", hp.grad_scale);
    double *ratio = lua_newuserdatauv(L, (size_t)(n > 0 ? n : 1) * sizeof *ratio, 0);
    if (zl_optim_lamb_tensors(&hp, t, n, ratio)) return zlb_raise(L);
    if (h == 5) {
        lua_pushnumber(L, ratio[0]);
        return 1;
    }
    lua_createtable(L, n, 0);
    for (int k = 0; k < n; k++) {
        lua_pushnumber(L, ratio[k]);
        lua_rawseti(L, -2, k + 1);
    }
    return 1;
}

static int l_sgd(lua_State *L)
{
    int n, h;
    zl_optim_tensors *t = sets_of(L, &n, &h);
    zl_optim_sgd hp = zl_optim_sgd_defaults();
    hp.lr = num_field(L, h, "lr", hp.lr);
    hp.momentum = num_field(L, h, "momentum", hp.momentum);
    hp.dampening = num_field(L, h, "dampening", hp.dampening);
    hp.weight_decay = num_field(L, h, "weight_decay", hp.weight_decay);
    hp.nesterov = bool_field(L, h, "nesterov", hp.nesterov);
    hp.step = (int64_t)num_field(L, h, "step", (double)hp.step);
    hp.grad_scale = num_field(L, h, "grad_scale", hp.grad_scale);
    if (zl_optim_sgd_tensors(&hp, t, n)) return zlb_raise(L);
    return 0;
}

static int l_kernel(lua_State *L)
{
    if (!lua_isnoneornil(L, 1) && zl_optim_set_kernel(luaL_checkstring(L, 1))) return zlb_raise(L);
    lua_pushstring(L, zl_optim_kernel_name());
    return 1;
}

/* Adds the optimizer functions to the core table on top of the stack. */
void zlb_open_optim(lua_State *L)
{
    static const luaL_Reg fns[] = {
        {"optim_adam", l_adam}, {"optim_lamb", l_lamb}, {"optim_sgd", l_sgd},
        {"optim_kernel", l_kernel}, {NULL, NULL},
    };
    zlb_setfuncs(L, fns);
}
