-- CPU benchmark: full training steps (forward, backward, AdamW) of the bench
-- shape on all cores, and OpenBLAS's SGEMM ceiling on the same machine.
--   build/ptdp scripts/bench_cpu.lua [--iters 10] [--warmup 2] [--bf16 | --fp16]
-- (16-bit on the CPU rounds stored values and computes in fp32: it measures
-- the cost of the rounding passes, not a speed-up.)
local ptdp = require 'ptdp'
local flags = require 'ptdp.flags'

local config, opts, given = flags.parse(arg, {
  iters = { default = 10, integer = true, min = 1, help = 'timed steps' },
  warmup = { default = 2, integer = true, min = 0, help = 'untimed steps first' },
  sgemm_n = { default = 2048, integer = true, min = 1, max = 16384,  -- (ptdp.benchmark_sgemm's range)
              help = 'size of the square SGEMM' },
}, {
  num_layers = 6, hidden_size = 384, num_attention_heads = 6, seq_length = 256,
  micro_batch_size = 8, global_batch_size = 8, train_iters = 1000000,
  lr = 1e-4, min_lr = 1e-5, lr_decay_style = 'constant',
  hidden_dropout = 0.1, attention_dropout = 0.1,
  vocab_size = 8192,  -- the bench vocabulary; byte tokens use ids 0..256 of it
  data_path = 'data/fortunes.ptdp',
})
require('ptdp.bench').refuse_untimed(given, config)  -- no saves or exits in the timed steps

-- The default dataset is tokenized on first use; a --data-path must exist.
config.data_path = ptdp.dataset { path = config.data_path, given = given.data_path,
                                  corpus = '/usr/share/games/fortunes' }

local trainer = ptdp.trainer(config)
local tokens = config.global_batch_size * config.seq_length
local dtype = (tonumber(config.bf16) or 0) ~= 0 and 'bf16' or (tonumber(config.fp16) or 0) ~= 0 and 'fp16' or 'fp32'
print(string.format('bench shape: layers %d hidden %d heads %d seq %d micro-batch %d vocab %d, %s, %d params',
  config.num_layers, config.hidden_size, config.num_attention_heads, config.seq_length,
  config.micro_batch_size, trainer:get('padded_vocab_size'), dtype, trainer:get('num_parameters')))
for _ = 1, opts.warmup do trainer:step() end
local best, total, tflops = math.huge, 0, 0
for _ = 1, opts.iters do
  local m = trainer:step()
  total = total + m.elapsed_ms
  best = math.min(best, m.elapsed_ms)
  tflops = tflops + m.tflops_per_rank * m.elapsed_ms  -- FLOPs of the step, in TFLOP*ms
end
local mean_ms = total / opts.iters
local tokens_per_s = tokens / (mean_ms / 1e3)
local gflops = tflops / total * 1e3
local sgemm = ptdp.benchmark_sgemm(opts.sgemm_n, 5)
print(string.format('step: mean %.1f ms, best %.1f ms over %d steps', mean_ms, best, opts.iters))
print(string.format('model GFLOP/s %.1f = %.1f%% of SGEMM %.1f GFLOP/s (n=%d)', gflops,
                    100 * gflops / sgemm, sgemm, opts.sgemm_n))
print(string.format('tokens_per_s=%.1f gflops=%.1f sgemm_gflops=%.1f', tokens_per_s, gflops, sgemm))
