/* Private to engine/zero: a checkpoint's engine.json as the engine reads and
 * checks it (ckpt_state.c), shared by the save's read-back (ckpt_save.c) and
 * the load (ckpt_load.c). */
#ifndef ZL_ZERO_CKPT_H
#define ZL_ZERO_CKPT_H

#include "../io/json.h"
#include "zero_impl.h"

#define ZZ_CKPT_FORMAT "zlua-checkpoint-2"
/* A tag's folder name plus its temporary's (".TAG.tmp-PID") stay within NAME_MAX. */
#define ZZ_TAG_MAX 200
#define ZZ_LATEST_MAX 1024
#define ZZ_ENGINE_JSON_MAX ((size_t)64 << 20)
#define ZZ_JSON_DEPTH 200
/* The largest count engine.json may hold: a product of counts stays exact. */
#define ZZ_COUNT_MAX ((int64_t)1 << 53)

/* One trained parameter as engine.json's optimizer.zero.params lists it. */
typedef struct zz_saved {
    const char *name;
    int64_t numel, k, step;   /* step: optimizer.state.<i>.step, 0 without state */
    int group;                /* 0-based */
} zz_saved;

/* engine.json, read and checked field by field: the parts the engine owns
 * (format, tag, counters, world size, precision, rng, optimizer, manifest);
 * the rest (the host's own members) is the host's to check. */
typedef struct zz_ckpt {
    char *path;               /* the checkpoint's folder */
    char *file;               /* its engine.json, for messages */
    char *text;               /* engine.json's bytes */
    size_t len;
    zli_json *root;
    zl_zero_counts counts;
    int64_t world_size;
    int nrng;
    uint64_t *seed, *offset;  /* [nrng] */
    bool has_optimizer;
    const char *optimizer;    /* optimizer.type */
    const zli_json *groups;   /* optimizer.param_groups */
    int stage, partitions, nparams, nkeys;
    zz_saved *params;
    char **keys;              /* optimizer.tensor_keys */
} zz_ckpt;

/* The tag rules of a folder inside DIR that `latest` gives back unchanged;
 * `op` and `from` (NULL: the argument) begin the message. */
ZZ_HIDDEN zl_status zz_check_tag(const char *tag, const char *op, const char *from);
/* Read PATH/engine.json (bounded, a regular file), check its CRC-32 and
 * every field the engine owns; with check_files, every file against the
 * manifest. Errors name the file and the key. *out to free with zz_ckpt_free. */
ZZ_HIDDEN zl_status zz_ckpt_open(const char *path, bool check_files, zz_ckpt **out);
ZZ_HIDDEN void zz_ckpt_free(zz_ckpt *c);

#endif
