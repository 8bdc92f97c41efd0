-- Checkpoint save and load bandwidth against the disk's raw bandwidth.
-- A GPT-2-small-sized model (12 layers, h 768, vocabulary 50304: 124M
-- parameters, 1.5 GB of state with Adam's two moments) on 4 thread ranks,
-- (t, p, d) = (2, 2, 1), saved and loaded --repeats times; in the same run, a
-- file of the checkpoint's size written (with fsync) and read back raw on the
-- same disk. Both reads are cold: the commit releases the saved file's pages
-- from the page cache, as the raw measurement does. Load verifies every block's
-- checksum (the default). The best round of each is reported.
-- Then --async-save on the same model: the time a step that starts a save is
-- blocked (the copy to host memory, and any wait for the save before; by
-- default the saves are far enough apart for each to finish before the next),
-- against a synchronous save's, and the time of a step while a save is being
-- written beside it, against a step without one. That part runs on one rank
-- with --async-threads OpenMP threads (default: every core but one), so that
-- the background writer has a core of its own, as it has on a GPU machine,
-- where the host's cores are free while the devices train; on a CPU rank that
-- keeps every core busy the write can only take cores from the step.
--   build/ptdp scripts/bench_checkpoint.lua [--dir DIR] [--repeats 3] [--async-steps N]
--                                           [--async-interval N] [--async-threads N]
-- It works in a directory of its own that it makes under DIR and removes at
-- the end (a signal removes it too); nothing else in DIR is touched.
local ptdp = require 'ptdp'
local flags = require 'ptdp.flags'
local bench = require 'ptdp.bench'

-- The engine's bound on OpenMP threads, for --async-threads (checked now, not
-- when the async part starts after the rounds).
local max_threads
for _, o in ipairs(ptdp.options()) do
  if o.key == 'num_threads' then max_threads = o.max end
end
local config, opts, given = flags.parse(arg, {
  dir = { default = bench.temp_dir(),
          help = 'where the benchmark makes its own directory for checkpoints and the raw test file (that directory is removed at the end, nothing else)' },
  repeats = { default = 3, integer = true, min = 1, help = 'save + load rounds' },
  async_steps = { default = 0, integer = true, min = 0,
                  help = 'steps of the --async-save part (0: two --async-interval\'s)' },
  async_interval = { default = 0, integer = true, min = 0,
                     help = 'the --async-save part saves every N steps (0: 1.5 synchronous saves\' time in steps, ' ..
                            'so that each save ends before the next; a shorter interval adds the wait for the save before)' },
  async_threads = { default = 0, integer = true, min = 0, max = max_threads,
                    help = 'OpenMP threads of the --async-save part\'s one rank (0: every core but one)' },
}, {
  num_layers = 12, hidden_size = 768, num_attention_heads = 12, seq_length = 128,
  vocab_size = 50304, micro_batch_size = 1, global_batch_size = 4, train_iters = 1000,
  tensor_model_parallel_size = 2, pipeline_model_parallel_size = 2,
  data_path = 'data/fortunes.ptdp', keep_last_checkpoints = 1,
})

-- What can be told before the work: the async part must save at least once,
-- and --dir must be a directory (or one that can be made).
local function refuse(...)
  ptdp.say('bench_checkpoint: ' .. string.format(...))
  os.exit(2)
end
if opts.async_interval == 1 then
  refuse("--async-interval must be 0 (chosen from a save's time) or at least 2: the step after a save's is " ..
         "timed as the step beside it")
end
if opts.async_steps > 0 and opts.async_interval == 0 then
  refuse('--async-steps needs --async-interval: by default the async part runs two intervals chosen from a ' ..
         "save's time")
end
if opts.async_steps > 0 and opts.async_steps < opts.async_interval then
  refuse('--async-steps (%d) must be >= --async-interval (%d): the async part saves every --async-interval steps',
         opts.async_steps, opts.async_interval)
end
ptdp.check_output(opts.dir, '--dir', true)
-- What the benchmark sets itself (its saves go under its own directory, the
-- async part's every --async-interval steps): given, they would be ignored.
for _, key in ipairs { 'save', 'save_interval', 'async_save', 'keep_last_checkpoints' } do
  if given[key] then
    ptdp.say(string.format("bench_checkpoint: flag '--%s' is this benchmark's to set (its " ..
                           "saves go under --dir, every --async-interval steps): leave it out",
                           (key:gsub('_', '-'))))
    os.exit(2)
  end
end
bench.refuse_untimed(given, config)  -- nor exits (its saves are refused above, with its reason)

-- The default dataset is tokenized on first use; a --data-path must exist.
config.data_path = ptdp.dataset { path = config.data_path, given = given.data_path,
                                  corpus = '/usr/share/games/fortunes' }
local trainer = ptdp.trainer(config)
-- (What mkdirs made of --dir goes at the end too, while it is empty: the
-- help promises nothing of the run stays behind.)
local _, made_dirs = ptdp.mkdirs(opts.dir)
-- A directory of its own (mkdtemp, not the shell's mktemp: a name read back
-- from a shell stopped at a newline in --dir and named another directory):
-- the only thing it ever removes, and a signal's cleanup removes it whole.
local ok, work = pcall(ptdp.make_temp_dir, opts.dir, 'ptdp_bench_checkpoint.')
if not ok then
  ptdp.unmake_dirs(made_dirs)
  ptdp.say('bench_checkpoint: ' .. tostring(work))
  os.exit(1)
end

-- Everything from here on in one function: a part that fails (a disk that is
-- full, an async save refused) still removes the benchmark's directory.
local function measure()
  local layout = trainer:layout()
  local params = trainer:get('num_parameters')
  trainer:step()  -- moments that are not zeros

  local now, median = bench.now, bench.median

  local function file_size(path)
    local h = assert(io.open(path, 'rb'))
    local n = h:seek('end')
    h:close()
    return n
  end

  -- Each round measures the checkpoint and the raw file back to back, so both
  -- see the same disk (a shared or virtual disk's bandwidth drifts over minutes).
  local best_save, best_load, raw_w, raw_r, bytes = math.huge, math.huge, 0, 0, 0
  for r = 1, opts.repeats do
    local t0 = now()
    local round = ptdp.make_temp_dir(work, 'round' .. r .. '.')
    local dir = trainer:save(round)
    local t1 = now()
    trainer:load(dir)
    local t2 = now()
    bytes = file_size(dir .. '/model.h5')
    -- (The raw measurement needs a file of at least 1 MiB: a small model's is that.)
    local w, rd = ptdp.benchmark_disk(work, math.max(bytes, 2 ^ 20))
    best_save, best_load = math.min(best_save, t1 - t0), math.min(best_load, t2 - t1)
    raw_w, raw_r = math.max(raw_w, w), math.max(raw_r, rd)
    local sg, lg = bytes / (t1 - t0) / 1e9, bytes / (t2 - t1) / 1e9
    print(string.format('round %d: save %.2f GB/s (%.0f%% of raw write %.2f), load %.2f GB/s (%.0f%% of raw read %.2f), %.2f GB',
                        r, sg, 100 * sg / w, w, lg, 100 * lg / rd, rd, bytes / 1e9))
    ptdp.remove_temp_dir(round)
  end

  -- --async-save, on one rank that leaves a core to the writer: a trainer that
  -- saves nothing by itself (its steps alone, and one synchronous save), then a
  -- trainer of the same run saving every --async-interval steps in the background.
  trainer = nil
  collectgarbage()
  local one = {}
  for k, v in pairs(config) do one[k] = v end
  one.tensor_model_parallel_size, one.pipeline_model_parallel_size, one.data_parallel_size = 1, 1, 1
  one.num_threads = opts.async_threads > 0 and opts.async_threads or math.max(1, bench.cores() - 1)
  -- Said, not silent: the layout and --num-threads given are the rounds' above.
  print(string.format('async part: one rank (t = p = d = 1), %d OpenMP threads (--async-threads%s)',
                      one.num_threads, (given.num_threads or given.tensor_model_parallel_size or
                                        given.pipeline_model_parallel_size or given.data_parallel_size)
                      and '; the layout and --num-threads given apply to the save and load rounds' or ''))
  local plain_trainer = ptdp.trainer(one)
  plain_trainer:step()  -- its first step (allocations) untimed
  local plain = {}
  for i = 1, 8 do
    local t0 = now()
    plain_trainer:step()
    plain[i] = now() - t0
  end
  local step_s = median(plain)
  local t_sync = now()
  local sync_dir = ptdp.make_temp_dir(work, 'sync.')
  plain_trainer:save(sync_dir)
  local sync_save = now() - t_sync
  plain_trainer = nil
  collectgarbage()
  ptdp.remove_temp_dir(sync_dir)
  local interval = opts.async_interval > 0 and opts.async_interval or
                   math.max(2, math.ceil(1.5 * sync_save / step_s))
  local steps = opts.async_steps > 0 and opts.async_steps or 2 * interval
  local aconfig = {}
  for k, v in pairs(one) do aconfig[k] = v end
  local async_dir = ptdp.make_temp_dir(work, 'async.')
  aconfig.async_save, aconfig.save, aconfig.save_interval = 1, async_dir, interval
  aconfig.keep_last_checkpoints = 1
  local async = ptdp.trainer(aconfig)
  async:step()  -- its first step (allocations) untimed
  local launching, beside = {}, {}
  -- A step that starts a save, and the one after it (the save is written beside it).
  for i = 2, steps + 1 do
    local t0 = now()
    async:step()
    local t = now() - t0
    if i % interval == 0 then launching[#launching + 1] = t - step_s
    elseif i % interval == 1 then beside[#beside + 1] = t end
  end
  local t0 = now()
  async:wait_for_saves()
  local final_wait = now() - t0
  if async:get('failed_saves') > 0 then
    error('an async save failed: ' .. async:text('last_save_error'), 0)
  end
  async = nil
  collectgarbage()
  ptdp.remove_temp_dir(async_dir)  -- (each tree by itself: an outer one's removal leaves the inner held)
  ptdp.remove_temp_dir(work)
  ptdp.unmake_dirs(made_dirs)
  work = nil
  -- (A step's time less the median plain step: below 0 is the steps' noise,
  -- reported as 0 blocked, not as a save that sped the step up.)
  local blocked, step_beside = math.max(0, median(launching)), median(beside)

  local save_gbps, load_gbps = bytes / best_save / 1e9, bytes / best_load / 1e9
  print(string.format('model: %.1fM parameters, %.2f GB of state (parameters + Adam moments), ' ..
                      'layout t=%d p=%d d=%d on %d thread ranks', params / 1e6, bytes / 1e9,
                      layout.t, layout.p, layout.d, layout.world_size))
  print(string.format('save: %.2f GB/s = %.0f%% of the raw write %.2f GB/s (fsync included in both)',
                      save_gbps, 100 * save_gbps / raw_w, raw_w))
  print(string.format('load: %.2f GB/s = %.0f%% of the raw read %.2f GB/s (cold cache, checksums verified)',
                      load_gbps, 100 * load_gbps / raw_r, raw_r))
  print(string.format('async save (one rank, %d OpenMP threads, a save every %d steps of %d): a step is ' ..
                      'blocked %.3f s per save = %.0f%% of the synchronous save (%.3f s); a step beside a ' ..
                      'save in flight takes %.3f s = %.0f%% of one without (%.3f s); the last save waited ' ..
                      'for %.3f s at the end', one.num_threads, interval, steps, blocked,
                      100 * blocked / sync_save, sync_save, step_beside, 100 * step_beside / step_s, step_s,
                      final_wait))
  if interval * step_s < sync_save then  -- said, so that the figure is not read as the copy alone
    print(string.format('note: a save every %d steps (%.3f s) is shorter than a save (%.3f s): each blocked ' ..
                        'step also waited for the save before', interval, interval * step_s, sync_save))
  end
  print(string.format('save_gbps=%.3f load_gbps=%.3f raw_write_gbps=%.3f raw_read_gbps=%.3f ' ..
                      'async_blocked_s=%.4f sync_save_s=%.4f step_s=%.4f step_beside_save_s=%.4f ' ..
                      'blocked_over_sync=%.3f beside_over_step=%.3f',
                      save_gbps, load_gbps, raw_w, raw_r, blocked, sync_save, step_s, step_beside,
                      blocked / sync_save, step_beside / step_s))
end
local ok_run, err = pcall(measure)
if not ok_run then
  if work then pcall(ptdp.remove_temp_dir, work) end
  pcall(ptdp.unmake_dirs, made_dirs)
  ptdp.say('bench_checkpoint: ' .. tostring(err):gsub('^[^:]*:%d+: ', ''))
  os.exit(1)
end
