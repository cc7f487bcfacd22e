/* zl_zero_ckpt_open / _load: a checkpoint found (a tag, or DIR/latest),
 * checked whole against the engine before anything changes, then read into
 * it: the optimizer's shards re-partitioned for this world size and stage,
 * or the masters from the model's weights, and this rank's generator. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "ckpt.h"

struct zl_zero_ckpt {
    zl_zero *z;
    zl_comm *comm;
    zl_zero_load_args a;
    zz_ckpt *k;
};

static zl_status bad(const zz_ckpt *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static zl_status bad(const zz_ckpt *k, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return zl_error(ZL_EINVAL, "load_checkpoint: %s: %s", k->path, msg);
}

/* DIR/TAG, with TAG from `latest` when none is given; *path NULL when there is neither. */
static zl_status find(const char *dir, const char *tag, char **path)
{
    *path = NULL;
    char lpath[4200], *latest = NULL;
    size_t n = strlen(dir);
    const char *sep = n && dir[n - 1] == '/' ? "" : "/";
    if (!tag) {
        snprintf(lpath, sizeof lpath, "%s%slatest", dir, sep);
        if (!zl_fs_exists(lpath)) {
            fprintf(stderr, "zlua: load_checkpoint: no checkpoint in %s (no \"latest\" file); starting fresh\n", dir);
            return ZL_OK;
        }
        size_t len = 0;
        if (zl_fs_read_file(lpath, ZZ_LATEST_MAX, true, &latest, &len))
            return zl_error(zli_last_code(), "load_checkpoint: %s", zl_last_error());
        char *s = latest, *e = latest + len, *nul = memchr(latest, '\0', len);
        if (nul) {
            zl_status st = zl_error(ZL_EINVAL, "load_checkpoint: the tag in %s holds a NUL byte (byte %td), which "
                                               "would cut the folder name there", lpath, nul - latest + 1);
            free(latest);
            return st;
        }
        while (s < e && (*s == ' ' || (*s >= '\t' && *s <= '\r'))) s++;
        while (e > s && (e[-1] == ' ' || (e[-1] >= '\t' && e[-1] <= '\r'))) e--;
        *e = '\0';
        tag = s;
        zl_status st = zz_check_tag(tag, "load_checkpoint", lpath);
        if (st) {
            free(latest);
            return st;
        }
    } else {
        zl_status st = zz_check_tag(tag, "load_checkpoint", NULL);
        if (st) return st;
    }
    size_t size = n + strlen(tag) + 2;
    char *p = malloc(size);
    if (!p) {
        free(latest);
        return zl_error(ZL_ENOMEM, "load_checkpoint: out of memory");
    }
    snprintf(p, size, "%s%s%s", dir, sep, tag);
    free(latest);
    struct stat sb;
    if (lstat(p, &sb) != 0) {
        zl_status st = zl_error(ZL_EIO, "load_checkpoint: %s does not exist", p);
        free(p);
        return st;
    }
    if (!S_ISDIR(sb.st_mode)) {
        const char *kind = S_ISREG(sb.st_mode) ? "file" : S_ISLNK(sb.st_mode) ? "link" : S_ISFIFO(sb.st_mode) ? "fifo"
                         : S_ISSOCK(sb.st_mode) ? "socket" : "device";
        zl_status st = zl_error(ZL_EINVAL, "load_checkpoint: %s is a %s, not a checkpoint folder", p, kind);
        free(p);
        return st;
    }
    *path = p;
    return ZL_OK;
}

/* The saved partition against this engine's parameters. */
static zl_status check_partition(const zz_ckpt *k, const zl_zero *z)
{
    if (k->nparams != z->nent)
        return bad(k, "the optimizer held %d parameters, it has %d now", k->nparams, z->nent);
    for (int i = 0; i < z->nent; i++) {
        const zz_saved *sp = &k->params[i];
        const zz_entry *e = &z->ents[i];
        if (strcmp(sp->name, e->name) != 0)
            return bad(k, "optimizer parameter %d is \"%.60s\" in the checkpoint and %s now (the model defines its "
                          "parameters in another order)", i + 1, sp->name, e->name);
        if (sp->numel != e->n)
            return bad(k, "%s has %" PRId64 " elements in the checkpoint and %" PRId64 " now", e->name, sp->numel, e->n);
    }
    return ZL_OK;
}

/* Every shard holds the chunks engine.json says it does, f32, of their lengths. */
static zl_status check_shards(const zz_ckpt *k)
{
    for (int q = 0; q < k->partitions; q++) {
        char name[48], path[4300];
        snprintf(name, sizeof name, "optim_rank%d.safetensors", q);
        snprintf(path, sizeof path, "%s/%s", k->path, name);
        zl_safetensors *f = zl_safetensors_open(path);
        if (!f) return zl_error(zli_last_code(), "load_checkpoint: %s", zl_last_error());
        zl_status st = ZL_OK;
        for (int i = 0; !st && i < k->nparams; i++) {
            const zz_saved *sp = &k->params[i];
            int64_t lo, own;
            zz_owned(sp->numel, sp->k, q, &lo, &own);
            for (int j = -1; !st && own > 0 && j < (sp->step > 0 ? k->nkeys : 0); j++) {
                char t[128];
                if (j < 0) snprintf(t, sizeof t, "param.%d", i + 1);
                else snprintf(t, sizeof t, "state.%d.%s", i + 1, k->keys[j]);
                const zl_safetensors_entry *e = zl_safetensors_find(f, t);
                if (!e || e->dtype != ZL_DTYPE_F32 || e->numel != own) {
                    char has[96] = "has no such tensor";
                    if (e) snprintf(has, sizeof has, "has %s of %" PRId64, e->dtype_name, e->numel);
                    st = bad(k, "%s should hold %s, f32 of %" PRId64 " elements (%s), and %s", name, t, own, sp->name,
                             has);
                }
            }
        }
        zl_safetensors_close(f);
        if (st) return st;
    }
    return ZL_OK;
}

/* model.safetensors holds each parameter to be read from it, of its size. */
static zl_status check_model(const zz_ckpt *k, const zl_zero *z)
{
    char path[4300];
    snprintf(path, sizeof path, "%s/model.safetensors", k->path);
    zl_safetensors *f = zl_safetensors_open(path);
    if (!f) return zl_error(zli_last_code(), "load_checkpoint: %s", zl_last_error());
    zl_status st = ZL_OK;
    for (int i = 0; !st && i < z->nent; i++) {
        const zz_entry *e = &z->ents[i];
        const zl_safetensors_entry *it = zl_safetensors_find(f, e->name);
        if (!it) st = bad(k, "model.safetensors has no %s", e->name);
        else if (it->numel != e->n)
            st = bad(k, "model.safetensors holds %" PRId64 " elements of %s, the parameter has %" PRId64, it->numel,
                     e->name, e->n);
        else if (it->dtype == ZL_DTYPE_COUNT || !zl_dtype_traits_of(it->dtype)->is_float)
            st = bad(k, "model.safetensors holds %s as %s, not a float dtype", e->name, it->dtype_name);
    }
    zl_safetensors_close(f);
    return st;
}

/* The saved hyperparameters the engine can take, checked by name and type. */
static zl_status group_hparams(const zz_ckpt *k, const zl_zero *z, int g, zl_zero_hparams *h)
{
    *h = z->hp[g];
    const zli_json *o = &k->groups->v[g];
    for (size_t j = 0; j < o->n; j++) {
        const char *key = o->k[j];
        const zli_json *v = &o->v[j];
        bool num = v->type == ZLI_JINT || v->type == ZLI_JNUM, flag = v->type == ZLI_JBOOL;
        double *d = !strcmp(key, "lr") ? &h->lr : !strcmp(key, "eps") ? &h->eps
                  : !strcmp(key, "weight_decay") ? &h->weight_decay : !strcmp(key, "max_coeff") ? &h->max_coeff
                  : !strcmp(key, "min_coeff") ? &h->min_coeff : !strcmp(key, "momentum") ? &h->momentum
                  : !strcmp(key, "dampening") ? &h->dampening : NULL;
        bool *b = !strcmp(key, "adam_w_mode") ? &h->adamw_mode : !strcmp(key, "bias_correction") ? &h->bias_correction
                : !strcmp(key, "nesterov") ? &h->nesterov : NULL;
        if (d && num) *d = v->d;
        else if (b && flag) *b = v->b;
        else if (!strcmp(key, "betas") && v->type == ZLI_JARR && v->n == 2) h->beta1 = v->v[0].d, h->beta2 = v->v[1].d;
        else if (!strcmp(key, "amsgrad") && flag && !v->b) continue;
        else
            return bad(k, "engine.json: optimizer.param_groups[%d].%s is no hyperparameter the engine takes in that form",
                       g + 1, key);
    }
    return ZL_OK;
}

static zl_status check_against(zl_zero_ckpt *c)
{
    const zz_ckpt *k = c->k;
    zl_zero *z = c->z;
    if (!z) return ZL_OK;
    bool optimizer = k->has_optimizer && !c->a.skip_optimizer;
    zl_status st = ZL_OK;
    if (optimizer) {
        if (c->a.optimizer && strcmp(k->optimizer, c->a.optimizer) != 0)
            return bad(k, "it holds the state of a %s optimizer; this engine has %s", k->optimizer, c->a.optimizer);
        if ((st = check_partition(k, z))) return st;
        if ((int)k->groups->n != z->ngroups)
            return bad(k, "the optimizer had %zu param groups, it has %d now", k->groups->n, z->ngroups);
        for (int j = 0; j < k->nkeys; j++) {
            bool known = false;
            for (int m = 0; m < z->nstates; m++) known |= strcmp(k->keys[j], z->keys[m]) == 0;
            if (!known) return bad(k, "the %s optimizer has no state \"%s\"", k->optimizer, k->keys[j]);
        }
        if ((st = check_shards(k))) return st;
        for (int g = 0; c->a.hparams && g < z->ngroups; g++) {
            zl_zero_hparams h;
            if ((st = group_hparams(k, z, g, &h))) return st;
        }
    }
    if (!optimizer || c->a.masters_from_model) st = check_model(k, z);
    return st;
}

zl_status zl_zero_ckpt_open(zl_zero *z, zl_comm *comm, const char *dir, const zl_zero_load_args *a, zl_zero_ckpt **out)
{
    if (!out) return zl_error(ZL_EINVAL, "load_checkpoint: no place for the result");
    *out = NULL;
    if (!dir || !*dir) return zl_error(ZL_EINVAL, "load_checkpoint: dir must be a folder path");
    zl_comm *cm = z ? z->comm : comm;
    if (!cm) return zl_error(ZL_EINVAL, "load_checkpoint: no engine and no communicator");
    if (zl_comm_rank(cm) == 0 && zl_fs_temp_sweep(dir, NULL))
        fprintf(stderr, "zlua: load_checkpoint: warning: %s\n", zl_last_error());
    char *path = NULL;
    zl_status st = find(dir, a ? a->tag : NULL, &path);
    if (st || !path) return st;
    zl_zero_ckpt *c = calloc(1, sizeof *c);
    if (!c) {
        free(path);
        return zl_error(ZL_ENOMEM, "load_checkpoint: out of memory");
    }
    c->z = z;
    c->comm = cm;
    if (a) c->a = *a;
    c->a.tag = NULL;
    st = zz_ckpt_open(path, true, &c->k);
    free(path);
    if (!st) st = check_against(c);
    if (st) {
        zl_zero_ckpt_close(c);
        return st;
    }
    *out = c;
    return ZL_OK;
}

const char *zl_zero_ckpt_path(const zl_zero_ckpt *c) { return c ? c->k->path : NULL; }

const char *zl_zero_ckpt_json(const zl_zero_ckpt *c, size_t *len)
{
    if (len) *len = c ? c->k->len : 0;
    return c ? c->k->text : NULL;
}

zl_zero_counts zl_zero_ckpt_counts(const zl_zero_ckpt *c) { return c ? c->k->counts : (zl_zero_counts){0}; }

void zl_zero_ckpt_close(zl_zero_ckpt *c)
{
    if (!c) return;
    zz_ckpt_free(c->k);
    free(c);
}

typedef struct model_reader {
    zl_safetensors *f;
    zl_zero *z;
} model_reader;

/* This rank's real elements of each master from the model's weights (of
 * their dtype, widened to f32 on the way). */
static zl_status master_from_model(int i, zl_tensor *master, zl_tensor *const *states, void *user)
{
    (void)states;
    model_reader *r = user;
    const zz_entry *e = &r->z->ents[i];
    if (e->own == 0) return ZL_OK;
    const zl_safetensors_entry *it = zl_safetensors_find(r->f, e->name);
    zl_tensor *tmp = zl_tensor_new(it->dtype, 1, (int64_t[]){e->own}, ZL_MEM_OTHER);
    zl_tensor *view = zl_tensor_narrow(master, 0, 0, e->own);
    zl_status st = tmp && view ? zl_safetensors_read_into(r->f, e->name, e->lo, tmp) : zli_last_code();
    if (!st) st = zl_tensor_copy_(view, tmp);
    zl_tensor_release(tmp);
    zl_tensor_release(view);
    return st;
}

zl_status zl_zero_ckpt_load(zl_zero_ckpt *c)
{
    if (!c) return zl_error(ZL_EINVAL, "load_checkpoint: nothing opened");
    const zz_ckpt *k = c->k;
    zl_zero *z = c->z;
    zl_status st = ZL_OK;
    bool optimizer = z && k->has_optimizer && !c->a.skip_optimizer;
    if (optimizer) {
        zl_zero_saved_param *ps = calloc((size_t)(k->nparams ? k->nparams : 1), sizeof *ps);
        if (!ps) return zl_error(ZL_ENOMEM, "load_checkpoint: out of memory");
        for (int i = 0; i < k->nparams; i++) ps[i] = (zl_zero_saved_param){k->params[i].numel, k->params[i].k, k->params[i].step};
        zl_zero_saved s = {.folder = k->path, .partitions = k->partitions, .nparams = k->nparams, .params = ps,
                           .nkeys = k->nkeys, .keys = (const char *const *)k->keys};
        st = zl_zero_load_shards(z, &s);
        free(ps);
        for (int g = 0; !st && c->a.hparams && g < z->ngroups; g++) {
            zl_zero_hparams h;
            if (!(st = group_hparams(k, z, g, &h))) st = zl_zero_set_hparams(z, g, &h);
        }
        if (st) return zl_error(zli_last_code(), "load_checkpoint: %s: %s", k->path, zl_last_error());
    }
    if (z && (!optimizer || c->a.masters_from_model)) {
        char path[4300];
        snprintf(path, sizeof path, "%s/model.safetensors", k->path);
        model_reader r = {.f = zl_safetensors_open(path), .z = z};
        if (!r.f) return zl_error(zli_last_code(), "load_checkpoint: %s", zl_last_error());
        st = zl_zero_each_chunk(z, true, NULL, master_from_model, &r);
        zl_safetensors_close(r.f);
        if (!st) st = zl_zero_sync_working(z);
        if (st) return zl_error(zli_last_code(), "load_checkpoint: %s: %s", k->path, zl_last_error());
    }
    if (c->a.keep_generator) return ZL_OK;
    int rank = zl_comm_rank(c->comm), q = rank < k->nrng ? rank : 0;
    zl_generator_seed(NULL, k->seed[q]);
    zl_generator_set_offset(NULL, k->offset[q]);
    return ZL_OK;
}

zl_status zl_zero_load(zl_zero *z, const char *dir, const zl_zero_load_args *a, bool *found, zl_zero_counts *counts,
                       char **json)
{
    if (found) *found = false;
    if (json) *json = NULL;
    zl_zero_ckpt *c = NULL;
    zl_status st = zl_zero_ckpt_open(z, NULL, dir, a, &c);
    if (st || !c) return st;
    st = zl_zero_ckpt_load(c);
    if (!st) {
        if (found) *found = true;
        if (counts) *counts = c->k->counts;
        if (json && !(*json = strdup(c->k->text))) st = zl_error(ZL_ENOMEM, "load_checkpoint: out of memory");
    }
    zl_zero_ckpt_close(c);
    return st;
}
