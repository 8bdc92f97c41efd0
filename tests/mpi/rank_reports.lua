-- rank_reports.lua DATA.ptdp T P D — under mpirun: trainer:rank_reports()
-- (ptdp_trainer_gather_reports) brings every world rank's report to world
-- rank 0's process, equal there to the rank_report of its own ranks; the other
-- processes get nil, and ptdp_trainer_world_rank_get refuses on them
-- (tests/mpi/tests.cmake: mpi_rank_reports_*).
local ffi = require 'ffi'
local ptdp = require 'ptdp'
local data = assert(arg[1], 'usage: ptdp rank_reports.lua DATA.ptdp T P D')
local t, p, d = tonumber(arg[2]), tonumber(arg[3]), tonumber(arg[4])
local trainer = ptdp.trainer {
  model = { num_layers = 2, hidden_size = 32, num_attention_heads = 2, seq_length = 16 },
  parallel = { t = t, p = p, d = d },
  data = { path = data }, micro_batch_size = 1, global_batch_size = 4, num_threads = 1,
}
local layout = trainer:layout()
local me = layout.rank
local function fail(msg) error(string.format('process of rank %d: %s', me, msg), 0) end
local v = ffi.new('double[1]')
-- A raw ptdp_trainer_world_rank_get: its status and message.
local function world_get(r, name)
  local st = ptdp.C.ptdp_trainer_world_rank_get(trainer.handle, r, name, v)
  return st, st ~= 0 and ffi.string(ptdp.C.ptdp_last_error()) or ''
end

trainer:step()
trainer:step()
local reports = trainer:rank_reports()
if me ~= 0 then
  if reports ~= nil then fail('rank_reports returned a table away from world rank 0') end
  local st, msg = world_get(0, 'step_seconds')
  if st ~= ptdp.C.PTDP_ERR_WRONG_STATE or not msg:find('held by the process of world rank 0', 1, true) then
    fail('world_rank_get away from world rank 0: status ' .. st .. ' "' .. msg .. '"')
  end
else
  if reports == nil then fail('no reports on world rank 0') end
  local seen = {}
  for r = 0, layout.world_size - 1 do
    local rep = reports[r]
    if rep == nil or rep.world_rank ~= r then fail('no report of world rank ' .. r) end
    if rep.tp_rank >= t or rep.pp_rank >= p or rep.dp_rank >= d then fail('rank ' .. r .. ': bad place') end
    local key = rep.tp_rank .. ',' .. rep.pp_rank .. ',' .. rep.dp_rank
    if seen[key] then fail('rank ' .. r .. ': place ' .. key .. ' twice') end
    seen[key] = true
    if not (rep.step_seconds > 0 and rep.compute_seconds > 0) then fail('rank ' .. r .. ': no step time') end
    if t > 1 and not (rep.bytes.tp > 0 and rep.calls.tp > 0) then fail('rank ' .. r .. ': no tp traffic') end
    if p > 1 and not (rep.bytes.pp > 0 and rep.bytes.embedding > 0) then fail('rank ' .. r .. ': no pp traffic') end
    if d > 1 and not (rep.bytes.dp > 0) then fail('rank ' .. r .. ': no dp traffic') end
  end
  if reports[layout.world_size] ~= nil then fail('a report beyond the world') end
  -- This process's own ranks: the gathered values are rank_report's, exactly.
  for i = 0, layout.local_ranks - 1 do
    local own = trainer:rank_report(i)
    local got = reports[own.world_rank]
    for k, x in pairs(own) do
      if type(x) == 'table' then
        for g, y in pairs(x) do
          if got[k][g] ~= y then fail(string.format('rank %d %s.%s: %.17g gathered, %.17g local', own.world_rank, k, g, got[k][g], y)) end
        end
      elseif got[k] ~= x then
        fail(string.format('rank %d %s: %.17g gathered, %.17g local', own.world_rank, k, got[k], x))
      end
    end
  end
  local st, msg = world_get(layout.world_size, 'step_seconds')
  if st ~= ptdp.C.PTDP_ERR_INVALID_ARGUMENT then fail('world_rank_get past the world: ' .. msg) end
end
-- A later step makes them stale on world rank 0; gathering again is collective.
trainer:step()
if me == 0 then
  local st, msg = world_get(1, 'step_seconds')
  if st ~= ptdp.C.PTDP_ERR_WRONG_STATE or not msg:find('not been gathered', 1, true) then
    fail('world_rank_get after a later step: status ' .. st .. ' "' .. msg .. '"')
  end
end
reports = trainer:rank_reports()
if me == 0 then
  if reports[layout.world_size - 1].world_rank ~= layout.world_size - 1 then fail('second gather') end
  print(string.format('mpi rank_reports: PASS (%d ranks, %d per process)', layout.world_size,
                      layout.local_ranks))
end
