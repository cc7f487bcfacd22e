/* A checkpoint's engine.json as the engine reads it: bounded, from a
 * regular file inside the folder, its CRC-32 checked, parsed strictly, and
 * every field the engine owns checked against the others before anything
 * is used; with the files, each against the manifest. Every message starts
 * "load_checkpoint: <file>: <key>". */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include "ckpt.h"

/* s for a message: quoted, control bytes as \xNN (all bytes past ASCII too
 * when s is not UTF-8), cut at 60 bytes. */
static const char *show(const char *s, char *buf, size_t n)
{
    size_t w = 0, len = strlen(s);
    bool utf8 = zli_utf8_valid(s, len < 60 ? len : 60);
    buf[w++] = '"';
    for (size_t i = 0; i < len && i < 60 && w + 6 < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7F || (!utf8 && c >= 0x80)) w += (size_t)snprintf(buf + w, n - w, "\\x%02X", c);
        else buf[w++] = (char)c;
    }
    if (len > 60 && w + 4 < n) {
        memcpy(buf + w, "...", 3);
        w += 3;
    }
    buf[w++] = '"';
    buf[w] = '\0';
    return buf;
}

static bool is_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

zl_status zz_check_tag(const char *tag, const char *op, const char *from)
{
    char what[4200], sh[128], why[96] = "";
    if (from) snprintf(what, sizeof what, "the tag in %s", from);
    else snprintf(what, sizeof what, "tag");
    if (!tag) return zl_error(ZL_EINVAL, "%s: %s must be a string, got nil", op, what);
    size_t len = strlen(tag);
    bool control = false;
    for (size_t i = 0; i < len; i++) control |= (unsigned char)tag[i] < 0x20 || tag[i] == 0x7F;
    if (len == 0) snprintf(why, sizeof why, "is empty");
    else if (len > ZZ_TAG_MAX) snprintf(why, sizeof why, "is %zu bytes long; a tag is at most %d", len, ZZ_TAG_MAX);
    else if (strchr(tag, '/')) snprintf(why, sizeof why, "holds \"/\": a tag names one folder inside the save folder");
    else if (tag[0] == '.')
        snprintf(why, sizeof why, "starts with \".\": a tag names a visible folder, never \".\" or \"..\"");
    else if (!zli_utf8_valid(tag, len)) snprintf(why, sizeof why, "is not valid UTF-8");
    else if (control) snprintf(why, sizeof why, "holds a control character");
    else if (is_space(tag[0]) || is_space(tag[len - 1]))
        snprintf(why, sizeof why, "starts or ends with a space, which `latest` would lose");
    if (why[0]) return zl_error(ZL_EINVAL, "%s: %s %s %s", op, what, show(tag, sh, sizeof sh), why);
    return ZL_OK;
}

/* ---- field checks: each names the file and the key ---- */

typedef struct checker {
    const char *file;
    zl_status st;
} checker;

static zl_status failf(checker *c, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static zl_status failf(checker *c, const char *key, const char *fmt, ...)
{
    if (c->st) return c->st;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return c->st = zl_error(ZL_EINVAL, "load_checkpoint: %s: %s %s", c->file, key, msg);
}

static const zli_json *table(checker *c, const char *key, const zli_json *v, bool list)
{
    if (c->st) return NULL;
    if (!v || (v->type != ZLI_JARR && v->type != ZLI_JOBJ)) {
        failf(c, key, "must be %s, got %s", list ? "a list" : "an object", v ? zli_json_kind(v) : "nil");
        return NULL;
    }
    if (list && v->type != ZLI_JARR) failf(c, key, "must be a list, got an object");
    if (!list && v->type != ZLI_JOBJ) failf(c, key, "must be an object, got a list");
    return c->st ? NULL : v;
}

static int64_t integer(checker *c, const char *key, const zli_json *v, int64_t lo, int64_t hi)
{
    if (c->st) return 0;
    if (!v || v->type != ZLI_JINT) {
        if (v && v->type == ZLI_JNUM)
            failf(c, key, "must be an integer, got %.*s", (int)(v->len < 40 ? v->len : 40), v->at);
        else
            failf(c, key, "must be an integer, got %s", v ? zli_json_kind(v) : "nil");
        return 0;
    }
    if (v->i < lo || v->i > hi) {
        char los[32] = "", his[32] = "";
        if (lo > INT64_MIN) snprintf(los, sizeof los, "%" PRId64, lo);
        if (hi < INT64_MAX) snprintf(his, sizeof his, "%" PRId64, hi);
        failf(c, key, "is %" PRId64 ", outside %s..%s", v->i, los, his);
        return 0;
    }
    return v->i;
}

static const char *string(checker *c, const char *key, const zli_json *v)
{
    if (c->st) return NULL;
    if (!v || v->type != ZLI_JSTR) {
        failf(c, key, "must be a string, got %s", v ? zli_json_kind(v) : "nil");
        return NULL;
    }
    return v->s;
}

/* A hyperparameter: a number, a boolean, a string, or a list of numbers (betas). */
static void hyper(checker *c, const char *key, const zli_json *v)
{
    char k2[240];
    if (v->type == ZLI_JINT || v->type == ZLI_JNUM || v->type == ZLI_JBOOL || v->type == ZLI_JSTR) return;
    if (v->type == ZLI_JARR) {
        for (size_t i = 0; i < v->n; i++)
            if (v->v[i].type != ZLI_JINT && v->v[i].type != ZLI_JNUM) {
                snprintf(k2, sizeof k2, "%s[%zu]", key, i + 1);
                failf(c, k2, "must be a number, got %s", zli_json_kind(&v->v[i]));
                return;
            }
        return;
    }
    if (v->type == ZLI_JOBJ) {
        failf(c, key, "must be a list, got an object");
        return;
    }
    failf(c, key, "must be a number, boolean, string or list of numbers, got %s", zli_json_kind(v));
}

static bool state_name(const char *s)
{
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || *s == '_')) return false;
    for (const char *p = s + 1; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_'))
            return false;
    return true;
}

/* The optimizer block: type, param groups, per-parameter steps, the state
 * tensors' names and the partition, with every count against the others. */
static void check_optimizer(checker *c, zz_ckpt *k, const zli_json *so)
{
    char key[160], sh[128];
    table(c, "optimizer", so, false);
    k->optimizer = string(c, "optimizer.type", zli_json_get(so, "type"));
    const zli_json *groups = table(c, "optimizer.param_groups", zli_json_get(so, "param_groups"), true);
    if (groups && groups->n == 0) failf(c, "optimizer.param_groups", "is empty");
    for (size_t g = 0; !c->st && groups && g < groups->n; g++) {
        snprintf(key, sizeof key, "optimizer.param_groups[%zu]", g + 1);
        const zli_json *h = table(c, key, &groups->v[g], false);
        for (size_t j = 0; h && !c->st && j < h->n; j++) {
            char hk[200];
            snprintf(hk, sizeof hk, "%s.%s", key, h->k[j]);
            hyper(c, hk, &h->v[j]);
        }
    }
    k->groups = groups;
    const zli_json *z = table(c, "optimizer.zero", zli_json_get(so, "zero"), false);
    k->stage = (int)integer(c, "optimizer.zero.stage", zli_json_get(z, "stage"), 0, 3);
    integer(c, "optimizer.zero.world_size", zli_json_get(z, "world_size"), 1, ZZ_COUNT_MAX);
    int64_t parts = integer(c, "optimizer.zero.partitions", zli_json_get(z, "partitions"), 1, ZZ_COUNT_MAX);
    int64_t align = integer(c, "optimizer.zero.align", zli_json_get(z, "align"), 1, 1 << 20);
    const zli_json *params = table(c, "optimizer.zero.params", zli_json_get(z, "params"), true);
    if (c->st) return;
    k->partitions = (int)(parts < INT32_MAX ? parts : INT32_MAX);
    k->nparams = (int)params->n;
    k->params = calloc(params->n ? params->n : 1, sizeof *k->params);
    if (!k->params) {
        c->st = zl_error(ZL_ENOMEM, "load_checkpoint: out of memory");
        return;
    }
    for (size_t i = 0; !c->st && i < params->n; i++) {
        snprintf(key, sizeof key, "optimizer.zero.params[%zu]", i + 1);
        const zli_json *p = table(c, key, &params->v[i], false);
        char kk[200];
        snprintf(kk, sizeof kk, "%s.name", key);
        k->params[i].name = string(c, kk, zli_json_get(p, "name"));
        snprintf(kk, sizeof kk, "%s.shape", key);
        const zli_json *shape = table(c, kk, zli_json_get(p, "shape"), true);
        int64_t n = 1;
        for (size_t d = 0; !c->st && shape && d < shape->n; d++) {
            char dk[220];
            snprintf(dk, sizeof dk, "%s.shape[%zu]", key, d + 1);
            int64_t s = integer(c, dk, &shape->v[d], 0, ZZ_COUNT_MAX);
            if (s != 0 && n > ZZ_COUNT_MAX / s) failf(c, kk, "holds more than 2^53 elements");
            n *= s;
        }
        snprintf(kk, sizeof kk, "%s.numel", key);
        int64_t numel = integer(c, kk, zli_json_get(p, "numel"), 0, ZZ_COUNT_MAX);
        if (!c->st && numel != n) failf(c, kk, "is %" PRId64 ", but its shape holds %" PRId64 " elements", numel, n);
        snprintf(kk, sizeof kk, "%s.group", key);
        k->params[i].group = (int)integer(c, kk, zli_json_get(p, "group"), 1, groups ? (int64_t)groups->n : 1) - 1;
        /* The chunk length: ceil(numel / partitions) rounded up to align. */
        int64_t want = (n + parts - 1) / parts;
        want = (want + align - 1) / align * align;
        snprintf(kk, sizeof kk, "%s.k", key);
        int64_t kv = integer(c, kk, zli_json_get(p, "k"), 0, INT64_MAX);
        if (!c->st && kv != want)
            failf(c, kk, "is %" PRId64 "; %" PRId64 " elements in %" PRId64 " partitions aligned to %" PRId64
                  " make chunks of %" PRId64, kv, n, parts, align, want);
        k->params[i].numel = numel;
        k->params[i].k = kv;
    }
    const zli_json *state = table(c, "optimizer.state", zli_json_get(so, "state"), false);
    for (size_t j = 0; state && !c->st && j < state->n; j++) {
        const char *sk = state->k[j];
        char *end;
        long i = strtol(sk, &end, 10);
        char back[24];
        snprintf(back, sizeof back, "%ld", i);
        if (*end || strcmp(back, sk) != 0 || i < 1 || i > k->nparams) {
            failf(c, "optimizer.state", "has the key %s, which names no parameter (1..%d)", show(sk, sh, sizeof sh),
                  k->nparams);
            break;
        }
        snprintf(key, sizeof key, "optimizer.state.%s", sk);
        const zli_json *sc = table(c, key, &state->v[j], false);
        for (size_t m = 0; sc && !c->st && m < sc->n; m++)
            if (strcmp(sc->k[m], "step") != 0)
                failf(c, key, "holds %s; the only saved scalar is step", show(sc->k[m], sh, sizeof sh));
        char kk[200];
        snprintf(kk, sizeof kk, "%s.step", key);
        k->params[i - 1].step = integer(c, kk, zli_json_get(sc, "step"), 0, k->counts.global_steps);
    }
    const zli_json *keys = table(c, "optimizer.tensor_keys", zli_json_get(so, "tensor_keys"), true);
    if (c->st) return;
    k->keys = calloc(keys->n ? keys->n : 1, sizeof *k->keys);
    if (!k->keys) {
        c->st = zl_error(ZL_ENOMEM, "load_checkpoint: out of memory");
        return;
    }
    for (size_t j = 0; !c->st && j < keys->n; j++) {
        const zli_json *t = &keys->v[j];
        if (t->type != ZLI_JSTR || !state_name(t->s)) {
            snprintf(key, sizeof key, "optimizer.tensor_keys[%zu]", j + 1);
                    failf(c, key, "is %s, not a state name",
                  t->type == ZLI_JSTR ? show(t->s, sh, sizeof sh) : zli_json_kind(t));
            break;
        }
        k->keys[k->nkeys++] = t->s;
    }
}

/* The files the manifest must list, exactly: the model, and each partition's shard. */
static bool wanted_file(const zz_ckpt *k, const char *f)
{
    if (strcmp(f, "model.safetensors") == 0) return true;
    int q, used = 0;
    if (!k->has_optimizer || sscanf(f, "optim_rank%d.safetensors%n", &q, &used) != 1 || f[used] || q < 0 ||
        q >= k->partitions)
        return false;
    char canon[64];
    snprintf(canon, sizeof canon, "optim_rank%d.safetensors", q);
    return strcmp(canon, f) == 0;
}

static void check_manifest(checker *c, zz_ckpt *k, bool check_files)
{
    const zli_json *m = zli_json_get(k->root, "manifest");
    char sh[128];
    if (!m || m->type == ZLI_JNULL) {
        failf(c, "manifest", "is %s: without it the files cannot be checked, so the checkpoint is refused",
              m ? "null" : "missing");
        return;
    }
    if (!table(c, "manifest", m, false)) return;
    if (k->has_optimizer && (size_t)k->partitions > m->n) {
        failf(c, "optimizer.zero.partitions", "is %d, but the manifest lists %zu files (the model and one per partition)",
              k->partitions, m->n);
        return;
    }
    for (size_t j = 0; j < m->n; j++)
        if (!wanted_file(k, m->k[j])) {
            failf(c, "manifest", "lists %s, which is no file of this checkpoint", show(m->k[j], sh, sizeof sh));
            return;
        }
    int nfiles = 1 + (k->has_optimizer ? k->partitions : 0);
    for (int f = 0; f < nfiles && !c->st; f++) {
        char name[64], key[96];
        if (f == 0) snprintf(name, sizeof name, "model.safetensors");
        else snprintf(name, sizeof name, "optim_rank%d.safetensors", f - 1);
        const zli_json *e = zli_json_get(m, name);
        if (!e) {
            failf(c, "manifest", "does not list %s", name);
            return;
        }
        snprintf(key, sizeof key, "manifest.%s", name);
        table(c, key, e, false);
        snprintf(key, sizeof key, "manifest[\"%s\"].crc32", name);
        integer(c, key, zli_json_get(e, "crc32"), 0, 0xFFFFFFFFLL);
        snprintf(key, sizeof key, "manifest[\"%s\"].bytes", name);
        integer(c, key, zli_json_get(e, "bytes"), 0, INT64_MAX);
    }
    if (c->st || !check_files) return;
    /* Every file before any is read: a damaged one is named before anything changes. */
    for (int f = 0; f < nfiles; f++) {
        char name[64], fpath[4200];
        if (f == 0) snprintf(name, sizeof name, "model.safetensors");
        else snprintf(name, sizeof name, "optim_rank%d.safetensors", f - 1);
        snprintf(fpath, sizeof fpath, "%s/%s", k->path, name);
        const zli_json *e = zli_json_get(m, name);
        int64_t want_bytes = zli_json_get(e, "bytes")->i, want_crc = zli_json_get(e, "crc32")->i;
        if (!zl_fs_exists(fpath)) {
            c->st = zl_error(ZL_EIO, "load_checkpoint: %s is missing", fpath);
            return;
        }
        uint32_t crc;
        int64_t bytes;
        if (zl_fs_file_crc32(fpath, true, &crc, &bytes)) {
            c->st = zl_error(ZL_EIO, "load_checkpoint: %s", zl_last_error());
            return;
        }
        if (bytes != want_bytes) {
            c->st = zl_error(ZL_EIO, "load_checkpoint: %s is %" PRId64 " bytes, the checkpoint wrote %" PRId64
                             " (truncated or replaced)", fpath, bytes, want_bytes);
            return;
        }
        if ((int64_t)crc != want_crc) {
            c->st = zl_error(ZL_EIO, "load_checkpoint: %s is damaged (CRC-32 %08x, written as %08x)", fpath, crc,
                             (unsigned)want_crc);
            return;
        }
    }
}

static void check_state(checker *c, zz_ckpt *k, bool check_files)
{
    const zli_json *r = k->root, *fmt = zli_json_get(r, "format");
    char sh[128];
    if (r->type != ZLI_JOBJ || !fmt || fmt->type != ZLI_JSTR || strcmp(fmt->s, ZZ_CKPT_FORMAT) != 0) {
        c->st = zl_error(ZL_EINVAL, "load_checkpoint: %s is not a zlua checkpoint (format %s, expected %s)", c->file,
                         r->type != ZLI_JOBJ ? "table" : !fmt ? "nil"
                         : fmt->type == ZLI_JSTR ? show(fmt->s, sh, sizeof sh) : zli_json_kind(fmt),
                         ZZ_CKPT_FORMAT);
        return;
    }
    string(c, "tag", zli_json_get(r, "tag"));
    int64_t steps = integer(c, "global_steps", zli_json_get(r, "global_steps"), 0, ZZ_COUNT_MAX);
    k->counts.global_steps = steps;
    k->counts.global_samples = integer(c, "global_samples", zli_json_get(r, "global_samples"), 0, ZZ_COUNT_MAX);
    k->counts.skipped_steps = integer(c, "skipped_steps", zli_json_get(r, "skipped_steps"), 0, steps);
    k->counts.micro_steps = integer(c, "micro_steps", zli_json_get(r, "micro_steps"), 0, ZZ_COUNT_MAX);
    k->world_size = integer(c, "world_size", zli_json_get(r, "world_size"), 1, 1 << 24);
    string(c, "precision", zli_json_get(r, "precision"));
    const zli_json *rng = table(c, "rng", zli_json_get(r, "rng"), true);
    if (rng && (int64_t)rng->n != k->world_size)
        failf(c, "rng", "lists %zu ranks, the checkpoint has %" PRId64, rng->n, k->world_size);
    if (c->st) return;
    k->nrng = (int)rng->n;
    k->seed = calloc(rng->n ? rng->n : 1, sizeof *k->seed);
    k->offset = calloc(rng->n ? rng->n : 1, sizeof *k->offset);
    if (!k->seed || !k->offset) {
        c->st = zl_error(ZL_ENOMEM, "load_checkpoint: out of memory");
        return;
    }
    for (size_t q = 0; q < rng->n && !c->st; q++) {
        char key[48];
        snprintf(key, sizeof key, "rng[%zu]", q + 1);
        const zli_json *g = table(c, key, &rng->v[q], false);
        snprintf(key, sizeof key, "rng[%zu].seed", q + 1);
        k->seed[q] = (uint64_t)integer(c, key, zli_json_get(g, "seed"), INT64_MIN, INT64_MAX);
        snprintf(key, sizeof key, "rng[%zu].offset", q + 1);
        k->offset[q] = (uint64_t)integer(c, key, zli_json_get(g, "offset"), INT64_MIN, INT64_MAX);
    }
    const zli_json *so = zli_json_get(r, "optimizer");
    k->has_optimizer = so != NULL;
    if (so && !c->st) check_optimizer(c, k, so);
    if (!c->st) check_manifest(c, k, check_files);
}

void zz_ckpt_free(zz_ckpt *c)
{
    if (!c) return;
    zli_json_free(c->root);
    free(c->text);
    free(c->path);
    free(c->file);
    free(c->seed);
    free(c->offset);
    free(c->params);
    free(c->keys);
    free(c);
}

zl_status zz_ckpt_open(const char *path, bool check_files, zz_ckpt **out)
{
    *out = NULL;
    zz_ckpt *k = calloc(1, sizeof *k);
    size_t plen = strlen(path);
    if (k) {
        k->path = strdup(path);
        k->file = malloc(plen + 16);
    }
    if (!k || !k->path || !k->file) {
        zz_ckpt_free(k);
        return zl_error(ZL_ENOMEM, "load_checkpoint: out of memory");
    }
    snprintf(k->file, plen + 16, "%s/engine.json", path);
    zl_status st = ZL_OK;
    if (!zl_fs_exists(k->file)) {
        st = zl_error(ZL_EIO, "load_checkpoint: %s is missing", k->file);
    } else if (zl_fs_read_file(k->file, ZZ_ENGINE_JSON_MAX, true, &k->text, &k->len)) {
        st = zl_error(zli_last_code(), "load_checkpoint: %s", zl_last_error());
    } else {
        char crcpath[4200], *want = NULL;
        size_t wlen = 0;
        snprintf(crcpath, sizeof crcpath, "%s.crc32", k->file);
        if (zl_fs_exists(crcpath) && zl_fs_read_file(crcpath, 64, true, &want, &wlen)) {
            st = zl_error(zli_last_code(), "load_checkpoint: %s", zl_last_error());
        } else {
            char *end = NULL;
            unsigned long long v = want ? strtoull(want, &end, 10) : 0;
            while (end && (*end == '\n' || *end == ' ' || *end == '\r')) end++;
            uLong crc = crc32(0L, (const Bytef *)k->text, (uInt)k->len);
            if (!want || !end || *end || end == want || v != (unsigned long long)crc)
                st = zl_error(ZL_EIO, "load_checkpoint: %s is damaged (its CRC-32 does not match %s.crc32)", k->file,
                              k->file);
        }
        free(want);
    }
    if (!st) {
        char what[4200];
        snprintf(what, sizeof what, "load_checkpoint: %s is corrupt", k->file);
        st = zli_json_parse(k->text, k->len, what, ZZ_JSON_DEPTH, &k->root);
    }
    if (!st) {
        checker c = {.file = k->file};
        check_state(&c, k, check_files);
        st = c.st;
    }
    if (st) {
        zz_ckpt_free(k);
        return st;
    }
    *out = k;
    return ZL_OK;
}
