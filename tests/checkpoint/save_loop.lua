-- Trains up to train_iters, saving as the engine flags say (--save DIR
-- --save-interval 1 ...), for tests/unit/test_checkpoint_crash.cpp, which
-- SIGKILLs it at random moments. Every flag is an engine option: the test
-- keeps the whole configuration, so its in-process reference is the same run.
-- Prints each iteration reached; a failed save ends the run with an error.
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
