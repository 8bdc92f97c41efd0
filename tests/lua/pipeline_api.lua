-- pipeline_api.lua CORPUS TMPDIR — the pipeline parts of the `ptdp` Lua module:
-- the parallel.v / schedule / scatter_gather aliases and the recompute group,
-- trainer:rank_report, trainer:replayed_bubble, trainer:op_seconds, ptdp.render_timeline, and the
-- --no-scatter-gather-tensors-in-pipeline switch of ptdp.flags. Exits non-zero
-- (with the failed check) on the first failure (tests/capi/tests.cmake:
-- lua_pipeline_api).
local ptdp = require 'ptdp'
local flags = require 'ptdp.flags'
local util = require 'testutil'
local check, expect_error = util.check, util.expect_error

local corpus, tmpdir = util.args('pipeline_api.lua')
local data = tmpdir .. '/pipeline_api.ptdp'
ptdp.tokenize { inputs = { corpus }, output = data, format = 'lines' }

local trace, png = tmpdir .. '/pipeline_api_trace.json', tmpdir .. '/pipeline_api.png'
os.remove(trace)
os.remove(png)

-- A table in the grouped form of ARCHITECTURE §7; `changes` overrides groups.
local function config(changes)
  local t = {
    model = { num_layers = 4, hidden_size = 32, num_attention_heads = 2, seq_length = 16,
              hidden_dropout = 0, attention_dropout = 0 },
    parallel = { p = 2, v = 2, schedule = 'interleaved' },
    recompute = { granularity = 'full', method = 'uniform', num_layers = 1 },
    optimizer = { lr = 1e-2, min_lr = 1e-3, warmup_iters = 1 },
    data = { path = data },
    micro_batch_size = 1, global_batch_size = 4, train_iters = 10, eval_iters = 1,
    num_threads = 1, seed = 3, timeline = trace,
  }
  return util.merged(t, changes)
end

-- parallel.v: model chunks per pipeline rank, mapped to
-- num_layers_per_virtual_pipeline_stage = num_layers / (p x v).
expect_error('parallel.v = 3: num_layers (4) must be divisible by p x v (2 x 3 = 6)',
             'v not dividing the layers', ptdp.config, config { parallel = { v = 3 } })
expect_error('must be a whole number in [1, num_layers', 'fractional v', ptdp.config,
             config { parallel = { v = 1.5 } })
expect_error('both set', 'v and num_layers_per_virtual_pipeline_stage together', ptdp.config,
             config { num_layers_per_virtual_pipeline_stage = 1 })
expect_error('pipeline_schedule must be one of', 'bad schedule alias', ptdp.config,
             config { parallel = { schedule = 'zigzag' } })
expect_error('recompute_granularity must be one of', 'bad recompute group value', ptdp.config,
             config { recompute = { granularity = 'partial' } })

local trainer = ptdp.trainer(config())
local layout = trainer:layout()
check(layout.p == 2 and layout.v == 2, 'p = 2 and v = 2 from parallel = { p = 2, v = 2 }')
check(layout.local_ranks == 2 and layout.world_size == 2, 'this process hosts both ranks')
expect_error('not available before the first', 'rank_report before the first step',
             trainer.rank_report, trainer, 0)
expect_error('not available before the first', 'replayed_bubble before the first step',
             trainer.replayed_bubble, trainer)
expect_error('not available before the first', 'rank_reports before the first step',
             trainer.rank_reports, trainer)

for _ = 1, 2 do trainer:step() end
for i = 0, 1 do
  local r = trainer:rank_report(i)
  check(r.world_rank == i and r.pp_rank == i and r.tp_rank == 0 and r.dp_rank == 0,
        'rank_report(' .. i .. ') is pipeline stage ' .. i)
  check(r.step_seconds > 0 and r.compute_seconds > 0 and r.compute_seconds <= r.step_seconds,
        string.format('rank %d: compute %.4f s within the step %.4f s', i, r.compute_seconds,
                      r.step_seconds))
  check(r.idle_fraction >= 0 and r.idle_fraction < 1,
        string.format('rank %d: idle fraction %.3f in [0, 1)', i, r.idle_fraction))
  check(r.peak_activation_bytes > 0, 'rank ' .. i .. ': activations stashed')
  check(r.bytes.pp > 0 and r.calls.pp > 0 and r.seconds.pp >= 0, 'rank ' .. i .. ': pp traffic')
  check(r.bytes.embedding > 0 and r.calls.embedding == 1,
        'rank ' .. i .. ': one tied-embedding all-reduce')
  check(r.bytes.tp == 0 and r.bytes.dp == 0, 'rank ' .. i .. ': no tp or dp traffic (t = d = 1)')
end
check(trainer:rank_report().world_rank == 0, 'rank_report() is local rank 0')
-- rank_reports: every world rank's report on world rank 0 (all local here),
-- the same values as rank_report.
local all = trainer:rank_reports()
check(all ~= nil and all[0] ~= nil and all[1] ~= nil and all[2] == nil,
      'rank_reports holds world ranks 0 and 1')
for i = 0, 1 do
  local a, b, differ = all[i], trainer:rank_report(i), {}
  for k, x in pairs(b) do
    if type(x) == 'table' then
      for g, y in pairs(x) do
        if a[k][g] ~= y then differ[#differ + 1] = k .. '.' .. g end
      end
    elseif a[k] ~= x then
      differ[#differ + 1] = k
    end
  end
  check(#differ == 0, string.format('rank_reports()[%d] equals rank_report(%d)%s', i, i,
                                    #differ > 0 and ' (differ: ' .. table.concat(differ, ', ') .. ')' or ''))
end
expect_error('outside [0, 2)', 'rank_report(2) of two local ranks', trainer.rank_report, trainer, 2)
local bubble = trainer:replayed_bubble()
check(bubble >= 0 and bubble < 2, string.format('replayed bubble %.4f', bubble))
local ops = trainer:op_seconds()
check(ops.forward > 0 and ops.backward > 0 and ops.weight == 0,
      string.format('op_seconds: F %.5f s, B %.5f s, no W under interleaving', ops.forward,
                    ops.backward))

check(ptdp.render_timeline(trace, png) == png, 'render_timeline returns the PNG path')
local head = util.read_all(png):sub(1, 8)
check(head == '\137PNG\r\n\26\n', 'render_timeline wrote a PNG')
expect_error('cannot open the trace', 'render_timeline of a missing trace', ptdp.render_timeline,
             tmpdir .. '/pipeline_api_no_trace.json', png)
expect_error('width', 'render_timeline with a width too small', ptdp.render_timeline, trace, png, 10)
trainer = nil
collectgarbage()

-- Scatter/gather between stages (t = 2): each stage sends 1/t of a boundary
-- tensor and all-gathers it over tp; the Megatron switch turns it off.
local cfg, opts = flags.parse({ '--no-scatter-gather-tensors-in-pipeline', '--iters', '2' },
                              { iters = { default = 1 } }, {})
check(cfg.scatter_gather_tensors_in_pipeline == 0 and opts.iters == 2,
      '--no-scatter-gather-tensors-in-pipeline sets scatter_gather_tensors_in_pipeline = 0')
expect_error('takes no value', 'the switch with a value', flags.parse,
             { '--no-scatter-gather-tensors-in-pipeline=1' }, {}, {})
-- Every 0/1 option of the schema may be given bare, as Megatron's command
-- lines write them; other options still need their value.
local bare = flags.parse({ '--use-flash-attn', '--overlap-grad-reduce', '--async-save', '--bf16',
                           '--seed', '3', '--exit-signal-handler' }, {}, {})
check(bare.use_flash_attn == '1' and bare.overlap_grad_reduce == '1' and bare.async_save == '1' and
      bare.bf16 == '1' and bare.seed == '3' and bare.exit_signal_handler == '1',
      'bare 0/1 options mean 1, the schema says which')
check(flags.parse({ '--use-flash-attn', '0' }, {}, {}).use_flash_attn == '0', 'a switch still takes 0')
expect_error('needs a value', 'a bare option that is no switch', flags.parse, { '--seed' }, {}, {})
-- A flag given again overrides the first, as Megatron's argparse does, with a
-- note on stderr naming both (a wrapper's override is not silent).
do
  local notes, real_stderr = {}, io.stderr
  io.stderr = { write = function(_, text) notes[#notes + 1] = text end }
  local ok, twice = pcall(flags.parse, { '--seed', '3', '--seed', '4', '--no-scatter-gather-tensors-in-pipeline',
                                         '--scatter-gather-tensors-in-pipeline', '1' }, {}, {})
  io.stderr = real_stderr
  check(ok and twice.seed == '4' and twice.scatter_gather_tensors_in_pipeline == '1',
        'a flag given again: the last one is used')
  check(#notes == 2 and notes[1]:find('--seed 3 is given again as --seed 4', 1, true) and
        notes[2]:find('--no-scatter-gather-tensors-in-pipeline is given again as ' ..
                      '--scatter-gather-tensors-in-pipeline 1', 1, true),
        'a flag given again is noted: ' .. table.concat(notes))
end
local function pp_bytes(changes)
  local t = ptdp.trainer(config(changes))
  t:step()
  return t:rank_report(0).bytes.pp
end
local base = { parallel = { t = 2, v = 1, schedule = '1f1b' }, timeline = '' }
local on = pp_bytes(base)
base.parallel.scatter_gather = false
local off = pp_bytes(base)
base.parallel.scatter_gather = nil
base.scatter_gather_tensors_in_pipeline = cfg.scatter_gather_tensors_in_pipeline
local off_flag = pp_bytes(base)
check(off / on > 1.8 and off / on < 2.2,
      string.format('scatter_gather = false sends t = 2 times the pp bytes (%d vs %d)', off, on))
check(off_flag == off, 'the flag and the alias give the same traffic')

print(string.format('pipeline_api: PASS (%d checks)', util.checks))
