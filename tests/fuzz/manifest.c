/* libFuzzer target for the checkpoint reader's checks (lua/zlua/engine/
 * verify.lua, verify.open: what load_checkpoint and zero_to_fp32 run before
 * anything is read or changed): the input is engine.json, in a folder that
 * also holds its right CRC-32 (so that inputs get past that check) and small
 * files standing for the model and four optimizer shards. verify.open must
 * take the folder or fail with "load_checkpoint: ..." naming a file of it;
 * never a Lua error from inside the checks. */
#include <stdio.h>
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
    "local verify = require 'zlua.engine.verify'\n"
    "local dir = ...\n"
    "return function()\n"
    "  local ok, err = pcall(verify.open, dir)\n"
    "  if ok then return end\n"
    "  -- zl.raise places the message at the caller's line: this chunk's.\n"
    "  local msg = tostring(err):gsub('^fuzz_manifest:%d+: ', '', 1)\n"
    "  if not msg:find('^load_checkpoint: ') or not msg:find(dir, 1, true) then\n"
    "    error('verify.open failed without naming a file of the checkpoint: ' .. tostring(err), 0)\n"
    "  end\n"
    "end\n";

static const char *dir;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    dir = fuzz_dir();
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
