/* The core's bindings of zlua/ops.h, one C function per engine op and raw:
 * 0-based dims, every argument explicit (ALL_DIMS for a full reduction).
 * Defaults, 1-based dims and overloads live in lua/zlua/init.lua. */
#include "binding.h"

/* One tensor in, one out; the box is created before the engine call. */
#define ZLB_OP1(name, call)                       \
    static int name(lua_State *L)                 \
    {                                             \
        zl_tensor *x = zlb_check_tensor_any(L, 1);    \
        zl_tensor **out = zlb_new_tensor(L);      \
        *out = call(x);                           \
        return zlb_result(L, *out);               \
    }
#define ZLB_OP2(name, call)                                                  \
    static int name(lua_State *L)                                            \
    {                                                                        \
        zl_tensor *a = zlb_check_tensor_any(L, 1), *b = zlb_check_tensor_any(L, 2);  \
        zl_tensor **out = zlb_new_tensor(L);                                 \
        *out = call(a, b);                                                   \
        return zlb_result(L, *out);                                          \
    }
ZLB_OP2(add, zl_add)
ZLB_OP2(sub, zl_sub)
ZLB_OP2(mul, zl_mul)
ZLB_OP2(div_, zl_div)
ZLB_OP2(pow_, zl_pow)
ZLB_OP2(eq, zl_eq)
ZLB_OP2(lt, zl_lt)
ZLB_OP2(gt, zl_gt)
ZLB_OP2(matmul, zl_matmul)
ZLB_OP1(neg, zl_neg)
ZLB_OP1(exp_, zl_exp)
ZLB_OP1(log_, zl_log)
ZLB_OP1(sqrt_, zl_sqrt)
ZLB_OP1(tanh_, zl_tanh)
ZLB_OP1(sigmoid, zl_sigmoid)
ZLB_OP1(relu, zl_relu)
ZLB_OP1(abs_, zl_abs)
ZLB_OP2(ne, zl_ne)
ZLB_OP2(le, zl_le)
ZLB_OP2(ge, zl_ge)
ZLB_OP1(silu, zl_silu)
ZLB_OP1(sin_, zl_sin)
ZLB_OP1(cos_, zl_cos)
ZLB_OP1(log1p_, zl_log1p)
#undef ZLB_OP1
#undef ZLB_OP2

static int pow_scalar(lua_State *L)
{
    zl_tensor *x = zlb_check_tensor_any(L, 1);
    double e = luaL_checknumber(L, 2);
    zl_tensor **out = zlb_new_tensor(L);
    *out = zl_pow_scalar(x, e);
    return zlb_result(L, *out);
}

static int affine(lua_State *L)
{
    zl_tensor *x = zlb_check_tensor_any(L, 1);
    double s = luaL_checknumber(L, 2), a = luaL_checknumber(L, 3);
    zl_tensor **out = zlb_new_tensor(L);
    *out = zl_affine(x, s, a);
    return zlb_result(L, *out);
}

static int gelu(lua_State *L)
{
    zl_tensor *x = zlb_check_tensor_any(L, 1);
    bool approximate = lua_toboolean(L, 2);
    zl_tensor **out = zlb_new_tensor(L);
    *out = zl_gelu(x, approximate);
    return zlb_result(L, *out);
}

/* reduce(x, dim, keepdim): dim is 0-based or ALL_DIMS. */
static int reduce(lua_State *L, zl_tensor *(*fn)(zl_tensor *, int, bool))
{
    zl_tensor *x = zlb_check_tensor_any(L, 1);
    int d = (int)luaL_checkinteger(L, 2);
    bool keepdim = lua_toboolean(L, 3);
    zl_tensor **out = zlb_new_tensor(L);
    *out = fn(x, d, keepdim);
    return zlb_result(L, *out);
}

static int sum(lua_State *L) { return reduce(L, zl_sum); }
static int mean(lua_State *L) { return reduce(L, zl_mean); }
static int max_(lua_State *L) { return reduce(L, zl_max); }
static int argmax(lua_State *L) { return reduce(L, zl_argmax); }
static int min_(lua_State *L) { return reduce(L, zl_min); }
static int argmin(lua_State *L) { return reduce(L, zl_argmin); }

/* softplus(x, beta, threshold), leaky_relu(x, slope), clamp(x, lo, hi): every
 * parameter given (clamp's open side as -inf or inf). */
static int softplus(lua_State *L)
{
    zl_tensor *x = zlb_check_tensor_any(L, 1);
    double beta = luaL_checknumber(L, 2), threshold = luaL_checknumber(L, 3);
    zl_tensor **out = zlb_new_tensor(L);
    *out = zl_softplus(x, beta, threshold);
    return zlb_result(L, *out);
}

static int leaky_relu(lua_State *L)
{
    zl_tensor *x = zlb_check_tensor_any(L, 1);
    double slope = luaL_checknumber(L, 2);
    zl_tensor **out = zlb_new_tensor(L);
    *out = zl_leaky_relu(x, slope);
    return zlb_result(L, *out);
}

static int clamp(lua_State *L)
{
    zl_tensor *x = zlb_check_tensor_any(L, 1);
    double lo = luaL_checknumber(L, 2), hi = luaL_checknumber(L, 3);
    zl_tensor **out = zlb_new_tensor(L);
    *out = zl_clamp(x, lo, hi);
    return zlb_result(L, *out);
}

/* A list of 0-based dims at idx (empty: every dim) into dims; returns the count. */
static int check_dims(lua_State *L, int idx, int *dims)
{
    luaL_checktype(L, idx, LUA_TTABLE);
    lua_Integer n = (lua_Integer)lua_rawlen(L, idx);
    if (n > ZL_MAX_DIMS) return zlb_error(L, "at most %d dims, got %d", ZL_MAX_DIMS, (int)n);
    for (lua_Integer i = 0; i < n; i++) {
        lua_rawgeti(L, idx, i + 1);
        dims[i] = (int)luaL_checkinteger(L, -1);
        lua_pop(L, 1);
    }
    return (int)n;
}

/* sum_dims/mean_dims(x, dims, keepdim) */
static int reduce_dims(lua_State *L, zl_tensor *(*fn)(zl_tensor *, int, const int *, bool))
{
    zl_tensor *x = zlb_check_tensor_any(L, 1);
    int dims[ZL_MAX_DIMS], n = check_dims(L, 2, dims);
    bool keepdim = lua_toboolean(L, 3);
    zl_tensor **out = zlb_new_tensor(L);
    *out = fn(x, n, dims, keepdim);
    return zlb_result(L, *out);
}

static int sum_dims(lua_State *L) { return reduce_dims(L, zl_sum_dims); }
static int mean_dims(lua_State *L) { return reduce_dims(L, zl_mean_dims); }

/* var/std(x, dims, correction, keepdim) */
static int var_like(lua_State *L, zl_tensor *(*fn)(zl_tensor *, int, const int *, double, bool))
{
    zl_tensor *x = zlb_check_tensor_any(L, 1);
    int dims[ZL_MAX_DIMS], n = check_dims(L, 2, dims);
    double correction = luaL_checknumber(L, 3);
    bool keepdim = lua_toboolean(L, 4);
    zl_tensor **out = zlb_new_tensor(L);
    *out = fn(x, n, dims, correction, keepdim);
    return zlb_result(L, *out);
}

static int var(lua_State *L) { return var_like(L, zl_var); }
static int std_(lua_State *L) { return var_like(L, zl_std); }

static int cumsum(lua_State *L)
{
    zl_tensor *x = zlb_check_tensor_any(L, 1);
    int d = (int)luaL_checkinteger(L, 2);
    zl_tensor **out = zlb_new_tensor(L);
    *out = zl_cumsum(x, d);
    return zlb_result(L, *out);
}

static int gather(lua_State *L)
{
    zl_tensor *x = zlb_check_tensor_any(L, 1);
    int d = (int)luaL_checkinteger(L, 2);
    zl_tensor *idx = zlb_check_tensor_any(L, 3);
    zl_tensor **out = zlb_new_tensor(L);
    *out = zl_gather(x, d, idx);
    return zlb_result(L, *out);
}

/* scatter/scatter_add(x, dim, index, src) */
static int scatter_like(lua_State *L, zl_tensor *(*fn)(zl_tensor *, int, zl_tensor *, zl_tensor *))
{
    zl_tensor *x = zlb_check_tensor_any(L, 1);
    int d = (int)luaL_checkinteger(L, 2);
    zl_tensor *idx = zlb_check_tensor_any(L, 3), *src = zlb_check_tensor_any(L, 4);
    zl_tensor **out = zlb_new_tensor(L);
    *out = fn(x, d, idx, src);
    return zlb_result(L, *out);
}

static int scatter(lua_State *L) { return scatter_like(L, zl_scatter); }
static int scatter_add(lua_State *L) { return scatter_like(L, zl_scatter_add); }

static int linear(lua_State *L)
{
    zl_tensor *x = zlb_check_tensor_any(L, 1), *w = zlb_check_tensor_any(L, 2), *b = zlb_opt_tensor_any(L, 3);
    zl_tensor **out = zlb_new_tensor(L);
    *out = zl_linear(x, w, b);
    return zlb_result(L, *out);
}

static int softmax_like(lua_State *L, zl_tensor *(*fn)(zl_tensor *, int))
{
    zl_tensor *x = zlb_check_tensor_any(L, 1);
    int d = (int)luaL_checkinteger(L, 2);
    zl_tensor **out = zlb_new_tensor(L);
    *out = fn(x, d);
    return zlb_result(L, *out);
}

static int softmax(lua_State *L) { return softmax_like(L, zl_softmax); }
static int log_softmax(lua_State *L) { return softmax_like(L, zl_log_softmax); }

static zl_reduction check_reduction(lua_State *L, int idx)
{
    static const char *const names[] = {"mean", "sum", "none", NULL};
    static const zl_reduction values[] = {ZL_REDUCE_MEAN, ZL_REDUCE_SUM, ZL_REDUCE_NONE};
    return values[luaL_checkoption(L, idx, "mean", names)];
}

/* cross_entropy(logits, target, ignore_index, reduction [, dtype of the loss
 * [, weight|nil [, label_smoothing]]]) */
static int cross_entropy(lua_State *L)
{
    zl_tensor *x = zlb_check_tensor_any(L, 1), *y = zlb_check_tensor_any(L, 2);
    lua_Integer ignore = luaL_optinteger(L, 3, -100);
    zl_reduction red = check_reduction(L, 4);
    zl_dtype dt = zlb_opt_dtype(L, 5, zl_tensor_dtype(x));
    zl_tensor *w = zlb_opt_tensor_any(L, 6);
    double smoothing = luaL_optnumber(L, 7, 0.0);
    zl_tensor **out = zlb_new_tensor(L);
    *out = zl_cross_entropy_ex(x, y, w, ignore, smoothing, red, dt);
    return zlb_result(L, *out);
}

static int mse_loss(lua_State *L)
{
    zl_tensor *x = zlb_check_tensor_any(L, 1), *y = zlb_check_tensor_any(L, 2);
    zl_reduction red = check_reduction(L, 3);
    zl_tensor **out = zlb_new_tensor(L);
    *out = zl_mse_loss(x, y, red);
    return zlb_result(L, *out);
}

/* layer_norm(x, nnorm, weight|nil, bias|nil, eps) */
static int layer_norm(lua_State *L)
{
    zl_tensor *x = zlb_check_tensor_any(L, 1);
    int nnorm = (int)luaL_checkinteger(L, 2);
    zl_tensor *w = zlb_opt_tensor_any(L, 3), *b = zlb_opt_tensor_any(L, 4);
    double eps = luaL_optnumber(L, 5, 1e-5);
    zl_tensor **out = zlb_new_tensor(L);
    *out = zl_layer_norm(x, nnorm, w, b, eps);
    return zlb_result(L, *out);
}

/* embedding(weight, indices [, padding_idx in [0, V)]): the engine's order. */
static int embedding(lua_State *L)
{
    zl_tensor *w = zlb_check_tensor_any(L, 1), *idx = zlb_check_tensor_any(L, 2);
    bool padded = !lua_isnoneornil(L, 3);
    lua_Integer pad = padded ? luaL_checkinteger(L, 3) : 0;
    zl_tensor **out = zlb_new_tensor(L);
    *out = padded ? zl_embedding_padded(w, idx, pad) : zl_embedding(w, idx);
    return zlb_result(L, *out);
}

/* dropout(x, p, training, generator|nil) */
static int dropout(lua_State *L)
{
    zl_tensor *x = zlb_check_tensor_any(L, 1);
    double p = luaL_checknumber(L, 2);
    bool training = lua_toboolean(L, 3);
    zl_generator *g = zlb_opt_generator(L, 4);
    zl_tensor **out = zlb_new_tensor(L);
    *out = zl_dropout(x, p, training, g);
    return zlb_result(L, *out);
}

/* conv2d(x, w, b|nil, stride_h, stride_w, pad_h, pad_w [, dilation_h, dilation_w [, groups]]) */
static int conv2d(lua_State *L)
{
    zl_tensor *x = zlb_check_tensor_any(L, 1), *w = zlb_check_tensor_any(L, 2), *b = zlb_opt_tensor_any(L, 3);
    int sh = (int)luaL_checkinteger(L, 4), sw = (int)luaL_checkinteger(L, 5);
    int ph = (int)luaL_checkinteger(L, 6), pw = (int)luaL_checkinteger(L, 7);
    int dh = (int)luaL_optinteger(L, 8, 1), dw = (int)luaL_optinteger(L, 9, 1);
    int groups = (int)luaL_optinteger(L, 10, 1);
    zl_tensor **out = zlb_new_tensor(L);
    *out = zl_conv2d_ex(x, w, b, sh, sw, ph, pw, dh, dw, groups);
    return zlb_result(L, *out);
}

/* max_pool2d(x, kh, kw, stride_h, stride_w, pad_h, pad_w) */
static int max_pool2d(lua_State *L)
{
    zl_tensor *x = zlb_check_tensor_any(L, 1);
    int kh = (int)luaL_checkinteger(L, 2), kw = (int)luaL_checkinteger(L, 3);
    int sh = (int)luaL_checkinteger(L, 4), sw = (int)luaL_checkinteger(L, 5);
    int ph = (int)luaL_checkinteger(L, 6), pw = (int)luaL_checkinteger(L, 7);
    zl_tensor **out = zlb_new_tensor(L);
    *out = zl_max_pool2d(x, kh, kw, sh, sw, ph, pw);
    return zlb_result(L, *out);
}

/* avg_pool2d(x, kh, kw, stride_h, stride_w, pad_h, pad_w, count_include_pad) */
static int avg_pool2d(lua_State *L)
{
    zl_tensor *x = zlb_check_tensor_any(L, 1);
    int kh = (int)luaL_checkinteger(L, 2), kw = (int)luaL_checkinteger(L, 3);
    int sh = (int)luaL_checkinteger(L, 4), sw = (int)luaL_checkinteger(L, 5);
    int ph = (int)luaL_checkinteger(L, 6), pw = (int)luaL_checkinteger(L, 7);
    bool count_pad = lua_toboolean(L, 8);
    zl_tensor **out = zlb_new_tensor(L);
    *out = zl_avg_pool2d(x, kh, kw, sh, sw, ph, pw, count_pad);
    return zlb_result(L, *out);
}

/* attention(q, k, v, causal, scale, mask|nil); scale 0 means 1/sqrt(D). */
static int attention(lua_State *L)
{
    zl_tensor *q = zlb_check_tensor_any(L, 1), *k = zlb_check_tensor_any(L, 2), *v = zlb_check_tensor_any(L, 3);
    bool causal = lua_toboolean(L, 4);
    double scale = luaL_optnumber(L, 5, 0.0);
    zl_tensor *mask = zlb_opt_tensor_any(L, 6);
    zl_tensor **out = zlb_new_tensor(L);
    *out = zl_attention_masked(q, k, v, mask, causal, scale);
    return zlb_result(L, *out);
}

/* rms_norm(x, nnorm, weight|nil, eps) */
static int rms_norm(lua_State *L)
{
    zl_tensor *x = zlb_check_tensor_any(L, 1);
    int nnorm = (int)luaL_checkinteger(L, 2);
    zl_tensor *w = zlb_opt_tensor_any(L, 3);
    double eps = luaL_checknumber(L, 4);
    zl_tensor **out = zlb_new_tensor(L);
    *out = zl_rms_norm(x, nnorm, w, eps);
    return zlb_result(L, *out);
}

/* rotary(x, cos, sin) */
static int rotary(lua_State *L)
{
    zl_tensor *x = zlb_check_tensor_any(L, 1), *c = zlb_check_tensor_any(L, 2), *s = zlb_check_tensor_any(L, 3);
    zl_tensor **out = zlb_new_tensor(L);
    *out = zl_rotary(x, c, s);
    return zlb_result(L, *out);
}

/* cat/stack(list, dim): the array of borrowed tensors lives in a userdata, so
 * a Lua error while reading the list frees it with everything else. */
static int join(lua_State *L, zl_tensor *(*fn)(zl_tensor *const *, int, int))
{
    luaL_checktype(L, 1, LUA_TTABLE);
    int d = (int)luaL_checkinteger(L, 2);
    size_t n = lua_rawlen(L, 1);
    if (n == 0 || n > INT32_MAX) return zlb_error(L, "expected a non-empty list of tensors");
    zl_tensor **ts = lua_newuserdatauv(L, n * sizeof *ts, 0);
    for (size_t i = 0; i < n; i++) {
        lua_rawgeti(L, 1, (lua_Integer)i + 1);
        zlb_tensor *u = luaL_testudata(L, -1, ZLB_TENSOR_MT);
        if (!u) return zlb_error(L, "entry %d of the list is a %s, expected a tensor", (int)i + 1, luaL_typename(L, -1));
        if (!u->t) return zlb_error(L, "entry %d of the list: tensor was released", (int)i + 1);
        ts[i] = u->t;
        lua_pop(L, 1);
    }
    zl_tensor **out = zlb_new_tensor(L);
    *out = fn(ts, (int)n, d);
    return zlb_result(L, *out);
}

static int cat(lua_State *L) { return join(L, zl_cat); }
static int stack(lua_State *L) { return join(L, zl_stack); }

static int index_select(lua_State *L)
{
    zl_tensor *x = zlb_check_tensor_any(L, 1);
    int d = (int)luaL_checkinteger(L, 2);
    zl_tensor *idx = zlb_check_tensor_any(L, 3);
    zl_tensor **out = zlb_new_tensor(L);
    *out = zl_index_select(x, d, idx);
    return zlb_result(L, *out);
}

static int where(lua_State *L)
{
    zl_tensor *c = zlb_check_tensor_any(L, 1), *a = zlb_check_tensor_any(L, 2), *b = zlb_check_tensor_any(L, 3);
    zl_tensor **out = zlb_new_tensor(L);
    *out = zl_where(c, a, b);
    return zlb_result(L, *out);
}

static int masked_fill(lua_State *L)
{
    zl_tensor *x = zlb_check_tensor_any(L, 1), *mask = zlb_check_tensor_any(L, 2);
    double v = luaL_checknumber(L, 3);
    zl_tensor **out = zlb_new_tensor(L);
    *out = zl_masked_fill(x, mask, v);
    return zlb_result(L, *out);
}

void zlb_open_ops(lua_State *L)
{
    static const luaL_Reg fns[] = {
        {"add", add}, {"sub", sub}, {"mul", mul}, {"div", div_}, {"pow", pow_}, {"eq", eq},
        {"lt", lt}, {"gt", gt}, {"neg", neg}, {"exp", exp_}, {"log", log_}, {"sqrt", sqrt_},
        {"tanh", tanh_}, {"sigmoid", sigmoid}, {"relu", relu}, {"abs", abs_},
        {"pow_scalar", pow_scalar}, {"affine", affine}, {"gelu", gelu}, {"sum", sum},
        {"mean", mean}, {"max", max_}, {"argmax", argmax}, {"matmul", matmul}, {"linear", linear},
        {"softmax", softmax}, {"log_softmax", log_softmax}, {"cross_entropy", cross_entropy},
        {"mse_loss", mse_loss}, {"layer_norm", layer_norm}, {"embedding", embedding},
        {"dropout", dropout}, {"conv2d", conv2d}, {"max_pool2d", max_pool2d},
        {"avg_pool2d", avg_pool2d},
        {"attention", attention}, {"cat", cat}, {"stack", stack}, {"index_select", index_select},
        {"where", where}, {"masked_fill", masked_fill},
        {"rms_norm", rms_norm}, {"rotary", rotary},
        {"ne", ne}, {"le", le}, {"ge", ge}, {"silu", silu}, {"sin", sin_}, {"cos", cos_}, {"log1p", log1p_},
        {"softplus", softplus}, {"leaky_relu", leaky_relu}, {"clamp", clamp}, {"min", min_}, {"argmin", argmin},
        {"sum_dims", sum_dims}, {"mean_dims", mean_dims}, {"var", var}, {"std", std_}, {"cumsum", cumsum},
        {"gather", gather}, {"scatter", scatter}, {"scatter_add", scatter_add},
        {NULL, NULL},
    };
    zlb_setfuncs(L, fns);
    lua_pushinteger(L, ZL_ALL_DIMS);
    lua_setfield(L, -2, "ALL_DIMS");
}
