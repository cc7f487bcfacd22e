/* The DeepSpeed config file for embed_zero, read with cJSON into the engine's
 * zl_zero_config and the few training settings the example uses. Keys this
 * reader does not handle are refused by name: nothing is silently ignored
 * (the Lua engine, zlua.config, reads every DeepSpeed key). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>
#include "config.h"

typedef struct reader {
    const char *file;
    char *err;
    size_t errn;
    bool failed;
} reader;

static void fail(reader *r, const char *fmt, const char *key, const char *what)
{
    if (r->failed) return;
    r->failed = true;
    char msg[512];
    snprintf(msg, sizeof msg, fmt, key, what);
    snprintf(r->err, r->errn, "%s: %s", r->file, msg);
}

/* Every key of obj must be in `known` (NULL-terminated). */
static void only(reader *r, const cJSON *obj, const char *where, const char *const *known)
{
    for (const cJSON *it = obj ? obj->child : NULL; it; it = it->next) {
        bool ok = false;
        for (int i = 0; known[i] && !ok; i++) ok = !strcmp(it->string, known[i]);
        if (!ok) {
            char key[256];
            snprintf(key, sizeof key, "%s%s", where, it->string);
            fail(r, "%s is not supported by this example%s", key,
                 " (zlua train.lua reads every DeepSpeed key)");
        }
    }
}

/* obj's `key` when present and of the kind `ok` accepts, else NULL (a wrong
 * kind fails naming the key and `kind`). */
static const cJSON *item(reader *r, const cJSON *obj, const char *where, const char *key,
                         cJSON_bool (*ok)(const cJSON *), const char *kind)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (v && !ok(v)) {
        char k[256];
        snprintf(k, sizeof k, "%s%s", where, key);
        fail(r, "%s must be %s", k, kind);
        return NULL;
    }
    return v;
}

static double num(reader *r, const cJSON *obj, const char *where, const char *key, double def)
{
    const cJSON *v = item(r, obj, where, key, cJSON_IsNumber, "a number");
    return v ? v->valuedouble : def;
}

static int64_t integer(reader *r, const cJSON *obj, const char *where, const char *key, int64_t def)
{
    const cJSON *v = item(r, obj, where, key, cJSON_IsNumber, "a number");
    if (!v) return def;
    double d = v->valuedouble;
    if (d != floor(d) || d < 0 || d > 9.0e18) {
        char k[256];
        snprintf(k, sizeof k, "%s%s", where, key);
        fail(r, "%s must be %s", k, "a whole number >= 0");
        return def;
    }
    return (int64_t)d;
}

static bool boolean(reader *r, const cJSON *obj, const char *where, const char *key, bool def)
{
    const cJSON *v = item(r, obj, where, key, cJSON_IsBool, "true or false");
    return v ? cJSON_IsTrue(v) : def;
}

static const char *string(reader *r, const cJSON *obj, const char *where, const char *key, const char *def)
{
    const cJSON *v = item(r, obj, where, key, cJSON_IsString, "a string");
    return v ? v->valuestring : def;
}

static void offload(reader *r, const cJSON *obj, const char *where, bool param, zl_zero_offload *o, char *path,
                    size_t pathn)
{
    static const char *const keys_opt[] = {"device", "nvme_path", "buffer_count", "pin_memory", "pipeline_read",
                                           "pipeline_write", "fast_init", NULL};
    static const char *const keys_param[] = {"device", "nvme_path", "buffer_count", "buffer_size", "max_in_cpu",
                                             "pin_memory", NULL};
    if (!obj) return;
    only(r, obj, where, param ? keys_param : keys_opt);
    const char *dev = string(r, obj, where, "device", "none");
    if (!strcmp(dev, "none")) o->device = ZL_OFFLOAD_NONE;
    else if (!strcmp(dev, "cpu")) o->device = ZL_OFFLOAD_CPU;
    else if (!strcmp(dev, "nvme")) o->device = ZL_OFFLOAD_NVME;
    else fail(r, "%sdevice must be \"none\", \"cpu\" or \"nvme\"%s", where, "");
    const char *p = string(r, obj, where, "nvme_path", NULL);
    if (p) {
        snprintf(path, pathn, "%s", p);
        o->nvme_path = path;
    }
    o->buffer_count = (int)integer(r, obj, where, "buffer_count", o->buffer_count);
    o->pin_memory = boolean(r, obj, where, "pin_memory", o->pin_memory);
    if (param) {
        o->buffer_size = integer(r, obj, where, "buffer_size", o->buffer_size);
        o->max_in_cpu = integer(r, obj, where, "max_in_cpu", o->max_in_cpu);
    } else {
        o->pipeline_read = boolean(r, obj, where, "pipeline_read", o->pipeline_read);
        o->pipeline_write = boolean(r, obj, where, "pipeline_write", o->pipeline_write);
        (void)boolean(r, obj, where, "fast_init", false);
    }
}

static void zero_section(reader *r, const cJSON *zo, example_config *c)
{
    static const char *const keys[] = {
        "stage", "reduce_bucket_size", "allgather_bucket_size", "overlap_comm", "reduce_scatter",
        "contiguous_gradients", "allgather_partitions", "sub_group_size", "stage3_prefetch_bucket_size",
        "stage3_param_persistence_threshold", "stage3_model_persistence_threshold", "stage3_max_live_parameters",
        "stage3_max_reuse_distance", "offload_optimizer", "offload_param", "ignore_unused_parameters", NULL};
    zl_zero_config *z = &c->zero;
    if (!zo) return;
    const char *w = "zero_optimization.";
    only(r, zo, w, keys);
    z->stage = (int)integer(r, zo, w, "stage", 0);
    if (z->stage > 3) fail(r, "%sstage must be 0..3%s", w, "");
    z->reduce_bucket_size = integer(r, zo, w, "reduce_bucket_size", z->reduce_bucket_size);
    z->allgather_bucket_size = integer(r, zo, w, "allgather_bucket_size", z->allgather_bucket_size);
    z->overlap_comm = boolean(r, zo, w, "overlap_comm", z->stage == 3);
    z->reduce_scatter = boolean(r, zo, w, "reduce_scatter", z->reduce_scatter);
    z->ignore_unused_parameters = boolean(r, zo, w, "ignore_unused_parameters", z->ignore_unused_parameters);
    /* Gradients are always laid out contiguously and partitions always all-gathered here. */
    (void)boolean(r, zo, w, "contiguous_gradients", true);
    (void)boolean(r, zo, w, "allgather_partitions", true);
    z->sub_group_size = integer(r, zo, w, "sub_group_size", z->sub_group_size);
    z->prefetch_bucket_size = integer(r, zo, w, "stage3_prefetch_bucket_size", z->prefetch_bucket_size);
    z->param_persistence_threshold = integer(r, zo, w, "stage3_param_persistence_threshold",
                                             z->param_persistence_threshold);
    z->model_persistence_threshold = integer(r, zo, w, "stage3_model_persistence_threshold",
                                             z->model_persistence_threshold);
    z->max_live_parameters = integer(r, zo, w, "stage3_max_live_parameters", z->max_live_parameters);
    z->max_reuse_distance = integer(r, zo, w, "stage3_max_reuse_distance", z->max_reuse_distance);
    offload(r, cJSON_GetObjectItemCaseSensitive(zo, "offload_optimizer"), "zero_optimization.offload_optimizer.",
            false, &z->offload_optimizer, c->nvme_opt, sizeof c->nvme_opt);
    offload(r, cJSON_GetObjectItemCaseSensitive(zo, "offload_param"), "zero_optimization.offload_param.", true,
            &z->offload_param, c->nvme_param, sizeof c->nvme_param);
}

static void optimizer_section(reader *r, const cJSON *o, example_config *c)
{
    static const char *const keys[] = {"type", "params", NULL};
    static const char *const pkeys[] = {"lr", "betas", "eps", "weight_decay", "momentum", NULL};
    if (!o) {
        fail(r, "%s is needed: the example trains with the optimizer it names%s", "optimizer", "");
        return;
    }
    only(r, o, "optimizer.", keys);
    const char *type = string(r, o, "optimizer.", "type", "");
    zl_zero_hparams *h = &c->hp;
    *h = zl_zero_hparams_defaults();
    if (!strcmp(type, "Adam") || !strcmp(type, "AdamW")) c->zero.optimizer = ZL_ZERO_ADAM;
    else if (!strcmp(type, "SGD")) c->zero.optimizer = ZL_ZERO_SGD;
    else fail(r, "optimizer.type must be Adam, AdamW or SGD here, got \"%s\"%s", type, "");
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "params");
    const char *w = "optimizer.params.";
    only(r, p, w, pkeys);
    h->lr = num(r, p, w, "lr", h->lr);
    h->eps = num(r, p, w, "eps", h->eps);
    h->weight_decay = num(r, p, w, "weight_decay", 0.0);
    h->momentum = num(r, p, w, "momentum", 0.0);
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(p, "betas");
    if (b) {
        if (!cJSON_IsArray(b) || cJSON_GetArraySize(b) != 2 || !cJSON_IsNumber(cJSON_GetArrayItem(b, 0)) ||
            !cJSON_IsNumber(cJSON_GetArrayItem(b, 1)))
            fail(r, "%sbetas must be a list of two numbers%s", w, "");
        else {
            h->beta1 = cJSON_GetArrayItem(b, 0)->valuedouble;
            h->beta2 = cJSON_GetArrayItem(b, 1)->valuedouble;
        }
    }
}

int example_config_load(const char *path, int world, example_config *c, char *err, size_t errn)
{
    reader r = {.file = path, .err = err, .errn = errn};
    memset(c, 0, sizeof *c);
    c->zero = zl_zero_config_defaults();
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errn, "%s: cannot open the config", path);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = size >= 0 && size < (1 << 24) ? malloc((size_t)size + 1) : NULL;
    if (!text || fread(text, 1, (size_t)size, f) != (size_t)size) {
        fclose(f);
        free(text);
        snprintf(err, errn, "%s: cannot read the config (at most 16 MiB)", path);
        return 1;
    }
    fclose(f);
    text[size] = 0;
    cJSON *root = cJSON_Parse(text);
    if (!root || !cJSON_IsObject(root)) {
        const char *at = cJSON_GetErrorPtr();
        snprintf(err, errn, "%s: not a JSON object (near byte %ld)", path, at && root == NULL ? (long)(at - text) : 0L);
        cJSON_Delete(root);
        free(text);
        return 1;
    }
    static const char *const keys[] = {"train_batch_size", "train_micro_batch_size_per_gpu",
                                       "gradient_accumulation_steps", "gradient_clipping", "optimizer",
                                       "zero_optimization", "aio", "fp16", "bf16", "steps_per_print",
                                       "wall_clock_breakdown", NULL};
    only(&r, root, "", keys);
    int64_t tb = integer(&r, root, "", "train_batch_size", 0);
    int64_t mb = integer(&r, root, "", "train_micro_batch_size_per_gpu", 0);
    int64_t gas = integer(&r, root, "", "gradient_accumulation_steps", 0);
    /* DeepSpeed's batch triple: any two give the third. */
    if (mb && gas && !tb) tb = mb * gas * world;
    if (tb && mb && !gas) gas = tb / (mb * world);
    if (tb && gas && !mb) mb = tb / (gas * world);
    if (tb && !mb && !gas) { gas = 1; mb = tb / world; }
    if (!gas) gas = 1;
    if (!r.failed && (mb <= 0 || tb != mb * gas * world))
        fail(&r, "%s must equal train_micro_batch_size_per_gpu x gradient_accumulation_steps x world size%s",
             "train_batch_size", "");
    c->micro_batch = mb;
    c->gas = gas;
    c->clip = num(&r, root, "", "gradient_clipping", 0.0);
    (void)integer(&r, root, "", "steps_per_print", 10);          /* the example prints every step */
    (void)boolean(&r, root, "", "wall_clock_breakdown", false);
    for (int i = 0; i < 2; i++) {
        const char *sec = i ? "bf16" : "fp16";
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(root, sec);
        static const char *const ek[] = {"enabled", NULL};
        char w[16];
        snprintf(w, sizeof w, "%s.", sec);
        only(&r, s, w, ek);
        if (boolean(&r, s, w, "enabled", false)) fail(&r, "%s.enabled: the example trains in f32%s", sec, "");
    }
    optimizer_section(&r, cJSON_GetObjectItemCaseSensitive(root, "optimizer"), c);
    zero_section(&r, cJSON_GetObjectItemCaseSensitive(root, "zero_optimization"), c);
    const cJSON *aio = cJSON_GetObjectItemCaseSensitive(root, "aio");
    static const char *const akeys[] = {"block_size", "queue_depth", "thread_count", "intra_op_parallelism",
                                        "single_submit", "overlap_events", NULL};
    only(&r, aio, "aio.", akeys);
    zl_aio_config *a = &c->zero.aio;
    a->block_size = integer(&r, aio, "aio.", "block_size", a->block_size);
    a->queue_depth = (int)integer(&r, aio, "aio.", "queue_depth", a->queue_depth);
    a->intra_op_parallelism = (int)integer(&r, aio, "aio.", "thread_count", a->intra_op_parallelism);
    a->intra_op_parallelism = (int)integer(&r, aio, "aio.", "intra_op_parallelism", a->intra_op_parallelism);
    a->single_submit = boolean(&r, aio, "aio.", "single_submit", a->single_submit);
    a->overlap_events = boolean(&r, aio, "aio.", "overlap_events", a->overlap_events);
    cJSON_Delete(root);
    free(text);
    return r.failed;
}
