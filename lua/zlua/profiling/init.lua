--[[ zlua.profiling: DeepSpeed's FLOPS profiler for zlua.nn models
  (docs/flops-profiler.md): the FlopsProfiler class and get_model_profile,
  which profiles one forward of a model and returns its FLOPs, MACs and
  parameters.

  local profiling = require 'zlua.profiling'
  local flops, macs, params = profiling.get_model_profile(model, {input_shape = {2, 32}, input_dtype = 'i64'})
]]

local zl = require 'zlua'
local Module = require 'zlua.nn.Module'
local FlopsProfiler = require 'zlua.profiling.FlopsProfiler'
local report = require 'zlua.profiling.report'

local fmt = string.format

local M = { FlopsProfiler = FlopsProfiler }

local function raise(msg, ...) zl.raise(fmt('get_model_profile: ' .. msg, ...)) end

local known = { input_shape = true, input_dtype = true, args = true, print_profile = true, detailed = true,
  module_depth = true, top_modules = true, warm_up = true, as_string = true, output_file = true,
  ignore_modules = true, mode = true }

-- The input made from input_shape: zeros of that shape on the model's device,
-- of input_dtype or else the dtype of the model's first parameter (token
-- ids need input_dtype = 'i64').
local function input_of(model, o)
  local shape = o.input_shape
  if type(shape) ~= 'table' or #shape == 0 then
    raise('input_shape must be a non-empty list of sizes, got %s', type(shape))
  end
  for i, n in ipairs(shape) do
    if math.tointeger(n) == nil or n < 1 then raise('input_shape[%d] must be a positive integer, got %s', i, tostring(n)) end
  end
  local first = model:parameters()[1]
  local dtype = o.input_dtype or (first and first:dtype()) or 'f32'
  return zl.zeros(shape, { dtype = dtype, device = first and first:device() or 'cpu' })
end

--- profiling.get_model_profile(model, opts): profiles one forward of model
--- after warm_up unprofiled ones (grad mode off, model in eval mode, its mode
--- restored after) and returns flops, macs, params: strings ("14.27 M",
--- "7.08 MMACs", "106.3 K") unless as_string is false. opts: input_shape (a
--- list of sizes: the one argument is zeros of that shape, of input_dtype),
--- or args (the list of arguments); print_profile = true, detailed = true,
--- module_depth = -1, top_modules = 1, warm_up = 1, as_string = true,
--- output_file = nil, ignore_modules = nil (classes not hooked), mode =
--- 'forward' or 'generate' (model:generate(args...)).
function M.get_model_profile(model, opts)
  if not Module.is_module(model) then raise('model must be a zlua.nn module, got %s', type(model)) end
  if opts ~= nil and type(opts) ~= 'table' then raise('opts must be a table, got %s', type(opts)) end
  local o = opts or {}
  for k in pairs(o) do
    if not known[k] then raise('unknown option %s', tostring(k)) end
  end
  local args
  if o.input_shape ~= nil then
    args = { n = 1, input_of(model, o) }
  elseif type(o.args) == 'table' and (o.args.n or #o.args) > 0 then
    args = { n = o.args.n or #o.args, table.unpack(o.args, 1, o.args.n or #o.args) }
  else
    raise('give input_shape or a non-empty args list')
  end
  local mode = o.mode or 'forward'
  if mode ~= 'forward' and mode ~= 'generate' then raise("mode must be 'forward' or 'generate', got %s", tostring(mode)) end
  local warm_up = o.warm_up == nil and 1 or math.tointeger(o.warm_up)
  if warm_up == nil or warm_up < 0 then raise('warm_up must be an integer >= 0, got %s', tostring(o.warm_up)) end

  local function run()
    if mode == 'generate' then return model:generate(table.unpack(args, 1, args.n)) end
    return model(table.unpack(args, 1, args.n))
  end
  local prof = FlopsProfiler.new(model)
  local training = model.training
  model:eval()
  local ok, err = pcall(zl.no_grad, function()
    for _ = 1, warm_up do run() end
    prof:start_profile{ ignore_list = o.ignore_modules }
    run()
    prof:stop_profile()
  end)
  if training then model:train() end
  if not ok then
    prof:end_profile()
    error(err, 0)
  end
  local flops, macs, params = prof:get_total_flops(), prof:get_total_macs(), prof:get_total_params()
  if o.print_profile ~= false then
    local printed, perr = pcall(prof.print_model_profile, prof, { profile_step = warm_up,
      module_depth = o.module_depth, top_modules = o.top_modules, detailed = o.detailed, output_file = o.output_file })
    if not printed then
      prof:end_profile()
      error(perr, 0)
    end
  end
  prof:end_profile()
  if o.as_string == false then return flops, macs, params end
  return report.number(flops), report.macs(macs), report.params(params)
end

return M
