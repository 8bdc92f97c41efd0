-- step_tokens_api.lua CORPUS TMPDIR — trainer:step_tokens, batches from the
-- script: on a dataset whose every sample is the same 17 ids, feeding those
-- ids gives the dataset's run bit for bit (serial and t = p = d = 2), in each
-- of the accepted forms (flat table, table of sequences, FFI array); bad
-- batches are refused and change nothing (tests/capi/tests.cmake: lua_step_tokens_api).
local ffi = require 'ffi'
local ptdp = require 'ptdp'
local util = require 'testutil'
local check, expect_error = util.check, util.expect_error

local _, tmpdir = util.args('step_tokens_api.lua')
local seq, batch = 16, 8

-- 14 letters, the newline and the end-of-document token (256): 16 ids per
-- document, so every window of seq + 1 = 17 ids is the same.
local corpus = tmpdir .. '/step_tokens_periodic.txt'
util.write_all(corpus, string.rep('abcdefghijklmn\n', 200))
local data = tmpdir .. '/step_tokens_periodic.ptdp'
ptdp.tokenize { inputs = { corpus }, output = data, format = 'lines' }
local sample = {}
for k = 0, seq do
  sample[k + 1] = k < 14 and 97 + k or k == 14 and 10 or k == 15 and 256 or 97
end
local flat, rows = {}, {}
for i = 1, batch do
  rows[i] = {}
  for k = 1, seq + 1 do
    flat[#flat + 1] = sample[k]
    rows[i][k] = sample[k]
  end
end
local array = ffi.new('int32_t[?]', #flat)
for i = 1, #flat do array[i - 1] = flat[i] end
-- The same ids as an array of sequences, int32_t[batch][seq + 1].
local grid = ffi.new('int32_t[' .. batch .. '][' .. (seq + 1) .. ']')
for i = 1, #flat do grid[math.floor((i - 1) / (seq + 1))][(i - 1) % (seq + 1)] = flat[i] end

local function make(t, p, d)
  return ptdp.trainer {
    model = { num_layers = 2, hidden_size = 32, num_attention_heads = 4, seq_length = seq,
              hidden_dropout = 0.1, attention_dropout = 0.1 },
    parallel = { t = t, p = p, d = d },
    optimizer = { lr = 1e-2, min_lr = 1e-3, warmup_iters = 1 },
    data = { path = data },
    micro_batch_size = 2, global_batch_size = batch, train_iters = 10, num_threads = 1,
  }
end

for _, layout in ipairs { { 1, 1, 1 }, { 2, 2, 2 } } do
  local t, p, d = layout[1], layout[2], layout[3]
  local from_data, fed = make(t, p, d), make(t, p, d)
  local feeds = { function() return fed:step_tokens(flat) end,
                  function() return fed:step_tokens(rows) end,
                  function() return fed:step_tokens(array, #flat) end,
                  function() return fed:step_tokens(grid, #flat) end }
  for k, feed in ipairs(feeds) do
    local a, b = from_data:step(), feed()
    check(a.loss == b.loss and a.grad_norm == b.grad_norm,
          string.format('t=%d p=%d d=%d step %d: loss %.17g equals the dataset step', t, p, d, k, b.loss))
    check(b.iteration == k and b.consumed_samples == k * batch, 'iteration and consumed samples advance')
  end
end

local tr = make(1, 1, 1)
local bad = {}
for i = 1, #flat do bad[i] = flat[i] end
bad[41] = 257
expect_error('token id 257 at index 40 (sequence 2, position 6) is outside the vocabulary [0, 257)',
             'an id past the vocabulary', tr.step_tokens, tr, bad)
bad[41] = 1.5
expect_error('token 40 must be a whole number, got 1.5', 'a fractional id', tr.step_tokens, tr, bad)
local short = {}
for i = 1, 40 do short[i] = flat[i] end
expect_error('136 token ids, got 40', 'a short batch', tr.step_tokens, tr, short)
expect_error('takes a table of token ids', 'a string', tr.step_tokens, tr, 'abc')
expect_error('needs its count', 'an FFI array without its count', tr.step_tokens, tr, array)
expect_error('a table of ids takes no count', 'a table with a count (it was ignored)',
             tr.step_tokens, tr, flat, -1)
-- trainer:agree compares values by their text: a table's is its address.
expect_error("option 'x' must be a string, number or boolean, got the table", 'agree on a table',
             tr.agree, tr, { x = {} })
-- Sequences of the wrong length were flattened and their boundaries moved.
local moved = { {}, {} }
for i = 1, #flat do table.insert(i <= 3 and moved[1] or moved[2], flat[i]) end
for i = 3, #rows do moved[#moved + 1] = rows[i] end
expect_error('step_tokens: sequence 0 has 3 ids; each has seq_length + 1', 'sequences of other lengths',
             tr.step_tokens, tr, moved)
expect_error('an FFI array must hold int32_t, got ctype<double [', 'an FFI array of doubles',
             tr.step_tokens, tr, ffi.new('double[?]', #flat), #flat)
local m = tr:step_tokens(flat)
check(m.iteration == 1 and m.consumed_samples == batch, 'refused batches changed nothing')
print('step_tokens_api: PASS')
