/* libFuzzer target for the checkpoint reader's checks (engine/zero/
 * ckpt_state.c through zl_zero_ckpt_open, what load_checkpoint and
 * zero_to_fp32 run before anything is read or changed): the input is
 * engine.json, in a folder that also holds its right CRC-32 (so that inputs
 * get past that check) and small files standing for the model and four
 * optimizer shards. The open must take the folder or fail with
 * "load_checkpoint: ..." naming a file of it; never a crash or a Lua error. */
#include <stdio.h>
#include <sys/stat.h>
#include <string.h>
#include <zlib.h>
#include "fuzz.h"
#include "fuzz_lua.h"

/* The files the manifest lists, and their contents: tests/fuzz/make_corpus.py
 * writes the seeds' manifests with these bytes' sizes and CRC-32s. */
static const char *const files[][2] = {
    {"model.safetensors", "zlua fuzz: model\n"},
    {"optim_rank0.safetensors", "zlua fuzz: optimizer shard 0\n"},
    {"optim_rank1.safetensors", "zlua fuzz: optimizer shard 1\n"},
    {"optim_rank2.safetensors", "zlua fuzz: optimizer shard 2\n"},
    {"optim_rank3.safetensors", "zlua fuzz: optimizer shard 3\n"},
};

static const char harness[] =
    "local zl = require 'zlua'\n"
    "local dir = ...\n"
    "local parent, tag = dir:match('^(.*)/([^/]+)$')\n"
    "return function()\n"
    "  local ok, err = pcall(zl.core.zero_ckpt_open, nil, parent, { tag = tag })\n"
    "  if ok then if err then err:close() end return end\n"
    "  -- the binding places the message at the caller's line: this chunk's.\n"
    "  local msg = tostring(err):gsub('^fuzz_manifest:%d+: ', '', 1)\n"
    "  if not msg:find('^load_checkpoint: ') or not msg:find(dir, 1, true) then\n"
    "    error('the checkpoint reader failed without naming a file of the checkpoint: ' .. msg, 0)\n"
    "  end\n"
    "end\n";

static const char *dir;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    /* The checkpoint is the folder "ck" of the process's own, so that the open
     * looks (and sweeps) only there. */
    static char ck[4096];
    snprintf(ck, sizeof ck, "%s/ck", fuzz_dir());
    if (mkdir(ck, 0700) != 0) fuzz_die("cannot make %s", ck);
    dir = ck;
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
        fuzz_write(dir, files[i][0], files[i][1], strlen(files[i][1]));
    fuzz_lua_open("=fuzz_manifest", harness, dir);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char crc[32];
    int n = snprintf(crc, sizeof crc, "%lu\n", crc32(crc32(0L, Z_NULL, 0), data, (uInt)size));
    fuzz_write(dir, "engine.json", data, size);
    fuzz_write(dir, "engine.json.crc32", crc, (size_t)n);
    fuzz_lua_run(data, size);
    return 0;
}
