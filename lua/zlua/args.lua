--[[ zlua.args: a training script's command line, the way DeepSpeed scripts take theirs
  (argparse plus deepspeed.add_config_arguments). Pure Lua.

  local args = require('zlua.args').parse(arg, { lr = 1e-3, epochs = 10, out = 'ckpt',
                                                 resume = false })

  args.parse(argv, defaults) -> a table of options (argv defaults to the global arg, defaults
  is optional: see below). It reads:
    --deepspeed_config FILE, --config FILE   both set args.deepspeed_config and args.config
                                             (--deepscale_config, DeepSpeed's old name, too)
    --deepspeed                              args.deepspeed = true (also --deepscale)
    --local_rank N                           checked and dropped: ranks come from the launcher
    --name value, --name=value               the script's options; a '-' in a name becomes '_'
                                             (--learning-rate sets learning_rate), as argparse
    --flag                                   true
    --                                       ends the options
    anything else                            positional: args[1], args[2], ...
  With defaults, only the options it names (and the ones above) are accepted, each takes the
  type of its default (boolean: a flag, which also takes --flag=true/false; integer; float:
  any number; string) and missing ones keep their default. Without defaults any option is
  accepted: it takes the next argument as its value unless that is an option, and a value
  that reads as a number becomes one. An option that needs a value and has none, a value of
  the wrong type and an unknown option are errors naming the option.
]]

local zl = require 'zlua'
local nearest = require 'zlua.util.nearest'

local fmt = string.format
local raise = zl.raise

local args = {}

-- DeepSpeed's own options: the key they set and what their value is.
local CONFIG_KEYS = { deepspeed_config = true, config = true, deepscale_config = true }
local FLAG_KEYS = { deepspeed = 'deepspeed', deepscale = 'deepspeed' }

local function kind_of(default)
  if type(default) == 'boolean' then return 'flag' end
  local t = math.type(default)
  if t == 'integer' then return 'integer' end
  if t == 'float' then return 'number' end
  if type(default) == 'string' then return 'string' end
  return nil
end

local function is_option(a)
  return a:sub(1, 2) == '--' and #a > 2
end

-- Negative numbers are values, not options.
local function is_value(a)
  return type(a) == 'string' and (not a:find('^%-') or tonumber(a) ~= nil)
end

local function convert(name, kind, text)
  if kind == 'string' then return text end
  if kind == 'flag' then
    if text == 'true' then return true end
    if text == 'false' then return false end
    raise(fmt('zlua.args: option --%s is a flag: write --%s or --%s=true/false, got %q', name,
      name, name, text))
  end
  local v = tonumber(text)
  if kind == 'integer' then v = v and math.tointeger(v) end
  if v == nil then
    raise(fmt('zlua.args: option --%s expects %s, got %q', name,
      kind == 'integer' and 'an integer' or 'a number', text))
  end
  return v
end

function args.parse(argv, defaults)
  argv = argv or _G.arg or {}
  if type(argv) ~= 'table' then
    raise('zlua.args: parse expects the argument list (a table), got ' .. type(argv))
  end
  if defaults ~= nil and type(defaults) ~= 'table' then
    raise('zlua.args: defaults must be a table of option = default, got ' .. type(defaults))
  end
  local out, kinds, names = {}, {}, {}
  for name, default in pairs(defaults or {}) do
    local kind = kind_of(default)
    if type(name) ~= 'string' or not kind then
      raise(fmt('zlua.args: default for %s must be a boolean, number or string, got %s',
        tostring(name), type(default)))
    end
    kinds[name] = kind
    out[name] = default
    names[#names + 1] = name
  end
  table.sort(names)

  local i, npos = 1, 0
  local function take_value(name, what)
    local v = argv[i + 1]
    if not is_value(v) then
      raise(fmt('zlua.args: option --%s needs a value (%s)%s', name, what,
        v == nil and '' or fmt(', got %s', v)))
    end
    i = i + 1
    return v
  end

  while argv[i] ~= nil do
    local a = argv[i]
    if type(a) ~= 'string' then
      raise(fmt('zlua.args: argument %d must be a string, got %s', i, type(a)))
    end
    if a == '--' then
      for j = i + 1, #argv do
        npos = npos + 1
        out[npos] = argv[j]
      end
      break
    elseif is_option(a) then
      local name, value = a:match('^%-%-([^=]+)=(.*)$')
      name = (name or a:sub(3)):gsub('%-', '_')
      if CONFIG_KEYS[name] then
        value = value or take_value(name, 'a config file')
        out.deepspeed_config, out.config = value, value
      elseif FLAG_KEYS[name] then
        out[FLAG_KEYS[name]] = value == nil or convert(name, 'flag', value)
      elseif name == 'local_rank' then
        value = value or take_value(name, 'a rank')
        if not math.tointeger(tonumber(value)) then
          raise(fmt('zlua.args: option --local_rank expects an integer, got %q', value))
        end
      elseif defaults then
        local kind = kinds[name]
        if not kind then
          local hint = nearest.find(name, names)
          raise(fmt('zlua.args: unknown option --%s%s', name,
            hint and fmt(' (did you mean --%s?)', hint) or ''))
        end
        if kind == 'flag' then
          out[name] = value == nil or convert(name, kind, value)
        else
          out[name] = convert(name, kind, value or take_value(name, kind == 'string'
            and 'a string' or 'a number'))
        end
      elseif value ~= nil then
        out[name] = tonumber(value) or value
      elseif is_value(argv[i + 1]) then
        i = i + 1
        out[name] = tonumber(argv[i]) or argv[i]
      else
        out[name] = true
      end
    elseif a:find('^%-%a') then
      raise(fmt('zlua.args: unknown option %s (options are written --name)', a))
    else
      npos = npos + 1
      out[npos] = a
    end
    i = i + 1
  end
  return out
end

--- args.executable(): the zlua running this script (arg's lowest index),
--- to start more of it.
function args.executable()
  local i = 0
  while arg[i - 1] do i = i - 1 end
  return arg[i]
end

--- args.message(err): an error's text without the "file:line: " zlua's
--- modules put in front (it says nothing to a tool's user).
function args.message(e) return (tostring(e):gsub('^[^\n]-:%d+: ', '')) end

--- args.script(name, usage, argv, defaults) -> options, die: a tool script's
--- command line. -h/--help prints usage and exits 0; a bad option or a stray
--- argument prints "name: message" and exits 1 (die(msg) does the same).
function args.script(name, usage, argv, defaults)
  local function die(msg)
    io.stderr:write(name, ': ', msg, '\n')
    os.exit(1)
  end
  for _, a in ipairs(argv) do
    if a == '-h' or a == '--help' then
      print(usage)
      os.exit(0)
    end
  end
  local ok, o = pcall(args.parse, argv, defaults)
  if not ok then die(args.message(o)) end
  if o[1] then die(fmt("unexpected argument '%s' (options are written --name value)\n%s", o[1], usage)) end
  return o, die
end

return args
