--[[ Text generation for zlua.nn.GPT and zlua.nn.Llama: the decoding loop
  over a key/value cache and the choice of each next id (greedy, or drawn
  after repetition_penalty, temperature, top_k and top_p). Their generate
  calls it; greedy picks what Hugging Face's generate picks, since both
  take the first largest logit. ]]

local zl = require 'zlua'
local check = require 'zlua.nn.check'

local fmt = string.format

-- Index (1-based) of the first largest entry of row.
local function argmax(row)
  local best = 1
  for i = 2, #row do if row[i] > row[best] then best = i end end
  return best
end

-- Weights of softmax(row) (unnormalised) kept by top_k (its top_k largest
-- entries) and then top_p (the fewest largest whose share reaches top_p),
-- the others 0, and their total.
local function weights(row, top_k, top_p)
  local cut = -math.huge
  if top_k and top_k < #row then
    local sorted = table.move(row, 1, #row, 1, {})
    table.sort(sorted, function(a, c) return a > c end)
    cut = sorted[top_k]
  end
  local hi = row[argmax(row)]
  local w, total = {}, 0
  for i = 1, #row do
    w[i] = row[i] >= cut and math.exp(row[i] - hi) or 0
    total = total + w[i]
  end
  if top_p and top_p < 1 then
    local order = {}
    for i = 1, #row do if w[i] > 0 then order[#order + 1] = i end end
    -- Ties keep the lower id first, so the set kept does not depend on sort's order.
    table.sort(order, function(a, c) return w[a] > w[c] or (w[a] == w[c] and a < c) end)
    local acc, kept = 0, 0
    for j, i in ipairs(order) do
      if acc >= top_p * total then w[i] = 0 else acc = acc + w[i]; kept = j end
    end
    total = 0
    for j = 1, kept do total = total + w[order[j]] end
  end
  return w, total
end

-- One id (0-based) drawn from the kept weights; u is uniform in [0, 1).
local function sample(row, top_k, top_p, u)
  local w, total = weights(row, top_k, top_p)
  local target, acc = u * total, 0
  for i = 1, #row do
    acc = acc + w[i]
    if acc > target and w[i] > 0 then return i - 1 end
  end
  for i = #row, 1, -1 do if w[i] > 0 then return i - 1 end end
end

local known = { max_new_tokens = true, do_sample = true, temperature = true, top_k = true, top_p = true,
                seed = true, generator = true, eos_token_id = true, pad_token_id = true, use_cache = true,
                repetition_penalty = true, attention_mask = true, slide = true }

-- The options checked and completed, in a table of their own (the caller's
-- is left as it was).
local function options(model, n, opts)
  local o = {}
  if type(n) == 'table' then
    -- generate(ids, {max_new_tokens =, ...}): greedy unless do_sample.
    for k, v in pairs(check.options('generate', n, known)) do o[k] = v end
    n = o.max_new_tokens
  else
    -- The older generate(idx, n [, opts]): always samples, never stops early.
    for k, v in pairs(check.options('generate', opts, known)) do o[k] = v end
    if o.max_new_tokens ~= nil or o.do_sample ~= nil then
      check.error('generate: give max_new_tokens and do_sample in the options table alone: '
                  .. 'generate(ids, {max_new_tokens = n, do_sample = true})')
    end
    o.do_sample = true
    o.legacy = true
  end
  local count = math.tointeger(n)
  if not count or count < 0 then
    check.error(fmt('generate: max_new_tokens must be a non-negative integer, got %s', tostring(n)))
  end
  o.max_new_tokens = count
  local t = o.temperature or 1
  if type(t) ~= 'number' or not (t > 0) then
    check.error(fmt('generate: temperature must be a positive number, got %s', tostring(o.temperature)))
  end
  o.temperature = t
  local top_k = o.top_k and math.tointeger(o.top_k)
  if o.top_k ~= nil and (not top_k or top_k < 1) then
    check.error(fmt('generate: top_k must be a positive integer, got %s', tostring(o.top_k)))
  end
  o.top_k = top_k
  if o.top_p ~= nil and (type(o.top_p) ~= 'number' or not (o.top_p > 0 and o.top_p <= 1)) then
    check.error(fmt('generate: top_p must be a number in (0, 1], got %s', tostring(o.top_p)))
  end
  if not o.legacy and o.eos_token_id == nil then
    o.eos_token_id = model.generation_config and model.generation_config.eos_token_id
  end
  local function valid(id) return math.type(id) == 'integer' and id >= 0 and id < model.config.vocab_size end
  -- eos_token_id may be a list (LLaMA 3 ends on either of two ids).
  local eos = o.eos_token_id
  o.eos = {}
  for i, id in ipairs(type(eos) == 'table' and eos or { eos }) do
    if not valid(id) then
      check.error(fmt('generate: eos_token_id%s must be an id in 0..%d, got %s',
                      type(eos) == 'table' and '[' .. i .. ']' or '', model.config.vocab_size - 1, tostring(id)))
    end
    o.eos[id] = true
  end
  if o.pad_token_id ~= nil and not valid(o.pad_token_id) then
    check.error(fmt('generate: pad_token_id must be an id in 0..%d, got %s', model.config.vocab_size - 1,
                    tostring(o.pad_token_id)))
  end
  o.pad_token_id = o.pad_token_id or (type(eos) == 'table' and eos[1] or eos)
  local rp = o.repetition_penalty
  if rp ~= nil and (type(rp) ~= 'number' or not (rp > 0) or rp == math.huge) then
    check.error(fmt('generate: repetition_penalty must be a positive number, got %s', tostring(rp)))
  end
  if o.attention_mask ~= nil and not model.supports_attention_mask then
    check.error('generate: this model takes no attention_mask (give rows of equal length)')
  end
  o.generator = o.generator or (o.seed and zl.Generator(o.seed))
  return o
end

-- ids as a tensor [B, T] of i64, and a function giving the result back in the
-- caller's form (a tensor [B, T'], a tensor [T'] or a Lua list).
local function as_batch(ids)
  if type(ids) == 'table' and not zl.is_tensor(ids) then
    local row = {}
    for i, id in ipairs(ids) do
      if math.type(id) ~= 'integer' then check.error(fmt('generate: ids[%d] is not an integer id', i)) end
      row[i] = id
    end
    if #row == 0 then check.error('generate: ids must not be empty') end
    return zl.tensor({ row }, 'i64'), function(out) return out:totable()[1] end
  end
  if zl.is_tensor(ids) and ids:dim() == 1 then
    return ids:view(1, ids:size(1)), function(out) return out:view(out:size(2)) end
  end
  return ids, function(out) return out end
end

-- The mask of padded rows as Lua lists and the positions Hugging Face gives
-- its tokens: the count of real tokens before each (padding at 1).
local function masked_rows(mask, b, t)
  if not zl.is_tensor(mask) or mask:dim() ~= 2 or mask:size(1) ~= b or mask:size(2) ~= t then
    check.error(fmt('generate: attention_mask must be a tensor [%d, %d] like the ids, got %s', b, t,
                    zl.is_tensor(mask) and '[' .. table.concat(mask:shape(), ', ') .. ']' or type(mask)))
  end
  local rows = mask:gt(0):to('i64'):totable()
  local seen = {}
  for r = 1, b do
    seen[r] = 0
    for j = 1, t do seen[r] = seen[r] + rows[r][j] end
  end
  return { rows = rows, seen = seen, len = t }
end

-- attention_mask [B, len] and position_ids [B, n] of the last n positions.
local function mask_inputs(m, n, device)
  local pos = {}
  for r, row in ipairs(m.rows) do
    local p, count = {}, 0
    for j = 1, m.len - n do count = count + row[j] end
    for j = m.len - n + 1, m.len do
      count = count + row[j]
      p[#p + 1] = row[j] == 1 and count - 1 or 1
    end
    pos[r] = p
  end
  return { attention_mask = zl.tensor(m.rows, 'i64'):to(device), position_ids = zl.tensor(pos, 'i64'):to(device) }
end

-- Hugging Face's repetition penalty on row (the raw logits of one sequence):
-- every id the sequence holds is made less likely.
local function penalise(row, ids, penalty)
  local done = {}
  for _, id in ipairs(ids) do
    local i = id + 1
    if not done[i] then
      done[i] = true
      row[i] = row[i] < 0 and row[i] * penalty or row[i] / penalty
    end
  end
end

-- Appends max_new_tokens ids to idx [B, T]. The model runs on sequences of
-- up to T + max_new_tokens - 1 ids, which must fit in block_size unless
-- o.slide: then the cache serves until the sequence outgrows block_size, and
-- from then on each step reruns the model on the last block_size ids, whose
-- positions have all shifted (not with an attention_mask: then the sequence
-- must fit).
local function decode(model, idx, o)
  local bs = model.config.block_size
  local need = idx:size(2) + math.max(o.max_new_tokens - 1, 0)
  if need > bs and not o.slide and not o.attention_mask then
    local key = model.config.max_position_embeddings and 'max_position_embeddings' or 'block_size'
    check.error(fmt('generate: a prompt of %d ids and max_new_tokens %d run the model on %d positions, more '
                    .. 'than its %s of %d (pass slide = true to run on the last %d ids as the sequence grows, '
                    .. 'their positions shifting)', idx:size(2), o.max_new_tokens, need, key, bs, bs))
  end
  local b = idx:size(1)
  local m = o.attention_mask ~= nil and masked_rows(o.attention_mask, b, idx:size(2)) or nil
  local cache = o.use_cache ~= false and model:new_cache() or nil
  local function window()
    local t = idx:size(2)
    return t > bs and idx:narrow(2, t - bs + 1, bs) or idx
  end
  local function run(new)
    if m then
      if m.len > bs then
        check.error(fmt('generate: with an attention_mask the sequence must fit in %d positions', bs))
      end
      if cache then return model:forward_cached(new, cache, mask_inputs(m, new:size(2), idx:device())) end
      return model:forward_cached(idx, nil, mask_inputs(m, idx:size(2), idx:device()))
    end
    if cache and cache.len + new:size(2) <= bs then return model:forward_cached(new, cache) end
    cache = nil
    return model(window())
  end
  local logits = run(idx)
  local done, finished = {}, 0
  for step = 1, o.max_new_tokens do
    local rows
    if o.repetition_penalty then
      rows = logits:select(2, -1):float():totable()
      local seqs = idx:totable()
      for r = 1, b do
        penalise(rows[r], seqs[r], o.repetition_penalty)
        for i = 1, #rows[r] do rows[r][i] = rows[r][i] / o.temperature end
      end
    else
      rows = (logits:select(2, -1) / o.temperature):float():totable()
    end
    local u = o.do_sample and zl.rand(b, o.generator):totable()
    local ids = {}
    for r = 1, b do
      local id
      if done[r] then id = o.pad_token_id
      elseif o.do_sample then id = sample(rows[r], o.top_k, o.top_p, u[r])
      else id = argmax(rows[r]) - 1 end
      if not done[r] and o.eos[id] then done[r] = true; finished = finished + 1 end
      ids[r] = { id }
    end
    local new = zl.tensor(ids, 'i64'):to(idx:device())
    idx = zl.cat({ idx, new }, 2)
    if m then
      -- As Hugging Face's, every row's mask grows by a 1, finished rows too.
      for r = 1, b do m.rows[r][m.len + 1] = 1 end
      m.len = m.len + 1
    end
    if step == o.max_new_tokens or finished == b then break end
    logits = run(new)
  end
  return idx
end

--- generate(model, ids, opts) or generate(model, idx, n [, opts]).
--- ids: a tensor [B, T] or [T] of 0-based ids, or a Lua list of them; the
--- result takes the same form with the new ids appended. Options:
---   max_new_tokens  how many ids to add (required)
---   do_sample       false (default): the most likely id each step; true: drawn
---   temperature     logits divided by it before drawing (default 1)
---   top_k, top_p    draw only among the top_k likeliest ids, then among the
---                   fewest likeliest whose probability reaches top_p
---   seed, generator the draws' source: a generator, else a zl.Generator(seed),
---                   else the global one
---   eos_token_id    a row that produces it (or one of a list of them) is
---                   finished: it is padded with pad_token_id (default the
---                   first eos_token_id), and generation stops when every row
---                   is; defaults to the model's generation_config (set by
---                   from_pretrained)
---   repetition_penalty  above 1, ids the sequence already holds are made
---                   less likely (a positive logit divided by it, a negative
---                   one multiplied), as Hugging Face's
---   attention_mask  [B, T], 0 where a row is padded (rows of different
---                   lengths padded on the left); for models that take one
---   use_cache       false: rerun the whole sequence each step (default true)
---   slide           true: a sequence longer than block_size runs on its last
---                   block_size ids (nanoGPT's crop); otherwise a prompt and
---                   max_new_tokens that need more positions are an error
--- The older form generate(idx, n, opts) samples (do_sample true) and ignores
--- end-of-text. Runs without autograd and in eval mode (modes restored after).
return function(model, ids, n, opts)
  local o = options(model, n, opts)
  local idx, back = as_batch(ids)
  if not zl.is_tensor(idx) or idx:dim() ~= 2 or idx:size(2) == 0 then
    check.error(fmt('generate: expected token ids [B, T] with T > 0, got %s',
                    zl.is_tensor(idx) and '[' .. table.concat(idx:shape(), ', ') .. ']' or type(idx)))
  end
  local modes = {}
  for _, m in model:named_modules() do modes[m] = m.training end
  model:eval()
  local ok, res = pcall(zl.no_grad, function() return decode(model, idx, o) end)
  for m, mode in pairs(modes) do rawset(m, 'training', mode) end
  if not ok then error(res, 0) end
  return back(res)
end
