-- ptdp.plan{...} from Lua: the table it returns, checked field by field, and
-- its errors. Run by the launcher: build/ptdp tests/plan/plan_api.lua
package.path = arg[0]:match('^(.*)/[^/]*$') .. '/../lua/?.lua;' .. package.path
local ptdp = require 'ptdp'
local T = require 'testutil'

-- The paper's 1T row: its layout given in full is the one evaluated.
local row = { num_layers = 128, hidden_size = 25600, num_attention_heads = 160,
              global_batch_size = 3072, num_gpus = 3072, machine = 'selene', fp16 = true,
              recompute_granularity = 'full' }
local fixed = {}
for k, v in pairs(row) do fixed[k] = v end
fixed.t, fixed.p, fixed.b, fixed.v = 8, 64, 1, 2
local r = ptdp.plan(fixed)
T.check(#r.layouts == 1 and r.best == r.layouts[1], 'a layout given in full is the only one ranked')
local b = r.best
T.check(b.tensor == 8 and b.pipeline == 64 and b.data == 6 and b.micro_batch == 1 and b.virtual == 2,
        'the layout asked for: t 8, p 64, d 6, b 1, v 2')
T.check(b.schedule == 'interleaved' and b.recompute == 'full', 'interleaved, full recomputation')
-- Published 163 TFLOP/s; the test of record is test_plan's Table 1 (10%).
T.check(math.abs(b.tflops_per_gpu / 163 - 1) < 0.10, 'within 10% of the published 163 TFLOP/s: ' .. b.tflops_per_gpu)
T.check(b.memory_gib > 0 and b.memory_gib < 80 and b.fits == 1, 'fits in 80 GiB: ' .. b.memory_gib)
T.check(b.bubble > 0 and b.bubble < 0.2, 'a bubble, small with v = 2: ' .. b.bubble)
-- Days for 300B tokens follow from the iteration time.
local iters = 300e9 / (3072 * 2048)
T.check(math.abs(b.days - iters * b.iteration_s / 86400) < 0.01 * b.days, 'days = iterations x iteration time')
T.check(r.text:find('tflops_per_gpu=', 1, true) ~= nil, 'the text report is there too')
local last = r.text:match('([^\n]+)\n$')
T.check(last:match('^tflops_per_gpu=[0-9.]+ iteration_s=[0-9.e+]+ memory_gib=[0-9.]+ tensor=8 pipeline=64 data=6 micro_batch=1 virtual=2$') ~= nil,
        'last line machine-readable: ' .. last)

-- Free choice: ranked fastest first, none slower than the paper's layout.
local free = ptdp.plan(row)
T.check(#free.layouts == 5, 'top 5 by default')
for i = 2, #free.layouts do
  T.check(free.layouts[i - 1].iteration_s <= free.layouts[i].iteration_s, 'ranked by iteration time #' .. i)
end
T.check(free.best.iteration_s <= b.iteration_s * (1 + 1e-9), 'the free choice is at least as fast as the paper\'s')
T.check(#free.invalid > 0 and free.invalid[1].reason ~= nil, 'layouts that cannot work come with a reason: ' ..
        free.invalid[1].label .. ': ' .. free.invalid[1].reason)
T.check(#free.too_big > 0 and free.too_big[1].fits == 0, 'layouts over the memory are listed')

-- explain
local ex = {}
for k, v in pairs(row) do ex[k] = v end
ex.explain = 't=8,p=64,b=1,v=1,no-sg'
local e = ptdp.plan(ex)
T.check(e.explained ~= nil and e.explained.virtual == 1 and e.explained.scatter_gather == 0, 'explained layout')
T.check(e.explained.iteration_s > free.best.iteration_s, 'slower than the best')
T.check(e.text:find('explain t=8,p=64,d=6,b=1,v=1,1f1b,full,no-sg', 1, true) ~= nil, 'explained in the text')

-- errors
T.expect_error('t=7 does not divide the attention heads (160)', 'bad t',
               ptdp.plan, { num_layers = 128, hidden_size = 25600, num_attention_heads = 160,
                            global_batch_size = 3072, num_gpus = 3584, t = 7, p = 1, b = 1 })
T.expect_error("unknown machine 'dgx-a100'; known presets: dgx-h100, selene", 'unknown machine',
               ptdp.plan, { num_layers = 2, hidden_size = 64, num_attention_heads = 2,
                            global_batch_size = 8, num_gpus = 8, machine = 'dgx-a100' })
T.expect_error("unknown plan option 'layers'", 'unknown option',
               ptdp.plan, { layers = 2, hidden_size = 64, num_attention_heads = 2,
                            global_batch_size = 8, num_gpus = 8 })
T.expect_error('takes a table', 'not a table', ptdp.plan, 'num_layers=2')
print('plan_api: PASS (' .. T.checks .. ' checks)')
