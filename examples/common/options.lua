--[[ The examples' command line: `--name value` or `--name=value` for the
  options an example declares, `--help` for a usage summary. An unknown
  option, a missing value or a value of the wrong kind stops the script with
  one line naming the option and exit status 2, as a usage error should.

  local options = dofile(here .. '/../common/options.lua')
  local opt = options.parse('digits', arg, {
    { 'epochs', 20, 'passes over the training set', min = 1 },
    { 'lr', 3e-3, 'peak learning rate' },
    { 'data', 'digits.csv.gz', 'the data file' },
  })
  -- opt.epochs, opt.lr, opt.data

  Each entry is { name, default, help [, min = m] }; the default's Lua type
  is the option's kind (an integer takes integers, a float any number, a
  string any text, a boolean is a flag: --name alone sets it) and a number
  below min is refused. options.ENGINE lists the options every example that
  trains through zlua.initialize takes: --config (and DeepSpeed's name
  --deepspeed_config), --out, --save_every, --resume, --nvme_path, and
  DeepSpeed's --deepspeed and --local_rank, accepted and ignored (the engine
  is always on; ranks come from the launcher); and the Hugging Face
  trainer's options that fill a config's "auto" values (options.HF:
  --learning_rate, --max_grad_norm, --per_device_train_batch_size, ...),
  which options.hf_args turns into zl.initialize's args. ]]

local options = {}

local placeholder = { integer = '<int>', number = '<num>', string = '<text>', flag = '' }

local function kind_of(default, spec)
  if spec and spec.kind then return spec.kind end
  if type(default) == 'boolean' then return 'flag' end
  local t = math.type(default)
  if t == 'integer' then return 'integer' end
  if t == 'float' then return 'number' end
  return 'string'
end

options.ENGINE = {
  { 'config', '', 'a DeepSpeed config file (JSON); empty: built from the options' },
  { 'deepspeed_config', '', 'the same as --config, under DeepSpeed\'s name' },
  { 'out', '', 'folder for checkpoints (empty: none saved)' },
  { 'save_every', 0, 'save a checkpoint every N optimizer steps (0: only at the end, with --out)', min = 0 },
  { 'resume', false, 'continue from the latest checkpoint in --out' },
  { 'deepspeed', false, 'accepted for DeepSpeed scripts and ignored: the engine is always on' },
  { 'local_rank', -1, 'accepted for DeepSpeed scripts and ignored: ranks come from the launcher' },
  { 'nvme_path', '', 'the folder for NVMe offload, over the config\'s offload nvme_path (empty: the config\'s)' },
}

-- The Hugging Face trainer's arguments that fill a DeepSpeed config's "auto"
-- values (zlua.config lists which fills which; docs/config_keys.md too).
-- None has a default: an option not given leaves the example's own value.
options.HF = {
  { 'learning_rate', nil, 'peak learning rate (fills optimizer lr, scheduler warmup_max_lr)', kind = 'number' },
  { 'adam_beta1', nil, 'Adam beta1 (fills optimizer betas)', kind = 'number' },
  { 'adam_beta2', nil, 'Adam beta2 (fills optimizer betas)', kind = 'number' },
  { 'adam_epsilon', nil, 'Adam epsilon (fills optimizer eps)', kind = 'number' },
  { 'weight_decay', nil, 'weight decay (fills optimizer weight_decay)', kind = 'number' },
  { 'max_grad_norm', nil, 'gradient clipping norm (fills gradient_clipping)', kind = 'number' },
  { 'per_device_train_batch_size', nil, 'micro batch of each rank (fills train_micro_batch_size_per_gpu)',
    kind = 'integer', min = 1 },
  { 'gradient_accumulation_steps', nil, 'micro batches per step (fills gradient_accumulation_steps)',
    kind = 'integer', min = 1 },
  { 'warmup_steps', nil, 'warmup steps (fills scheduler warmup_num_steps)', kind = 'integer', min = 0 },
  { 'warmup_ratio', nil, 'warmup as a share of all steps, when warmup_steps is not given', kind = 'number' },
  { 'max_steps', nil, 'optimizer steps in all (fills scheduler total_num_steps)', kind = 'integer', min = 1 },
  { 'num_train_epochs', nil, 'epochs (fills total_num_steps when max_steps is not given)', kind = 'number' },
  { 'bf16', nil, 'train in bf16 (fills bf16.enabled)', kind = 'flag' },
  { 'fp16', nil, 'train in fp16 (fills fp16.enabled)', kind = 'flag' },
}

--- options.with_engine(specs): specs followed by options.ENGINE and the
--- Hugging Face trainer's options (options.HF) the example does not declare
--- itself.
function options.with_engine(specs)
  local all = table.move(specs, 1, #specs, 1, {})
  local have = {}
  for _, s in ipairs(specs) do have[s[1]] = true end
  for _, s in ipairs(options.ENGINE) do all[#all + 1] = s end
  for _, s in ipairs(options.HF) do
    if not have[s[1]] then all[#all + 1] = s end
  end
  return all
end

--- options.use_hf(opt, own): own maps a Hugging Face option name to the
--- example's option of the same meaning ({learning_rate = 'lr'}); each
--- Hugging Face option given on the command line sets the example's too, so
--- the run and the config it fills agree. Call it right after parse.
function options.use_hf(opt, own)
  for hf, mine in pairs(own) do
    if opt[hf] ~= nil and mine ~= hf then opt[mine] = opt[hf] end
  end
end

--- options.hf_args(opt, own [, extra]) -> the args zl.initialize fills "auto"
--- from: each Hugging Face option given, else the example's option own names
--- for it, else extra's value (extra also adds what no option holds:
--- hidden_size, steps_per_epoch); nvme_path comes along.
function options.hf_args(opt, own, extra)
  local args = {}
  for _, s in ipairs(options.HF) do
    local name, mine = s[1], own[s[1]]
    local v = opt[name]
    if v == nil and mine then v = opt[mine] end
    args[name] = v
  end
  for k, v in pairs(extra or {}) do
    -- A warmup ratio given on the command line is not hidden by the
    -- example's own warmup steps (the trainer's warmup_steps defaults to 0).
    if args[k] == nil and not (k == 'warmup_steps' and opt.warmup_ratio ~= nil) then args[k] = v end
  end
  args.nvme_path = opt.nvme_path
  return args
end

-- Where each option's value ends up in the resolved config (engine.config).
local HF_KEYS = {
  learning_rate = { 'optimizer.params.lr', function(c) return c.optimizer and c.optimizer.params.lr end },
  adam_beta1 = { 'optimizer.params.betas[1]', function(c) return c.optimizer and (c.optimizer.params.betas or {})[1] end },
  adam_beta2 = { 'optimizer.params.betas[2]', function(c) return c.optimizer and (c.optimizer.params.betas or {})[2] end },
  adam_epsilon = { 'optimizer.params.eps', function(c) return c.optimizer and c.optimizer.params.eps end },
  weight_decay = { 'optimizer.params.weight_decay', function(c) return c.optimizer and c.optimizer.params.weight_decay end },
  max_grad_norm = { 'gradient_clipping', function(c) return c.gradient_clipping end },
  per_device_train_batch_size = { 'train_micro_batch_size_per_gpu', function(c) return c.train_micro_batch_size_per_gpu end },
  gradient_accumulation_steps = { 'gradient_accumulation_steps', function(c) return c.gradient_accumulation_steps end },
  bf16 = { 'bf16.enabled', function(c) return c.bf16.enabled end },
  fp16 = { 'fp16.enabled', function(c) return c.fp16.enabled end },
}

-- Whether the config as written (a file's path or a table) holds the dotted key.
local function written(src, key)
  local t = src
  if type(src) == 'string' then
    local ok, doc = pcall(function() return require('zlua.json').decode(require('zlua.config').read(src)) end)
    t = ok and doc or {}
  end
  for part in key:gsub('%[%d+%]$', ''):gmatch('[^.]+') do
    if type(t) ~= 'table' then return false end
    t = t[part]
  end
  return t ~= nil
end

--- options.check_hf(opt, cfg, src): each Hugging Face option given on the
--- command line whose key the config sets to another value (cfg as the
--- engine resolved it, src as written) did not take effect: a message naming
--- them all, as the Hugging Face trainer refuses such a mismatch (nil when
--- there is none). One whose key the config leaves out (its default stands)
--- gets a notice on stderr instead, as the trainer says nothing of it.
function options.check_hf(opt, cfg, src)
  local bad = {}
  for _, s in ipairs(options.HF) do
    local name, k = s[1], HF_KEYS[s[1]]
    if k and opt._given[name] then
      local have = k[2](cfg)
      if have ~= nil and have ~= opt[name] then
        local line = ('--%s %s, but %s is %s'):format(name, tostring(opt[name]), k[1], tostring(have))
        if written(src, k[1]) then
          bad[#bad + 1] = line
        elseif require('zlua.dist').rank() == 0 then
          io.stderr:write(('zlua: note: %s: the config has no %s, so its default stands\n'):format(line, k[1]))
        end
      end
    end
  end
  if #bad == 0 then return nil end
  return ('%s: the config disagrees with the options given: %s (set the key to "auto" to take the option)'):format(
    cfg.source or 'config', table.concat(bad, '; '))
end

local Parser = {}
Parser.__index = Parser

function Parser:usage()
  local lines = { ('usage: zlua %s [options]'):format(self.script), 'options:' }
  for _, s in ipairs(self.specs) do
    lines[#lines + 1] = ('  --%-22s %s (default: %s)'):format(
      s[1] .. ' ' .. placeholder[kind_of(s[2], s)], s[3], s[2] == nil and 'not given' or tostring(s[2]))
  end
  return table.concat(lines, '\n')
end

function Parser:fail(msg)
  io.stderr:write(self.prog, ': ', msg, '\n', self:usage(), '\n')
  os.exit(2)
end

function Parser:convert(spec, text)
  local kind = kind_of(spec[2], spec)
  if kind == 'string' then return text end
  if kind == 'flag' then
    if text == 'true' or text == 'false' then return text == 'true' end
    self:fail(('option --%s is a flag: --%s or --%s=false, got %q'):format(spec[1], spec[1], spec[1], text))
  end
  local v = kind == 'integer' and math.tointeger(tonumber(text)) or tonumber(text)
  if v == nil then
    self:fail(('option --%s expects %s, got %q'):format(
      spec[1], kind == 'integer' and 'an integer' or 'a number', text))
  end
  if spec.min and v < spec.min then
    self:fail(('option --%s must be at least %s, got %s'):format(spec[1], spec.min, text))
  end
  return v
end

--- options.parse(prog, argv, specs) -> a table of every option, defaults
--- filled in. prog names the example in messages; argv is the script's
--- `arg`. An argument that is not an option is an error too: every example
--- takes its inputs by name.
function options.parse(prog, argv, specs)
  local self = setmetatable({ prog = prog, script = argv[0] or prog, specs = specs }, Parser)
  -- opt._given names the options the command line set.
  local known, opt = {}, { _given = {} }
  for _, s in ipairs(specs) do
    known[s[1]] = s
    opt[s[1]] = s[2]
  end
  local i = 1
  while argv[i] ~= nil do
    local a = argv[i]
    if a == '--help' or a == '-h' then
      io.stdout:write(self:usage(), '\n')
      os.exit(0)
    end
    local name, value = a:match('^%-%-([%w_]+)=(.*)$')
    if not name then name = a:match('^%-%-([%w_]+)$') end
    if not name then self:fail(('unexpected argument %q (options are --name value)'):format(a)) end
    local spec = known[name]
    if not spec then self:fail(('unknown option --%s'):format(name)) end
    if kind_of(spec[2], spec) == 'flag' and value == nil then value = 'true' end
    if value == nil then
      i = i + 1
      value = argv[i]
      if value == nil or value:match('^%-%-%a') then self:fail(('option --%s needs a value'):format(name)) end
    end
    opt[name] = self:convert(spec, value)
    opt._given[name] = true
    i = i + 1
  end
  return opt
end

return options
