/* A checkpoint's optimizer shards: each rank's chunks of the f32 masters and
 * of the optimizer state written to a safetensors file of its own, and the
 * reading back of a saved partition into this engine's, whatever world size
 * and stage saved it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "zero_impl.h"

/* Tensor names: "param.<i>" and "state.<i>.<key>", i counting parameters from 1. */
#define NAME_MAX_LEN 96

static void param_name(char *out, int i) { snprintf(out, NAME_MAX_LEN, "param.%d", i + 1); }

static void state_name(char *out, int i, const char *key) { snprintf(out, NAME_MAX_LEN, "state.%d.%s", i + 1, key); }

static bool has_state(const zl_zero *z, const zz_entry *e) { return z->steps[e->group] > 0; }

static bool known_key(const zl_zero *z, const char *key)
{
    for (int j = 0; j < z->nstates; j++)
        if (strcmp(z->keys[j], key) == 0) return true;
    return false;
}

/* The first `own` elements of a chunk, in host memory (a view when it is already there). */
static zl_tensor *real_part(zl_tensor *chunk, int64_t own)
{
    zl_tensor *v = zl_tensor_narrow(chunk, 0, 0, own);
    if (!v || zl_tensor_device(v) == ZL_DEVICE_CPU) return v;
    zl_tensor *h = zl_tensor_to_device(v, ZL_DEVICE_CPU, 0);
    zl_tensor_release(v);
    return h;
}

static zl_status append_real(zl_safetensors_writer *w, zl_tensor *chunk, int64_t own)
{
    zl_tensor *t = real_part(chunk, own);
    zl_status st = t ? zl_safetensors_writer_append(w, t) : zli_last_code();
    zl_tensor_release(t);
    return st;
}

static zl_status write_chunk(int i, zl_tensor *master, zl_tensor *const *states, void *user)
{
    zl_safetensors_writer *w = ((void **)user)[0];
    zl_zero *z = ((void **)user)[1];
    const zz_entry *e = &z->ents[i];
    if (e->own == 0) return ZL_OK;
    zl_status st = append_real(w, master, e->own);
    for (int j = 0; !st && has_state(z, e) && j < z->nstates; j++) st = append_real(w, states[j], e->own);
    return st;
}

zl_status zl_zero_save_shard(zl_zero *z, const char *path)
{
    if (!z || !path) return zl_error(ZL_EINVAL, "zl_zero_save_shard: %s is NULL", z ? "path" : "engine");
    int cap = z->nent * (1 + z->nstates), n = 0;
    zl_safetensors_entry *ents = calloc((size_t)(cap ? cap : 1), sizeof *ents);
    char *names = calloc((size_t)(cap ? cap : 1), NAME_MAX_LEN);
    if (!ents || !names) {
        free(ents);
        free(names);
        return zl_error(ZL_ENOMEM, "zl_zero_save_shard: out of memory");
    }
    for (int i = 0; i < z->nent; i++) {
        const zz_entry *e = &z->ents[i];
        if (e->own == 0) continue;
        for (int j = -1; j < (has_state(z, e) ? z->nstates : 0); j++) {
            char *name = names + (size_t)n * NAME_MAX_LEN;
            if (j < 0)
                param_name(name, i);
            else
                state_name(name, i, z->keys[j]);
            ents[n++] = (zl_safetensors_entry){.name = name, .dtype = ZL_DTYPE_F32, .ndim = 1, .shape = {e->own}};
        }
    }
    zl_safetensors_writer *w = zl_safetensors_writer_open(path, n, ents, 0, NULL);
    zl_status st = w ? ZL_OK : zli_last_code();
    free(ents);
    free(names);
    if (st) return st;
    void *ctx[2] = {w, z};
    st = zl_zero_each_chunk(z, false, NULL, write_chunk, ctx);
    if (st) {
        zl_safetensors_writer_abort(w);
        return st;
    }
    return zl_safetensors_writer_commit(w);
}

/* ---- loading ---- */

typedef struct loader {
    zl_zero *z;
    const zl_zero_saved *s;
    zl_safetensors **files;    /* [partitions], opened on first use */
} loader;

static zl_safetensors *shard_file(loader *l, int q)
{
    if (!l->files[q]) {
        char path[4096];
        int len = snprintf(path, sizeof path, "%s/optim_rank%d.safetensors", l->s->folder, q);
        if (len < 0 || (size_t)len >= sizeof path) {
            zl_error(ZL_EINVAL, "zl_zero_load_shards: the folder name '%s' is too long", l->s->folder);
            return NULL;
        }
        l->files[q] = zl_safetensors_open(path);
    }
    return l->files[q];
}

/* Elements [a, b) of the saved tensor `name` of parameter i into dst (a
 * chunk's first b - a elements), from the saved chunks that hold them, each
 * in the shard of the rank that owned it. */
static zl_status read_range(loader *l, int i, const char *name, int64_t a, int64_t b, zl_tensor *dst)
{
    const zl_zero_saved_param *sp = &l->s->params[i];
    for (int64_t q = a / sp->k; q <= (b - 1) / sp->k; q++) {
        int64_t lo, own;
        zz_owned(sp->numel, sp->k, (int)q, &lo, &own);
        int64_t s0 = a > lo ? a : lo, s1 = b < lo + own ? b : lo + own;
        if (s1 <= s0) continue;
        zl_safetensors *f = shard_file(l, (int)q);
        if (!f) return zli_last_code();
        zl_tensor *view = zl_tensor_narrow(dst, 0, s0 - a, s1 - s0);
        bool host = view && zl_tensor_device(view) == ZL_DEVICE_CPU;
        zl_tensor *into = host ? zl_tensor_retain(view) : zl_tensor_new(ZL_DTYPE_F32, 1, (int64_t[]){s1 - s0}, ZL_MEM_OTHER);
        zl_status st = view && into ? zl_safetensors_read_into(f, name, s0 - lo, into) : zli_last_code();
        if (!st && !host) st = zl_tensor_copy_(view, into);
        zl_tensor_release(into);
        zl_tensor_release(view);
        if (st) return st;
    }
    return ZL_OK;
}

static int saved_key(const zl_zero_saved *s, const char *key)
{
    for (int j = 0; j < s->nkeys; j++)
        if (strcmp(s->keys[j], key) == 0) return j;
    return -1;
}

static zl_status read_chunk(int i, zl_tensor *master, zl_tensor *const *states, void *user)
{
    loader *l = user;
    zl_zero *z = l->z;
    const zz_entry *e = &z->ents[i];
    const zl_zero_saved_param *sp = &l->s->params[i];
    char name[NAME_MAX_LEN];
    param_name(name, i);
    zl_status st = e->own > 0 ? read_range(l, i, name, e->lo, e->lo + e->own, master) : ZL_OK;
    for (int j = 0; !st && j < z->nstates; j++) {
        /* Padding and a state never saved are zeros, as in a fresh optimizer. */
        st = zl_tensor_fill(states[j], 0);
        if (!st && sp->step > 0 && e->own > 0 && saved_key(l->s, z->keys[j]) >= 0) {
            state_name(name, i, z->keys[j]);
            st = read_range(l, i, name, e->lo, e->lo + e->own, states[j]);
        }
    }
    return st;
}

/* What the engine reads must be what the shards hold, before anything changes. */
static zl_status check_saved(const zl_zero *z, const zl_zero_saved *s)
{
    if (!s->folder || s->partitions < 1 || !s->params || (s->nkeys > 0 && !s->keys))
        return zl_error(ZL_EINVAL, "zl_zero_load_shards: the saved partition is incomplete (folder, partitions >= 1, "
                                   "params and keys are needed)");
    if (s->nparams != z->nent)
        return zl_error(ZL_EINVAL, "zl_zero_load_shards: %s: the optimizer held %d parameters, it has %d now",
                        s->folder, s->nparams, z->nent);
    for (int j = 0; j < s->nkeys; j++)
        if (!s->keys[j] || !known_key(z, s->keys[j]))
            return zl_error(ZL_EINVAL, "zl_zero_load_shards: %s: the optimizer has no state '%s'", s->folder,
                            s->keys[j] ? s->keys[j] : "(null)");
    for (int i = 0; i < z->nent; i++) {
        const zl_zero_saved_param *sp = &s->params[i];
        if (sp->numel != z->ents[i].n)
            return zl_error(ZL_EINVAL, "zl_zero_load_shards: %s: %s has %lld elements in the checkpoint and %lld now",
                            s->folder, z->ents[i].name, (long long)sp->numel, (long long)z->ents[i].n);
        if (sp->k != zz_chunk(sp->numel, s->partitions) || sp->step < 0)
            return zl_error(ZL_EINVAL, "zl_zero_load_shards: %s: %s's saved chunk length %lld or step %lld does not "
                            "fit %d partitions", s->folder, z->ents[i].name, (long long)sp->k, (long long)sp->step,
                            s->partitions);
    }
    return ZL_OK;
}

zl_status zl_zero_load_shards(zl_zero *z, const zl_zero_saved *s)
{
    if (!z || !s) return zl_error(ZL_EINVAL, "zl_zero_load_shards: %s is NULL", z ? "saved" : "engine");
    zl_status st = check_saved(z, s);
    if (st) return st;
    loader l = {.z = z, .s = s, .files = calloc((size_t)s->partitions, sizeof *l.files)};
    if (!l.files) return zl_error(ZL_ENOMEM, "zl_zero_load_shards: out of memory");
    st = zl_zero_each_chunk(z, true, NULL, read_chunk, &l);
    for (int q = 0; q < s->partitions; q++) zl_safetensors_close(l.files[q]);
    free(l.files);
    if (st) return st;
    /* A group's count is its parameters' largest: they step together. */
    for (int g = 0; g < z->ngroups; g++) z->steps[g] = 0;
    for (int i = 0; i < z->nent; i++) {
        int64_t *steps = &z->steps[z->ents[i].group];
        if (s->params[i].step > *steps) *steps = s->params[i].step;
    }
    return zl_zero_sync_working(z);
}
