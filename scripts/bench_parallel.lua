-- Tensor/data parallelism on thread ranks: the CPU bench shape at (t, d) =
-- (1,1), (2,1), (1,2) with the same global batch; tokens/s and the share of
-- the step rank 0 spends inside communication (waiting included).
--   build/ptdp scripts/bench_parallel.lua [--iters 5]
local ptdp = require 'ptdp'
local flags = require 'ptdp.flags'

local config, opts, given = flags.parse(arg, {
  iters = { default = 5, integer = true, min = 1, help = 'timed steps per configuration' },
  warmup = { default = 1, integer = true, min = 0, help = 'untimed steps first' },
}, {
  num_layers = 6, hidden_size = 384, num_attention_heads = 6, seq_length = 256,
  micro_batch_size = 8, global_batch_size = 16, train_iters = 1000000,
  lr = 1e-4, min_lr = 1e-5, lr_decay_style = 'constant', vocab_size = 8192,
  hidden_dropout = 0.1, attention_dropout = 0.1, data_path = 'data/fortunes.ptdp',
})
require('ptdp.bench').refuse_untimed(given, config)  -- no saves or exits in the timed steps

-- The default dataset is tokenized on first use; a --data-path must exist.
-- (Checked with the layouts below, before any runs.)
config.data_path = ptdp.dataset { path = config.data_path, given = given.data_path,
                                  corpus = '/usr/share/games/fortunes' }

-- Each layout, checked before any runs; two micro-batches per replica, so the
-- global batch is a multiple of 4 (2 micro-batches x 2 replicas at d = 2).
if tonumber(config.global_batch_size) % 4 ~= 0 then
  ptdp.say(string.format('bench_parallel: --global-batch-size %s: the bench gives each data ' ..
                         'replica two micro-batches at d = 1 and 2, so it must be a multiple ' ..
                         'of 4', tostring(config.global_batch_size)))
  os.exit(2)
end
local layouts = {}
for _, layout in ipairs { { 1, 1 }, { 2, 1 }, { 1, 2 } } do
  local t, d = layout[1], layout[2]
  layouts[#layouts + 1] = { tensor_model_parallel_size = t, data_parallel_size = d,
                            micro_batch_size = config.global_batch_size / (2 * d) }
end
local configs = require('ptdp.bench').variants(ptdp, config, given, layouts,
                                               'it runs (t, d) = (1, 1), (2, 1), (1, 2)')

local results = {}
for _, c in ipairs(configs) do
  local t, d = c.tensor_model_parallel_size, c.data_parallel_size
  local trainer = ptdp.trainer(c)
  for _ = 1, opts.warmup do trainer:step() end
  local comm0, ms = trainer:get('comm_seconds'), 0
  for _ = 1, opts.iters do ms = ms + trainer:step().elapsed_ms end
  local comm = (trainer:get('comm_seconds') - comm0) * 1e3
  local tps = config.global_batch_size * config.seq_length * opts.iters / (ms / 1e3)
  results[#results + 1] = string.format('tokens_per_s_t%dd%d=%.1f', t, d, tps)
  print(string.format('t=%d d=%d: %d ranks, micro-batch %d, step %.1f ms, %.1f tokens/s, communication %.1f%% of the step',
                      t, d, t * d, c.micro_batch_size, ms / opts.iters, tps, 100 * comm / ms))
  trainer = nil
  collectgarbage()
end
print(table.concat(results, ' '))
