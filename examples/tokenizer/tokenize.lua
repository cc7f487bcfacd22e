--[[ GPT-2's tokenizer from Lua: Hugging Face's files read, a text encoded to
  the ids Hugging Face gives and decoded back, then a vocabulary of one's own
  trained and saved in the same files (docs/fine-tuning.md's tokenizer section).
    zlua examples/tokenizer/tokenize.lua [--dir DIR] [--text TEXT] [--train FILE --vocab_size N --out DIR]
  --dir defaults to the tiny vocabulary of tests/data/gpt2_tok (a real GPT-2
  folder, with vocab.json and merges.txt or tokenizer.json, works the same).
  Output: `ids <n> ...`, `decoded <text>`, `round trip ok`, then for the
  trained vocabulary `trained <size> tokens` and its own ids. ]]

local tokenizer = require 'zlua.tokenizer'

local here = arg[0]:match('^(.*)/[^/]*$') or '.'
local data = here .. '/../../tests/data/gpt2_tok'
local options = dofile(here .. '/../common/options.lua')
local opt = options.parse('tokenize', arg, {
  { 'dir', data, 'a folder with tokenizer.json, or vocab.json and merges.txt' },
  { 'text', "It's 3.14 in Zürich 😀 <|endoftext|> 中文", 'the text to encode' },
  { 'train', data .. '/corpus.txt', 'a text file to train a vocabulary on' },
  { 'vocab_size', 400, 'tokens in the trained vocabulary (256 bytes + 1 special + merges)', min = 257 },
  { 'out', '', 'folder to save the trained vocabulary in (empty: not saved)' },
})

local tok = tokenizer.from_pretrained(opt.dir)
print(tostring(tok))
local ids = tok:encode(opt.text)
print('ids ' .. #ids .. ' ' .. table.concat(ids, ' '))
local text = tok:decode(ids)
print('decoded ' .. text)
print(text == opt.text and 'round trip ok' or 'round trip FAILED')

local mine = tokenizer.train({ opt.train }, opt.vocab_size, { special_tokens = { '<|endoftext|>' } })
if opt.out ~= '' then mine:save_pretrained(opt.out) end
print(('trained %d tokens'):format(mine:vocab_size()))
print('ids ' .. table.concat(mine:encode(opt.text), ' '))
os.exit(text == opt.text and 0 or 1)
