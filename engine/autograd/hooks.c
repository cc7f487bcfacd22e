/* Hook registration and firing: gradient-ready hooks on leaves (ZeRO-2 buckets
 * from them) and use hooks on parameters (ZeRO-3 gathers and releases from them). */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "node.h"

/* Process-wide and atomic: handles stay unique whichever context or thread adds. */
static _Atomic int next_handle = 1;

static int add_hook(zl_tensor *t, int kind, zl_grad_ready_fn gr, zl_use_fn use, void *user,
                    void (*user_free)(void *))
{
    if (!t) { zl_error(ZL_EINVAL, "add_hook: tensor is NULL"); return 0; }
    if (!gr && !use) { zl_error(ZL_EINVAL, "add_hook: the hook function is NULL"); return 0; }
    zli_grad_meta *m = zli_meta_get(t);
    zli_hook *h = m ? calloc(1, sizeof *h) : NULL;
    if (!h) { zl_error(ZL_ENOMEM, "add_hook: out of memory"); return 0; }
    h->handle = atomic_fetch_add(&next_handle, 1);
    h->kind = kind;
    h->grad_ready = gr;
    h->use = use;
    h->user = user;
    h->user_free = user_free;
    zli_hook **tail = &m->hooks;   /* append: hooks fire in registration order */
    while (*tail) tail = &(*tail)->next;
    *tail = h;
    return h->handle;
}

int zl_tensor_add_grad_ready_hook(zl_tensor *leaf, zl_grad_ready_fn fn, void *user,
                                  void (*user_free)(void *))
{
    if (leaf && zli_grad_fn(leaf)) {
        zl_error(ZL_EINVAL, "add_grad_ready_hook: the tensor is not a leaf (produced by %s)",
                 zli_grad_fn(leaf)->name);
        return 0;
    }
    return add_hook(leaf, ZLI_HOOK_GRAD_READY, fn, NULL, user, user_free);
}

int zl_tensor_add_use_hook(zl_tensor *t, zl_use_fn fn, void *user, void (*user_free)(void *))
{
    return add_hook(t, ZLI_HOOK_USE, NULL, fn, user, user_free);
}

static void unlink_free(zli_hook **p)
{
    zli_hook *h = *p;
    *p = h->next;
    if (h->user_free) h->user_free(h->user);
    free(h);
}

/* A hook may remove itself or another hook while firing: then it is only
 * marked, and the list is swept once the firing loop has let go of it. */
void zl_tensor_remove_hook(zl_tensor *t, int handle)
{
    zli_grad_meta *m = t ? zli_meta(t) : NULL;
    for (zli_hook **p = m ? &m->hooks : NULL; p && *p; p = &(*p)->next) {
        if ((*p)->handle != handle || (*p)->removed) continue;
        if (m->hooks_firing) (*p)->removed = true;
        else unlink_free(p);
        return;
    }
}

void zli_hooks_free(zli_hook *h)
{
    while (h) {
        zli_hook *next = h->next;
        if (h->user_free) h->user_free(h->user);
        free(h);
        h = next;
    }
}

static void sweep(zli_grad_meta *m)
{
    if (--m->hooks_firing > 0) return;
    for (zli_hook **p = &m->hooks; *p;) {
        if ((*p)->removed) unlink_free(p);
        else p = &(*p)->next;
    }
}

static zl_status hook_failed(const char *what, const char *op)
{
    if (zl_last_error()[0] == '\0') zl_error(ZL_EHOOK, "%s hook failed in %s", what, op);
    return ZL_EHOOK;
}

static zl_status fire_one(zl_tensor *t, zl_use_event ev, const char *op)
{
    zl_status st = ZL_OK;
    zli_grad_meta *m = zli_meta(t);
    m->hooks_firing++;
    for (zli_hook *h = m->hooks; h && !st; h = h->next) {
        if (h->kind != ZLI_HOOK_USE || h->removed) continue;
        zl_clear_error();
        if (h->use(t, ev, op, h->user)) st = hook_failed("use", op);
    }
    sweep(m);
    return st;
}

zl_status zli_fire_use(int n, zl_tensor *const *ts, zl_use_event ev, const char *op)
{
    for (int i = 0; i < n; i++) {
        if (!ts[i] || !zli_hooks(ts[i])) continue;
        zl_status st = fire_one(ts[i], ev, op);
        if (!st) continue;
        /* The inputs before this one saw "before": they get their "after" (a
         * gathered parameter is released), and the first error is kept. */
        if (ev == ZL_USE_BEFORE_FORWARD || ev == ZL_USE_BEFORE_BACKWARD) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", zl_last_error());
            for (int j = 0; j < i; j++)
                if (ts[j] && zli_hooks(ts[j])) fire_one(ts[j], (zl_use_event)(ev + 1), op);
            zl_error(st, "%s", msg);
        }
        return st;
    }
    return ZL_OK;
}

zl_status zli_fire_grad_ready(zl_tensor *leaf)
{
    zl_status st = ZL_OK;
    zli_grad_meta *m = zli_meta(leaf);
    if (!m) return ZL_OK;
    m->hooks_firing++;
    for (zli_hook *h = m->hooks; h && !st; h = h->next) {
        if (h->kind != ZLI_HOOK_GRAD_READY || h->removed) continue;
        zl_clear_error();
        if (h->grad_ready(leaf, h->user)) st = hook_failed("grad-ready", "backward");
    }
    sweep(m);
    return st;
}
