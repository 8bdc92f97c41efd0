-- module_data.lua JSONL TEXT TMPDIR — the ptdp module's data calls, every
-- result asserted here: tokenize into Megatron's indexed dataset, a blend
-- given as a table, trainer:log_json() and ptdp.append_line.
local ptdp = require 'ptdp'

local jsonl, text, tmp = arg[1], arg[2], arg[3]
assert(jsonl and text and tmp, 'usage: ptdp module_data.lua JSONL TEXT TMPDIR')

local function expect_error(fn, wanted)
  local ok, err = pcall(fn)
  assert(not ok, 'no error; expected one containing: ' .. wanted)
  assert(tostring(err):find(wanted, 1, true),
         string.format('error "%s" does not contain "%s"', tostring(err), wanted))
end

-- Megatron's format from JSON lines and from plain lines.
local docs, toks, a = ptdp.tokenize { inputs = jsonl, output_prefix = tmp .. '/mod_a',
                                      json_keys = { 'text' }, append_eod = true }
assert(docs == 200 and toks == 7670, string.format('jsonl: %s documents, %s tokens', docs, toks))
assert(a == tmp .. '/mod_a_text_document', a)
local docs_b, toks_b, b = ptdp.tokenize { inputs = text, output_prefix = tmp .. '/mod_b', format = 'lines' }
assert(docs_b == 200 and toks_b == 7470, 'lines without EOD: ' .. toks_b)
expect_error(function() ptdp.tokenize { inputs = jsonl, output_prefix = tmp .. '/x', json_keys = 'nope' } end,
             "no key 'nope'")
expect_error(function() ptdp.tokenize { inputs = jsonl, output = tmp .. '/x.ptdp', output_prefix = tmp .. '/x' } end,
             'not both')
-- workers: the same counts from two threads; a bad count names the range.
local docs_w, toks_w = ptdp.tokenize { inputs = jsonl, output_prefix = tmp .. '/mod_w',
                                       append_eod = true, workers = 2 }
assert(docs_w == 200 and toks_w == 7670, string.format('workers = 2: %s, %s', docs_w, toks_w))
expect_error(function() ptdp.tokenize { inputs = text, output = tmp .. '/w.ptdp', workers = -1 } end,
             'workers must be in [0, 1024]')

local function config(path)
  return { model = { num_layers = 1, hidden_size = 32, num_attention_heads = 2, seq_length = 16,
                     hidden_dropout = 0, attention_dropout = 0 },
           optimizer = { lr = 1e-3, warmup_iters = 1 }, data = { path = path, split = '90,10' },
           micro_batch_size = 2, global_batch_size = 4, train_iters = 2, num_threads = 1, seed = 3 }
end

-- A blend as a Lua list is the blend as a string; it is neither of its parts.
local tr = ptdp.trainer(config { 0.25, a, 0.75, b })
expect_error(function() tr:log_json() end, 'no log record before the first')
local m = tr:step()
local same = ptdp.trainer(config('0.25 ' .. a .. ' 0.75 ' .. b)):step()
assert(same.loss == m.loss, string.format('table %.17g vs string %.17g', m.loss, same.loss))
assert(ptdp.trainer(config(a)):step().loss ~= m.loss, 'the blend trained like its first part')
assert(ptdp.trainer(config(b)):step().loss ~= m.loss, 'the blend trained like its second part')
expect_error(function() ptdp.trainer(config { 0.5, a, 0.5 }) end, 'odd number')

-- The log record is the step's: same iteration, loss, learning rate.
local rec = tr:log_json()
assert(rec:match('^{"kind": "train", "iteration": 1, '), rec)
local loss = tonumber(rec:match('"lm_loss": ([^,}]+)'))
local lr = tonumber(rec:match('"lr": ([^,}]+)'))
assert(loss == m.loss and lr == m.lr, rec)

-- append_line: fresh replaces, otherwise appends; bad targets are refused.
local f = tmp .. '/module_data.jsonl'
os.remove(f)  -- (an earlier run's file, of whatever format that run wrote)
ptdp.append_line(f, '{"kind": "run", "old": true}', true)
ptdp.append_line(f, '{"kind": "run", "a": 1}', true)
ptdp.append_line(f, rec)
local h = assert(io.open(f))
local content = h:read('*a')
h:close()
assert(content == '{"kind": "run", "a": 1}\n' .. rec .. '\n', content)
-- A metrics log begins with its run record: what tells it from a JSONL corpus.
expect_error(function() ptdp.append_line(tmp .. '/no_run.jsonl', '{"a": 1}', true) end,
             'a metrics log begins with its run record')
expect_error(function() ptdp.append_line(tmp, '{}') end, 'is a directory')
expect_error(function() ptdp.append_line(f, '{"two":\n"lines"}') end, 'must be one line')
print('module_data: PASS')
