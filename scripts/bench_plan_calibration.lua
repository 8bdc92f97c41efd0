-- Does the planner predict ptdp's own runs? Calibrates this machine (or loads
-- a saved calibration), then for several layouts of a small GPT on thread
-- ranks (serial; t=2; d=2; p=2 with 1F1B; p=2 interleaved with v=2; full
-- recomputation serial and with 1F1B; a few
-- micro-batch sizes) predicts the iteration time with `ptdp plan` and
-- measures it with the trainer: warm-up steps, then the median of the timed
-- ones. Other processes only ever slow a step down, so the layouts are
-- measured in `--rounds` passes and each keeps its lowest median. Prints
-- predicted, measured and their ratio per layout; the last line is
-- machine-readable.
--   build/ptdp scripts/bench_plan_calibration.lua [--iters 5] [--rounds 2]
--       [--machine FILE | --save-machine FILE]
-- On 2 cores the parallel layouts are 2 ranks of one thread each, the serial
-- ones one rank of two threads (ptdp gives each rank cores / ranks threads).
local ptdp = require 'ptdp'
local flags = require 'ptdp.flags'

local config, opts, given = flags.parse(arg, {
  iters = { default = 5, integer = true, min = 1, help = 'timed steps per layout and round (their median is taken)' },
  warmup = { default = 2, integer = true, min = 0, help = 'untimed steps first' },
  rounds = { default = 2, integer = true, min = 1, help = 'passes over the layouts; each layout keeps its lowest median' },
  machine = { default = '', help = 'a calibrated machine JSON to use (default: calibrate now)' },
  save_machine = { default = '', help = 'write the calibration to this JSON file' },
  ranks = { default = 2, integer = true, min = 2, help = 'ranks of the parallel layouts (t, d or p)' },
  corpus = { default = '/usr/share/games/fortunes', help = 'text the dataset is made from when missing' },
  corpus_format = { default = 'fortune', choices = { 'fortune', 'lines', 'file' },
                    help = 'its format: fortune, lines, file' },
}, {
  num_layers = 4, hidden_size = 256, num_attention_heads = 4, seq_length = 128,
  micro_batch_size = 1, global_batch_size = 8, train_iters = 1000000, vocab_size = 512,
  lr = 1e-4, min_lr = 1e-5, lr_decay_style = 'constant',
  hidden_dropout = 0.1, attention_dropout = 0.1, data_path = 'data/fortunes.ptdp',
})
require('ptdp.bench').refuse_untimed(given, config)  -- no saves or exits in the timed steps

-- What the benchmark sets itself is refused when given (it would be
-- overwritten per layout), and so are --machine with --save-machine (the
-- first loads a calibration, the second writes a new one).
for _, key in ipairs { 'tensor_model_parallel_size', 'pipeline_model_parallel_size', 'data_parallel_size',
                       'micro_batch_size', 'recompute_granularity', 'pipeline_schedule',
                       'num_layers_per_virtual_pipeline_stage' } do
  if given[key] then
    ptdp.say(string.format("bench_plan_calibration: flag '--%s' is this benchmark's to set (it " ..
                           'measures its own list of layouts): leave it out', (key:gsub('_', '-'))))
    os.exit(2)
  end
end
if opts.machine ~= '' and opts.save_machine ~= '' then
  ptdp.say('bench_plan_calibration: give --machine (use a calibration) or --save-machine ' ..
           '(calibrate now and keep it), not both')
  os.exit(2)
end
-- The output is checked before any work (a dataset made from --corpus included).
if opts.save_machine ~= '' then ptdp.check_output(opts.save_machine, '--save-machine', false, 'machine') end

local n = opts.ranks
local L, h = tonumber(config.num_layers), tonumber(config.hidden_size)
local gbs, seq = tonumber(config.global_batch_size), tonumber(config.seq_length)
local model = {
  num_layers = L, hidden_size = h, num_attention_heads = tonumber(config.num_attention_heads),
  seq_length = seq, vocab_size = tonumber(config.vocab_size), global_batch_size = gbs,
  fp32 = true, recompute_granularity = 'none',
}

-- The layouts measured, each checked before any work (a model they cannot
-- all take was refused only after the calibration).
local layouts = {}
local function add(name, t, p, d, b, v, recompute)
  layouts[#layouts + 1] = { name = name, t = t, p = p, d = d, b = b, v = v or 1,
                            recompute = recompute }
end
add('serial', 1, 1, 1, 1)
add('serial', 1, 1, 1, 2)
add('serial', 1, 1, 1, 8)
add('tensor', n, 1, 1, 1)
add('tensor', n, 1, 1, 4)
add('data', 1, 1, n, 1)
add('data', 1, 1, n, 4)
add('1f1b', 1, n, 1, 1)
add('1f1b', 1, n, 1, 2)
add('interleaved', 1, n, 1, 1, 2)
add('interleaved', 1, n, 1, 2, 2)
-- Full recomputation: every layer's forward again in the backward.
add('recompute', 1, 1, 1, 2, 1, true)
add('1f1b+recomp', 1, n, 1, 2, 1, true)

local function layout_config(layout)
  local c = {}
  for k, v in pairs(config) do c[k] = v end
  c.tensor_model_parallel_size, c.pipeline_model_parallel_size = layout.t, layout.p
  c.data_parallel_size, c.micro_batch_size = layout.d, layout.b
  if layout.recompute then c.recompute_granularity = 'full' end
  if layout.v > 1 then
    c.num_layers_per_virtual_pipeline_stage = L / (layout.p * layout.v)
    c.pipeline_schedule = 'interleaved'
  elseif layout.p > 1 then
    c.pipeline_schedule = '1f1b'
  end
  return c
end
for _, lay in ipairs(layouts) do
  local ok_layout, why = true, nil
  if L and L % (lay.p * lay.v) ~= 0 then
    ok_layout, why = false, string.format('--num-layers (%d) must be a multiple of p x v = %d', L, lay.p * lay.v)
  else
    ok_layout, why = pcall(ptdp.check_config, layout_config(lay))
  end
  if not ok_layout then
    ptdp.say(string.format('bench_plan_calibration: the model cannot run in the %s layout ' ..
                           '(t=%d p=%d d=%d b=%d v=%d), one of those it measures: %s', lay.name,
                           lay.t, lay.p, lay.d, lay.b, lay.v, (tostring(why):gsub('^[^:]+:%d+: ', ''))))
    os.exit(2)
  end
end

-- The default dataset is tokenized on first use; a --data-path must exist
-- unless --corpus says what to make it from.
local data_path, _, made_now = ptdp.dataset { path = config.data_path, given = given.data_path,
                                             create = given.corpus, corpus = opts.corpus,
                                             format = opts.corpus_format }
config.data_path = data_path
if given.corpus_format and not given.corpus and not made_now then  -- said, not silent
  ptdp.say(string.format("bench_plan_calibration: --data-path '%s' exists: measuring on it " ..
                         '(--corpus-format reads a corpus only when a dataset is made)',
                         config.data_path))
end

-- A calibration only for this run lives in a directory of its own, removed
-- however the run ends (os.tmpname's file stayed behind in /tmp).
local tmpdir = (opts.machine == '' and opts.save_machine == '') and
               ptdp.make_temp_dir(require('ptdp.bench').temp_dir(), 'ptdp_plan_calibration.') or nil
local ok, err = pcall(function()
  -- Calibrate once (or load), then every prediction reads the same machine file.
  local machine = opts.machine
  if machine == '' then
    machine = opts.save_machine ~= '' and opts.save_machine or tmpdir .. '/machine.json'
    local cal = {}
    for k, v in pairs(model) do cal[k] = v end
    cal.num_gpus, cal.calibrate, cal.save_machine = 1, true, machine
    local report = ptdp.plan(cal).text  -- the text report holds what was measured
    for line in report:gmatch('[^\n]+') do
      if line:find('calibrated this CPU', 1, true) then print(line:gsub('^%s+', '')) end
    end
  end

  local function predict(layout)
    local q = {}
    for k, v in pairs(model) do q[k] = v end
    q.machine, q.num_gpus = machine, layout.t * layout.p * layout.d
    q.t, q.p, q.d, q.b, q.v = layout.t, layout.p, layout.d, layout.b, layout.v
    if layout.recompute then q.recompute_granularity = 'full' end
    if layout.p > 1 then q.pipeline_schedule = layout.v > 1 and 'interleaved' or '1f1b' end
    local r = ptdp.plan(q)
    assert(r.best, 'the planner has no prediction for ' .. layout.name)
    return r.best.iteration_s
  end

  local median = require('ptdp.bench').median

  local function measure(layout)
    local trainer = ptdp.trainer(layout_config(layout))
    for _ = 1, opts.warmup do trainer:step() end
    local times = {}
    for i = 1, opts.iters do times[i] = trainer:step().elapsed_ms / 1e3 end
    trainer = nil
    collectgarbage()
    local lo, hi = math.huge, 0
    for _, x in ipairs(times) do lo, hi = math.min(lo, x), math.max(hi, x) end
    return median(times), (hi - lo) / median(times)
  end

  print(string.format('GPT l=%d h=%d a=%d s=%d V=%d, global batch %d, fp32; %d warm-up + median of ' ..
                      '%d steps, lowest of %d rounds', L, h, model.num_attention_heads, seq,
                      model.vocab_size, gbs, opts.warmup, opts.iters, opts.rounds))
  for _, lay in ipairs(layouts) do lay.pred = predict(lay) end
  for _ = 1, opts.rounds do
    for _, lay in ipairs(layouts) do
      local meas, spread = measure(lay)
      if not lay.meas or meas < lay.meas then lay.meas, lay.spread = meas, spread end
      lay.worst = math.max(lay.worst or 0, meas)
    end
  end
  print(string.format('%-12s %2s %2s %2s %2s %2s %3s  %13s  %12s  %6s  %7s  %7s', 'layout', 't', 'p', 'd',
                      'b', 'v', 'm', 'predicted(ms)', 'measured(ms)', 'ratio', 'spread', 'rounds'))
  local sum, worst = 0, 0
  for _, lay in ipairs(layouts) do
    local ratio = lay.pred / lay.meas
    local err = math.abs(ratio - 1)
    sum, worst = sum + err, math.max(worst, err)
    -- spread: (slowest - fastest) / median step of the kept round; rounds: the
    -- slowest round's median over the kept one, minus 1 (how loaded the machine was).
    print(string.format('%-12s %2d %2d %2d %2d %2d %3d  %13.2f  %12.2f  %6.3f  %6.1f%%  %6.1f%%', lay.name,
                        lay.t, lay.p, lay.d, lay.b, lay.v, gbs / (lay.b * lay.d), 1e3 * lay.pred,
                        1e3 * lay.meas, ratio, 100 * lay.spread, 100 * (lay.worst / lay.meas - 1)))
  end
  print(string.format('layouts=%d mean_abs_rel_err=%.4f max_abs_rel_err=%.4f', #layouts, sum / #layouts, worst))
end)
if tmpdir then ptdp.remove_temp_dir(tmpdir) end
if not ok then
  ptdp.say('bench_plan_calibration: ' .. tostring(err):gsub('^[^:]*:%d+: ', ''))
  os.exit(1)
end
