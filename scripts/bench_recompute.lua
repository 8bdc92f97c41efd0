-- Activation recomputation on one rank: the CPU bench shape (h 384, s 512, a
-- 6, 6 layers) without recomputation, with selective recomputation (the
-- attention core's probabilities computed again in backward) and with full
-- recomputation (each layer's forward again), the same batch. Prints each
-- step's time and the activations kept for backward (the rank's peak), then
-- the ratios against no recomputation measured in the same run.
--   build/ptdp scripts/bench_recompute.lua [--iters 3]
local ptdp = require 'ptdp'
local flags = require 'ptdp.flags'

local config, opts, given = flags.parse(arg, {
  iters = { default = 3, integer = true, min = 1, help = 'timed steps per granularity' },
  warmup = { default = 1, integer = true, min = 0, help = 'untimed steps first' },
}, {
  num_layers = 6, hidden_size = 384, num_attention_heads = 6, seq_length = 512,
  micro_batch_size = 4, global_batch_size = 8, train_iters = 1000000,
  lr = 1e-4, min_lr = 1e-5, lr_decay_style = 'constant', vocab_size = 8192,
  hidden_dropout = 0.1, attention_dropout = 0.1, data_path = 'data/fortunes.ptdp',
})
require('ptdp.bench').refuse_untimed(given, config)  -- no saves or exits in the timed steps

-- The default dataset is tokenized on first use; a --data-path must exist.
-- (Every granularity's configuration is checked below, before any runs.)
config.data_path = ptdp.dataset { path = config.data_path, given = given.data_path,
                                  corpus = '/usr/share/games/fortunes' }

local granularities = { 'none', 'selective', 'full' }
local configs = require('ptdp.bench').variants(ptdp, config, given, {
  { recompute_granularity = 'none' }, { recompute_granularity = 'selective' },
  { recompute_granularity = 'full' } }, 'it runs every granularity')

local res = {}
for i, granularity in ipairs(granularities) do
  local c = configs[i]
  local trainer = ptdp.trainer(c)
  for _ = 1, opts.warmup do trainer:step() end
  local ms = 0
  for _ = 1, opts.iters do ms = ms + trainer:step().elapsed_ms end
  local peak = trainer:rank_report(0).peak_activation_bytes
  res[granularity] = { ms = ms / opts.iters, peak = peak }
  print(string.format('%-9s step %.0f ms, activations kept %.1f MB', granularity, ms / opts.iters,
                      peak / 1e6))
  trainer = nil
  collectgarbage()
end
print(string.format('step_selective/none=%.3f step_full/none=%.3f step_selective/full=%.3f ' ..
                    'act_selective/none=%.3f act_full/none=%.3f',
                    res.selective.ms / res.none.ms, res.full.ms / res.none.ms,
                    res.selective.ms / res.full.ms, res.selective.peak / res.none.peak,
                    res.full.peak / res.none.peak))
