-- Mixed precision against fp32: the same run (bench shape, seed, data) for
-- --steps steps in fp32, bf16 and fp16 (dynamic loss scaling), in one process.
-- Prints each run's loss over its last 10 steps (or all, if fewer), its gap to fp32, its skipped
-- steps and its mean step time (16-bit on the CPU rounds stored values and
-- computes in fp32: the time is the cost of rounding, not a speed-up).
--   build/ptdp scripts/bench_precision.lua [--steps 200]
local ptdp = require 'ptdp'
local flags = require 'ptdp.flags'

local config, opts, given = flags.parse(arg, {
  steps = { default = 200, integer = true, min = 1, help = 'training steps of each run' },
}, {
  num_layers = 6, hidden_size = 384, num_attention_heads = 6, seq_length = 256,
  micro_batch_size = 8, global_batch_size = 8, train_iters = 200,
  lr = 1e-3, min_lr = 1e-4, lr_warmup_iters = 20, lr_decay_style = 'cosine',
  hidden_dropout = 0.1, attention_dropout = 0.1,
  vocab_size = 8192,  -- the bench vocabulary; byte tokens use ids 0..256 of it
  data_path = 'data/fortunes.ptdp',
})
require('ptdp.bench').refuse_untimed(given, config)  -- no saves or exits in the timed steps
-- The default warm-up (20 steps) shortened to a tenth of a shorter run, which
-- it would otherwise outlast.
if not given.lr_warmup_iters then config.lr_warmup_iters = math.min(20, math.floor(opts.steps / 10)) end
-- The three runs (--steps steps each), checked before the dataset is made or
-- any runs: fp32, then bf16 and fp16, which the benchmark sets itself.
local configs = require('ptdp.bench').variants(ptdp, config, given, {
  { train_iters = opts.steps, bf16 = 0, fp16 = 0 }, { train_iters = opts.steps, bf16 = 1, fp16 = 0 },
  { train_iters = opts.steps, bf16 = 0, fp16 = 1 } }, 'it runs fp32, bf16 and fp16 for --steps')

-- The default dataset is tokenized on first use; a --data-path must exist.
local data = ptdp.dataset { path = config.data_path, given = given.data_path,
                            corpus = '/usr/share/games/fortunes' }

-- The loss is the mean of the last 10 steps (all of them where --steps is fewer).
local last = math.min(10, opts.steps)
local function run(c)
  c.data_path = data
  local trainer = ptdp.trainer(c)
  local tail, ms, m = 0, 0, nil
  for it = 1, opts.steps do
    m = trainer:step()
    ms = ms + m.elapsed_ms
    if it > opts.steps - last then tail = tail + m.loss / last end
  end
  return { loss = tail, ms = ms / opts.steps, skipped = m.skipped_iters, scale = m.loss_scale }
end

local f32 = run(configs[1])
print(string.format('fp32: loss over the last %d steps %.5f, %.1f ms/step', last, f32.loss, f32.ms))
local out = { string.format('loss_fp32=%.5f', f32.loss) }
local skipped_all = {}
for i, dt in ipairs { 'bf16', 'fp16' } do
  local r = run(configs[i + 1])
  local rel = (r.loss - f32.loss) / f32.loss
  print(string.format('%s: loss over the last %d steps %.5f (%+.2e relative to fp32), %d skipped steps, loss scale %g, %.1f ms/step (%.2fx fp32)',
                      dt, last, r.loss, rel, r.skipped, r.scale, r.ms, r.ms / f32.ms))
  out[#out + 1] = string.format('loss_%s=%.5f rel_%s=%.2e', dt, r.loss, dt, rel)
  if r.skipped >= opts.steps then  -- (its loss is the initial model's: no comparison)
    skipped_all[#skipped_all + 1] = dt
  end
end
print(table.concat(out, ' '))
if #skipped_all > 0 then
  ptdp.say(string.format('bench_precision: every step of the %s run skipped its update (an ' ..
                         'overflow or NaN each time): its figures compare nothing; give more ' ..
                         '--steps', table.concat(skipped_all, ' and ')))
  os.exit(1)
end
