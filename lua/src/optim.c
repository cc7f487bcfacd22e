/* The binding of engine/optim: one call per parameter tensor running the fused
 * Adam, Lamb or SGD kernel on (p, g, m, v), with the hyperparameters read from a
 * Lua table. Optimizer objects and param groups live in lua/zlua/optim/. */
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

/* Arguments: p, g, m, v, hp table [, p_half]: one set, in host memory or on
 * a device (the engine steps it where it lives). */
static zl_optim_tensors set_of(lua_State *L)
{
    zl_optim_tensors t = {.p = zlb_check_tensor_any(L, 1), .g = zlb_check_tensor_any(L, 2),
                          .m = zlb_opt_tensor_any(L, 3), .v = zlb_opt_tensor_any(L, 4)};
    luaL_checktype(L, 5, LUA_TTABLE);
    t.p_half = zlb_opt_tensor_any(L, 6);
    return t;
}

static int l_adam(lua_State *L)
{
    zl_optim_tensors t = set_of(L);
    zl_optim_adam hp = zl_optim_adam_defaults();
    hp.lr = num_field(L, 5, "lr", hp.lr);
    hp.beta1 = num_field(L, 5, "beta1", hp.beta1);
    hp.beta2 = num_field(L, 5, "beta2", hp.beta2);
    hp.eps = num_field(L, 5, "eps", hp.eps);
    hp.weight_decay = num_field(L, 5, "weight_decay", hp.weight_decay);
    hp.adamw_mode = bool_field(L, 5, "adamw_mode", hp.adamw_mode);
    hp.bias_correction = bool_field(L, 5, "bias_correction", hp.bias_correction);
    hp.step = (int64_t)num_field(L, 5, "step", (double)hp.step);
    hp.grad_scale = num_field(L, 5, "grad_scale", hp.grad_scale);
    if (zl_optim_adam_tensors(&hp, &t, 1)) return zlb_raise(L);
    return 0;
}

static void lamb_hp(lua_State *L, zl_optim_lamb *hp)
{
    *hp = zl_optim_lamb_defaults();
    hp->lr = num_field(L, 5, "lr", hp->lr);
    hp->beta1 = num_field(L, 5, "beta1", hp->beta1);
    hp->beta2 = num_field(L, 5, "beta2", hp->beta2);
    hp->eps = num_field(L, 5, "eps", hp->eps);
    hp->weight_decay = num_field(L, 5, "weight_decay", hp->weight_decay);
    hp->max_coeff = num_field(L, 5, "max_coeff", hp->max_coeff);
    hp->min_coeff = num_field(L, 5, "min_coeff", hp->min_coeff);
    hp->bias_correction = bool_field(L, 5, "bias_correction", hp->bias_correction);
    hp->step = (int64_t)num_field(L, 5, "step", (double)hp->step);
    hp->grad_scale = num_field(L, 5, "grad_scale", hp->grad_scale);
}

/* Returns the trust ratio used. */
static int l_lamb(lua_State *L)
{
    zl_optim_tensors t = set_of(L);
    zl_optim_lamb hp;
    lamb_hp(L, &hp);
    double ratio = 0;
    if (zl_optim_lamb_tensors(&hp, &t, 1, &ratio)) return zlb_raise(L);
    lua_pushnumber(L, ratio);
    return 1;
}

static int l_sgd(lua_State *L)
{
    zl_optim_tensors t = set_of(L);
    zl_optim_sgd hp = zl_optim_sgd_defaults();
    hp.lr = num_field(L, 5, "lr", hp.lr);
    hp.momentum = num_field(L, 5, "momentum", hp.momentum);
    hp.dampening = num_field(L, 5, "dampening", hp.dampening);
    hp.weight_decay = num_field(L, 5, "weight_decay", hp.weight_decay);
    hp.nesterov = bool_field(L, 5, "nesterov", hp.nesterov);
    hp.step = (int64_t)num_field(L, 5, "step", (double)hp.step);
    hp.grad_scale = num_field(L, 5, "grad_scale", hp.grad_scale);
    if (zl_optim_sgd_tensors(&hp, &t, 1)) return zlb_raise(L);
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
