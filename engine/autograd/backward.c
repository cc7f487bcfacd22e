/* The backward walk. Design: one pass counts, for every tensor reachable from
 * the root, how many graph edges consume it (bw_pending); a tensor is processed
 * when its count reaches zero, so its gradient is complete. For a leaf that is
 * the moment its gradient-ready hooks fire: ZeRO-2 starts reducing that
 * gradient while the rest of backward goes on. The ready stack is LIFO and the
 * input order fixed, so the walk, and every sum in it, is the same run to run. */
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>
#include "node.h"

/* Stamps marking the tensors one walk has met: process-wide and atomic, so
 * walks in different contexts or threads never share a stamp. */
static _Atomic unsigned epoch;

typedef struct { zl_tensor **v; size_t n, cap; } vec;

static zl_status push(vec *s, zl_tensor *t)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        zl_tensor **v = realloc(s->v, cap * sizeof *v);
        if (!v) return zl_error(ZL_ENOMEM, "backward: out of memory");
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = t;
    return ZL_OK;
}

/* dst (any dtype/layout, shape of src) += src (contiguous f32): core's add,
 * which sums in f32 element by element on the host or on dst's device. */
static zl_status accumulate_into(zl_tensor *dst, const zl_tensor *src) { return zli_add(dst, src, 1.0); }

static bool same_shape(const zl_tensor *a, const zl_tensor *b)
{
    return a->ndim == b->ndim && memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof a->shape[0]) == 0;
}

/* Add g (any layout, shape of t) into t's pending gradient, kept as contiguous f32. */
static zl_status add_pending(zl_tensor *t, zl_tensor *g, const char *op)
{
    if (!same_shape(t, g)) {
        char a[128], b[128];
        return zl_error(ZL_ESHAPE, "backward of %s produced a gradient of shape %s for an input of shape %s",
                        op, zl_shape_str(g->ndim, g->shape, a, sizeof a),
                        zl_shape_str(t->ndim, t->shape, b, sizeof b));
    }
    zl_tensor *gc = zli_f32c(g);
    if (!gc) return ZL_ENOMEM;
    zli_grad_meta *m = zli_meta(t);
    if (!m->bw_grad) {
        /* Own the buffer we accumulate into: a backward may hand the same
         * gradient (or views of it) to several inputs. Held only by gin and gc
         * with unshared storage, it is ours to adopt. */
        if (gc == g && (gc->refcount > 2 || gc->storage->refcount > 1)) {
            zl_tensor *copy = zli_copy_as(gc, ZL_DTYPE_F32, ZL_MEM_GRADS);
            zl_tensor_release(gc);
            if (!copy) return ZL_ENOMEM;
            gc = copy;
        }
        m->bw_grad = gc;
        return ZL_OK;
    }
    zl_status st = accumulate_into(m->bw_grad, gc);
    zl_tensor_release(gc);
    return st;
}

/* A leaf's first gradient: the pending buffer itself when nothing else
 * holds it and it is already the gradient's dtype and whole storage (the
 * common case: saves a copy of every parameter's gradient each step). */
static zl_tensor *first_grad(zl_tensor *g, zl_dtype dt)
{
    if (g->dtype == dt && g->refcount == 1 && g->storage->refcount == 1 && g->offset == 0 &&
        zl_tensor_is_contiguous(g) && (size_t)zl_tensor_numel(g) * zl_dtype_size(dt) == g->storage->nbytes) {
        zl_tensor_set_category(g, ZL_MEM_GRADS);
        return zl_tensor_retain(g);
    }
    return zli_copy_as(g, dt, ZL_MEM_GRADS);
}

static zl_status accumulate_leaf(zl_tensor *leaf, zl_tensor *g)
{
    zli_grad_meta *m = zli_meta(leaf);
    if (!m->grad) {
        m->grad = first_grad(g, m->grad_f32 ? ZL_DTYPE_F32 : leaf->dtype);
        return m->grad ? ZL_OK : ZL_ENOMEM;
    }
    return accumulate_into(m->grad, g);
}

static zl_status collect(zl_tensor *root, vec *all)
{
    vec stack = {0};
    zl_status st = ZL_OK;
    unsigned mine = atomic_fetch_add(&epoch, 1) + 1;
    zli_meta(root)->bw_epoch = mine;
    zli_meta(root)->bw_pending = 0;
    if ((st = push(all, zl_tensor_retain(root))) || (st = push(&stack, root))) goto done;
    while (stack.n) {
        zl_tensor *t = stack.v[--stack.n];
        zl_node *nd = zli_grad_fn(t);
        if (!nd) continue;
        if (nd->freed) {
            st = zl_error(ZL_ESTATE, "backward through the graph a second time: the saved state of "
                          "'%s' was freed by the first backward (pass retain_graph to keep it)", nd->name);
            goto done;
        }
        for (int i = 0; i < nd->ninputs; i++) {
            zl_tensor *in = nd->inputs[i];
            if (!zli_requires_grad(in)) continue;
            zli_grad_meta *m = zli_meta(in);
            if (m->bw_epoch != mine) {
                m->bw_epoch = mine;
                m->bw_pending = 0;
                zl_tensor_release(m->bw_grad);
                m->bw_grad = NULL;
                if ((st = push(all, zl_tensor_retain(in))) || (st = push(&stack, in))) goto done;
            }
            m->bw_pending++;
        }
    }
done:
    free(stack.v);
    return st;
}

zl_tensor *zli_pending_grad(zl_tensor *in)
{
    zli_grad_meta *m = zli_meta(in);
    zl_tensor *g = m ? m->bw_grad : NULL;
    return g && !g->storage->dev && g->refcount == 1 && g->storage->refcount == 1 ? g : NULL;
}

static zl_status run_node(zl_tensor *t, vec *ready)
{
    zl_node *nd = zli_grad_fn(t);
    zl_tensor *gin_small[8] = {0};
    zl_tensor **gin = nd->ninputs <= 8 ? gin_small : calloc((size_t)nd->ninputs, sizeof *gin);
    if (!gin) return zl_error(ZL_ENOMEM, "backward: out of memory");
    zl_status st = zli_fire_use(nd->ninputs, nd->inputs, ZL_USE_BEFORE_BACKWARD, nd->name);
    if (!st) {
        bool was = zl_grad_set_enabled(false);
        st = nd->backward(nd, zli_meta(t)->bw_grad, gin);
        zl_grad_set_enabled(was);
    }
    /* The output's gradient is dropped before the inputs take theirs: a view
     * of it handed on (a reshape's) is then the storage's only holder and is
     * adopted rather than copied. */
    zl_tensor_release(zli_meta(t)->bw_grad);
    zli_meta(t)->bw_grad = NULL;
    /* The inputs' gradients are taken in before the AFTER event: a ZeRO-3
     * hook releases a parameter's data there, and its shape with it. */
    for (int i = 0; i < nd->ninputs; i++) {
        zl_tensor *in = nd->inputs[i];
        if (!st && zli_requires_grad(in)) {
            zli_grad_meta *m = zli_meta(in);
            if (gin[i]) st = add_pending(in, gin[i], nd->name);
            if (!st && --m->bw_pending == 0 && m->bw_grad) st = push(ready, in);
        }
        zl_tensor_release(gin[i]);
    }
    if (!st) st = zli_fire_use(nd->ninputs, nd->inputs, ZL_USE_AFTER_BACKWARD, nd->name);
    if (gin != gin_small) free(gin);
    return st;
}

zl_status zl_backward(zl_tensor *root, zl_tensor *grad, bool retain_graph)
{
    if (zli_check_arg("backward", "tensor", root)) return zli_last_code();
    if (!zli_requires_grad(root))
        return zl_error(ZL_ESTATE, "backward: the tensor does not require grad and has no grad_fn");
    zl_tensor *seed;
    if (grad) {
        if (!same_shape(root, grad)) {
            char a[128], b[128];
            return zl_error(ZL_ESHAPE, "backward: gradient of shape %s given for a tensor of shape %s",
                            zl_shape_str(grad->ndim, grad->shape, a, sizeof a),
                            zl_shape_str(root->ndim, root->shape, b, sizeof b));
        }
        seed = zli_copy_as(grad, ZL_DTYPE_F32, ZL_MEM_GRADS);
    } else {
        if (zl_tensor_numel(root) != 1) {
            char a[128];
            return zl_error(ZL_EINVAL, "backward: a gradient can be implied only for a one-element tensor, "
                            "got shape %s (pass a gradient)", zl_shape_str(root->ndim, root->shape, a, sizeof a));
        }
        seed = zli_full_like_device(root, ZL_DTYPE_F32, root->ndim, root->shape, ZL_MEM_OTHER, 1.0);
    }
    if (!seed) return ZL_ENOMEM;

    vec all = {0}, ready = {0};
    zl_status st = collect(root, &all);
    if (!st) {
        zl_tensor_release(zli_meta(root)->bw_grad);
        zli_meta(root)->bw_grad = seed;
        seed = NULL;
        st = push(&ready, root);
    }
    while (!st && ready.n) {
        zl_tensor *t = ready.v[--ready.n];
        zli_grad_meta *m = zli_meta(t);
        if (zl_interrupt_pending()) { st = zl_error(ZL_EINTERRUPT, "backward: interrupted"); break; }
        if (m->grad_fn) {
            st = run_node(t, &ready);
        } else {
            st = accumulate_leaf(t, m->bw_grad);
            if (!st) st = zli_fire_grad_ready(t);
        }
        zl_tensor_release(m->bw_grad);
        m->bw_grad = NULL;
    }
    zl_tensor *work = NULL;
    for (size_t i = 0; i < all.n; i++) {
        zl_tensor *t = all.v[i];
        zli_grad_meta *m = zli_meta(t);
        zli_release_deferred(m->bw_grad, &work);
        m->bw_grad = NULL;
        if (!retain_graph && m->grad_fn && !st) zli_node_clear(m->grad_fn, &work);
        zli_release_deferred(t, &work);
    }
    /* Hand the worklist to the ordinary release, which drains it iteratively. */
    while (work) {
        zl_tensor *x = work;
        work = x->free_next;
        x->refcount = 1;
        zl_tensor_release(x);
    }
    zl_tensor_release(seed);
    free(all.v);
    free(ready.v);
    return st;
}

bool zl_tensor_requires_grad(const zl_tensor *t) { return t && zli_requires_grad(t); }
zl_status zl_tensor_set_grad_dtype(zl_tensor *t, zl_dtype dt)
{
    if (zli_check_arg("set_grad_dtype", "tensor", t)) return zli_last_code();
    if (dt != ZL_DTYPE_F32 && dt != t->dtype)
        return zl_error(ZL_EDTYPE, "set_grad_dtype: a %s tensor's gradient can be %s or f32, not %s",
                        zl_dtype_name(t->dtype), zl_dtype_name(t->dtype), zl_dtype_name(dt));
    if (dt != ZL_DTYPE_F32 && !zli_meta(t)) return ZL_OK;   /* already the default */
    zli_grad_meta *m = zli_meta_get(t);
    if (!m) return ZL_ENOMEM;
    m->grad_f32 = dt == ZL_DTYPE_F32;
    return ZL_OK;
}

bool zl_tensor_is_leaf(const zl_tensor *t) { return t && !zli_grad_fn(t); }
zl_tensor *zl_tensor_grad(const zl_tensor *t) { return t && zli_meta(t) ? zli_meta(t)->grad : NULL; }
const char *zl_tensor_grad_fn_name(const zl_tensor *t) { return t && zli_grad_fn(t) ? zli_grad_fn(t)->name : NULL; }

zl_status zl_tensor_set_requires_grad(zl_tensor *t, bool on)
{
    if (zli_check_arg("requires_grad", "tensor", t)) return zli_last_code();
    if (zli_grad_fn(t) && !on)
        return zl_error(ZL_ESTATE, "requires_grad: cannot turn off requires_grad on a non-leaf tensor "
                        "(produced by %s); use detach()", zli_grad_fn(t)->name);
    if (on && !zl_dtype_traits_of(t->dtype)->is_float)
        return zl_error(ZL_EDTYPE, "requires_grad: only float tensors can require gradients, got %s",
                        zl_dtype_name(t->dtype));
    if (!on && !zli_meta(t)) return ZL_OK;
    zli_grad_meta *m = zli_meta_get(t);
    if (!m) return ZL_ENOMEM;
    m->requires_grad = on;
    return ZL_OK;
}

zl_status zl_tensor_set_grad(zl_tensor *t, zl_tensor *g)
{
    if (zli_check_arg("set_grad", "tensor", t)) return zli_last_code();
    if (g && !same_shape(t, g)) {
        char a[128], b[128];
        return zl_error(ZL_ESHAPE, "set_grad: gradient of shape %s for a tensor of shape %s",
                        zl_shape_str(g->ndim, g->shape, a, sizeof a), zl_shape_str(t->ndim, t->shape, b, sizeof b));
    }
    if (!g && !zli_meta(t)) return ZL_OK;
    zli_grad_meta *m = zli_meta_get(t);
    if (!m) return ZL_ENOMEM;
    zl_tensor_retain(g);
    zl_tensor_release(m->grad);
    m->grad = g;
    return ZL_OK;
}
