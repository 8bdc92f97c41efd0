-- Trains up to train_iters, saving as the engine flags say (--save DIR
-- --save-interval 1 ...), for tests/checkpoint/test_checkpoint_crash.cpp, which
-- SIGKILLs it at random moments. Every flag is an engine option: the test
-- keeps the whole configuration, so its in-process reference is the same run.
-- Prints each iteration reached (with --async-save its save may still be in
-- flight); a failed save ends the run with an error.
local ptdp = require 'ptdp'
local flags = require 'ptdp.flags'
local config = flags.parse(arg, {}, {})
local trainer = ptdp.trainer(config)
local last = tonumber(config.train_iters)
while trainer:get('iteration') < last do
  local m = trainer:step()
  local err = trainer:text('last_save_error')
  if err ~= '' then error('save failed: ' .. err, 0) end
  io.write(string.format('iteration %d\n', m.iteration))
  io.flush()
end
trainer:wait_for_saves()  -- --async-save: the last one on disk before the end
if trainer:text('last_save_error') ~= '' then error('save failed: ' .. trainer:text('last_save_error'), 0) end
