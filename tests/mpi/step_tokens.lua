-- step_tokens.lua DATA.ptdp — under mpirun (t = p = d = 2): every process
-- passes the same whole batch to trainer:step_tokens and the run equals the
-- dataset's bit for bit. DATA holds one repeated line of 14 letters (16 ids
-- per document with its newline and end-of-document token), so every sample
-- is the same 17 ids (tests/mpi/tests.cmake: mpi_step_tokens).
local ptdp = require 'ptdp'
local data = assert(arg[1], 'usage: ptdp step_tokens.lua DATA.ptdp')
local seq, batch = 16, 8
local ids = {}
for _ = 1, batch do
  for k = 0, seq do ids[#ids + 1] = k < 14 and 97 + k or k == 14 and 10 or k == 15 and 256 or 97 end
end
local function make()
  return ptdp.trainer {
    model = { num_layers = 2, hidden_size = 32, num_attention_heads = 4, seq_length = seq,
              hidden_dropout = 0.1, attention_dropout = 0.1 },
    parallel = { t = 2, p = 2, d = 2 },
    data = { path = data }, micro_batch_size = 2, global_batch_size = batch, num_threads = 1,
  }
end
local from_data, fed = make(), make()
local rank0 = fed:layout().rank == 0
for k = 1, 3 do
  local a, b = from_data:step(), fed:step_tokens(ids)
  if a.loss ~= b.loss or a.grad_norm ~= b.grad_norm then
    error(string.format('step %d: dataset loss %.17g, fed %.17g', k, a.loss, b.loss))
  end
  if rank0 then print(string.format('step %d: loss %.17g equal', k, b.loss)) end
end
if rank0 then print('mpi step_tokens: PASS') end
