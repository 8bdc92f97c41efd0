-- Prints the loss and gradient norm of each step at full precision (first rank
-- only), for comparing layouts and backends: ptdp losses.lua [engine flags]
local ptdp = require 'ptdp'
local flags = require 'ptdp.flags'
local config, opts = flags.parse(arg, { steps = { default = 10, help = 'steps' } }, {
  num_layers = 2, hidden_size = 48, num_attention_heads = 12, seq_length = 16,
  micro_batch_size = 2, global_batch_size = 8, lr = 3e-3, min_lr = 3e-4, lr_warmup_iters = 2,
  train_iters = 10, hidden_dropout = 0.1, attention_dropout = 0.1, split = '80,20',
})
local trainer = ptdp.trainer(config)
local rank0 = trainer:layout().rank == 0
for _ = 1, opts.steps do
  local m = trainer:step()
  if rank0 then print(string.format('%.17g %.17g', m.loss, m.grad_norm)) end
end
