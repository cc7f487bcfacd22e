--[[ zlua.zero.estimate: DeepSpeed's estimates of the memory that parameters,
  gradients and optimizer states need under ZeRO-2 and ZeRO-3, per offload
  choice (estimate_zero2/zero3_model_states_mem_needs), and the two counts
  they take from a model. Pure functions; scripts/estimate_memory.lua prints them.

  local est = require 'zlua.zero.estimate'
  local total, largest = est.count(model)
  for _, r in ipairs(est.zero3(total, largest, { num_gpus_per_node = 8 })) do
    print(r.offload_param, r.offload_optimizer, r.zero_init, r.per_cpu, r.per_gpu)
  end
]]

local zl = require 'zlua'
local Module = require 'zlua.nn.Module'

local fmt = string.format
local raise = zl.raise
local tointeger = math.tointeger

local estimate = {}

--[[ Design: the numbers must be DeepSpeed's to the byte. Python multiplies
  integers exactly and rounds once when a float (the buffer factor, 1/nodes)
  joins in, then truncates with int(). A product of two doubles is also
  rounded once, so doing the float parts in doubles gives the same bytes as
  long as every count is exact in a double and 18 * total_params is too:
  hence the bound on total_params (5e14, far past any model trained). ]]
local MAX_PARAMS = 5e14

local function count_arg(what, v, allow_zero)
  local n = type(v) == 'number' and tointeger(v)
  if not n or n < 0 or (n == 0 and not allow_zero) then
    raise(fmt('zlua.zero.estimate: %s must be a %s integer, got %s', what,
              allow_zero and 'non-negative' or 'positive', tostring(v)))
  end
  if n > MAX_PARAMS then
    raise(fmt('zlua.zero.estimate: %s = %s is over %.0e, the most this estimate computes exactly',
              what, tostring(v), MAX_PARAMS))
  end
  return n
end

local KNOWN = { num_gpus_per_node = true, num_nodes = true, additional_buffer_factor = true }

-- gpus per node, nodes, buffer factor (DeepSpeed's defaults: 1, 1, 1.5).
local function hardware(opts)
  if opts == nil then opts = {} end
  if type(opts) ~= 'table' then raise('zlua.zero.estimate: options must be a table, got ' .. type(opts)) end
  for k in pairs(opts) do
    if not KNOWN[k] then
      raise(fmt('zlua.zero.estimate: unknown option %s (expected num_gpus_per_node, num_nodes, '
                .. 'additional_buffer_factor)', tostring(k)))
    end
  end
  local gpn = count_arg('num_gpus_per_node', opts.num_gpus_per_node or 1)
  local nodes = count_arg('num_nodes', opts.num_nodes or 1)
  local abf = opts.additional_buffer_factor or 1.5
  if type(abf) ~= 'number' or not (abf > 0 and abf < math.huge) then
    raise('zlua.zero.estimate: additional_buffer_factor must be a positive number, got ' .. tostring(abf))
  end
  return gpn, nodes, abf + 0.0
end

-- Python's int() of a non-negative estimate, as an integer number of bytes.
local function bytes(x, what)
  local n = tointeger(math.floor(x))
  if not n then raise(fmt('zlua.zero.estimate: the %s estimate (%.3g bytes) does not fit in 64 bits', what, x)) end
  return n
end

--- estimate.zero2(total_params [, opts]) -> rows: for offload_optimizer 'cpu'
--- then 'none', { offload_param = 'none', offload_optimizer =, per_cpu =,
--- per_gpu = } in bytes (integers). opts: num_gpus_per_node (1), num_nodes
--- (1), additional_buffer_factor (1.5). Bad counts or options raise an error
--- naming the argument.
function estimate.zero2(total_params, opts)
  local p = count_arg('total_params', total_params, true)
  local gpn, nodes, abf = hardware(opts)
  local gpus = gpn * nodes
  local pf = p + 0.0
  -- Offloaded: bit16 params on the device; the host holds the fp32 master,
  -- gradients and Adam moments of every rank's partition.
  local offload = { offload_param = 'none', offload_optimizer = 'cpu',
                    per_gpu = 2 * p,
                    per_cpu = bytes(pf * math.max(4 * gpus, 16) * abf, 'per-CPU') }
  -- On device: 2 bytes of bit16 params whole, 18 bytes per param partitioned
  -- (bit16 + fp32 gradients, fp32 master, two fp32 Adam moments); the host
  -- only loads the model, once per rank of the node.
  local device = { offload_param = 'none', offload_optimizer = 'none',
                   per_gpu = 2 * p + bytes(18.0 * p / gpus, 'per-GPU'),
                   per_cpu = bytes(pf * 4 * gpn * abf, 'per-CPU') }
  return { offload, device }
end

--- estimate.zero3(total_params, largest_layer_params [, opts]) -> rows in
--- DeepSpeed's order: offload_param/offload_optimizer cpu/cpu, none/cpu,
--- none/none, each with zero_init 1 then 0; { offload_param =,
--- offload_optimizer =, zero_init = 1|0, per_cpu =, per_gpu = } in bytes.
--- largest_layer_params (the most parameters one module owns) sizes the
--- gathered layer every rank holds whole. opts as zero2's.
function estimate.zero3(total_params, largest_layer_params, opts)
  local p = count_arg('total_params', total_params, true)
  local ll = count_arg('largest_layer_params', largest_layer_params, true)
  if ll > p then
    raise(fmt('zlua.zero.estimate: largest_layer_params (%d) is more than total_params (%d)', ll, p))
  end
  local gpn, nodes, abf = hardware(opts)
  local gpus = gpn * nodes
  local per_node = 1 / nodes
  local pf = p + 0.0
  -- The gathered layer: bit16 params and gradients.
  local layer = 4 * ll
  local rows = {}
  local function row(param, optim, zero_init, cpu, gpu)
    rows[#rows + 1] = { offload_param = param, offload_optimizer = optim, zero_init = zero_init,
                        per_cpu = bytes(cpu, 'per-CPU'), per_gpu = gpu }
  end
  -- Everything offloaded: 18 bytes per param on the host, split over nodes.
  -- Without zero_init every rank of a node first builds the whole model there.
  row('cpu', 'cpu', 1, pf * 18 * per_node * abf, layer)
  row('cpu', 'cpu', 0, pf * math.max(4 * gpn, 18 * per_node) * abf, layer)
  -- Optimizer offloaded: the device keeps its bit16 partition, the host the rest.
  local gpu = layer + bytes(2.0 * p / gpus, 'per-GPU')
  row('none', 'cpu', 1, pf * 16 * per_node * abf, gpu)
  row('none', 'cpu', 0, pf * math.max(4 * gpn, 16 * per_node) * abf, gpu)
  -- Nothing offloaded: 18 bytes per param partitioned on the device; the host
  -- holds one layer per rank with zero_init, the whole model per rank without.
  gpu = layer + bytes(18.0 * p / gpus, 'per-GPU')
  row('none', 'none', 1, ll * 4.0 * gpn * abf, gpu)
  row('none', 'none', 0, pf * 4 * gpn * abf, gpu)
  return rows
end

--- estimate.count(model) -> total_params, largest_layer_params, name: the
--- parameters of a zlua.nn module (a tied weight once) and the most any one
--- module owns itself, not through children (DeepSpeed's largest layer; a
--- tied weight counts in each module that holds it), with that module's
--- dotted name ('' for the model itself).
function estimate.count(model)
  if not Module.is_module(model) then
    raise('zlua.zero.estimate.count: expected a zlua.nn module, got ' .. type(model))
  end
  local largest, largest_name = 0, nil
  for name, m in model:named_modules() do
    -- A module's own parameters are not exposed apart from its children's,
    -- so they are read from the table Module keeps them in.
    local own, seen = 0, {}
    for _, t in pairs(m._parameters) do
      if not seen[t:id()] then
        seen[t:id()] = true
        own = own + t:numel()
      end
    end
    if own > largest or not largest_name then largest, largest_name = own, name end
  end
  return model:num_parameters(), largest, largest_name
end

return estimate
