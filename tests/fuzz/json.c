/* libFuzzer target for zlua.json's decoder (lua/zlua/json.lua), which reads
 * every DeepSpeed config and a checkpoint's engine.json. Any bytes either
 * decode, and then encode (compact and indented) to text that decodes to the
 * same value, or fail with "fuzz:<line>:<column>: ..." (the decoder's own
 * message, not a Lua error from inside it). */
#include "fuzz_lua.h"

static const char harness[] =
    "local json = require 'zlua.json'\n"
    "local mtype = math.type\n"
    "-- a and b the same JSON value: types (integer and float apart), -0.0, arrays and objects.\n"
    "local function same(a, b)\n"
    "  if type(a) ~= type(b) then return false end\n"
    "  if type(a) == 'number' then\n"
    "    return mtype(a) == mtype(b) and a == b and (a ~= 0 or 1 / a == 1 / b)\n"
    "  end\n"
    "  if type(a) ~= 'table' or a == json.null or b == json.null then return a == b end\n"
    "  if getmetatable(a) ~= getmetatable(b) then return false end\n"
    "  for k, v in pairs(a) do if not same(v, b[k]) then return false end end\n"
    "  for k in pairs(b) do if a[k] == nil then return false end end\n"
    "  return true\n"
    "end\n"
    "return function(text)\n"
    "  local ok, v = pcall(json.decode, text, 'fuzz')\n"
    "  if not ok then\n"
    "    if type(v) ~= 'string' or not v:find('^fuzz:%d+:%d+: ') then\n"
    "      error('json.decode failed without its own message: ' .. tostring(v), 0)\n"
    "    end\n"
    "    return\n"
    "  end\n"
    "  for _, indent in ipairs({ false, 2 }) do\n"
    "    local ok2, t = pcall(json.encode, v, indent or nil)\n"
    "    if not ok2 then error('json.encode refused what json.decode gave: ' .. tostring(t), 0) end\n"
    "    local back = json.decode(t, 'encoded')\n"
    "    if not same(v, back) then error('encode then decode changed the value: ' .. t, 0) end\n"
    "  end\n"
    "end\n";

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    fuzz_lua_open("=fuzz_json", harness, NULL);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_lua_run(data, size);
    return 0;
}
