-- Pipeline schedules on thread ranks: an 8-layer model over p = 4 stages with
-- the same global batch, run with GPipe, 1F1B, the interleaved 1F1B (one
-- layer per model chunk: v = 2) and the zero-bubble ZB-H1 and ZB-V (v = 2 in
-- a V). For each: tokens/s, the share of the step the ranks sit idle (wall
-- clock, mean over ranks), the bubble replayed from the measured op times of
-- the last step, and its formula: (p-1)/m, and (p-1)/(v m) interleaved (the
-- paper's); for the zero-bubble schedules, with the measured mean F, B and W
-- of one chunk, (p-1)(F+B-W) / (m(F+B+W)) for ZB-H1 and
-- (p-1) max(B, 2(B-W)) / (2m(F+B+W)) for ZB-V (docs/pipeline.md). Then the
-- zero-bubble steps' speed and bubbles against 1F1B's, and the timeline of an
-- interleaved step.
--   build/ptdp scripts/bench_pipeline.lua [--iters 3] [--png pipeline_timeline.png]
-- The byte vocabulary keeps the LM head small, so the last stage is not much
-- heavier than the others. On few cores the ranks share them: in the warm-up
-- and cool-down, where fewer ranks are busy, their ops run faster, so both the
-- replayed bubble and the idle share come out below the formula (which
-- assumes one device per rank and ops of equal length).
local ptdp = require 'ptdp'
local flags = require 'ptdp.flags'
local bench = require 'ptdp.bench'

local config, opts, given = flags.parse(arg, {
  iters = { default = 3, integer = true, min = 1, help = 'timed steps per schedule' },
  warmup = { default = 2, integer = true, min = 0, help = 'untimed steps first' },
  png = { default = bench.temp_dir() .. '/pipeline_timeline.png',
          help = 'picture of an interleaved step' },
  trace = { default = bench.temp_dir() .. '/pipeline_timeline.json',
            help = 'Chrome trace of that step (Perfetto)' },
  width = { default = 1600, integer = true, min = 140, max = 8192,  -- (ptdp.render_timeline's range)
            help = 'width of the picture in pixels' },
}, {
  num_layers = 8, hidden_size = 384, num_attention_heads = 6, seq_length = 256,
  micro_batch_size = 2, global_batch_size = 16, train_iters = 1000000,
  pipeline_model_parallel_size = 4, vocab_size = 0,
  lr = 1e-4, min_lr = 1e-5, lr_decay_style = 'constant',
  hidden_dropout = 0.1, attention_dropout = 0.1, data_path = 'data/fortunes.ptdp',
})
require('ptdp.bench').refuse_untimed(given, config)  -- no saves or exits in the timed steps
if given.timeline then  -- (each schedule's run would replace it, the interleaved one with --trace)
  ptdp.say("bench_pipeline: --timeline is this benchmark's to set: the interleaved step's " ..
           'trace goes to --trace, and its picture to --png')
  os.exit(2)
end

-- The outputs and every schedule's layout are checked now, not after the
-- first schedules have run: against the dataset (an input once resolved
-- below, a missing default made first) and against each other.
config.data_path = ptdp.dataset { path = config.data_path, given = given.data_path,
                                  corpus = '/usr/share/games/fortunes' }
ptdp.check_output(opts.png, '--png', false, 'png')
ptdp.check_output(opts.trace, '--trace', false, 'trace')
if ptdp.same_output(opts.png, opts.trace) then
  ptdp.say(string.format("bench_pipeline: --png '%s' and --trace '%s' are one file: give " ..
                         'each its own', opts.png, opts.trace))
  os.exit(2)
end
-- ZB-V runs two chunks per rank in a V: num_layers / (2p) layers each.
local p_size, layers = tonumber(config.pipeline_model_parallel_size), tonumber(config.num_layers)
if layers % (2 * p_size) ~= 0 then
  ptdp.say(string.format('bench_pipeline: --num-layers %d: the ZB-V run puts two chunks of ' ..
                         'equal layers on each of the %d ranks, so it must be a multiple of ' ..
                         '2 x --pipeline-model-parallel-size = %d', layers, p_size, 2 * p_size))
  os.exit(2)
end
local zbv_layers = layers / (2 * p_size)
require('ptdp.bench').variants(ptdp, config, given, {
  { pipeline_schedule = 'gpipe' }, { pipeline_schedule = 'zbh1' },
  { pipeline_schedule = 'zbv', num_layers_per_virtual_pipeline_stage = zbv_layers },
  { pipeline_schedule = '1f1b' },
  { pipeline_schedule = 'interleaved', num_layers_per_virtual_pipeline_stage = 1 },
}, 'it runs every schedule')


local p = tonumber(config.pipeline_model_parallel_size)
local gbs, seq = tonumber(config.global_batch_size), tonumber(config.seq_length)

local function run(name, changes)
  local c = {}
  for k, v in pairs(config) do c[k] = v end
  for k, v in pairs(changes) do c[k] = v end
  local trainer = ptdp.trainer(c)
  local layout = trainer:layout()
  local v = layout.v
  local m = gbs / (tonumber(c.micro_batch_size) * layout.d)
  for _ = 1, opts.warmup do trainer:step() end
  local ms, idle, peak = 0, 0, 0
  for _ = 1, opts.iters do
    ms = ms + trainer:step().elapsed_ms
    for i = 0, layout.local_ranks - 1 do
      local r = trainer:rank_report(i)
      idle = idle + r.idle_fraction / (layout.local_ranks * opts.iters)
      peak = math.max(peak, r.peak_activation_bytes)
    end
  end
  local t = trainer:op_seconds()
  local formula = (p - 1) / (v * m)
  if c.pipeline_schedule == 'zbh1' then
    formula = (p - 1) * (t.forward + t.backward - t.weight) / (m * (t.forward + t.backward + t.weight))
  elseif c.pipeline_schedule == 'zbv' then
    formula = (p - 1) * math.max(t.backward, 2 * (t.backward - t.weight)) /
              (2 * m * (t.forward + t.backward + t.weight))
  end
  local res = {
    tokens_per_s = gbs * seq * opts.iters / (ms / 1e3), idle = idle, step_ms = ms / opts.iters,
    bubble = trainer:replayed_bubble(), formula = formula, peak = peak,
  }
  print(string.format('%-11s p=%d v=%d m=%d: step %.0f ms, %.1f tokens/s, idle %.1f%% of the step ' ..
                      '(wall clock, mean over ranks), replayed bubble %.3f, formula %.3f, ' ..
                      'peak activations %.1f MB', name, p, v, m, ms / opts.iters, res.tokens_per_s,
                      100 * res.idle, res.bubble, res.formula, res.peak / 1e6))
  return res
end

local gpipe = run('gpipe', { pipeline_schedule = 'gpipe' })
collectgarbage()
local zbh1 = run('zbh1', { pipeline_schedule = 'zbh1' })
collectgarbage()
local zbv = run('zbv', { pipeline_schedule = 'zbv', num_layers_per_virtual_pipeline_stage = zbv_layers })
collectgarbage()
local one_f_one_b = run('1f1b', { pipeline_schedule = '1f1b' })
collectgarbage()
-- The interleaved run also writes each step's timeline (each replaces the last,
-- by the writers' rules: a link keeps pointing at its file).
local interleaved = run('interleaved', { pipeline_schedule = 'interleaved',
                                         num_layers_per_virtual_pipeline_stage = 1,
                                         timeline = opts.trace })
collectgarbage()
ptdp.render_timeline(opts.trace, opts.png, opts.width)
print(string.format('timeline of the last interleaved step: %s (trace %s)', opts.png, opts.trace))
print(string.format('bubble_1f1b=%.4f formula_1f1b=%.4f bubble_interleaved=%.4f formula_interleaved=%.4f',
                    one_f_one_b.bubble, one_f_one_b.formula, interleaved.bubble,
                    interleaved.formula))
print(string.format('bubble_zbh1=%.4f formula_zbh1=%.4f bubble_zbv=%.4f formula_zbv=%.4f',
                    zbh1.bubble, zbh1.formula, zbv.bubble, zbv.formula))
-- Against 1F1B in the same run: the replayed bubbles (as if each rank had
-- its own device) and the measured steps (thread ranks sharing this
-- machine's cores).
print(string.format('zbh1/1f1b: bubble %.3f, step time %.3f; zbv/1f1b: bubble %.3f, step time %.3f',
                    zbh1.bubble / one_f_one_b.bubble, zbh1.step_ms / one_f_one_b.step_ms,
                    zbv.bubble / one_f_one_b.bubble, zbv.step_ms / one_f_one_b.step_ms))
