/* Autograd: accumulation into .grad, no-grad mode, freed graphs, the
 * gradient-ready and use hooks, and teardown of very long graphs. */
#include "harness.h"

static zl_tensor *leaf(int ndim, const int64_t *shape)
{
    zl_tensor *t = zl_tensor_randn(ZL_DTYPE_F32, ndim, shape, NULL);
    zl_tensor_set_requires_grad(t, true);
    return t;
}

TEST(backward_accumulates)
{
    zl_tensor *x = leaf(SHAPE(3));
    for (int rep = 0; rep < 2; rep++) {
        zl_tensor *y = zl_mul(x, x), *s = zl_sum(y, ZL_ALL_DIMS, false);
        CHECK(zl_backward(s, NULL, false) == ZL_OK);
        zl_tensor_release(y);
        zl_tensor_release(s);
    }
    for (int i = 0; i < 3; i++) CHECK_CLOSE(zl_tensor_get(zl_tensor_grad(x), i), 4 * zl_tensor_get(x, i), 1e-6);
    zl_tensor_release(x);
}

TEST(no_grad_and_errors)
{
    zl_tensor *x = leaf(SHAPE(2));
    bool was = zl_grad_set_enabled(false);
    zl_tensor *y = zl_exp(x);
    zl_grad_set_enabled(was);
    CHECK(!zl_tensor_requires_grad(y) && zl_tensor_grad_fn_name(y) == NULL);
    CHECK_ERR(zl_backward(y, NULL, false), "does not require grad");
    zl_tensor *z = zl_exp(x);
    CHECK(zl_tensor_grad_fn_name(z) && strcmp(zl_tensor_grad_fn_name(z), "exp") == 0);
    CHECK_ERR(zl_backward(z, NULL, false), "one-element tensor");
    zl_tensor *s = zl_sum(z, ZL_ALL_DIMS, false);
    CHECK(zl_backward(s, NULL, false) == ZL_OK);
    CHECK_ERR(zl_backward(s, NULL, false), "second time");
    zl_tensor *z2 = zl_exp(x), *s2 = zl_sum(z2, ZL_ALL_DIMS, false);
    CHECK(zl_backward(s2, NULL, true) == ZL_OK);
    CHECK(zl_backward(s2, NULL, false) == ZL_OK);   /* retained: may run again */
    zl_tensor *i = zl_tensor_arange(ZL_DTYPE_I64, 3);
    CHECK_ERR(zl_tensor_set_requires_grad(i, true), "only float tensors");
    zl_tensor *all[] = {x, y, z, s, z2, s2, i};
    for (int k = 0; k < 7; k++) zl_tensor_release(all[k]);
}

typedef struct { int fired; double seen; } ready_log;

static zl_status on_ready(zl_tensor *t, void *user)
{
    ready_log *log = user;
    log->fired++;
    log->seen = zl_tensor_get(zl_tensor_grad(t), 0);
    return ZL_OK;
}

TEST(grad_ready_fires_once_when_complete)
{
    /* w is used three times; the hook must fire once, after all three contributions. */
    zl_tensor *w = leaf(SHAPE(1));
    zl_tensor_fill(w, 0);
    ready_log log = {0, 0};
    bool was = zl_grad_set_enabled(false);
    zl_tensor_fill(w, 2.0);
    zl_grad_set_enabled(was);
    CHECK(zl_tensor_add_grad_ready_hook(w, on_ready, &log, NULL) > 0);
    zl_tensor *a = zl_mul(w, w), *b = zl_add(a, w), *c = zl_exp(w), *d = zl_add(b, c);
    CHECK(zl_backward(d, NULL, false) == ZL_OK);
    CHECK(log.fired == 1);
    CHECK_CLOSE(log.seen, 2 * 2.0 + 1 + exp(2.0), 1e-5);
    zl_tensor *all[] = {w, a, b, c, d};
    for (int k = 0; k < 5; k++) zl_tensor_release(all[k]);
}

typedef struct { int before_fwd, after_fwd, before_bwd, after_bwd; } use_log;

static zl_status on_use(zl_tensor *t, zl_use_event ev, const char *op, void *user)
{
    use_log *log = user;
    switch (ev) {
    case ZL_USE_BEFORE_FORWARD: log->before_fwd++; break;
    case ZL_USE_AFTER_FORWARD: log->after_fwd++; break;
    case ZL_USE_BEFORE_BACKWARD: log->before_bwd++; break;
    case ZL_USE_AFTER_BACKWARD: log->after_bwd++; break;
    }
    return ZL_OK;
}

static zl_status refuse(zl_tensor *t, zl_use_event ev, const char *op, void *user)
{
    return zl_error(ZL_EINVAL, "parameter not gathered (op %s)", op);
}

static int freed;
static void count_free(void *p) { freed++; }

TEST(use_hooks)
{
    zl_tensor *w = leaf(SHAPE(3, 4)), *x = zl_tensor_randn(ZL_DTYPE_F32, SHAPE(2, 4), NULL);
    use_log log = {0};
    int h = zl_tensor_add_use_hook(w, on_use, &log, count_free);
    zl_tensor *y = zl_linear(x, w, NULL), *s = zl_sum(y, ZL_ALL_DIMS, false);
    CHECK(log.before_fwd == 1 && log.after_fwd == 1 && log.before_bwd == 0);
    CHECK(zl_backward(s, NULL, false) == ZL_OK);
    CHECK(log.before_bwd == 1 && log.after_bwd == 1);
    zl_tensor_remove_hook(w, h);
    CHECK(freed == 1);
    zl_tensor_add_use_hook(w, refuse, NULL, NULL);
    CHECK_ERR(zl_linear(x, w, NULL), "parameter not gathered (op linear)");
    zl_tensor *all[] = {w, x, y, s};
    for (int k = 0; k < 4; k++) zl_tensor_release(all[k]);
}

TEST(long_graph_releases_without_recursion)
{
    zl_tensor *x = leaf(SHAPE(1));
    zl_tensor *acc = zl_tensor_retain(x);
    for (int i = 0; i < 200000; i++) {
        zl_tensor *n = zl_affine(acc, 1.0, 0.0);
        zl_tensor_release(acc);
        acc = n;
    }
    zl_tensor_release(acc);   /* frees 200000 nodes; a recursive release would overflow the stack */
    acc = zl_tensor_retain(x);
    for (int i = 0; i < 100000; i++) {
        zl_tensor *n = zl_affine(acc, 1.0, 1e-3);
        zl_tensor_release(acc);
        acc = n;
    }
    CHECK(zl_backward(acc, NULL, false) == ZL_OK);
    CHECK_CLOSE(zl_tensor_get(zl_tensor_grad(x), 0), 1.0, 1e-6);
    zl_tensor_release(acc);
    zl_tensor_release(x);
}

TEST(views_backward)
{
    zl_tensor *x = leaf(SHAPE(2, 3));
    zl_tensor *t = zl_tensor_transpose(x, 0, 1), *n = zl_tensor_narrow(t, 0, 1, 2);   /* [2, 2] */
    zl_tensor *r = zl_tensor_reshape(n, SHAPE(4)), *s = zl_sum(r, ZL_ALL_DIMS, false);
    CHECK(zl_backward(s, NULL, false) == ZL_OK);
    zl_tensor *g = zl_tensor_grad(x);
    double want[6] = {0, 1, 1, 0, 1, 1};
    for (int i = 0; i < 6; i++) CHECK(zl_tensor_get(g, i) == want[i]);
    zl_tensor *all[] = {x, t, n, r, s};
    for (int k = 0; k < 5; k++) zl_tensor_release(all[k]);
}

static int self_removing_handle, calls_after;
static zl_status remove_self(zl_tensor *t, zl_use_event ev, const char *op, void *user)
{
    zl_tensor_remove_hook(t, self_removing_handle);
    return ZL_OK;
}
static zl_status count_calls(zl_tensor *t, zl_use_event ev, const char *op, void *user)
{
    calls_after++;
    return ZL_OK;
}

TEST(hook_may_remove_itself_while_firing)
{
    zl_tensor *x = leaf(SHAPE(2));
    self_removing_handle = zl_tensor_add_use_hook(x, remove_self, NULL, count_free);
    zl_tensor_add_use_hook(x, count_calls, NULL, NULL);
    freed = 0;
    zl_tensor *y = zl_exp(x);
    CHECK(y && freed == 1);           /* removed (and its user data freed) once firing ended */
    CHECK(calls_after == 2);          /* the second hook still ran, before and after */
    zl_tensor *z = zl_exp(x);
    CHECK(calls_after == 4);
    zl_tensor_release(z);
    zl_tensor_release(y);
    zl_tensor_release(x);
}

typedef struct { int before, after; } pair_log;
static zl_status log_pair(zl_tensor *t, zl_use_event ev, const char *op, void *user)
{
    pair_log *l = user;
    if (ev == ZL_USE_BEFORE_FORWARD) l->before++;
    if (ev == ZL_USE_AFTER_FORWARD) l->after++;
    return ZL_OK;
}

TEST(failed_before_hook_releases_earlier_inputs)
{
    /* b's hook refuses: a, which already saw "before", must see "after" too. */
    zl_tensor *a = leaf(SHAPE(2)), *b = leaf(SHAPE(2));
    pair_log la = {0, 0};
    zl_tensor_add_use_hook(a, log_pair, &la, NULL);
    zl_tensor_add_use_hook(b, refuse, NULL, NULL);
    CHECK_ERR(zl_add(a, b), "parameter not gathered (op add)");
    CHECK(la.before == 1 && la.after == 1);
    CHECK(zl_tensor_add_use_hook(a, NULL, NULL, NULL) == 0 && strstr(zl_last_error(), "hook function is NULL"));
    zl_tensor_release(a);
    zl_tensor_release(b);
}

/* ZeRO-3's pattern: a parameter whose data is swapped in before each use and
 * swapped out (empty) after it, in forward and in backward. */
typedef struct { zl_tensor *full, *empty; int swaps; } swap_state;

static zl_status swap_data(zl_tensor *t, zl_use_event ev, const char *op, void *user)
{
    (void)op;
    swap_state *s = user;
    bool before = ev == ZL_USE_BEFORE_FORWARD || ev == ZL_USE_BEFORE_BACKWARD;
    s->swaps++;
    return zl_tensor_set_data(t, before ? s->full : s->empty);
}

TEST(released_parameter_gets_whole_gradient)
{
    zl_tensor *w = leaf(SHAPE(3, 4)), *x = zl_tensor_randn(ZL_DTYPE_F32, SHAPE(2, 4), NULL);
    swap_state st = {zl_tensor_detach(w), zl_tensor_new(ZL_DTYPE_F32, 1, (int64_t[]){0}, ZL_MEM_PARAMS), 0};
    CHECK(zl_tensor_set_data(w, st.empty) == ZL_OK);
    zl_tensor_add_use_hook(w, swap_data, &st, NULL);
    /* w read by two ops (a tied weight): released in between, in forward and backward. */
    zl_tensor *y1 = zl_linear(x, w, NULL), *y2 = zl_linear(x, w, NULL), *y = zl_add(y1, y2);
    zl_tensor *s = zl_sum(y, ZL_ALL_DIMS, false);
    CHECK(zl_tensor_numel(w) == 0);
    CHECK(zl_backward(s, NULL, false) == ZL_OK);
    CHECK(st.swaps == 8 && zl_tensor_numel(w) == 0);
    zl_tensor *g = zl_tensor_grad(w);
    CHECK(g && zl_tensor_numel(g) == 12);
    /* d/dw sum(2 x w^T) = 2 * (column sums of x), the same for every row of w. */
    for (int j = 0; j < 4; j++) {
        double want = 2 * (zl_tensor_get(x, j) + zl_tensor_get(x, 4 + j));
        for (int i = 0; i < 3; i++) CHECK_CLOSE(zl_tensor_get(g, i * 4 + j), want, 1e-5);
    }
    zl_tensor *all[] = {w, x, st.full, st.empty, y1, y2, y, s};
    for (int k = 0; k < 8; k++) zl_tensor_release(all[k]);
}

TEST(grad_dtype)
{
    zl_tensor *r = zl_tensor_randn(ZL_DTYPE_F32, SHAPE(4), NULL), *w = zl_tensor_to(r, ZL_DTYPE_BF16);
    zl_tensor_release(r);
    zl_tensor_set_requires_grad(w, true);
    CHECK_ERR(zl_tensor_set_grad_dtype(w, ZL_DTYPE_F16), "gradient can be bf16 or f32, not f16");
    CHECK(zl_tensor_set_grad_dtype(w, ZL_DTYPE_F32) == ZL_OK);
    zl_tensor *s = zl_sum(w, ZL_ALL_DIMS, false);
    CHECK(zl_backward(s, NULL, false) == ZL_OK);
    CHECK(zl_tensor_dtype(zl_tensor_grad(w)) == ZL_DTYPE_F32 && zl_tensor_get(zl_tensor_grad(w), 0) == 1.0);
    zl_tensor_release(s);
    zl_tensor_release(w);
}
