-- Tests zlua.args: DeepSpeed's options (--deepspeed_config/--config, --deepspeed,
-- --local_rank), the script's own options with and without declared defaults, positional
-- arguments, and each error naming the option.

local args = require 'zlua.args'

local H = require 'harness'
local test, check_eq, check_error = H.test, H.check_eq, H.check_error

test('deepspeed_options', function()
  local a = args.parse({ '--deepspeed', '--deepspeed_config', 'ds.json', '--local_rank', '3' })
  check_eq(a.deepspeed, true)
  check_eq(a.deepspeed_config, 'ds.json')
  check_eq(a.config, 'ds.json', 'both names set')
  check_eq(a.local_rank, nil, 'local_rank is dropped')
  a = args.parse({ '--config=c.json', '--local_rank=0' })
  check_eq(a.config, 'c.json')
  check_eq(a.deepspeed_config, 'c.json')
  check_eq(a.deepspeed, nil)
  a = args.parse({ '--deepscale_config', 'old.json', '--deepscale' })
  check_eq(a.config, 'old.json')
  check_eq(a.deepspeed, true)
  check_eq(args.parse({ '--deepspeed=false' }).deepspeed, false)
  check_error(function() args.parse({ '--deepspeed_config' }) end,
    'zlua.args: option --deepspeed_config needs a value (a config file)')
  check_error(function() args.parse({ '--config', '--deepspeed' }) end,
    'zlua.args: option --config needs a value (a config file), got --deepspeed')
  check_error(function() args.parse({ '--local_rank' }) end,
    'zlua.args: option --local_rank needs a value (a rank)')
  check_error(function() args.parse({ '--local_rank', 'one' }) end,
    'zlua.args: option --local_rank expects an integer, got "one"')
  check_error(function() args.parse({ '--deepspeed=maybe' }) end,
    'zlua.args: option --deepspeed is a flag: write --deepspeed or --deepspeed=true/false, got "maybe"')
end)

test('untyped_options', function()
  local a = args.parse({ 'train.txt', '--learning-rate', '3e-5', '--epochs=4', '--name', 'run1',
    '--resume', '--fp16', '--offset', '-2', '--', '--not-an-option' })
  check_eq(a.learning_rate, 3e-5, 'dashes become underscores, numbers are numbers')
  check_eq(a.epochs, 4)
  check_eq(math.type(a.epochs), 'integer')
  check_eq(a.name, 'run1')
  check_eq(a.resume, true, 'an option followed by an option is a flag')
  check_eq(a.fp16, true)
  check_eq(a.offset, -2, 'a negative number is a value')
  check_eq(a[1], 'train.txt')
  check_eq(a[2], '--not-an-option', 'after --, everything is positional')
  check_eq(#a, 2)
  check_eq(args.parse({ '--last' }).last, true)
  check_error(function() args.parse({ '-b', '32' }) end,
    'zlua.args: unknown option -b (options are written --name)')
  check_error(function() args.parse({ '--x', 5 }) end, 'zlua.args: argument 2 must be a string, got number')
end)

test('declared_options', function()
  local defaults = { lr = 1e-3, epochs = 10, out = 'ckpt', resume = false, save_every = 0 }
  local a = args.parse({ '--lr', '0.01', '--epochs=3', '--resume', '--save-every', '5',
    '--config', 'ds.json', '--local_rank=1' }, defaults)
  check_eq(a.lr, 0.01)
  check_eq(a.epochs, 3)
  check_eq(a.out, 'ckpt', 'missing options keep their default')
  check_eq(a.resume, true)
  check_eq(a.save_every, 5)
  check_eq(a.config, 'ds.json')
  check_eq(args.parse({ '--resume=false' }, defaults).resume, false)
  check_eq(args.parse({ '--lr', '-1e-3' }, defaults).lr, -1e-3)
  check_eq(args.parse({ '--out', '123' }, defaults).out, '123', 'a string option keeps text')
  check_eq(math.type(args.parse({ '--lr', '1' }, defaults).lr), 'integer')
  check_error(function() args.parse({ '--epoch', '3' }, defaults) end,
    'zlua.args: unknown option --epoch (did you mean --epochs?)')
  check_error(function() args.parse({ '--epochs', '2.5' }, defaults) end,
    'zlua.args: option --epochs expects an integer, got "2.5"')
  check_error(function() args.parse({ '--lr', 'fast' }, defaults) end,
    'zlua.args: option --lr expects a number, got "fast"')
  check_error(function() args.parse({ '--lr' }, defaults) end,
    'zlua.args: option --lr needs a value (a number)')
  check_error(function() args.parse({ '--out', '--resume' }, defaults) end,
    'zlua.args: option --out needs a value (a string), got --resume')
  check_error(function() args.parse({ '--resume=yes' }, defaults) end,
    'zlua.args: option --resume is a flag: write --resume or --resume=true/false, got "yes"')
  check_error(function() args.parse({}, { f = print }) end,
    'zlua.args: default for f must be a boolean, number or string, got function')
  check_error(function() args.parse('x') end, 'zlua.args: parse expects the argument list')
end)

test('global_arg', function()
  local saved = arg
  arg = { [0] = 'train.lua', '--config', 'g.json' }
  local a = args.parse()
  arg = saved
  check_eq(a.config, 'g.json')
end)

H.done()
