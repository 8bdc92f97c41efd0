-- Prints the loss and gradient norm of each step at full precision (first rank
-- only), for comparing layouts and backends: ptdp losses.lua [engine flags]
local ptdp = require 'ptdp'
local flags = require 'ptdp.flags'
local config, opts = flags.parse(arg, {
  steps = { default = 10, help = 'steps' },
  die_rank = { default = -1, help = 'this rank kills itself (SIGKILL) before step --die-step' },
  die_step = { default = 3, help = 'see --die-rank' },
  error_rank = { default = -1, help = 'this rank raises a Lua error before step --die-step' },
  term_rank = { default = -1, help = 'this rank sends itself SIGTERM before step --die-step' },
}, {
  num_layers = 4, hidden_size = 48, num_attention_heads = 12, seq_length = 16,
  micro_batch_size = 2, global_batch_size = 8, lr = 3e-3, min_lr = 3e-4, lr_warmup_iters = 2,
  train_iters = 10, hidden_dropout = 0.1, attention_dropout = 0.1, split = '80,20',
})
local trainer = ptdp.trainer(config)
local rank0 = trainer:layout().rank == 0
local ffi = require 'ffi'
ffi.cdef 'int getpid(void); int kill(int pid, int sig);'
for step = 1, opts.steps do
  if step == opts.die_step and trainer:layout().rank == opts.die_rank then
    ffi.C.kill(ffi.C.getpid(), 9)  -- the other ranks are now waiting in this step
  end
  if step == opts.die_step and trainer:layout().rank == opts.error_rank then
    error('script error on rank ' .. opts.error_rank)
  end
  if step == opts.die_step and trainer:layout().rank == opts.term_rank then
    ffi.C.kill(ffi.C.getpid(), 15)  -- only this process: every process must end after this step
  end
  local m = trainer:step()
  if rank0 then print(string.format('%.17g %.17g', m.loss, m.grad_norm)) end
  local why = trainer:text('exit_reason')
  if why ~= '' then
    print(string.format('rank %d: exiting: %s', trainer:layout().rank, why))
    break
  end
end
