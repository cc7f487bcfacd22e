/* zlua/ds_config.h: a DeepSpeed config read for a C host gives, field by
 * field, what zlua.initialize hands the engine for the same file (captured
 * from a real zlua.initialize in a Lua state) and the values worked out by
 * hand; each refusal has zlua.config's code and its message word for word. */
#include <stdlib.h>
#include <lua.h>
#include <lauxlib.h>
#include "binding.h"
#include "harness.h"
#include "zlua/ds_config.h"
#include "zlua/embed.h"

/* path of a fresh file `name` holding text, in the run's temp folder */
static const char *config_file(char *buf, size_t n, const char *name, const char *text)
{
    zt_tmp_path(buf, n, name);
    zt_write_file(buf, text, strlen(text));
    return buf;
}

/* stage 3, both offloads on NVMe, AdamW, WarmupDecayLR, bf16, an aio block; %s: the temp folder */
static const char *const full_json =
    "{\n"
    "  \"train_batch_size\": 32,\n"
    "  \"train_micro_batch_size_per_gpu\": 4,\n"
    "  \"gradient_clipping\": 0.5,\n"
    "  \"steps_per_print\": 50,\n"
    "  \"bf16\": {\"enabled\": true},\n"
    "  \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.002, \"betas\": [0.8, 0.99], \"eps\": 1e-7,\n"
    "                \"weight_decay\": 0.05}},\n"
    "  \"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": {\"total_num_steps\": 100, \"warmup_num_steps\": 10,\n"
    "                \"warmup_min_lr\": 0.0001, \"warmup_max_lr\": 0.002, \"warmup_type\": \"linear\"}},\n"
    "  \"data_types\": {\"grad_accum_dtype\": \"fp32\"},\n"
    "  \"zero_optimization\": {\n"
    "    \"stage\": 3, \"contiguous_gradients\": false, \"reduce_bucket_size\": 1000,\n"
    "    \"allgather_bucket_size\": 2000,\n"
    "    \"sub_group_size\": 300, \"stage3_prefetch_bucket_size\": 700, \"stage3_param_persistence_threshold\": 20,\n"
    "    \"stage3_max_live_parameters\": 5000, \"stage3_max_reuse_distance\": 6000,\n"
    "    \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"%s/nvme_opt\", \"buffer_count\": 3,\n"
    "                          \"pipeline_read\": true},\n"
    "    \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"%s/nvme_param\", \"buffer_count\": 6,\n"
    "                      \"buffer_size\": 4096, \"max_in_cpu\": 64}\n"
    "  },\n"
    "  \"aio\": {\"block_size\": 262144, \"queue_depth\": 4, \"thread_count\": 2, \"single_submit\": true,\n"
    "          \"overlap_events\": false}\n"
    "}\n";

/* fp16 with its loss scaler's keys, SGD with momentum, OneCycle */
static const char *const fp16_json =
    "{\"train_batch_size\": 8,\n"
    " \"fp16\": {\"enabled\": true, \"loss_scale_window\": 200, \"hysteresis\": 3, \"min_loss_scale\": 0.5,\n"
    "          \"initial_scale_power\": 12},\n"
    " \"optimizer\": {\"type\": \"SGD\", \"params\": {\"lr\": 0.1, \"momentum\": 0.9}},\n"
    " \"scheduler\": {\"type\": \"OneCycle\", \"params\": {\"cycle_min_lr\": 0.01, \"cycle_max_lr\": 0.1}}}\n";

static const char *full_path(char *buf, size_t n)
{
    char text[4096];
    snprintf(text, sizeof text, full_json, zt_tmp_dir(), zt_tmp_dir());
    return config_file(buf, n, "full.json", text);
}

TEST(full_config_by_hand)
{
    char path[512], want[1024];
    full_path(path, sizeof path);
    zlua_ds_config *c;
    CHECK(zlua_ds_config_read(path, 2, &c) == ZL_OK);
    if (!c) return;
    const zl_zero_config *z = zlua_ds_config_zero(c);
    CHECK(z->stage == 3 && z->optimizer == ZL_ZERO_ADAM);
    CHECK(z->dtype == ZL_DTYPE_BF16 && z->grad_accum_dtype == ZL_DTYPE_F32);
    CHECK(z->reduce_bucket_size == 1000 && z->allgather_bucket_size == 2000);
    CHECK(z->overlap_comm && z->reduce_scatter && z->ignore_unused_parameters);
    CHECK(!z->prescale_gradients && z->gradient_predivide_factor == 1.0);
    CHECK(z->prefetch_bucket_size == 700 && z->param_persistence_threshold == 20);
    CHECK(z->model_persistence_threshold == INT64_MAX);
    CHECK(z->max_live_parameters == 5000 && z->max_reuse_distance == 6000 && z->sub_group_size == 300);
    CHECK(z->offload_optimizer.device == ZL_OFFLOAD_NVME && z->offload_param.device == ZL_OFFLOAD_NVME);
    snprintf(want, sizeof want, "%s/nvme_opt", zt_tmp_dir());
    CHECK(z->offload_optimizer.nvme_path && !strcmp(z->offload_optimizer.nvme_path, want));
    snprintf(want, sizeof want, "%s/nvme_param", zt_tmp_dir());
    CHECK(z->offload_param.nvme_path && !strcmp(z->offload_param.nvme_path, want));
    CHECK(z->offload_optimizer.buffer_count == 3 && z->offload_optimizer.pipeline_read);
    CHECK(!z->offload_optimizer.pipeline_write && !z->offload_optimizer.pin_memory);
    CHECK(z->offload_param.buffer_count == 6 && z->offload_param.buffer_size == 4096);
    CHECK(z->offload_param.max_in_cpu == 64);
    CHECK(z->aio.block_size == 262144 && z->aio.queue_depth == 4 && z->aio.intra_op_parallelism == 2);
    CHECK(z->aio.single_submit && !z->aio.overlap_events);

    CHECK(!strcmp(zlua_ds_config_optimizer(c), "AdamW"));
    zl_zero_hparams h = zlua_ds_config_hparams(c);
    CHECK(h.lr == 0.002 && h.beta1 == 0.8 && h.beta2 == 0.99 && h.eps == 1e-7 && h.weight_decay == 0.05);
    CHECK(h.adamw_mode && h.bias_correction);

    zlua_ds_training t = zlua_ds_config_training(c);
    CHECK(t.world_size == 2 && t.train_batch_size == 32 && t.micro_batch == 4);
    CHECK(t.gradient_accumulation_steps == 4);   /* 32 // 4 // 2 */
    CHECK(t.gradient_clipping == 0.5 && t.steps_per_print == 50 && t.bf16 && !t.fp16);

    int64_t start = 0;
    const zl_lr_schedule *s = zlua_ds_config_schedule(c, &start);
    CHECK(s && start == -1);
    if (s) {
        CHECK(s->kind == ZL_LR_WARMUP_DECAY && s->ngroups == 1 && s->groups);
        CHECK(s->total_num_steps == 100 && s->warmup_num_steps == 10 && s->warmup_type == ZL_LR_WARMUP_LINEAR);
        CHECK(s->groups[0].min_lr == 0.0001 && s->groups[0].max_lr == 0.002);
        double lr;
        CHECK(zl_lr_schedule_lr(s, 5, 0, &lr) == ZL_OK);
        CHECK_CLOSE(lr, 0.0001 + (0.002 - 0.0001) * 5 / 10, 1e-15);
    }
    CHECK(zlua_ds_config_warning(c, 0) == NULL);
    const char *note = zlua_ds_config_notice(c, 0);
    CHECK(note && strstr(note, "zero_optimization.contiguous_gradients = false: ignored: ") == note);
    CHECK(zlua_ds_config_notice(c, 1) == NULL && zlua_ds_config_notice(c, -1) == NULL);
    zlua_ds_config_free(c);
    zlua_ds_config_free(NULL);
}

/* What a real zlua.initialize of config_path (world size 1) hands the
 * engine: core.zero_new's config table and first param group, copied as it
 * receives them (the scheduler writes its lr into the group afterwards); the
 * engine itself is built with the offload in host memory, which is not what
 * is compared. */
static const char *const initialize_chunk =
    "local nn = require 'zlua.nn'\n"
    "local real = zl.core.zero_new\n"
    "zl.core.zero_new = function(c, params, groups, inits)\n"
    "  local g = {}\n"
    "  for k, v in pairs(groups[1]) do g[k] = v end\n"
    "  if g.betas then g.betas = { g.betas[1], g.betas[2] } end\n"
    "  captured_config, captured_group = c, g\n"
    "  local copy = {}\n"
    "  for k, v in pairs(c) do copy[k] = v end\n"
    "  copy.offload_optimizer, copy.offload_param = { device = 'none' }, { device = 'none' }\n"
    "  return real(copy, params, groups, inits)\n"
    "end\n"
    "engine = zl.initialize { model = nn.Linear(4, 2), config = config_path }\n"
    "zl.core.zero_new = real\n"
    "schedule = engine.lr_scheduler and engine.lr_scheduler.c\n"
    "start = engine.lr_scheduler and engine.lr_scheduler.last_batch_iteration\n";

typedef struct captured {
    zl_zero_config zero;
    zl_zero_hparams hp;
    const zl_lr_schedule *schedule;   /* borrowed from the state */
    int64_t start, tbs, micro, gas;
    double clip;
} captured;

static int read_captured(lua_State *L)
{
    captured *cap = lua_touserdata(L, 1);
    lua_getglobal(L, "captured_config");
    zlb_zero_config(L, lua_gettop(L), &cap->zero);
    lua_getglobal(L, "captured_group");
    zlb_zero_hparams(L, lua_gettop(L), &cap->hp);
    cap->schedule = lua_getglobal(L, "schedule") == LUA_TNIL ? NULL : zlb_lr_schedule_of(L, -1);
    lua_getglobal(L, "start");
    cap->start = lua_tointeger(L, -1);
    lua_getglobal(L, "engine");
    lua_getfield(L, -1, "train_batch_size");
    lua_getfield(L, -2, "micro_batch_size");
    lua_getfield(L, -3, "gas");
    lua_getfield(L, -4, "clip");
    cap->tbs = lua_tointeger(L, -4);
    cap->micro = lua_tointeger(L, -3);
    cap->gas = lua_tointeger(L, -2);
    cap->clip = lua_tonumber(L, -1);
    return 0;
}

static bool same_string(const char *a, const char *b) { return a == b || (a && b && !strcmp(a, b)); }

static void same_offload(const zl_zero_offload *a, const zl_zero_offload *b)
{
    CHECK(a->device == b->device && same_string(a->nvme_path, b->nvme_path));
    CHECK(a->buffer_count == b->buffer_count && a->buffer_size == b->buffer_size && a->max_in_cpu == b->max_in_cpu);
    CHECK(a->pipeline_read == b->pipeline_read && a->pipeline_write == b->pipeline_write);
    CHECK(a->pin_memory == b->pin_memory);
}

#define SAME(f) CHECK(a->f == b->f)
static void same_zero(const zl_zero_config *a, const zl_zero_config *b)
{
    SAME(stage); SAME(optimizer); SAME(dtype); SAME(grad_accum_dtype); SAME(reduce_bucket_size);
    SAME(allgather_bucket_size); SAME(overlap_comm); SAME(reduce_scatter); SAME(ignore_unused_parameters);
    SAME(prescale_gradients); SAME(gradient_predivide_factor); SAME(prefetch_bucket_size); SAME(max_live_parameters);
    SAME(max_reuse_distance); SAME(param_persistence_threshold); SAME(model_persistence_threshold);
    SAME(use_all_reduce_for_fetch_params); SAME(log_trace_cache_warnings); SAME(sub_group_size);
    SAME(aio.block_size); SAME(aio.queue_depth); SAME(aio.intra_op_parallelism); SAME(aio.single_submit);
    SAME(aio.overlap_events);
    same_offload(&a->offload_optimizer, &b->offload_optimizer);
    same_offload(&a->offload_param, &b->offload_param);
}

static void same_hparams(const zl_zero_hparams *a, const zl_zero_hparams *b)
{
    SAME(lr); SAME(beta1); SAME(beta2); SAME(eps); SAME(weight_decay); SAME(adamw_mode); SAME(bias_correction);
    SAME(max_coeff); SAME(min_coeff); SAME(momentum); SAME(dampening); SAME(nesterov);
}

static void same_schedule(const zl_lr_schedule *a, const zl_lr_schedule *b)
{
    SAME(kind); SAME(ngroups); SAME(warmup_num_steps); SAME(warmup_type); SAME(total_num_steps);
    SAME(warmup_min_ratio); SAME(cos_min_ratio); SAME(cycle_first_step_size); SAME(cycle_second_step_size);
    SAME(cycle_first_stair_count); SAME(cycle_second_stair_count); SAME(decay_step_size); SAME(decay_lr_rate);
    SAME(decay_mom_rate); SAME(cycle_momentum); SAME(lr_range_test_step_size); SAME(lr_range_test_step_rate);
    SAME(lr_range_test_staircase);
    for (int g = 0; g < a->ngroups && a->ngroups == b->ngroups; g++) {
        SAME(groups[g].min_lr); SAME(groups[g].max_lr); SAME(groups[g].base_lr); SAME(groups[g].min_mom);
        SAME(groups[g].max_mom);
    }
}
#undef SAME

/* The reader's result for path against a zlua.initialize of it, field by field. */
static void same_as_initialize(const char *path)
{
    zlua_ds_config *c;
    CHECK(zlua_ds_config_read(path, 1, &c) == ZL_OK);
    zlua_state *st = zlua_open();
    if (!c || !st) return;
    lua_State *L = zlua_lua(st);
    lua_pushstring(L, path);
    lua_setglobal(L, "config_path");
    CHECK(zlua_dostring(st, initialize_chunk, "initialize") == ZL_OK);
    captured cap = {0};
    lua_pushcfunction(L, read_captured);
    lua_pushlightuserdata(L, &cap);
    CHECK(lua_pcall(L, 1, 0, 0) == LUA_OK);
    same_zero(zlua_ds_config_zero(c), &cap.zero);
    zl_zero_hparams hp = zlua_ds_config_hparams(c);
    same_hparams(&hp, &cap.hp);
    int64_t start;
    const zl_lr_schedule *s = zlua_ds_config_schedule(c, &start);
    CHECK((s == NULL) == (cap.schedule == NULL));
    if (s && cap.schedule) {
        same_schedule(s, cap.schedule);
        CHECK(start == cap.start);
    }
    zlua_ds_training t = zlua_ds_config_training(c);
    CHECK(t.train_batch_size == cap.tbs && t.micro_batch == cap.micro);
    CHECK(t.gradient_accumulation_steps == cap.gas && t.gradient_clipping == cap.clip);
    zlua_close(st);
    zlua_ds_config_free(c);
}

TEST(full_config_as_initialize)
{
    char path[512];
    same_as_initialize(full_path(path, sizeof path));
}

TEST(fp16_sgd_one_cycle)
{
    char path[512];
    config_file(path, sizeof path, "fp16.json", fp16_json);
    zlua_ds_config *c;
    CHECK(zlua_ds_config_read(path, 1, &c) == ZL_OK);
    if (!c) return;
    zlua_ds_training t = zlua_ds_config_training(c);
    CHECK(t.fp16 && !t.bf16 && zlua_ds_config_zero(c)->dtype == ZL_DTYPE_F16);
    CHECK(t.loss_scaler.loss_scale == 0 && t.loss_scaler.initial_scale_power == 12);
    CHECK(t.loss_scaler.loss_scale_window == 200 && t.loss_scaler.hysteresis == 3);
    CHECK(t.loss_scaler.min_loss_scale == 0.5 && !t.loss_scaler.consecutive_hysteresis);
    CHECK(t.micro_batch == 8 && t.gradient_accumulation_steps == 1 && t.steps_per_print == 0);
    CHECK(!strcmp(zlua_ds_config_optimizer(c), "SGD") && zlua_ds_config_zero(c)->optimizer == ZL_ZERO_SGD);
    zl_zero_hparams h = zlua_ds_config_hparams(c);
    CHECK(h.lr == 0.1 && h.momentum == 0.9 && h.dampening == 0 && !h.nesterov && h.weight_decay == 0);
    const zl_lr_schedule *s = zlua_ds_config_schedule(c, NULL);
    CHECK(s && s->kind == ZL_LR_ONE_CYCLE);
    /* SGD has no betas to cycle; the second half defaults to the first */
    if (s) CHECK(!s->cycle_momentum && s->cycle_second_step_size == s->cycle_first_step_size);
    zlua_ds_config_free(c);
    same_as_initialize(path);
}

TEST(no_optimizer_no_scheduler)
{
    char path[512];
    config_file(path, sizeof path, "bare.json", "{\"train_micro_batch_size_per_gpu\": 2}");
    zlua_ds_config *c;
    CHECK(zlua_ds_config_read(path, 3, &c) == ZL_OK);
    if (!c) return;
    CHECK(zlua_ds_config_optimizer(c) == NULL);
    zl_zero_hparams h = zlua_ds_config_hparams(c), d = zl_zero_hparams_defaults();
    CHECK(h.lr == d.lr && h.eps == d.eps);
    int64_t start = 7;
    CHECK(zlua_ds_config_schedule(c, &start) == NULL && start == -1);
    zlua_ds_training t = zlua_ds_config_training(c);
    CHECK(t.train_batch_size == 6 && t.world_size == 3 && t.gradient_clipping == 0);
    const zl_zero_config *z = zlua_ds_config_zero(c), dz = zl_zero_config_defaults();
    CHECK(z->stage == 0 && z->dtype == ZL_DTYPE_F32 && z->reduce_bucket_size == dz.reduce_bucket_size);
    CHECK(z->offload_optimizer.device == ZL_OFFLOAD_NONE && z->offload_optimizer.nvme_path == NULL);
    zlua_ds_config_free(c);
}

/* config.load(path) called from C, as the reader calls it: with no script
 * line on the stack, zlua.config's message has no position of the caller's. */
static int load_config(lua_State *L)
{
    lua_getglobal(L, "require");
    lua_pushliteral(L, "zlua.config");
    lua_call(L, 1, 1);
    lua_getfield(L, -1, "load");
    lua_pushvalue(L, 1);
    lua_call(L, 1, 1);
    return 1;
}

/* The reader refuses path with `code` and zlua.config.load's own message. */
static void refused(const char *path, zl_status code, const char *needle)
{
    zlua_ds_config *c = (zlua_ds_config *)&c;
    zl_clear_error();
    CHECK(zlua_ds_config_read(path, 1, &c) == code);
    CHECK(c == NULL);
    char got[2048];
    snprintf(got, sizeof got, "%s", zl_last_error());
    if (!strstr(got, needle)) zt_fail(__FILE__, __LINE__, "expected \"%s\" in \"%s\"", needle, got);
    zlua_state *st = zlua_open();
    if (!st) return;
    lua_State *L = zlua_lua(st);
    lua_pushcfunction(L, load_config);
    lua_pushstring(L, path);
    CHECK(lua_pcall(L, 1, 1, 0) != LUA_OK);
    const char *lua_msg = lua_tostring(L, -1);
    if (!lua_msg || strcmp(lua_msg, got)) zt_fail(__FILE__, __LINE__, "zlua.config says \"%s\", the reader \"%s\"",
                                                  lua_msg ? lua_msg : "(nothing)", got);
    zlua_close(st);
}

/* A config zlua.config accepts and zlua.initialize refuses later (the engine
 * checks it as it builds its parts): the reader refuses it with ZL_EINVAL. */
static void refused_after_checks(const char *name, const char *text, const char *needle)
{
    char path[512];
    config_file(path, sizeof path, name, text);
    zlua_ds_config *c;
    CHECK_ERR(zlua_ds_config_read(path, 1, &c), needle);
    CHECK(zlua_ds_config_read(path, 1, &c) == ZL_EINVAL && c == NULL);
}

/* A schedule needs an optimizer's groups. */
TEST(scheduler_without_optimizer)
{
    refused_after_checks("sched.json", "{\"train_batch_size\": 8, \"scheduler\": {\"type\": \"WarmupLR\"}}",
                         "the config has a scheduler but no optimizer");
}

/* The fp16 loss scaler's range is the engine's to check. */
TEST(engine_check_of_the_loss_scaler)
{
    refused_after_checks("scale.json",
                         "{\"train_batch_size\": 8, \"fp16\": {\"enabled\": true, \"initial_scale_power\": 200}}",
                         "initial_scale_power");
}

/* A config file `name` holding text is refused with `code` and a message
 * that begins with its path and goes on with `after_path`. */
static void refused_text(const char *name, const char *text, zl_status code, const char *after_path)
{
    char path[512], want[1024];
    config_file(path, sizeof path, name, text);
    snprintf(want, sizeof want, "%s%s", path, after_path);
    refused(path, code, want);
}

TEST(unknown_key_names_the_nearest)
{
    refused_text("typo.json", "{\"train_batch_size\": 8,\n \"zero_optimization\": {\"stage\": 2,\n  \"stgae\": 3}}\n",
                 ZL_EINVAL, ":3: unknown key zero_optimization.stgae (did you mean zero_optimization.stage?)");
}

TEST(top_level_typo_is_a_warning)
{
    char path[512], want[1024];
    config_file(path, sizeof path, "top.json", "{\"train_batch_size\": 8,\n \"zero_optimisation\": {\"stage\": 2}}\n");
    zlua_ds_config *c;
    CHECK(zlua_ds_config_read(path, 1, &c) == ZL_OK);
    if (!c) return;
    snprintf(want, sizeof want, "%s:2: unknown key zero_optimisation ignored (did you mean zero_optimization?)", path);
    CHECK(zlua_ds_config_warning(c, 0) && !strcmp(zlua_ds_config_warning(c, 0), want));
    CHECK(zlua_ds_config_warning(c, 1) == NULL);
    CHECK(zlua_ds_config_zero(c)->stage == 0);
    zlua_ds_config_free(c);
}

TEST(bad_value_type)
{
    refused_text("type.json", "{\"train_batch_size\": 8,\n \"gradient_clipping\": \"1.0\"}\n", ZL_EINVAL,
                 ":2: gradient_clipping must be a finite number, got \"1.0\"");
}

TEST(auto_without_arguments)
{
    refused_text("auto.json", "{\"train_micro_batch_size_per_gpu\": \"auto\"}\n", ZL_EINVAL,
                 ": train_micro_batch_size_per_gpu is \"auto\" and args.per_device_train_batch_size, which fills it, "
                 "was not given");
}

TEST(unimplemented_key)
{
    refused_text("cdt.json", "{\"train_batch_size\": 8, \"communication_data_type\": \"bf16\"}", ZL_EINVAL,
                 ":1: communication_data_type = \"bf16\": gradient collectives in fp16 or bf16");
}

TEST(missing_file_and_folder)
{
    char path[512], want[1024];
    zt_tmp_path(path, sizeof path, "absent.json");
    snprintf(want, sizeof want, "config: cannot read %s: No such file or directory", path);
    refused(path, ZL_EIO, want);
    refused(zt_tmp_dir(), ZL_EIO, zt_tmp_dir());
}

TEST(malformed_json)
{
    refused_text("bad.json", "{\"train_batch_size\": 8,\n \"fp16\": {\"enabled\": tru}}\n", ZL_EFORMAT,
                 ":2:22: expected a value");
}

TEST(bad_arguments)
{
    zlua_ds_config *c;
    CHECK(zlua_ds_config_read(NULL, 1, &c) == ZL_EINVAL && c == NULL);
    CHECK_ERR(zlua_ds_config_read(NULL, 1, &c), "zlua_ds_config_read: path is NULL");
    CHECK_ERR(zlua_ds_config_read("x.json", 1, NULL), "zlua_ds_config_read: out is NULL");
    CHECK_ERR(zlua_ds_config_read("x.json", 0, &c), "world_size must be at least 1, got 0");
}

/* The private state's context and thread count never reach the caller. */
TEST(caller_context_kept)
{
    char path[512];
    full_path(path, sizeof path);
    zl_context *mine = zl_context_new(), *before = zl_context_set_current(mine);
    zl_set_num_threads(1);
    zlua_ds_config *c;
    CHECK(zlua_ds_config_read(path, 1, &c) == ZL_OK);
    CHECK(zl_context_current() == mine && zl_get_num_threads() == 1);
    zlua_ds_config_free(c);
    CHECK(zlua_ds_config_read("/nonexistent/ds.json", 1, &c) == ZL_EIO);
    CHECK(zl_context_current() == mine && zl_get_num_threads() == 1);
    zl_context_set_current(before);
    zl_context_free(mine);
}
