--[[ zlua.engine: zlua.initialize, DeepSpeed's deepspeed.initialize for zlua.

  local zlua = require 'zlua'
  local args = zlua.args()                      -- --deepspeed_config FILE, --local_rank, ...
  local engine, optimizer, loader, scheduler = zlua.initialize{
    model = model, model_parameters = model:parameters(), config = args.deepspeed_config,
    args = args, training_data = dataset }
  for x, y in loader() do
    local loss = crit(engine(x), y)
    engine:backward(loss)
    engine:step()
  end

  initialize{model=, model_parameters=, config= (a path or a table; or args.deepspeed_config),
             config_params= (DeepSpeed's other name for a dict config), args=,
             training_data=, collate_fn=, optimizer= (an optimizer, or a function(params)
             returning one; overrides the config's), lr_scheduler= (a scheduler or a
             function(optimizer); overrides the config's), dist_init_required= (no
             effect, said in a note: the communicator starts with the process)}
    -> engine, optimizer, dataloader (nil without training_data), lr_scheduler ]]

local zl = require 'zlua'
local config = require 'zlua.config'
local Engine = require 'zlua.engine.Engine'

local fmt = string.format

local M = {}

local KNOWN = { model = true, model_parameters = true, config = true, config_params = true, args = true,
  training_data = true, collate_fn = true, optimizer = true, lr_scheduler = true, dist_init_required = true }

function M.initialize(t)
  if type(t) ~= 'table' then zl.raise('zlua.initialize: expected a table of arguments {model=, config=, ...}') end
  for k in pairs(t) do
    if not KNOWN[k] then
      zl.raise(fmt('zlua.initialize: unknown argument %q (expected model, model_parameters, config, config_params, '
        .. 'args, training_data, collate_fn, optimizer, lr_scheduler, dist_init_required)', tostring(k)))
    end
  end
  if t.model == nil then zl.raise('zlua.initialize: model is required') end
  local args = t.args or {}
  local from_args = args.deepspeed_config
  local cfg_src = t.config or t.config_params
  if cfg_src ~= nil and from_args ~= nil and cfg_src ~= from_args then
    zl.raise(fmt('zlua.initialize: a config was given both as config= and as --deepspeed_config %s: give one',
      tostring(from_args)))
  end
  cfg_src = cfg_src or from_args
  if cfg_src == nil then
    zl.raise('zlua.initialize: no config: pass config= (a file or a table) or --deepspeed_config FILE')
  end
  -- The ranks come from zlua.dist (one, without a launcher).
  local dist = require 'zlua.dist'
  local world_size, rank = dist.world_size(), dist.rank()
  if t.dist_init_required ~= nil then
    require('zlua.engine.notices').once(rank, 'zlua.initialize: dist_init_required has no effect here: each '
      .. 'rank\'s communicator starts with its process (zlua --nprocs, mpirun)')
  end
  local cfg = config.load(cfg_src, { args = args, world_size = world_size })
  local engine = Engine.new(t, cfg, rank, world_size)
  return engine, engine.optimizer, engine.training_dataloader, engine.lr_scheduler
end

return M
