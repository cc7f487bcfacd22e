/* Runs the op cases (op_cases.c) on a target against the host: the inputs
 * built from each case's description with values drawn from a counter-based
 * stream of their own, the op run with autograd on the host and on the
 * target, outputs and gradients compared. */
#include <stdint.h>
#include <stdlib.h>
#include "gradcheck.h"
#include "op_cases.h"

enum { MAX_IN = 6, MAX_ND = 4 };

typedef struct in_spec {
    zl_dtype dt;
    int ndim;
    int64_t shape[MAX_ND];
    char values;   /* 'n', '+', '<', '?', '~' or '!' */
    int64_t below;
    bool trans, host, constant;
    int endim;     /* > 0: expanded to eshape */
    int64_t eshape[MAX_ND];
} in_spec;

typedef struct parsed {
    const op_case *c;
    int n;
    in_spec in[MAX_IN];
} parsed;

static const struct { const char *name; zl_dtype dt; } dtypes[] = {
    {"f32", ZL_DTYPE_F32}, {"bf16", ZL_DTYPE_BF16}, {"f16", ZL_DTYPE_F16}, {"i64", ZL_DTYPE_I64},
    {"i32", ZL_DTYPE_I32}, {"u8", ZL_DTYPE_U8}, {"bool", ZL_DTYPE_BOOL},
};

static bool is_float(zl_dtype dt) { return dt == ZL_DTYPE_F32 || dt == ZL_DTYPE_BF16 || dt == ZL_DTYPE_F16; }

/* "[2,3]" at *s into shape; false on a malformed list. */
static bool parse_dims(const char **s, int *nd, int64_t *shape)
{
    const char *p = *s;
    if (*p++ != '[') return false;
    *nd = 0;
    while (*p && *p != ']') {
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p || *nd == MAX_ND) return false;
        shape[(*nd)++] = v;
        p = *end == ',' ? end + 1 : end;
    }
    if (*p != ']') return false;
    *s = p + 1;
    return true;
}

static bool parse_one(const char **s, in_spec *sp)
{
    const char *p = *s;
    *sp = (in_spec){.values = 'n'};
    size_t k = 0;
    while (k < sizeof dtypes / sizeof *dtypes &&
           (strncmp(p, dtypes[k].name, strlen(dtypes[k].name)) || p[strlen(dtypes[k].name)] != '['))
        k++;
    if (k == sizeof dtypes / sizeof *dtypes) return false;
    sp->dt = dtypes[k].dt;
    p += strlen(dtypes[k].name);
    if (!parse_dims(&p, &sp->ndim, sp->shape)) return false;
    while (*p && *p != ' ') {
        char c = *p++;
        if (c == '+' || c == '?' || c == '~' || c == '!') sp->values = c;
        else if (c == '<') {
            char *end;
            sp->values = '<';
            sp->below = strtoll(p, &end, 10);
            if (end == p) return false;
            p = end;
        } else if (c == '^' && *p == 'T') p++, sp->trans = true;
        else if (c == '>') {
            if (!parse_dims(&p, &sp->endim, sp->eshape)) return false;
        } else if (c == '@' && *p == 'h') p++, sp->host = true;
        else if (c == '=') sp->constant = true;
        else return false;
    }
    if (sp->trans && sp->ndim < 2) return false;
    *s = p;
    return true;
}

static bool parse_case(const op_case *c, parsed *out)
{
    out->c = c;
    out->n = 0;
    const char *p = c->inputs;
    while (*p) {
        while (*p == ' ') p++;
        if (!*p) break;
        if (out->n == MAX_IN || !parse_one(&p, &out->in[out->n])) {
            zt_fail(__FILE__, __LINE__, "case %s (%s): cannot read input %d of \"%s\"", c->op, c->what, out->n + 1,
                    c->inputs);
            return false;
        }
        out->n++;
    }
    return true;
}

/* splitmix64: the values depend only on the case, the input and the element. */
static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static double uniform(uint64_t key) { return ((double)(mix(key) >> 11) + 0.5) / 9007199254740992.0; }

static double normal(uint64_t key)
{
    return sqrt(-2.0 * log(uniform(key))) * cos(6.283185307179586 * uniform(key ^ 0x5bd1e995u));
}

static double value_of(const in_spec *sp, uint64_t key, int64_t i)
{
    static const double edges[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, 1e30, -1e30, 1e-30, 88.5, -88.5, 1.0, -2.5};
    switch (sp->values) {
    case '+': return 0.5 + fabs(normal(key));
    case '<': return floor(uniform(key) * (double)sp->below);
    case '?': return uniform(key) < 0.5;
    case '~': return nearbyint(normal(key) * 1.5);
    case '!': return i % 2 ? normal(key) : edges[(i / 2) % (sizeof edges / sizeof *edges)];
    default: return normal(key);
    }
}

/* A host tensor of dtype dt and the given shape, its elements drawn for `key`. */
static zl_tensor *drawn(const in_spec *sp, int ndim, const int64_t *shape, uint64_t key)
{
    zl_tensor *t = zl_tensor_new(sp->dt, ndim, shape, ZL_MEM_OTHER);
    if (!t) return NULL;
    for (int64_t i = 0; i < zl_tensor_numel(t); i++) zl_tensor_set(t, i, value_of(sp, mix(key + (uint64_t)i), i));
    return t;
}

/* Input i's storage on the host: its shape, with the last two dims swapped
 * when it is stored transposed. */
static zl_tensor *base_of(const parsed *p, int i, uint64_t key)
{
    const in_spec *sp = &p->in[i];
    int64_t shape[MAX_ND];
    memcpy(shape, sp->shape, sizeof shape);
    if (sp->trans) {
        shape[sp->ndim - 1] = sp->shape[sp->ndim - 2];
        shape[sp->ndim - 2] = sp->shape[sp->ndim - 1];
    }
    return drawn(sp, sp->ndim, shape, key * 131 + (uint64_t)i * 1000003u);
}

static bool wants_grad(const in_spec *sp) { return is_float(sp->dt) && !sp->host && !sp->constant; }

/* The case's output from its input storages: the views built, the op run, the views dropped. */
static zl_tensor *forward(zl_tensor **bases, void *ctx)
{
    const parsed *p = ctx;
    zl_tensor *views[MAX_IN] = {0};
    bool ok = true;
    for (int i = 0; i < p->n && ok; i++) {
        const in_spec *sp = &p->in[i];
        zl_tensor *v = sp->trans ? zl_tensor_transpose(bases[i], sp->ndim - 2, sp->ndim - 1)
                                 : zl_tensor_retain(bases[i]);
        if (v && sp->endim) {
            zl_tensor *e = zl_tensor_expand(v, sp->endim, sp->eshape);
            zl_tensor_release(v);
            v = e;
        }
        views[i] = v;
        ok = v != NULL;
    }
    zl_tensor *y = ok ? p->c->run(views) : NULL;
    for (int i = 0; i < p->n; i++) zl_tensor_release(views[i]);
    return y;
}

/* One run: the output and each input's gradient (NULL where it has none). */
typedef struct result {
    zl_tensor *y;
    zl_tensor *grad[MAX_IN];
} result;

static void result_free(result *r)
{
    zl_tensor_release(r->y);
    for (int i = 0; i < MAX_IN; i++) zl_tensor_release(r->grad[i]);
}

/* The case run on bases, backward from gy (made from y's shape on first use). */
static bool run_on(const parsed *p, zl_tensor **bases, zl_tensor **gy, const op_target *t, result *r,
                   uint64_t key)
{
    bool grad = p->c->flags & CASE_GRAD;
    for (int i = 0; i < p->n; i++) zl_tensor_set_requires_grad(bases[i], grad && wants_grad(&p->in[i]));
    r->y = forward(bases, (void *)p);
    if (!r->y || !grad) return r->y != NULL;
    if (!*gy) {
        in_spec g = {.dt = zl_tensor_dtype(r->y), .values = 'n'};
        *gy = drawn(&g, zl_tensor_ndim(r->y), zl_tensor_shape(r->y), key * 7 + 3);
    }
    zl_tensor *g = t ? t->to_dev(*gy) : zl_tensor_retain(*gy);
    zl_status st = g ? zl_backward(r->y, g, false) : ZL_EINVAL;
    zl_tensor_release(g);
    if (st) return false;
    for (int i = 0; i < p->n; i++)
        if (wants_grad(&p->in[i])) r->grad[i] = zl_tensor_retain(zl_tensor_grad(bases[i]));
    return true;
}

static double tolerance(zl_dtype dt)
{
    return dt == ZL_DTYPE_BF16 ? 2e-2 : dt == ZL_DTYPE_F16 ? 2e-3 : 1e-4;
}

/* A failure unless got (on the target) equals ref (host): bits when exact,
 * else within the dtype's tolerance (NaN matching NaN, infinities equal). */
static void compare(const parsed *p, const op_target *t, const char *what, const zl_tensor *ref, const zl_tensor *got,
                    zl_device where)
{
    const op_case *c = p->c;
    if (zl_tensor_device(got) != where) {
        zt_fail(__FILE__, __LINE__, "case %s (%s) on %s: the %s is not on the inputs' device", c->op, c->what,
                t->name, what);
        return;
    }
    zl_tensor *a = zl_tensor_contiguous((zl_tensor *)ref), *b = t->to_host(got);
    int nd = zl_tensor_ndim(a);
    if (!b || zl_tensor_dtype(a) != zl_tensor_dtype(b) || nd != zl_tensor_ndim(b) ||
        memcmp(zl_tensor_shape(a), zl_tensor_shape(b), (size_t)nd * sizeof(int64_t))) {
        zt_fail(__FILE__, __LINE__, "case %s (%s) on %s: the %s's dtype or shape differs from the host's", c->op,
                c->what, t->name, what);
    } else {
        bool bits = t->exact && !(c->flags & CASE_CLOSE);
        size_t es = zl_dtype_size(zl_tensor_dtype(a));
        double tol = is_float(zl_tensor_dtype(a)) ? tolerance(zl_tensor_dtype(a)) : 0;
        for (int64_t i = 0; i < zl_tensor_numel(a); i++) {
            double x = zl_tensor_get(a, i), y = zl_tensor_get(b, i);
            bool same = bits ? !memcmp((char *)zl_tensor_data(a) + i * es, (char *)zl_tensor_data(b) + i * es, es)
                             : x == y || (isnan(x) && isnan(y)) || fabs(x - y) <= tol * (1 + fabs(x));
            if (!same) {
                zt_fail(__FILE__, __LINE__, "case %s (%s, %s) on %s: the %s's element %lld is %.9g, the host's %.9g",
                        c->op, c->what, c->inputs, t->name, what, (long long)i, y, x);
                break;
            }
        }
    }
    zl_tensor_release(a);
    zl_tensor_release(b);
}

/* The host's gradients against finite differences, for cases whose inputs
 * that take a gradient are all f32. */
static void finite_differences(const parsed *p, zl_tensor **bases, const zl_tensor *y)
{
    if (zl_tensor_dtype(y) != ZL_DTYPE_F32) return;   /* a step of 1e-3 is below a half dtype's resolution */
    for (int i = 0; i < p->n; i++)
        if (wants_grad(&p->in[i]) && p->in[i].dt != ZL_DTYPE_F32) return;
    char name[160];
    snprintf(name, sizeof name, "case %s (%s)", p->c->op, p->c->what);
    for (int i = 0; i < p->n; i++) zl_tensor_set_requires_grad(bases[i], wants_grad(&p->in[i]));
    zt_gradcheck(name, forward, (void *)p, p->n, bases, 1e-3, 1e-2);
}

static void run_case(const op_target *t, const op_case *c, uint64_t key)
{
    parsed p;
    if (!parse_case(c, &p)) return;
    zl_tensor *host[MAX_IN] = {0}, *dev[MAX_IN] = {0}, *gy = NULL;
    result ref = {0}, got = {0};
    for (int i = 0; i < p.n; i++) {
        host[i] = base_of(&p, i, key);
        dev[i] = p.in[i].host ? zl_tensor_clone(host[i]) : t->to_dev(host[i]);
        if (!host[i] || !dev[i]) {
            zt_fail(__FILE__, __LINE__, "case %s (%s) on %s: input %d: %s", c->op, c->what, t->name, i + 1,
                    zl_last_error());
            goto out;
        }
    }
    if (!run_on(&p, host, &gy, NULL, &ref, key)) {
        zt_fail(__FILE__, __LINE__, "case %s (%s) on the host: %s", c->op, c->what, zl_last_error());
        goto out;
    }
    zl_device where = ZL_DEVICE_CPU;
    for (int i = 0; i < p.n; i++)
        if (!p.in[i].host) where = zl_tensor_device(dev[i]);
    zl_clear_error();
    bool ran = run_on(&p, dev, &gy, t, &got, key);
    if (!ran) {
        zt_fail(__FILE__, __LINE__, "case %s (%s) on %s: %s", c->op, c->what, t->name, zl_last_error());
        goto out;
    }
    compare(&p, t, "output", ref.y, got.y, where);
    for (int i = 0; i < p.n; i++) {
        char what[32];
        snprintf(what, sizeof what, "gradient of input %d", i + 1);
        if (!ref.grad[i] != !got.grad[i])
            zt_fail(__FILE__, __LINE__, "case %s (%s) on %s: the %s is %s there and %s on the host", c->op, c->what,
                    t->name, what, got.grad[i] ? "set" : "missing", ref.grad[i] ? "set" : "missing");
        else if (ref.grad[i]) compare(&p, t, what, ref.grad[i], got.grad[i], zl_tensor_device(dev[i]));
    }
    if (t->fd && (c->flags & CASE_GRAD) && !(c->flags & CASE_NO_FD)) finite_differences(&p, host, ref.y);
out:
    result_free(&ref);
    result_free(&got);
    zl_tensor_release(gy);
    for (int i = 0; i < MAX_IN; i++) {
        zl_tensor_release(host[i]);
        zl_tensor_release(dev[i]);
    }
}

int op_cases_run(const op_target *t, const char *filter)
{
    int ran = 0;
    for (int k = 0; k < op_case_count; k++) {
        const op_case *c = &op_cases[k];
        if (filter && !strstr(c->op, filter) && !strstr(c->what, filter)) continue;
        run_case(t, c, (uint64_t)k + 1);
        ran++;
    }
    return ran;
}

int op_cases_check_coverage(const char *ops_h)
{
    FILE *f = fopen(ops_h, "r");
    if (!f) {
        zt_fail(__FILE__, __LINE__, "cannot read %s", ops_h);
        return 0;
    }
    char line[512];
    const char *lead = "ZL_API zl_tensor *";
    int ops = 0;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, lead, strlen(lead))) continue;
        const char *name = line + strlen(lead);
        size_t len = strcspn(name, "(");
        ops++;
        int k = 0;
        while (k < op_case_count && (strlen(op_cases[k].op) != len || strncmp(op_cases[k].op, name, len))) k++;
        if (k == op_case_count)
            zt_fail(__FILE__, __LINE__, "%.*s (%s) has no case in tests/c/op_cases.c", (int)len, name, ops_h);
    }
    fclose(f);
    return ops;
}
