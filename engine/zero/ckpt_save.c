/* zl_zero_save: a checkpoint folder written whole or not at all (zero.h's
 * layout): engine.json composed from the engine's state and the host's own
 * members, checked before any file is written, the files written into a
 * marked temporary folder, read back, and renamed into place; the ranks
 * agree on each outcome. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#include "ckpt.h"

/* The keys of engine.json the engine writes; a host's member may not take one. */
static const char *const engine_keys[] = {"format", "tag", "world_size", "precision", "global_steps",
                                          "global_samples", "skipped_steps", "micro_steps", "rng",
                                          "optimizer", "manifest"};

/* One int64 per rank, gathered (out[world]) or, with root >= 0, root's to
 * every rank (out[0]); in the memory the communicator takes. */
static zl_status exchange_i64(zl_comm *comm, int64_t mine, int root, int64_t *out)
{
    int index = 0, world = zl_comm_size(comm);
    zl_device dev = zl_comm_device(comm, &index);
    int64_t n = root >= 0 ? 1 : world;
    zl_tensor *h = zl_tensor_full(ZL_DTYPE_I64, 1, (int64_t[]){1}, (double)0);
    zl_tensor *hall = zl_tensor_zeros(ZL_DTYPE_I64, 1, &n);
    if (!h || !hall) {
        zl_tensor_release(h);
        zl_tensor_release(hall);
        return zl_error(ZL_ENOMEM, "save_checkpoint: out of memory");
    }
    *(int64_t *)zl_tensor_data(h) = mine;
    zl_tensor *in = dev == ZL_DEVICE_CPU ? zl_tensor_retain(h) : zl_tensor_to_device(h, dev, index);
    zl_tensor *all = dev == ZL_DEVICE_CPU ? zl_tensor_retain(hall) : zl_tensor_to_device(hall, dev, index);
    zl_status st = !in || !all ? zli_last_code()
                 : root >= 0 ? zl_comm_broadcast(comm, in, root) : zl_comm_allgather(comm, in, all);
    zl_tensor *back = st ? NULL : zl_tensor_to_device(root >= 0 ? in : all, ZL_DEVICE_CPU, 0);
    if (!st && !back) st = zli_last_code();
    if (!st) memcpy(out, zl_tensor_data(back), (size_t)n * sizeof *out);
    zl_tensor *rel[] = {h, hall, in, all, back};
    for (int i = 0; i < 5; i++) zl_tensor_release(rel[i]);
    return st;
}

/* Whether ok holds on every rank (a failure to ask counts as not). */
static bool agree(zl_comm *comm, bool ok)
{
    int world = zl_comm_size(comm);
    if (world == 1) return ok;
    int64_t all[world > 0 ? world : 1];
    if (exchange_i64(comm, ok ? 1 : 0, -1, all)) return false;
    for (int q = 0; q < world; q++) ok &= all[q] != 0;
    return ok;
}

/* ---- engine.json ---- */

static void put_counts(zli_jbuf *b, const zl_zero_counts *c)
{
    zli_jb_line_key(b, false, "global_steps");
    zli_jb_int(b, c->global_steps);
    zli_jb_line_key(b, false, "global_samples");
    zli_jb_int(b, c->global_samples);
    zli_jb_line_key(b, false, "skipped_steps");
    zli_jb_int(b, c->skipped_steps);
    zli_jb_line_key(b, false, "micro_steps");
    zli_jb_int(b, c->micro_steps);
}

/* The engine's hyperparameters of group g under torch's and zlua.optim's names. */
static void put_group(zli_jbuf *b, const zl_zero *z, int g)
{
    const zl_zero_hparams *h = &z->hp[g];
    zli_jb_raw(b, "{", 1);
    zli_jb_key(b, true, "lr");
    zli_jb_num(b, h->lr);
    zli_jb_key(b, false, "weight_decay");
    zli_jb_num(b, h->weight_decay);
    if (z->cfg.optimizer == ZL_ZERO_SGD) {
        zli_jb_key(b, false, "momentum");
        zli_jb_num(b, h->momentum);
        zli_jb_key(b, false, "dampening");
        zli_jb_num(b, h->dampening);
        zli_jb_key(b, false, "nesterov");
        zli_jb_raw(b, h->nesterov ? "true" : "false", h->nesterov ? 4 : 5);
    } else {
        zli_jb_key(b, false, "betas");
        zli_jb_raw(b, "[", 1);
        zli_jb_num(b, h->beta1);
        zli_jb_raw(b, ", ", 2);
        zli_jb_num(b, h->beta2);
        zli_jb_raw(b, "]", 1);
        zli_jb_key(b, false, "eps");
        zli_jb_num(b, h->eps);
        zli_jb_key(b, false, "bias_correction");
        zli_jb_raw(b, h->bias_correction ? "true" : "false", h->bias_correction ? 4 : 5);
        if (z->cfg.optimizer == ZL_ZERO_LAMB) {
            zli_jb_key(b, false, "max_coeff");
            zli_jb_num(b, h->max_coeff);
            zli_jb_key(b, false, "min_coeff");
            zli_jb_num(b, h->min_coeff);
        } else {
            zli_jb_key(b, false, "adam_w_mode");
            zli_jb_raw(b, h->adamw_mode ? "true" : "false", h->adamw_mode ? 4 : 5);
        }
    }
    zli_jb_raw(b, "}", 1);
}

static void put_optimizer(zli_jbuf *b, const zl_zero *z, const zl_zero_save_args *a, const zli_json *groups)
{
    zli_jb_line_key(b, false, "optimizer");
    zli_jb_raw(b, "{", 1);
    zli_jb_key(b, true, "type");
    zli_jb_str(b, a->optimizer ? a->optimizer : z->cfg.optimizer == ZL_ZERO_SGD ? "SGD"
                  : z->cfg.optimizer == ZL_ZERO_LAMB ? "Lamb" : "Adam");
    zli_jb_key(b, false, "param_groups");
    if (groups) {
        zli_jb_raw(b, groups->at, groups->len);
    } else {
        zli_jb_raw(b, "[", 1);
        for (int g = 0; g < z->ngroups; g++) {
            if (g) zli_jb_raw(b, ", ", 2);
            put_group(b, z, g);
        }
        zli_jb_raw(b, "]", 1);
    }
    zli_jb_key(b, false, "state");
    zli_jb_raw(b, "{", 1);
    bool first = true;
    for (int i = 0; i < z->nent; i++) {
        int64_t steps = z->steps[z->ents[i].group];
        if (steps <= 0) continue;
        char key[24];
        snprintf(key, sizeof key, "%d", i + 1);
        zli_jb_key(b, first, key);
        first = false;
        zli_jb_raw(b, "{\"step\": ", 9);
        zli_jb_int(b, steps);
        zli_jb_raw(b, "}", 1);
    }
    zli_jb_raw(b, "}", 1);
    zli_jb_key(b, false, "tensor_keys");
    zli_jb_raw(b, "[", 1);
    for (int j = 0; j < z->nstates; j++) {
        if (j) zli_jb_raw(b, ", ", 2);
        zli_jb_str(b, z->keys[j]);
    }
    zli_jb_raw(b, "]", 1);
    zli_jb_key(b, false, "zero");
    zli_jb_raw(b, "{", 1);
    zli_jb_key(b, true, "stage");
    zli_jb_int(b, z->stage);
    zli_jb_key(b, false, "world_size");
    zli_jb_int(b, z->world);
    zli_jb_key(b, false, "partitions");
    zli_jb_int(b, z->P);
    zli_jb_key(b, false, "align");
    zli_jb_int(b, ZL_ZERO_ALIGN);
    zli_jb_key(b, false, "params");
    zli_jb_raw(b, "[", 1);
    for (int i = 0; i < z->nent; i++) {
        const zz_entry *e = &z->ents[i];
        zli_jb_raw(b, i ? ", {" : "{", i ? 3 : 1);
        zli_jb_key(b, true, "name");
        zli_jb_str(b, e->name);
        zli_jb_key(b, false, "shape");
        zli_jb_raw(b, "[", 1);
        for (int d = 0; d < e->ndim; d++) {
            if (d) zli_jb_raw(b, ", ", 2);
            zli_jb_int(b, e->shape[d]);
        }
        zli_jb_raw(b, "]", 1);
        zli_jb_key(b, false, "numel");
        zli_jb_int(b, e->n);
        zli_jb_key(b, false, "group");
        zli_jb_int(b, e->group + 1);
        zli_jb_key(b, false, "k");
        zli_jb_int(b, e->k);
        zli_jb_raw(b, "}", 1);
    }
    zli_jb_raw(b, "]}}", 3);
}

/* engine.json up to its manifest (the caller closes it): every field the
 * engine owns, then the host's members as the host wrote them. */
static zl_status compose(const zl_zero *z, const zl_zero_save_args *a, const char *tag, int world,
                         const int64_t *rng, const zli_json *members, const zli_json *groups, zli_jbuf *b)
{
    zli_jb_raw(b, "{", 1);
    zli_jb_line_key(b, true, "format");
    zli_jb_str(b, ZZ_CKPT_FORMAT);
    zli_jb_line_key(b, false, "tag");
    zli_jb_str(b, tag);
    zli_jb_line_key(b, false, "world_size");
    zli_jb_int(b, world);
    zli_jb_line_key(b, false, "precision");
    zli_jb_str(b, a->precision ? a->precision : !z || z->wdtype == ZL_DTYPE_F32 ? "f32"
                  : z->wdtype == ZL_DTYPE_BF16 ? "bf16" : "fp16");
    put_counts(b, &a->counts);
    zli_jb_line_key(b, false, "rng");
    zli_jb_raw(b, "[", 1);
    for (int q = 0; q < world; q++) {
        zli_jb_raw(b, q ? ", {" : "{", q ? 3 : 1);
        zli_jb_key(b, true, "seed");
        zli_jb_int(b, rng[2 * q]);
        zli_jb_key(b, false, "offset");
        zli_jb_int(b, rng[2 * q + 1]);
        zli_jb_raw(b, "}", 1);
    }
    zli_jb_raw(b, "]", 1);
    for (size_t j = 0; members && j < members->n; j++) {
        zli_jb_line_key(b, false, members->k[j]);
        zli_jb_raw(b, members->v[j].at, members->v[j].len);
    }
    for (int i = 0; z && i < z->nent; i++)
        if (!zli_utf8_valid(z->ents[i].name, strlen(z->ents[i].name))) {
            char sh[256];
            size_t w = 0;
            for (const unsigned char *p = (const unsigned char *)z->ents[i].name; *p && w + 5 < sizeof sh; p++)
                w += (size_t)(*p >= 0x80 || *p < 0x20 ? snprintf(sh + w, sizeof sh - w, "\\x%02X", *p)
                                                      : snprintf(sh + w, sizeof sh - w, "%c", *p));
            return zl_error(ZL_EINVAL, "save_checkpoint: engine.json cannot hold the state: the parameter name \"%s\" "
                                       "is not valid UTF-8", sh);
        }
    if (z) put_optimizer(b, z, a, groups);
    return b->failed ? zl_error(ZL_ENOMEM, "save_checkpoint: out of memory composing engine.json") : ZL_OK;
}

/* The host's JSON, parsed and checked before anything is written. */
static zl_status host_json(const zl_zero_save_args *a, zli_json **members, zli_json **groups)
{
    *members = *groups = NULL;
    zl_status st = ZL_OK;
    if (a->members && (st = zli_json_parse(a->members, strlen(a->members), "save_checkpoint: members",
                                           ZZ_JSON_DEPTH, members)))
        return st;
    if (*members && (*members)->type != ZLI_JOBJ)
        return zl_error(ZL_EINVAL, "save_checkpoint: members must be a JSON object, got %s", zli_json_kind(*members));
    for (size_t j = 0; *members && j < (*members)->n; j++)
        for (size_t e = 0; e < sizeof engine_keys / sizeof engine_keys[0]; e++)
            if (strcmp((*members)->k[j], engine_keys[e]) == 0)
                return zl_error(ZL_EINVAL, "save_checkpoint: members: \"%s\" is a key of the engine's own in "
                                           "engine.json", engine_keys[e]);
    if (a->param_groups && (st = zli_json_parse(a->param_groups, strlen(a->param_groups),
                                                "save_checkpoint: param_groups", ZZ_JSON_DEPTH - 2, groups)))
        return st;
    if (*groups && (*groups)->type != ZLI_JARR)
        return zl_error(ZL_EINVAL, "save_checkpoint: param_groups must be a JSON list, got %s", zli_json_kind(*groups));
    for (size_t g = 0; *groups && g < (*groups)->n; g++)
        if ((*groups)->v[g].type != ZLI_JOBJ)
            return zl_error(ZL_EINVAL, "save_checkpoint: param_groups[%zu] must be an object, got %s", g + 1,
                            zli_json_kind(&(*groups)->v[g]));
    return ZL_OK;
}

/* ---- the files ---- */

/* model.safetensors of the engine's parameters alone, in the working dtype:
 * every rank takes part in stage 3's gathers, rank 0 writes. */
static zl_status write_params(zl_zero *z, const char *path)
{
    zl_safetensors_writer *w = NULL;
    zl_status st = ZL_OK;
    if (z->rank == 0) {
        zl_safetensors_entry *ents = calloc((size_t)(z->nent ? z->nent : 1), sizeof *ents);
        if (!ents) return zl_error(ZL_ENOMEM, "save_checkpoint: out of memory");
        for (int i = 0; i < z->nent; i++) {
            const zz_entry *e = &z->ents[i];
            ents[i] = (zl_safetensors_entry){.name = e->name, .dtype = z->wdtype, .ndim = e->ndim};
            memcpy(ents[i].shape, e->shape, sizeof e->shape);
        }
        w = zl_safetensors_writer_open(path, z->nent, ents, 0, NULL);
        free(ents);
        if (!w) st = zli_last_code();
    }
    for (int i = 0; i < z->nent; i++) {
        zz_entry *e = &z->ents[i];
        zl_status s2 = zl_zero_gather(z, e->p);
        if (!s2 && w && !st) {
            zl_tensor *host = zl_tensor_to_device(e->p, ZL_DEVICE_CPU, 0);
            s2 = host ? zl_safetensors_writer_append(w, host) : zli_last_code();
            zl_tensor_release(host);
        }
        zl_status s3 = zl_zero_release(z, e->p);
        if (!st) st = s2 ? s2 : s3;
    }
    if (w && !st) return zl_safetensors_writer_commit(w);
    zl_safetensors_writer_abort(w);
    return st;
}

static zl_status manifest_entry(zli_jbuf *b, bool first, const char *folder, const char *name)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", folder, name);
    uint32_t crc;
    int64_t bytes;
    if (zl_fs_file_crc32(path, true, &crc, &bytes)) return zli_last_code();
    zli_jb_key(b, first, name);
    zli_jb_raw(b, "{\"crc32\": ", 10);
    zli_jb_int(b, crc);
    zli_jb_raw(b, ", \"bytes\": ", 11);
    zli_jb_int(b, bytes);
    zli_jb_raw(b, "}", 1);
    return ZL_OK;
}

/* Rank 0, the files written: the manifest, engine.json and its CRC-32, read
 * back byte for byte and as a checkpoint, and each file's header. */
static zl_status finish(const char *tmp, int partitions, zli_jbuf *b)
{
    zli_jb_line_key(b, false, "manifest");
    zli_jb_raw(b, "{", 1);
    zl_status st = manifest_entry(b, true, tmp, "model.safetensors");
    for (int q = 0; !st && q < partitions; q++) {
        char name[48];
        snprintf(name, sizeof name, "optim_rank%d.safetensors", q);
        st = manifest_entry(b, false, tmp, name);
    }
    zli_jb_raw(b, "}\n}\n", 4);
    if (st) return st;
    if (b->failed) return zl_error(ZL_ENOMEM, "save_checkpoint: out of memory composing engine.json");
    if (b->n > ZZ_ENGINE_JSON_MAX)
        return zl_error(ZL_EINVAL, "save_checkpoint: engine.json would be %zu bytes, more than the %zu a load reads "
                                   "(a client_state that large belongs in a file of its own)", b->n, ZZ_ENGINE_JSON_MAX);
    char jpath[4400], cpath[4440], crc[24];
    snprintf(jpath, sizeof jpath, "%s/engine.json", tmp);
    snprintf(cpath, sizeof cpath, "%s.crc32", jpath);
    int n = snprintf(crc, sizeof crc, "%lu\n", crc32(0L, (const Bytef *)b->p, (uInt)b->n));
    if ((st = zl_file_write_atomic(jpath, b->p, b->n)) || (st = zl_file_write_atomic(cpath, crc, (size_t)n))) return st;
    char *back = NULL;
    size_t blen = 0;
    if ((st = zl_fs_read_file(jpath, ZZ_ENGINE_JSON_MAX, true, &back, &blen))) return st;
    bool same = blen == b->n && memcmp(back, b->p, blen) == 0;
    free(back);
    if (!same) return zl_error(ZL_EIO, "save_checkpoint: %s does not read back as written", jpath);
    zz_ckpt *k = NULL;
    if ((st = zz_ckpt_open(tmp, false, &k)))
        return zl_error(st, "save_checkpoint: engine.json would not load back: %s", zl_last_error());
    zz_ckpt_free(k);
    for (int q = -1; q < partitions; q++) {
        char name[4400];
        if (q < 0) snprintf(name, sizeof name, "%s/model.safetensors", tmp);
        else snprintf(name, sizeof name, "%s/optim_rank%d.safetensors", tmp, q);
        zl_safetensors *f = zl_safetensors_open(name);
        if (!f) return zli_last_code();
        zl_safetensors_close(f);
    }
    return ZL_OK;
}

/* The save proper; every rank runs it, and each step's outcome is agreed. */
static zl_status save(zl_zero *z, zl_comm *comm, const char *dir, const zl_zero_save_args *a, char *final,
                      size_t final_size)
{
    int rank = zl_comm_rank(comm), world = zl_comm_size(comm);
    char tagbuf[48];
    const char *tag = a->tag;
    if (!tag) {
        snprintf(tagbuf, sizeof tagbuf, "global_step%" PRId64, a->counts.global_steps);
        tag = tagbuf;
    }
    zl_status st = zz_check_tag(tag, "save_checkpoint", NULL);
    if (st) return st;
    if (!dir || !*dir) return zl_error(ZL_EINVAL, "save_checkpoint: dir must be a folder path");
    int64_t mine[2] = {(int64_t)zl_generator_get_seed(NULL), (int64_t)zl_generator_get_offset(NULL)};
    int64_t *rng = calloc((size_t)(2 * world), sizeof *rng), *seeds = calloc((size_t)world, sizeof *seeds);
    if (!rng || !seeds) {
        free(rng);
        free(seeds);
        return zl_error(ZL_ENOMEM, "save_checkpoint: out of memory");
    }
    if (!(st = exchange_i64(comm, mine[0], -1, seeds))) {
        for (int q = 0; q < world; q++) rng[2 * q] = seeds[q];
        if (!(st = exchange_i64(comm, mine[1], -1, seeds)))
            for (int q = 0; q < world; q++) rng[2 * q + 1] = seeds[q];
    }
    free(seeds);
    if (st) {
        free(rng);
        return st;
    }
    /* Everything engine.json will hold, checked on rank 0 before any file is written. */
    zli_json *members = NULL, *groups = NULL;
    zli_jbuf b = {0};
    if (rank == 0 && !(st = host_json(a, &members, &groups)))
        st = compose(z, a, tag, world, rng, members, groups, &b);
    /* The manifest adds a line per file to this. */
    if (!st && b.n + 4096 > ZZ_ENGINE_JSON_MAX)
        st = zl_error(ZL_EINVAL, "save_checkpoint: engine.json would be %zu bytes, more than the %zu a load reads (a "
                                 "client_state that large belongs in a file of its own)", b.n + 4096, ZZ_ENGINE_JSON_MAX);
    free(rng);
    /* The first failure's words and code, said on every rank that saw it. */
    char why[5000] = "";
    zl_status code = ZL_EIO;
    if (st) snprintf(why, sizeof why, "%s", zl_last_error()), code = st;
    bool ok = agree(comm, !st);
    int n = snprintf(final, final_size, "%s%s%s", dir, dir[strlen(dir) - 1] == '/' ? "" : "/", tag);
    char tmp[4300];
    if (ok && (n < 0 || (size_t)n >= final_size)) ok = false, snprintf(why, sizeof why, "save_checkpoint: %s: the path is too long", dir);
    if (ok && rank == 0) {
        ok = !zl_fs_mkdirs(dir);
        if (!ok) snprintf(why, sizeof why, "save_checkpoint: %s", zl_last_error()), code = zli_last_code();
        int swept = 0;
        if (ok && zl_fs_temp_sweep(dir, &swept))
            fprintf(stderr, "zlua: save_checkpoint: warning: %s\n", zl_last_error());
    }
    int64_t token = 0;
    if (agree(comm, ok) && !exchange_i64(comm, (int64_t)getpid(), 0, &token)) {
        snprintf(tmp, sizeof tmp, "%s%s.%s.tmp-%" PRId64, dir, dir[strlen(dir) - 1] == '/' ? "" : "/", tag, token);
        ok = true;
        if (rank == 0 && (zl_fs_remove_tree(tmp) || zl_fs_temp_mark(tmp) || zl_fs_mkdirs(tmp))) {
            ok = false;
            snprintf(why, sizeof why, "save_checkpoint: %s", zl_last_error());
        }
        if (agree(comm, ok)) {
            char path[4400];
            snprintf(path, sizeof path, "%s/model.safetensors", tmp);
            st = a->write_model ? a->write_model(a->user, path) : write_params(z, path);
            if (!st && z && (z->P > 1 || rank == 0)) {
                snprintf(path, sizeof path, "%s/optim_rank%d.safetensors", tmp, rank);
                st = zl_zero_save_shard(z, path);
            }
            if (st) snprintf(why, sizeof why, "%s", zl_last_error()), code = st;
            ok = agree(comm, !st);
            if (!ok && !why[0])
                snprintf(why, sizeof why, "save_checkpoint: another rank failed to write its part of the checkpoint "
                                          "(its message names it)");
            if (ok && rank == 0) {
                st = finish(tmp, z ? z->P : 0, &b);
                if (!st) st = zl_fs_exists(final) ? zl_fs_exchange(tmp, final) : zl_fs_rename(tmp, final);
                if (!st && zl_fs_exists(tmp)) st = zl_fs_remove_tree(tmp);
                if (!st) st = zl_fs_temp_unmark(tmp);
                if (!st && !a->keep_latest) {
                    char latest[4300];
                    snprintf(latest, sizeof latest, "%s%slatest", dir, dir[strlen(dir) - 1] == '/' ? "" : "/");
                    st = zl_file_write_atomic(latest, tag, strlen(tag));
                }
                if (st) snprintf(why, sizeof why, "%s", zl_last_error()), code = st;
                ok = !st;
            }
            ok = agree(comm, ok);
            if (!ok && !why[0])
                snprintf(why, sizeof why, "save_checkpoint: rank 0 failed to complete %s (its message says why)", final);
        } else if (!why[0]) {
            snprintf(why, sizeof why, "save_checkpoint: rank 0 could not create %s", tmp);
        }
        if (!ok && rank == 0) {
            zl_fs_remove_tree(tmp);
            zl_fs_temp_unmark(tmp);
        }
    } else {
        ok = false;
        if (!why[0]) snprintf(why, sizeof why, "save_checkpoint: rank 0 refused the state (its message says why)");
    }
    zli_json_free(members);
    zli_json_free(groups);
    free(b.p);
    return ok ? ZL_OK : zl_error(code, "%s", why);
}

zl_status zl_zero_save(zl_zero *z, const char *dir, const zl_zero_save_args *a, char *path, size_t path_size)
{
    if (!a) return zl_error(ZL_EINVAL, "save_checkpoint: no arguments");
    zl_comm *comm = z ? z->comm : a->comm;
    if (!comm) return zl_error(ZL_EINVAL, "save_checkpoint: no engine and no communicator");
    if (!z && !a->write_model) return zl_error(ZL_EINVAL, "save_checkpoint: without an engine the host writes the model");
    char local[4200];
    zl_status st = save(z, comm, dir, a, path ? path : local, path ? path_size : sizeof local);
    return st;
}
