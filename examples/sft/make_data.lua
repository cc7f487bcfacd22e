--[[ Writes examples/sft/data/prompts.jsonl, the SFT example's dataset: one
  {"prompt": ..., "response": ...} object a line, in DeepSpeed-Chat's
  " Human: ... Assistant:" form, and trains the example's tokenizer on it
  (examples/sft/tokenizer/: GPT-2's byte-level BPE, zlua.tokenizer.train,
  <|endoftext|> as its special token). The tasks (sums and differences, reversing,
  capitals, spelling, counting letters, opposites, plurals, countries'
  capitals) are ones a model of a few hundred thousand parameters learns in
  minutes on a CPU, so the example's eval perplexity visibly falls. Seeded:
  the same file every run. The file is kept in the repository; this script
  says how it was made.
    zlua examples/sft/make_data.lua [out.jsonl] [tokenizer_dir] ]]

local zl = require 'zlua'
local json = require 'zlua.json'

local here = arg[0]:match('^(.*)/[^/]*$') or '.'
local out = arg[1] or here .. '/data/prompts.jsonl'
local tok_dir = arg[2] or here .. '/tokenizer'
local gen = zl.Generator(20261127)
-- An integer in [lo, hi] from the seeded generator.
local function pick(lo, hi) return lo + math.floor(zl.rand(1, gen):item() * (hi - lo + 1)) end
local function one(list) return list[pick(1, #list)] end

local words = { 'garden', 'window', 'river', 'planet', 'silver', 'orange', 'pencil', 'bridge', 'forest',
  'candle', 'rocket', 'island', 'marble', 'spider', 'winter', 'summer', 'basket', 'doctor', 'engine',
  'flower', 'guitar', 'hammer', 'jacket', 'kitten', 'ladder', 'magnet', 'needle', 'oyster', 'parrot',
  'rabbit', 'saddle', 'tunnel', 'violin', 'walnut', 'yellow', 'zipper', 'anchor', 'butter', 'cactus',
  'dragon', 'falcon', 'goblet', 'helmet', 'insect', 'jungle', 'kettle', 'lemon', 'mirror', 'napkin',
  'otter', 'pepper', 'quartz', 'ribbon', 'salmon', 'tomato', 'velvet', 'wizard', 'button', 'cookie' }
local opposites = { { 'hot', 'cold' }, { 'up', 'down' }, { 'big', 'small' }, { 'fast', 'slow' },
  { 'light', 'dark' }, { 'happy', 'sad' }, { 'early', 'late' }, { 'open', 'closed' }, { 'full', 'empty' },
  { 'hard', 'soft' }, { 'high', 'low' }, { 'new', 'old' }, { 'rich', 'poor' }, { 'strong', 'weak' },
  { 'wet', 'dry' }, { 'long', 'short' }, { 'loud', 'quiet' }, { 'clean', 'dirty' }, { 'near', 'far' },
  { 'thick', 'thin' } }
local capitals = { { 'France', 'Paris' }, { 'Japan', 'Tokyo' }, { 'Italy', 'Rome' }, { 'Spain', 'Madrid' },
  { 'Egypt', 'Cairo' }, { 'Kenya', 'Nairobi' }, { 'Canada', 'Ottawa' }, { 'Peru', 'Lima' },
  { 'Norway', 'Oslo' }, { 'Greece', 'Athens' }, { 'Chile', 'Santiago' }, { 'Poland', 'Warsaw' },
  { 'Germany', 'Berlin' }, { 'Portugal', 'Lisbon' }, { 'Ireland', 'Dublin' }, { 'Austria', 'Vienna' },
  { 'Sweden', 'Stockholm' }, { 'Finland', 'Helsinki' }, { 'Cuba', 'Havana' }, { 'Thailand', 'Bangkok' } }
local plurals = { { 'box', 'boxes' }, { 'child', 'children' }, { 'mouse', 'mice' }, { 'city', 'cities' },
  { 'knife', 'knives' }, { 'tooth', 'teeth' }, { 'story', 'stories' }, { 'wolf', 'wolves' },
  { 'bus', 'buses' }, { 'foot', 'feet' }, { 'goose', 'geese' }, { 'baby', 'babies' }, { 'leaf', 'leaves' },
  { 'man', 'men' }, { 'dish', 'dishes' }, { 'party', 'parties' } }

local tasks = {
  function()
    local a, b = pick(0, 99), pick(0, 99)
    return ('What is %d plus %d?'):format(a, b), ('%d plus %d is %d.'):format(a, b, a + b)
  end,
  function()
    local a = pick(10, 99)
    local b = pick(0, a)
    return ('What is %d minus %d?'):format(a, b), ('%d minus %d is %d.'):format(a, b, a - b)
  end,
  function()
    local w = one(words)
    return ("Reverse the word '%s'."):format(w), ("The word '%s' reversed is '%s'."):format(w, w:reverse())
  end,
  function()
    local w = one(words)
    return ("Spell '%s' with dashes."):format(w), (w:gsub('.', '%0-'):sub(1, -2)) .. '.'
  end,
  function()
    local w = one(words)
    return ("How many letters are in '%s'?"):format(w), ("'%s' has %d letters."):format(w, #w)
  end,
  function()
    local w = one(words)
    return ("Write '%s' in capital letters."):format(w), w:upper() .. '.'
  end,
  function()
    local p = one(opposites)
    if pick(0, 1) == 1 then p = { p[2], p[1] } end
    return ("What is the opposite of '%s'?"):format(p[1]), ("The opposite of '%s' is '%s'."):format(p[1], p[2])
  end,
  function()
    local c = one(capitals)
    return ('What is the capital of %s?'):format(c[1]), ('The capital of %s is %s.'):format(c[1], c[2])
  end,
  function()
    local p = one(plurals)
    return ("What is the plural of '%s'?"):format(p[1]), ("The plural of '%s' is '%s'."):format(p[1], p[2])
  end,
}

local f = assert(io.open(out, 'w'))
local text_path = os.tmpname()
local text = assert(io.open(text_path, 'w'))
local seen, n = {}, 0
while n < 2400 do
  local q, a = one(tasks)()
  if not seen[q] then
    seen[q] = true
    n = n + 1
    local row = { prompt = ' Human: ' .. q .. ' Assistant:', response = ' ' .. a }
    f:write(json.encode(row), '\n')
    text:write(row.prompt, row.response, '\n')
  end
end
assert(f:close())
assert(text:close())
print(('make_data: %d prompts in %s'):format(n, out))

os.execute(('mkdir -p %q'):format(tok_dir))
local tok = require('zlua.tokenizer').train({ text_path }, 512, { special_tokens = { '<|endoftext|>' } })
os.remove(text_path)
tok:save_pretrained(tok_dir)
print(('make_data: a tokenizer of %d tokens in %s'):format(tok:vocab_size(), tok_dir))
