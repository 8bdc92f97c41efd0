-- Helpers the benchmark scripts share: a monotonic wall clock and the median.
local ffi = require 'ffi'

local M = {}

ffi.cdef 'typedef struct { long tv_sec; long tv_nsec; } ptdp_timespec; int clock_gettime(int, ptdp_timespec *);'
local ts = ffi.new('ptdp_timespec')

-- Seconds on CLOCK_MONOTONIC (1 on Linux): for differences only.
function M.now()
  ffi.C.clock_gettime(1, ts)
  return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9
end

-- The median of a non-empty list of numbers (sorts it in place).
function M.median(xs)
  table.sort(xs)
  local k = #xs
  return k % 2 == 1 and xs[(k + 1) / 2] or (xs[k / 2] + xs[k / 2 + 1]) / 2
end

-- The configurations a benchmark runs, checked before it runs any: config
-- with each variant's settings over it, each through ptdp.check_config (a
-- layout or schedule that cannot be built stops it now, not after the first
-- runs), and a flag the user gave refused where a variant sets it (it would be
-- overwritten silently). `why` says what the benchmark varies. Returns them.
function M.variants(ptdp, config, given, list, why)
  local out = {}
  for _, v in ipairs(list) do
    local c = {}
    for k, x in pairs(config) do c[k] = x end
    for k, x in pairs(v) do
      if given[k] then
        error(string.format("flag '--%s' is this benchmark's to set (%s): leave it out",
                            (k:gsub('_', '-')), why), 0)
      end
      c[k] = x
    end
    ptdp.check_config(c)
    out[#out + 1] = c
  end
  return out
end

-- Engine flags a benchmark does not take: a save in its timed steps would be
-- timed with them, an exit would end them early, and both without a word.
local untimed = { 'save', 'save_interval', 'async_save', 'keep_last_checkpoints', 'exit_interval',
                  'exit_duration_in_mins', 'exit_signal_handler' }
-- Nor the run's length and evaluation: a benchmark times the steps its own
-- flags set and evaluates nothing (they were ignored, exit 0).
local own_steps = { 'train_iters', 'eval_iters', 'eval_interval' }
-- Nor one that acts only on a load that is not given (ptdp.flags.unused_option).
function M.refuse_untimed(given, config)
  for _, key in ipairs(untimed) do
    if given[key] then
      error(string.format("flag '--%s' is not a benchmark's: a save or an exit inside the timed " ..
                          "steps would be timed with them or end them early; leave it out",
                          (key:gsub('_', '-'))), 0)
    end
  end
  for _, key in ipairs(own_steps) do
    if given[key] then
      error(string.format("flag '--%s' is not a benchmark's: it times the steps its own flags set " ..
                          '(see --help) and evaluates nothing; leave it out', (key:gsub('_', '-'))), 0)
    end
  end
  local unused = require('ptdp.flags').unused_option(config, given)
  if unused then error(unused, 0) end
end

-- The cores this process may run on (nproc follows the affinity mask).
-- (Not OMP_NUM_THREADS's count, which GNU nproc reports instead: a benchmark
-- sets its threads from the cores, and OMP_NUM_THREADS=10000 made it ask for
-- 9999.)
function M.cores()
  local h = io.popen('env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc 2>/dev/null')
  local n = h and tonumber(h:read('*l') or '')
  if h then h:close() end
  return n or 1
end

-- Where a benchmark puts its files by default: $TMPDIR, or /tmp when it is
-- unset or empty (an empty one named the root directory).
function M.temp_dir()
  local t = os.getenv('TMPDIR')
  return (t and t ~= '') and t or '/tmp'
end

return M
