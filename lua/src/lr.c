/* The binding of zlua/schedule.h: a learning-rate schedule as a userdata
 * holding its zl_lr_schedule and its groups' values, asked for every group's
 * lr (and OneCycle's betas) at a step. zlua.lr's schedule objects hold one. */
#include <stddef.h>
#include <string.h>
#include "fields.h"

#define ZLB_LR_SCHEDULE_MT "zlua.LRSchedule"

/* Lua never moves a full userdata, so s.groups can point into it. */
typedef struct zlb_lr {
    zl_lr_schedule s;
    zl_lr_group groups[];
} zlb_lr;

enum { NUM, INT, BOOL, WARMUP_TYPE, GROUP };

#define K(kind) (1u << (kind))
#define WARMUPS (K(ZL_LR_WARMUP) | K(ZL_LR_WARMUP_DECAY) | K(ZL_LR_WARMUP_COSINE))
#define S(f) offsetof(zl_lr_schedule, f)
#define G(f) offsetof(zl_lr_group, f)

/* DeepSpeed's parameters: the kinds that take each, its type, where it goes
 * (a GROUP value in each zl_lr_group, from a number or a list of one per
 * group). "lr" is WarmupCosineLR's base: the optimizer's lrs. */
static const struct lr_field {
    const char *key;
    unsigned kinds;
    int type;
    size_t offset;
} fields[] = {
    {"warmup_min_lr", K(ZL_LR_WARMUP) | K(ZL_LR_WARMUP_DECAY), GROUP, G(min_lr)},
    {"warmup_max_lr", K(ZL_LR_WARMUP) | K(ZL_LR_WARMUP_DECAY), GROUP, G(max_lr)},
    {"warmup_num_steps", WARMUPS, INT, S(warmup_num_steps)},
    {"warmup_type", WARMUPS, WARMUP_TYPE, S(warmup_type)},
    {"total_num_steps", K(ZL_LR_WARMUP_DECAY) | K(ZL_LR_WARMUP_COSINE), INT, S(total_num_steps)},
    {"warmup_min_ratio", K(ZL_LR_WARMUP_COSINE), NUM, S(warmup_min_ratio)},
    {"cos_min_ratio", K(ZL_LR_WARMUP_COSINE), NUM, S(cos_min_ratio)},
    {"lr", K(ZL_LR_WARMUP_COSINE), GROUP, G(base_lr)},
    {"cycle_min_lr", K(ZL_LR_ONE_CYCLE), GROUP, G(min_lr)},
    {"cycle_max_lr", K(ZL_LR_ONE_CYCLE), GROUP, G(max_lr)},
    {"cycle_min_mom", K(ZL_LR_ONE_CYCLE), GROUP, G(min_mom)},
    {"cycle_max_mom", K(ZL_LR_ONE_CYCLE), GROUP, G(max_mom)},
    {"cycle_first_step_size", K(ZL_LR_ONE_CYCLE), NUM, S(cycle_first_step_size)},
    {"cycle_second_step_size", K(ZL_LR_ONE_CYCLE), NUM, S(cycle_second_step_size)},
    {"cycle_first_stair_count", K(ZL_LR_ONE_CYCLE), INT, S(cycle_first_stair_count)},
    {"cycle_second_stair_count", K(ZL_LR_ONE_CYCLE), INT, S(cycle_second_stair_count)},
    {"decay_step_size", K(ZL_LR_ONE_CYCLE), NUM, S(decay_step_size)},
    {"decay_lr_rate", K(ZL_LR_ONE_CYCLE), NUM, S(decay_lr_rate)},
    {"decay_mom_rate", K(ZL_LR_ONE_CYCLE), NUM, S(decay_mom_rate)},
    {"cycle_momentum", K(ZL_LR_ONE_CYCLE), BOOL, S(cycle_momentum)},
    {"lr_range_test_min_lr", K(ZL_LR_RANGE_TEST), GROUP, G(min_lr)},
    {"lr_range_test_step_size", K(ZL_LR_RANGE_TEST), INT, S(lr_range_test_step_size)},
    {"lr_range_test_step_rate", K(ZL_LR_RANGE_TEST), NUM, S(lr_range_test_step_rate)},
    {"lr_range_test_staircase", K(ZL_LR_RANGE_TEST), BOOL, S(lr_range_test_staircase)},
};

#undef K
#undef WARMUPS
#undef S
#undef G

/* The value on top of the stack into field f of u. */
static void read_field(lua_State *L, zlb_lr *u, const struct lr_field *f, const char *name)
{
    char *s = (char *)&u->s + f->offset;
    switch (f->type) {
    case NUM: *(double *)s = zlb_number_at(L, -1, name, f->key); break;
    case INT: *(int64_t *)s = zlb_integer_at(L, -1, name, f->key); break;
    case BOOL: *(bool *)s = zlb_boolean_at(L, -1, name, f->key); break;
    case WARMUP_TYPE: {
        const char *v = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "";
        if (strcmp(v, "log") && strcmp(v, "linear")) zlb_error(L, "%s: warmup_type must be 'log' or 'linear'", name);
        u->s.warmup_type = strcmp(v, "log") ? ZL_LR_WARMUP_LINEAR : ZL_LR_WARMUP_LOG;
        break;
    }
    default: {
        int n = u->s.ngroups;
        bool list = lua_istable(L, -1);
        if (list && lua_rawlen(L, -1) != (size_t)n)
            zlb_error(L, "%s: %s must have one value per param group (%d), got %d", name, f->key, n,
                      (int)lua_rawlen(L, -1));
        double v = list ? 0 : zlb_number_at(L, -1, name, f->key);
        for (int g = 0; g < n; g++) {
            if (list) {
                lua_rawgeti(L, -1, g + 1);
                v = zlb_number_at(L, -1, name, f->key);
                lua_pop(L, 1);
            }
            *(double *)((char *)&u->groups[g] + f->offset) = v;
        }
    }
    }
}

/* lr_schedule(kind, ngroups, params) -> a schedule: `kind` DeepSpeed's name,
 * params by DeepSpeed's names (absent ones take DeepSpeed's defaults), each
 * per-group value a number or a list of ngroups. Checked by the engine. */
static int lr_schedule(lua_State *L)
{
    const char *name = luaL_checkstring(L, 1);
    lua_Integer n = luaL_checkinteger(L, 2);
    luaL_checktype(L, 3, LUA_TTABLE);
    int kind = 0;
    while (zl_lr_kind_name((zl_lr_kind)kind) && strcmp(zl_lr_kind_name((zl_lr_kind)kind), name)) kind++;
    if (!zl_lr_kind_name((zl_lr_kind)kind)) zlb_error(L, "lr_schedule: unknown schedule '%s'", name);
    if (n < 0 || n > INT32_MAX) zlb_error(L, "%s: %d param groups", name, (int)n);
    zlb_lr *u = lua_newuserdatauv(L, sizeof *u + (size_t)n * sizeof u->groups[0], 0);
    u->s = zl_lr_schedule_defaults((zl_lr_kind)kind);
    u->s.ngroups = (int)n;
    u->s.groups = u->groups;
    for (int g = 0; g < n; g++) u->groups[g] = zl_lr_group_defaults((zl_lr_kind)kind);
    luaL_setmetatable(L, ZLB_LR_SCHEDULE_MT);
    for (lua_pushnil(L); lua_next(L, 3); lua_pop(L, 1)) {
        const char *key = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "";
        size_t f = 0, nfields = sizeof fields / sizeof fields[0];
        while (f < nfields && (strcmp(fields[f].key, key) || !(fields[f].kinds & (1u << kind)))) f++;
        if (f == nfields) zlb_error(L, "%s: unknown parameter '%s'", name, luaL_tolstring(L, -2, NULL));
        read_field(L, u, &fields[f], name);
    }
    if (zl_lr_schedule_check(&u->s)) return zlb_raise(L);
    return 1;
}

/* One value per group at last_batch_iteration t: each lr, or (betas) each
 * {beta1, beta2} pair of OneCycle with cycle_momentum. */
static int per_group(lua_State *L, bool betas)
{
    zlb_lr *u = luaL_checkudata(L, 1, ZLB_LR_SCHEDULE_MT);
    lua_Integer t = luaL_checkinteger(L, 2);
    lua_createtable(L, u->s.ngroups, 0);
    for (int g = 0; g < u->s.ngroups; g++) {
        double v[2];
        if (betas ? zl_lr_schedule_betas(&u->s, t, g, v) : zl_lr_schedule_lr(&u->s, t, g, v)) return zlb_raise(L);
        if (betas) {
            lua_createtable(L, 2, 0);
            for (int k = 0; k < 2; k++) {
                lua_pushnumber(L, v[k]);
                lua_rawseti(L, -2, k + 1);
            }
        } else {
            lua_pushnumber(L, v[0]);
        }
        lua_rawseti(L, -2, g + 1);
    }
    return 1;
}

/* s:lrs(t) -> every group's lr at t */
static int lr_lrs(lua_State *L) { return per_group(L, false); }

/* s:betas(t) -> every group's {beta1, beta2} at t */
static int lr_betas(lua_State *L) { return per_group(L, true); }

/* s:warmup_steps() -> the warmup the formulas run (warmup_num_steps, at least 2) */
static int lr_warmup_steps(lua_State *L)
{
    zlb_lr *u = luaL_checkudata(L, 1, ZLB_LR_SCHEDULE_MT);
    lua_pushinteger(L, zl_lr_schedule_warmup_steps(&u->s));
    return 1;
}

/* s:caveat() -> the line DeepSpeed would warn with for this valid schedule, or nil */
static int lr_caveat(lua_State *L)
{
    zlb_lr *u = luaL_checkudata(L, 1, ZLB_LR_SCHEDULE_MT);
    char line[256];
    if (zl_lr_schedule_caveat(&u->s, line, sizeof line))
        lua_pushstring(L, line);
    else
        lua_pushnil(L);
    return 1;
}

const zl_lr_schedule *zlb_lr_schedule_of(lua_State *L, int idx)
{
    zlb_lr *u = luaL_checkudata(L, idx, ZLB_LR_SCHEDULE_MT);
    return &u->s;
}

/* Adds lr_schedule to the core table on top of the stack. */
void zlb_open_lr(lua_State *L)
{
    static const luaL_Reg fns[] = {{"lr_schedule", lr_schedule}, {NULL, NULL}};
    zlb_setfuncs(L, fns);
    static const luaL_Reg methods[] = {
        {"lrs", lr_lrs}, {"betas", lr_betas}, {"warmup_steps", lr_warmup_steps}, {"caveat", lr_caveat}, {NULL, NULL},
    };
    luaL_newmetatable(L, ZLB_LR_SCHEDULE_MT);
    zlb_newlib(L, methods);
    lua_setfield(L, -2, "__index");
    lua_pop(L, 1);
}
