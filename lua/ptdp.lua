-- The `ptdp` Lua module: a thin layer over the C ABI (capi/ptdp.h) through
-- LuaJIT's FFI. Handles are freed by ffi.gc; failures raise Lua errors that
-- carry the library's message, positioned at the calling script line.
local ffi = require 'ffi'

local M = {}

-- Bind the declarations between the ffi markers of the two headers, the
-- engine's (capi/ptdp.h) and the tools' (capi/ptdp_tools.h), which have no
-- preprocessor lines inside them (ARCHITECTURE §6).
local here = debug.getinfo(1, 'S').source:match('^@(.*)/[^/]*$') or '.'
-- A header's text. Read without blocking (a FIFO named as a header has no
-- writer), so that anything but a regular file is an error naming it.
pcall(ffi.cdef, [[
int open(const char *path, int flags, ...);
long read(int fd, void *buf, unsigned long n);
int close(int fd);
char *strerror(int errnum);
]])
local function read_header(path, what)
  local fd = ffi.C.open(path, 0x800)  -- O_RDONLY | O_NONBLOCK
  if fd < 0 then
    error(string.format("ptdp: cannot open %s '%s': %s", what, path,
                        ffi.string(ffi.C.strerror(ffi.errno()))), 0)
  end
  local parts, buf = {}, ffi.new('char[65536]')
  while true do
    local n = ffi.C.read(fd, buf, 65536)
    if n < 0 then
      local why = ffi.string(ffi.C.strerror(ffi.errno()))
      ffi.C.close(fd)
      error(string.format("ptdp: cannot read %s '%s': %s", what, path, why), 0)
    end
    if n == 0 then break end
    parts[#parts + 1] = ffi.string(buf, n)
  end
  ffi.C.close(fd)
  local text = table.concat(parts)
  local decls = text:match('/%* ffi%-begin %*/(.-)/%* ffi%-end %*/')
  if not decls then
    error(string.format("ptdp: %s '%s' has no /* ffi-begin */ ... /* ffi-end */ declarations: " ..
                        "it is not ptdp's header", what, path), 0)
  end
  return text, decls
end
-- PTDP_HEADER names the engine's header (no other is tried then); the tools'
-- header sits beside it, always the same pair (the version check below reads
-- the engine's).
local header_path = os.getenv('PTDP_HEADER')
if not header_path or header_path == '' then header_path = here .. '/../capi/ptdp.h' end
local header, decls = read_header(header_path, 'the C header (PTDP_HEADER, or capi/ptdp.h)')
local _, tools_decls = read_header((header_path:match('^(.*)/[^/]*$') or '.') .. '/ptdp_tools.h',
                                   "the tools' header beside " .. header_path)
local function bind(d)
  local ok, err = pcall(ffi.cdef, (d:gsub('PTDP_DEPRECATED%b()%s*', ''):gsub('PTDP_API ', '')))
  if not ok then error("ptdp: the declarations of '" .. header_path .. "' (or the tools' " ..
                       'header beside it) do not parse: ' .. tostring(err), 0) end
end
bind(decls)
bind(tools_decls)
-- The version the header declares: the library must be the same one.
local major, minor, patch = header:match('#define PTDP_VERSION_MAJOR (%d+)'),
                            header:match('#define PTDP_VERSION_MINOR (%d+)'),
                            header:match('#define PTDP_VERSION_PATCH (%d+)')
if not (major and minor and patch) then
  error("ptdp: '" .. header_path .. "' has no #define PTDP_VERSION_MAJOR/MINOR/PATCH: it is not " ..
        "ptdp's header", 0)
end
local header_version = major .. '.' .. minor .. '.' .. patch

-- Inside the `ptdp` launcher the library is already loaded; elsewhere load it.
local C
do
  local ok = pcall(function() return ffi.C.ptdp_version end)
  C = ok and ffi.C or ffi.load(os.getenv('PTDP_LIBRARY') or 'ptdp')
end
M.C = C
do
  local lib = ffi.string(C.ptdp_version())
  if lib ~= header_version then
    error(string.format('ptdp: the library is version %s but the header it is bound with ' ..
                        '(capi/ptdp.h, or PTDP_HEADER) is %s: use the header of that library',
                        lib, header_version), 0)
  end
end
M.header_version = header_version
-- The headers are inputs of every run that loads this module: no output of it
-- may replace them (a script's write_file did, and every later run failed).
for _, h in ipairs { header_path, (header_path:match('^(.*)/[^/]*$') or '.') .. '/ptdp_tools.h' } do
  if C.ptdp_hold_input(h, 'C header') ~= 0 then error('ptdp: ' .. ffi.string(C.ptdp_last_error()), 0) end
end

-- Raises msg at the first stack level outside the module (this file and its
-- helpers in ptdp/, e.g. ptdp/bench.lua), so the message names the calling
-- script's line, not a line of the module the script cannot see.
local function raise(msg)
  local here_src, level = debug.getinfo(1, 'S').source, 2
  local dir = here_src:match('^(@.*/)ptdp%.lua$')
  local function in_module(src)
    return src == here_src or (dir ~= nil and src:sub(1, #dir + 5) == dir .. 'ptdp/')
  end
  while true do
    local info = debug.getinfo(level, 'S')
    if not info or not in_module(info.source) then break end
    level = level + 1
  end
  error(msg, level)
end

-- Raises, naming the function and the argument, unless value is a string.
local function need_string(value, fn, arg)
  if type(value) ~= 'string' then
    raise(string.format('ptdp.%s: %s must be a string, got %s', fn, arg, type(value)))
  end
  -- A path or a text line ends at a NUL in C ('a\0.txt' would name the file
  -- 'a'); only bytes (a file's contents) may hold one.
  if arg ~= 'bytes' and value:find('\0', 1, true) then
    raise(string.format('ptdp.%s: %s holds a NUL byte, which no path or text the engine takes may',
                        fn, arg))
  end
  -- An empty path is no path ('' made make_temp_dir's directory in /); only
  -- texts may be empty.
  if value == '' and arg ~= 'bytes' and arg ~= 'line' and arg ~= 'prompt' then
    raise(string.format('ptdp.%s: %s is empty; give one', fn, arg))
  end
end

-- The same for an argument that may be left out (nil).
local function opt_string(value, fn, arg)
  if value ~= nil then need_string(value, fn, arg) end
end

-- A value as a message shows it: a text quoted and named so ('64' shown as 64
-- read as out of range; '1' as a token id as 1).
local function shown(value)
  if type(value) == 'number' then return tostring(value) end
  return string.format("the %s '%s'", type(value), tostring(value))
end

-- Every number an argument gives reaches C through one of these two: the FFI
-- converts a NaN, an infinity or 1e300 to an integer parameter as whatever
-- the machine makes of it (INT_MIN), and a fraction by cutting it off.
-- Raises unless value is nil or a whole number in [min, max].
local function need_count(value, fn, arg, min, max)
  if value ~= nil and type(value) ~= 'number' then  -- ('64' read as out of range said "got 64")
    raise(string.format('ptdp.%s: %s must be a number (a whole number in [%d, %d]), got %s',
                        fn, arg, min, max, shown(value)))
  end
  if value ~= nil and (value ~= math.floor(value) or value < min or value > max) then
    raise(string.format('ptdp.%s: %s must be a whole number in [%d, %d], got %s', fn, arg, min, max,
                        tostring(value)))
  end
end
-- Raises unless value is nil or a finite number (C checks its range).
local function need_number(value, fn, arg)
  if value ~= nil and type(value) ~= 'number' then
    raise(string.format('ptdp.%s: %s must be a number, got %s', fn, arg, shown(value)))
  end
  if value ~= nil and (value ~= value or value == math.huge or value == -math.huge) then
    raise(string.format('ptdp.%s: %s must be a finite number, got %s', fn, arg, tostring(value)))
  end
end

-- A list: keys 1 .. #t only ({ 'a', nil, 'c' } or { 'a', [5] = 'x' } would
-- drop what ipairs does not reach).
local function need_list(t, fn, arg)
  for k in pairs(t) do
    if type(k) ~= 'number' or k % 1 ~= 0 or k < 1 or k > #t then
      raise(string.format('ptdp.%s: %s is a list, 1 to %d; it has the key %s', fn, arg, #t, tostring(k)))
    end
  end
  for i = 1, #t do  -- (# may count past a hole: {1, nil, 3} can be 3 long)
    if t[i] == nil then raise(string.format('ptdp.%s: %s is a list with a hole at %d', fn, arg, i)) end
  end
end

-- An options table: nil, or a table whose keys are all in `known` (a
-- mistyped key would otherwise be ignored and its default used).
local function need_options(value, fn, known)
  if value == nil then return {} end
  if type(value) ~= 'table' then
    raise(string.format('ptdp.%s: options are a table (keys: %s), got %s', fn,
                        table.concat(known, ', '), type(value)))
  end
  for k in pairs(value) do
    local ok = false
    for _, name in ipairs(known) do ok = ok or k == name end
    if not ok then
      raise(string.format("ptdp.%s: unknown option '%s' (known: %s)", fn, tostring(k),
                          table.concat(known, ', ')))
    end
  end
  return value
end

-- Raises the library's error for a failed status.
local function check(status)
  if status ~= 0 then
    raise(ffi.string(C.ptdp_status_string(status)) .. ': ' .. ffi.string(C.ptdp_last_error()))
  end
end

-- Calls fn(buf, cap, out_len) with a growing buffer until the text fits.
local function read_text(fn)
  local len = ffi.new('size_t[1]')
  local cap = 256
  while true do
    local buf = ffi.new('char[?]', cap)
    local st = fn(buf, cap, len)
    if st == 0 then return ffi.string(buf, len[0]) end
    if st ~= C.PTDP_ERR_BUFFER_TOO_SMALL then check(st) end
    cap = tonumber(len[0]) + 1
  end
end

function M.version() return ffi.string(C.ptdp_version()) end

-- The option schema: { {key=, default=, help=}, ... }
function M.options()
  local out = {}
  local k, d, h = ffi.new('const char*[1]'), ffi.new('const char*[1]'), ffi.new('const char*[1]')
  local t, c = ffi.new('const char*[1]'), ffi.new('const char*[1]')
  local lo, hi = ffi.new('double[1]'), ffi.new('double[1]')
  for i = 0, C.ptdp_option_count() - 1 do
    check(C.ptdp_option_info(i, k, d, h))
    check(C.ptdp_option_type(i, t, lo, hi, c))
    local o = { key = ffi.string(k[0]), default = ffi.string(d[0]), help = ffi.string(h[0]),
                type = ffi.string(t[0]), min = lo[0], max = hi[0], choices = ffi.string(c[0]) }
    o.switch = o.type == 'int' and o.min == 0 and o.max == 1  -- given bare, it means 1
    out[#out + 1] = o
  end
  return out
end

-- Short names used inside the grouped tables of ARCHITECTURE §7.
local aliases = {
  optimizer = { warmup_iters = 'lr_warmup_iters', decay_iters = 'lr_decay_iters',
                decay = 'lr_decay_style', beta1 = 'adam_beta1', beta2 = 'adam_beta2',
                eps = 'adam_eps' },
  data = { path = 'data_path', tokenizer = 'tokenizer_type' },
  parallel = { t = 'tensor_model_parallel_size', p = 'pipeline_model_parallel_size',
               d = 'data_parallel_size', schedule = 'pipeline_schedule',
               scatter_gather = 'scatter_gather_tensors_in_pipeline' },
  recompute = { granularity = 'recompute_granularity', method = 'recompute_method',
                num_layers = 'recompute_num_layers' },
  model = {},
}

-- Numbers go through set_double, which writes whole numbers as integers. A
-- table is a list (data_path's blend { 0.3, 'A', 0.7, 'B' }): its items
-- joined by spaces.
local switch_options, text_options
local function set_option(cfg, key, value)
  if type(key) ~= 'string' then
    raise(string.format('ptdp.config: option keys are names (num_layers = 2, ...); got the %s key %s',
                        type(key), tostring(key)))
  end
  if key:find('\0', 1, true) then raise("ptdp.config: an option key holds a NUL byte") end
  if not switch_options then
    switch_options, text_options = {}, {}
    for _, o in ipairs(M.options()) do
      switch_options[o.key], text_options[o.key] = o.switch, o.type == 'string'
    end
  end
  -- (C's own message names ptdp_config_set, which a script does not call.)
  if type(value) == 'number' and text_options[key] then
    raise(string.format('ptdp.config: %s takes a text (%s), not the number %s', key,
                        key == 'data_path' and "a path, or a blend table { 0.3, 'A', 0.7, 'B' }" or
                        'a path or a name', tostring(value)))
  end
  -- true/false only where the option is a switch (lr = true read as 1), a
  -- list only for data_path's blend (num_layers = {4} read as 4).
  if type(value) == 'boolean' and switch_options[key] == false then
    raise(string.format("ptdp.config: %s takes a %s, not %s", key,
                        key == 'data_path' and 'path' or 'value', tostring(value)))
  end
  if type(value) == 'table' and key ~= 'data_path' then
    raise(string.format('ptdp.config: %s takes one value, not a table (only data_path takes a ' ..
                        'list: a blend { 0.3, \'A\', 0.7, \'B\' })', key))
  end
  if type(value) == 'table' then  -- (a hole would cut the blend short, {} mean no data)
    need_list(value, 'config', key)
    if #value == 0 then raise('ptdp.config: data_path is an empty list; a blend lists WEIGHT, PREFIX pairs') end
  end
  if type(value) == 'string' and value:find('\0', 1, true) then
    raise(string.format('ptdp.config: %s holds a NUL byte', key))
  end
  if type(value) ~= 'string' and type(value) ~= 'number' and type(value) ~= 'boolean' and
     type(value) ~= 'table' then
    raise(string.format('ptdp.config: %s takes a number or a text, not a %s', key, type(value)))
  end
  if type(value) == 'boolean' then value = value and 1 or 0 end
  if type(value) == 'table' then
    local items = {}
    for i, v in ipairs(value) do
      if type(v) ~= 'number' and type(v) ~= 'string' then  -- (a table read as 'table: 0x...')
        raise(string.format('ptdp.config: %s item %d is a %s; a blend lists weights (numbers) ' ..
                            'and prefixes (texts)', key, i, type(v)))
      end
      -- The engine reads the blend as one text split at white space: an item
      -- holding some would be read as other items (a dataset 'g 1 d' as the
      -- blend of g and d).
      if type(v) == 'string' and (v == '' or v:find('%s')) then
        raise(string.format("ptdp.config: %s item %d '%s' is empty or holds white space, which " ..
                            'separates the items of a blend: give that dataset a name (or a ' ..
                            'link) without it', key, i, v))
      end
      -- Of more than one item, WEIGHT, PATH pairs: { 'a', 'b' } was joined
      -- into the one path 'a b', and trained on a file of that name.
      if #value > 1 and i % 2 == 1 and type(v) ~= 'number' and not M.decimal_number(v) then
        raise(string.format("ptdp.config: %s item %d '%s' is not a weight: a blend table lists " ..
                            "WEIGHT, PATH pairs, e.g. { 0.3, 'A', 0.7, 'B' } (one dataset: its " ..
                            'path as a text)', key, i, tostring(v)))
      end
      if #value > 1 and i % 2 == 0 and type(v) ~= 'string' then
        raise(string.format("ptdp.config: %s item %d is the number %s, not a path: a blend table " ..
                            "lists WEIGHT, PATH pairs, e.g. { 0.3, 'A', 0.7, 'B' }", key, i, tostring(v)))
      end
      items[i] = tostring(v)
    end
    value = table.concat(items, ' ')
  end
  if type(value) == 'number' then return C.ptdp_config_set_double(cfg, key, value) end
  return C.ptdp_config_set(cfg, key, tostring(value))
end

local function config_get(cfg, key)
  return read_text(function(buf, cap, len) return C.ptdp_config_get(cfg, key, buf, cap, len) end)
end

-- Builds a config from a table: flat option keys, or the groups model /
-- optimizer / data / parallel / recompute holding option keys or their short
-- aliases. parallel.v is the paper's v, model chunks per pipeline rank: it
-- becomes num_layers_per_virtual_pipeline_stage = num_layers / (p x v), with
-- the table's num_layers and p (or their defaults).
function M.config(t)
  if t ~= nil and type(t) ~= 'table' then
    raise(string.format('ptdp.config / ptdp.trainer take a table of options, e.g. ' ..
                        '{ num_layers = 2 }; got a %s', type(t)))
  end
  local out = ffi.new('ptdp_config*[1]')
  check(C.ptdp_config_create(out))
  local cfg = ffi.gc(out[0], C.ptdp_config_destroy)
  local v, per_chunk_set
  -- One option given twice (model = { num_layers = 2 } and num_layers = 4, or
  -- parallel.t and tensor_model_parallel_size) is refused: which would win
  -- depends on the table's order.
  local given = {}
  local function apply(tbl, group)
    for k, val in pairs(tbl) do
      local name = group and group .. '.' .. tostring(k) or tostring(k)
      if type(val) == 'table' and aliases[k] and not group then
        apply(val, k)
      elseif group == 'parallel' and k == 'v' then
        v = val
      else
        local key = group and aliases[group][k] or k
        if type(key) == 'string' and given[key] then
          raise(string.format("option '%s' is given twice, as %s and as %s: give it once", key,
                              given[key], name))
        end
        given[key] = name
        if key == 'num_layers_per_virtual_pipeline_stage' then per_chunk_set = true end
        check(set_option(cfg, key, val))
      end
    end
  end
  apply(t or {}, nil)
  if v ~= nil then
    local n, p = tonumber(config_get(cfg, 'num_layers')),
                 tonumber(config_get(cfg, 'pipeline_model_parallel_size'))
    local nv = tonumber(v)
    if per_chunk_set then
      raise('parallel.v and num_layers_per_virtual_pipeline_stage both set: give one of them')
    end
    if type(v) ~= 'number' or not nv or nv < 1 or nv % 1 ~= 0 or nv > n then
      raise(string.format("parallel.v (model chunks per pipeline rank) must be a whole number " ..
                          "in [1, num_layers = %d], got '%s'", n, tostring(v)))
    end
    if n % (p * nv) ~= 0 then
      raise(string.format('parallel.v = %d: num_layers (%d) must be divisible by p x v ' ..
                          '(%d x %d = %d)', nv, n, p, nv, p * nv))
    end
    check(set_option(cfg, 'num_layers_per_virtual_pipeline_stage', nv == 1 and 0 or n / (p * nv)))
  end
  return cfg
end

-- Every engine option's value for the table t as the engine reads it, the
-- defaults filled in: { key = text, ... } (a run's arguments, for its log).
-- The options checked together as ptdp.trainer would check them, where no
-- file or device is needed; makes nothing. Raises the trainer's error.
function M.check_config(t)
  check(C.ptdp_config_check(M.config(t)))
end

-- Where the options' model differs from the checkpoint's at dir, in the
-- load's words ('num_layers: checkpoint 2, this run 4'), or '' when it is the same.
function M.model_differences(t, dir)
  need_string(dir, 'model_differences', 'dir')
  local cfg = M.config(t)
  return read_text(function(buf, cap, len) return C.ptdp_config_model_differences(cfg, dir, buf, cap, len) end)
end

function M.config_values(t)
  local cfg = M.config(t)
  local out = {}
  for _, o in ipairs(M.options()) do out[o.key] = config_get(cfg, o.key) end
  return out
end

-- The model's options recorded in the checkpoint at dir (a save directory's
-- newest, or one iter_N), as the engine's option keys and their texts:
-- { num_layers = '4', normalization = 'RMSNorm', ... }. Options still at their
-- defaults are left out. A missing or damaged checkpoint raises the load's error.
function M.model_options(dir)
  need_string(dir, 'model_options', 'dir')
  local out = ffi.new('ptdp_config*[1]')
  check(C.ptdp_config_create(out))
  local cfg = ffi.gc(out[0], C.ptdp_config_destroy)
  local before = {}
  for _, o in ipairs(M.options()) do before[o.key] = config_get(cfg, o.key) end
  check(C.ptdp_config_set_model_from_checkpoint(cfg, dir))
  local model = {}
  for key, was in pairs(before) do
    local now = config_get(cfg, key)
    if now ~= was then model[key] = now end
  end
  return model
end

local Trainer = {}
-- A closed trainer's methods (but close) say so, rather than the C ABI's
-- "trainer must not be NULL".
Trainer.__index = function(t, k)
  local method = Trainer[k]
  if method and k ~= 'close' and rawget(t, 'handle') == nil then  -- (only close clears it)
    return function() raise('ptdp.trainer: this trainer is closed (trainer:close()); make another') end
  end
  return method
end

-- A trainer the script no longer refers to holds its --save directory (no
-- other writer of this process may save there) until the collector frees it:
-- everything that saves collects first (or the script closes the trainer).
local function release_let_go() collectgarbage() end

function M.trainer(t)
  local cfg = M.config(t)
  local out = ffi.new('ptdp_trainer*[1]')
  release_let_go()
  check(C.ptdp_trainer_create(cfg, out))
  return setmetatable({ handle = ffi.gc(out[0], C.ptdp_trainer_destroy),
                        batch = tonumber(config_get(cfg, 'global_batch_size')),
                        seq = tonumber(config_get(cfg, 'seq_length')) }, Trainer)
end

-- The values a step reports, from the engine's one table of trainer values.
local metric_names = {}
do
  local name, step = ffi.new('const char*[1]'), ffi.new('int32_t[1]')
  for i = 0, C.ptdp_trainer_value_count() - 1 do
    check(C.ptdp_trainer_value_info(i, name, step))
    if step[0] == 1 then metric_names[#metric_names + 1] = ffi.string(name[0]) end
  end
end

-- This process's place in the job: rank (its first rank) and that rank's
-- tp_rank, dp_rank, pp_rank; world_size, local_ranks and the t, p, d degrees
-- and v (virtual_pipeline_stages, model chunks per pipeline rank).
function Trainer:layout()
  local out = {}
  for _, k in ipairs { 'rank', 'tp_rank', 'dp_rank', 'pp_rank', 'world_size', 'local_ranks',
                       'tensor_model_parallel_size', 'pipeline_model_parallel_size',
                       'data_parallel_size', 'virtual_pipeline_stages' } do
    out[k] = self:get(k)
  end
  out.t, out.p, out.d = out.tensor_model_parallel_size, out.pipeline_model_parallel_size,
                        out.data_parallel_size
  out.v = out.virtual_pipeline_stages
  return out
end

function Trainer:get(name)
  need_string(name, 'get', 'name')
  local v = ffi.new('double[1]')
  check(C.ptdp_trainer_get(self.handle, name, v))
  return v[0]
end

local rank_names = { 'world_rank', 'tp_rank', 'pp_rank', 'dp_rank', 'step_seconds',
                     'compute_seconds', 'idle_fraction', 'peak_activation_bytes',
                     'device_peak_bytes', 'device_in_use_bytes' }
local groups = { 'tp', 'pp', 'dp', 'embedding' }

-- The report of one rank through get (ptdp_trainer_rank_get or
-- ptdp_trainer_world_rank_get), as rank_report returns it.
local function rank_values(get, handle, rank)
  local v = ffi.new('double[1]')
  local out = { bytes = {}, seconds = {}, calls = {} }
  for _, n in ipairs(rank_names) do
    check(get(handle, rank, n, v))
    out[n] = v[0]
  end
  for _, g in ipairs(groups) do
    for _, kind in ipairs { 'bytes', 'seconds', 'calls' } do
      check(get(handle, rank, kind .. '_' .. g, v))
      out[kind][g] = v[0]
    end
  end
  return out
end

-- One rank hosted by this process, after a step: local_rank counts from 0 like
-- every rank number of the module (default 0; up to layout().local_ranks - 1;
-- without mpirun it is the world rank). Returns { world_rank, tp_rank,
-- pp_rank, dp_rank, step_seconds, compute_seconds, idle_fraction,
-- peak_activation_bytes, device_peak_bytes, device_in_use_bytes,
-- bytes = {tp=, pp=, dp=, embedding=}, seconds = {...},
-- calls = {...} } of the last step (embedding is 0 off the first and last
-- pipeline stages).
function Trainer:rank_report(local_rank)
  need_count(local_rank, 'rank_report', 'local_rank', 0, 2 ^ 31 - 1)
  return rank_values(C.ptdp_trainer_rank_get, self.handle, local_rank or 0)
end

-- Every world rank's rank_report of the last step, gathered on the process of
-- world rank 0 (ptdp_trainer_gather_reports, so under mpirun every process
-- calls it after the same step). Returns on that process a table of
-- layout().world_size reports indexed by world rank from 0, and nil on the others.
function Trainer:rank_reports()
  check(C.ptdp_trainer_gather_reports(self.handle))
  if self:get('rank') ~= 0 then return nil end
  local out = {}
  for r = 0, self:get('world_size') - 1 do
    out[r] = rank_values(C.ptdp_trainer_world_rank_get, self.handle, r)
  end
  return out
end

-- The last step's pipeline bubble replayed from measured op times
-- (ptdp_trainer_get 'replayed_bubble'; not under mpirun with several processes).
function Trainer:replayed_bubble() return self:get('replayed_bubble') end

-- The mean time of one compute op of a model chunk in that replay:
-- { forward =, backward =, weight = } seconds (backward is B alone and weight
-- W under zbh1 and zbv; weight is 0 under other schedules).
function Trainer:op_seconds()
  return { forward = self:get('forward_op_seconds'), backward = self:get('backward_op_seconds'),
           weight = self:get('weight_op_seconds') }
end

-- The metrics of the step just run (loss = lm_loss).
local function step_metrics(self)
  local m = {}
  local v = ffi.new('double[1]')
  for _, n in ipairs(metric_names) do
    check(C.ptdp_trainer_get(self.handle, n, v))
    m[n] = v[0]
  end
  m.loss = m.lm_loss
  return m
end

-- One optimizer step; returns a table of the step's metrics (loss = lm_loss).
function Trainer:step()
  check(C.ptdp_trainer_step(self.handle, nil))
  return step_metrics(self)
end

-- The same step on the caller's token ids (ptdp_trainer_step_tokens): the
-- global batch as global_batch_size sequences of seq_length + 1 ids, given as
-- a flat table, a table of sequences (tables), or an FFI int32_t array with
-- its count. Sequence i is global sample consumed_samples + i. Under mpirun
-- every process passes the same whole batch. Returns the step's metrics.
function Trainer:step_tokens(ids, count)
  local arr, n
  if type(ids) == 'cdata' then
    if type(count) ~= 'number' then
      raise('step_tokens(ids, count): an FFI array needs its count of token ids')
    end
    need_count(count, 'step_tokens', 'count', 0, 2 ^ 53)
    local ct = tostring(ffi.typeof(ids))  -- int32_t is int to the FFI
    if not (ct:match('^ctype<int [%[%*]') or ct:match('^ctype<const int [%[%*]') or
            ct:match('^ctype<int32_t [%[%*]') or ct:match('^ctype<const int32_t [%[%*]')) then
      raise(string.format('step_tokens(ids, count): an FFI array must hold int32_t, got %s',
                          tostring(ffi.typeof(ids))))
    end
    -- An array knows its size (a pointer does not): a count past it would read beyond.
    local bytes = ct:match('%[') and ffi.sizeof(ids)
    if bytes and count * 4 > bytes then
      raise(string.format('step_tokens(ids, count): count %d is more than the array holds (%d ids)',
                          count, bytes / 4))
    end
    -- As int32_t *: an array of arrays (int32_t[b][s + 1]) holds the same ids in order.
    arr, n = ffi.cast('const int32_t *', ids), count
  elseif type(ids) == 'table' then
    if count ~= nil then  -- (a table knows its length: a count was ignored)
      raise('step_tokens(ids): a table of ids takes no count (its length is the count); got ' ..
            shown(count))
    end
    need_list(ids, 'step_tokens', 'ids')  -- (a hole would cut the list short)
    local flat = ids
    if type(ids[1]) == 'table' then  -- a table of sequences: global_batch_size of seq_length + 1
      if #ids ~= self.batch then
        raise(string.format('step_tokens: %d sequences, but global_batch_size is %d', #ids, self.batch))
      end
      flat = {}
      for i, seq in ipairs(ids) do
        if type(seq) == 'table' then need_list(seq, 'step_tokens', 'sequence ' .. (i - 1)) end
        if type(seq) ~= 'table' or #seq ~= self.seq + 1 then
          raise(string.format('step_tokens: sequence %d has %s ids; each has seq_length + 1 = %d',
                              i - 1, type(seq) == 'table' and tostring(#seq) or 'no', self.seq + 1))
        end
        for _, id in ipairs(seq) do flat[#flat + 1] = id end
      end
    end
    n = #flat
    arr = ffi.new('int32_t[?]', math.max(n, 1))
    for i = 1, n do
      local id = flat[i]
      if type(id) ~= 'number' or id % 1 ~= 0 or id < -2^31 or id >= 2^31 then
        raise(string.format('step_tokens: token %d must be a whole number, got %s',
                            i - 1, shown(id)))
      end
      arr[i - 1] = id
    end
  else
    raise(string.format('step_tokens takes a table of token ids (flat or one table per ' ..
                        'sequence) or an FFI int32_t array and its count; got a %s', type(ids)))
  end
  check(C.ptdp_trainer_step_tokens(self.handle, arr, n, nil))
  return step_metrics(self)
end

function Trainer:evaluate(iters)
  need_count(iters, 'evaluate', 'iters', 1, 2 ^ 31 - 1)  -- nil: the run's eval_iters
  local v = ffi.new('double[1]')
  check(C.ptdp_trainer_evaluate(self.handle, iters or 0, v))
  return v[0]
end

-- The last step's log line; its lm loss is the mean over the steps since the
-- previous log line or record (Megatron's log interval).
function Trainer:log_line()
  return read_text(function(buf, cap, len) return C.ptdp_trainer_log_line(self.handle, buf, cap, len) end)
end

-- The last step as one line of JSON, the log line's fields (see ptdp.append_line).
function Trainer:log_json()
  return read_text(function(buf, cap, len) return C.ptdp_trainer_log_json(self.handle, buf, cap, len) end)
end

-- opts: max_new_tokens (default 200), temperature (0 = greedy), seed.
-- The model's logits for a sequence of token ids (a Lua list), no dropout:
-- a list of rows, one per position, each a list of vocab_size numbers; with
-- { last = true } the last position's row alone.
function Trainer:logits(ids, opts)
  if type(ids) ~= 'table' or #ids == 0 then raise('logits needs a non-empty list of token ids') end
  need_list(ids, 'logits', 'ids')
  opts = need_options(opts, 'logits', { 'last' })
  if opts.last ~= nil and type(opts.last) ~= 'boolean' then  -- ('no' would be true)
    raise('ptdp.logits: last is true or false, got ' .. tostring(opts.last))
  end
  local n = #ids
  local buf = ffi.new('int32_t[?]', n)
  for i = 1, n do
    if type(ids[i]) ~= 'number' or ids[i] ~= math.floor(ids[i]) or ids[i] < 0 or ids[i] > 2147483647 then
      raise('logits: id ' .. i .. ' is ' .. shown(ids[i]) .. ', not a token id (an integer >= 0)')
    end
    buf[i - 1] = ids[i]
  end
  local last = opts.last and 1 or 0
  local len = ffi.new('size_t[1]')
  check(C.ptdp_trainer_logits(self.handle, buf, n, last, nil, 0, len))
  local out = ffi.new('float[?]', len[0])
  check(C.ptdp_trainer_logits(self.handle, buf, n, last, out, len[0], len))
  local V = tonumber(len[0]) / (opts.last and 1 or n)
  local rows = {}
  for r = 0, (opts.last and 1 or n) - 1 do
    local row = {}
    for j = 0, V - 1 do row[j + 1] = out[r * V + j] end
    rows[r + 1] = row
  end
  return opts.last and rows[1] or rows
end

function Trainer:generate(prompt, opts)
  opt_string(prompt, 'generate', 'prompt')
  opts = need_options(opts, 'generate', { 'max_new_tokens', 'temperature', 'top_k', 'top_p', 'seed' })
  need_count(opts.max_new_tokens, 'generate', 'max_new_tokens', 0, C.PTDP_MAX_NEW_TOKENS)
  need_count(opts.top_k, 'generate', 'top_k', 0, 2 ^ 31 - 1)
  need_count(opts.seed, 'generate', 'seed', 0, 2 ^ 53)
  need_number(opts.temperature, 'generate', 'temperature')
  need_number(opts.top_p, 'generate', 'top_p')
  if opts.seed ~= nil and (opts.temperature or 0) == 0 then  -- (top_k, top_p: the engine says)
    raise('ptdp.generate: seed keys the sampling, and temperature 0 samples nothing (greedy ' ..
          'decoding takes the most likely token): give a temperature > 0, or leave seed out')
  end
  return read_text(function(buf, cap, len)
    return C.ptdp_trainer_generate_top(self.handle, prompt or '', opts.max_new_tokens or 200,
                                       opts.temperature or 0, opts.top_k or 0, opts.top_p or 1,
                                       opts.seed or 0, buf, cap, len)
  end)
end

-- Saves the training state as dir/iter_N (atomic; see ARCHITECTURE §5) and
-- returns that directory.
function Trainer:save(dir)
  need_string(dir, 'save', 'dir')
  release_let_go()
  check(C.ptdp_trainer_save(self.handle, dir))
  return self:text('last_checkpoint')
end

-- With async_save, waits for the save in flight (its outcome is then in
-- text('last_checkpoint'), text('last_save_error'), get('failed_saves'));
-- returns the seconds waited.
function Trainer:wait_for_saves()
  local s = ffi.new('double[1]')
  check(C.ptdp_trainer_wait_for_saves(self.handle, s))
  return s[0]
end

-- Under mpirun, that every process gives the same values (a table name ->
-- value) for a script's own options that shape what all ranks run together
-- (an evaluation interval, a sample's prompt); collective. A difference
-- raises on every process naming it; one process: nothing to do.
function Trainer:agree(options)
  if type(options) ~= 'table' then
    raise('trainer:agree takes a table of option name -> value, got ' .. shown(options))
  end
  local keys = {}
  for k in pairs(options) do
    if type(k) ~= 'string' then raise('trainer:agree: option names are strings, got ' .. shown(k)) end
    keys[#keys + 1] = k
  end
  table.sort(keys)
  local names, values = ffi.new('const char *[?]', #keys + 1), ffi.new('const char *[?]', #keys + 1)
  local texts = {}  -- (kept alive while C reads them)
  for i, k in ipairs(keys) do
    -- By value: a table's or function's text is its address, another in each process.
    local v = options[k]
    if type(v) ~= 'string' and type(v) ~= 'number' and type(v) ~= 'boolean' then
      raise(string.format("trainer:agree: option '%s' must be a string, number or boolean, got %s",
                          k, shown(v)))
    end
    texts[i] = tostring(v)
    names[i - 1], values[i - 1] = k, texts[i]
  end
  check(C.ptdp_trainer_agree(self.handle, names, values, #keys))
end

-- Loads a checkpoint saved under any layout (dir: a save directory, whose
-- newest complete checkpoint is taken, or one iter_N); returns the line saying
-- which was taken, why, and the layouts it was saved with and loaded into.
function Trainer:load(dir)
  need_string(dir, 'load', 'dir')
  check(C.ptdp_trainer_load(self.handle, dir))
  return self:text('loaded_checkpoint')
end

-- Ends the trainer now (its saves waited for, its --save directory and
-- outputs released) rather than when the collector frees it; any later call
-- on it is an error.
function Trainer:close()
  if self.handle == nil then return end
  local h = self.handle
  self.handle = nil
  C.ptdp_trainer_destroy(ffi.gc(h, nil))
end

-- loaded_checkpoint, last_checkpoint or last_save_error ('' if none), or device
-- (the first local rank's: what --device, by default auto, chose).
function Trainer:text(name)
  need_string(name, 'text', 'name')
  return read_text(function(buf, cap, len) return C.ptdp_trainer_get_text(self.handle, name, buf, cap, len) end)
end

-- Checkpoint tools, as `ptdp ckpt` runs them: inspect returns the report;
-- verify returns ok, report (every fault listed); export writes safetensors,
-- float32 unless opts.dtype says 'bf16' or 'f16', and returns out (import
-- below).
function M.checkpoint_inspect(dir)
  need_string(dir, 'checkpoint_inspect', 'dir')
  return read_text(function(buf, cap, len) return C.ptdp_checkpoint_inspect(dir, buf, cap, len) end)
end

function M.checkpoint_verify(dir)
  need_string(dir, 'checkpoint_verify', 'dir')
  local ok = true
  local report = read_text(function(buf, cap, len)
    local st = C.ptdp_checkpoint_verify(dir, buf, cap, len)
    if st == C.PTDP_ERR_CORRUPT_DATA then
      ok = false
      return 0
    end
    return st
  end)
  return ok, report
end

function M.export_safetensors(dir, out, opts)
  need_string(dir, 'export_safetensors', 'dir')
  need_string(out, 'export_safetensors', 'out')
  opts = need_options(opts, 'export_safetensors', { 'dtype' })
  opt_string(opts.dtype, 'export_safetensors', 'dtype')
  check(C.ptdp_checkpoint_export_safetensors_dtype(dir, out, opts.dtype or 'f32'))
  return out
end

-- The reverse of export: a Hugging Face GPT-2 safetensors file made into a
-- checkpoint at iteration 0 in dir; opts.config names its config.json
-- (default: the file's gpt2_config metadata, else config.json beside it).
-- Returns dir.
function M.import_safetensors(file, dir, opts)
  need_string(file, 'import_safetensors', 'file')
  need_string(dir, 'import_safetensors', 'dir')
  opts = need_options(opts, 'import_safetensors', { 'config' })
  opt_string(opts.config, 'import_safetensors', 'config')
  release_let_go()
  check(C.ptdp_checkpoint_import_safetensors(file, opts.config, dir))
  return dir
end

-- ptdp.tokenize{ inputs = {...} or 'path', output = 'file', format = 'fortune', tokenizer = 'byte' }
-- writes a ptdp token dataset; returns documents, tokens.
-- ptdp.tokenize{ inputs = ..., output_prefix = 'P', format = 'jsonl', json_keys = { 'text' },
--                append_eod = true, tokenizer = 'byte' }
-- writes Megatron's indexed dataset P_KEY_document.{bin,idx} per key; returns
-- the first key's documents, tokens and prefix (what data_path takes).
-- tokenizer = 'GPT2BPETokenizer' takes vocab_file + merge_file (vocab.json,
-- merges.txt) or tokenizer_file (a Hugging Face tokenizer.json). workers = N
-- threads encode (default 1, 0: one per core); the output is the same for any N.
-- new_only = true (output only): a file another command made there meanwhile
-- is not replaced (an error, nothing of this call's left).
function M.tokenize(t)
  if type(t) ~= 'table' then raise('ptdp.tokenize takes a table, e.g. { inputs = ..., output = ... }') end
  t = need_options(t, 'tokenize', { 'inputs', 'output', 'output_prefix', 'format', 'json_keys',
                                    'append_eod', 'tokenizer', 'vocab_file', 'merge_file',
                                    'tokenizer_file', 'workers', 'new_only' })
  local inputs = type(t.inputs) == 'table' and t.inputs or { t.inputs }
  if #inputs == 0 then raise('ptdp.tokenize: inputs names no file') end
  need_list(inputs, 'tokenize', 'inputs')
  if t.append_eod ~= nil and type(t.append_eod) ~= 'boolean' then
    raise('ptdp.tokenize: append_eod is true or false, got ' .. tostring(t.append_eod))
  end
  local arr = ffi.new('const char*[?]', #inputs)
  for i, p in ipairs(inputs) do
    need_string(p, 'tokenize', 'inputs[' .. i .. ']')
    arr[i - 1] = p
  end
  for _, k in ipairs { 'output', 'output_prefix', 'format', 'tokenizer', 'vocab_file', 'merge_file',
                       'tokenizer_file' } do
    opt_string(t[k], 'tokenize', k)
  end
  local kv = { 'tokenizer_type=' .. (t.tokenizer or 'byte') }
  for _, k in ipairs { 'vocab_file', 'merge_file', 'tokenizer_file' } do
    if t[k] and t[k] ~= '' then kv[#kv + 1] = k .. '=' .. t[k] end
  end
  if t.workers ~= nil then
    if tostring(t.workers):find('\0', 1, true) then raise('ptdp.tokenize: workers holds a NUL byte') end
    kv[#kv + 1] = 'workers=' .. tostring(t.workers)
  end
  if t.new_only ~= nil and type(t.new_only) ~= 'boolean' then
    raise('ptdp.tokenize: new_only is true or false, got ' .. tostring(t.new_only))
  end
  if t.new_only and t.output_prefix then raise('ptdp.tokenize: new_only is for output (a ptdp dataset)') end
  if t.new_only then kv[#kv + 1] = 'new_only=1' end
  local function options()
    local opts = ffi.new('const char*[?]', #kv)
    for i, v in ipairs(kv) do opts[i - 1] = v end
    return opts
  end
  if t.output_prefix then
    if t.output then raise('ptdp.tokenize: give output or output_prefix, not both') end
    local keys = t.json_keys or { 'text' }
    if type(keys) == 'string' then keys = { keys } end
    if type(keys) ~= 'table' or #keys == 0 then
      raise('ptdp.tokenize: json_keys is a key or a list of keys, e.g. { \'text\' }')
    end
    need_list(keys, 'tokenize', 'json_keys')
    for i, k in ipairs(keys) do
      need_string(k, 'tokenize', 'json_keys[' .. i .. ']')
      if k:find(',', 1, true) then  -- the C list is comma-separated: one key would count as two
        raise(string.format("ptdp.tokenize: json_keys[%d] '%s' holds a comma: give the keys as a " ..
                            "list, { 'text', 'title' }", i, k))
      end
    end
    for _, v in ipairs { 'output_prefix=' .. t.output_prefix, 'format=' .. (t.format or 'jsonl'),
                         'json_keys=' .. table.concat(keys, ','),
                         'append_eod=' .. (t.append_eod and '1' or '0') } do
      kv[#kv + 1] = v
    end
    local docs, toks = ffi.new('int64_t[?]', #keys), ffi.new('int64_t[?]', #keys)
    check(C.ptdp_tokenize_indexed(arr, #inputs, options(), #kv, docs, toks))
    return tonumber(docs[0]), tonumber(toks[0]), t.output_prefix .. '_' .. keys[1] .. '_document'
  end
  local docs, toks = ffi.new('int64_t[1]'), ffi.new('int64_t[1]')
  if not t.output then raise('ptdp.tokenize needs output (a ptdp file) or output_prefix (Megatron)') end
  if t.json_keys ~= nil then  -- (it was ignored)
    raise('ptdp.tokenize: json_keys picks the keys of a jsonl corpus for output_prefix; output reads no JSON')
  end
  if t.append_eod ~= nil then  -- (ignored too: a ptdp dataset always ends each document with EOD)
    raise('ptdp.tokenize: append_eod goes with output_prefix; output always ends each document with EOD')
  end
  kv[#kv + 1] = 'output=' .. t.output
  kv[#kv + 1] = 'format=' .. (t.format or 'fortune')
  check(C.ptdp_tokenize_options(arr, #inputs, options(), #kv, docs, toks))
  return tonumber(docs[0]), tonumber(toks[0])
end

-- Appends one line (a JSON object) to a metrics log (JSON lines whose first record is
-- the run's, {"kind": "run", ...}: what --log-json writes); fresh = true
-- replaces the file with it. Refuses a directory, device or FIFO.
function M.append_line(path, line, fresh)
  need_string(path, 'append_line', 'path')
  need_string(line, 'append_line', 'line')
  if fresh ~= nil and type(fresh) ~= 'boolean' then  -- ('no' would be true)
    raise('ptdp.append_line: fresh is true or false, got ' .. tostring(fresh))
  end
  check(C.ptdp_append_line(path, line, fresh and 1 or 0))
end

-- A script's own small file: bytes at path, written as every writer writes
-- (temporary file, rename); a directory, device, FIFO, dangling link, an
-- input of this run or a file in a format ptdp's writers make (a dataset, a
-- model, a log, a trace, a PNG) is refused, naming `what`.
function M.write_file(path, bytes, what)
  need_string(path, 'write_file', 'path')
  need_string(bytes, 'write_file', 'bytes')
  need_string(what, 'write_file', 'what')
  check(C.ptdp_write_file(path, bytes, #bytes, what))
end

-- Checks an output the script will make before anything is made (the
-- writers' rules; nothing is written): a file, or with directory = true a
-- directory an output tree goes into (a --save root). Raises naming `what`.
-- With kind (a writer's format: 'metrics_log', 'trace', 'png', ... as
-- ptdp_check_output_kind names them), an existing file must be of that kind.
function M.check_output(path, what, directory, kind)
  need_string(path, 'check_output', 'path')
  need_string(what, 'check_output', 'what')
  if directory ~= nil and type(directory) ~= 'boolean' then
    raise('ptdp.check_output: directory is true or false, got ' .. tostring(directory))
  end
  opt_string(kind, 'check_output', 'kind')
  if kind and directory then  -- (a directory has no kind: the kind would be ignored)
    raise("ptdp.check_output: a kind is a file's, not a directory's: give directory = true or a kind, not both")
  end
  if kind and not directory then
    check(C.ptdp_check_output_kind(path, what, kind))
  else
    check(C.ptdp_check_output(path, what, directory and 1 or 0))
  end
end

pcall(ffi.cdef, 'char *realpath(const char *path, char *resolved); void free(void *p);')
-- path as the file it names: links, "." and ".." resolved; a part that does
-- not exist yet is taken as written after its first existing folder, resolved.
-- nil when nothing of it can be resolved. Two spellings of one file give one text.
function M.real_path(path)
  need_string(path, 'real_path', 'path')
  local rest, cur = {}, path
  while true do
    local r = ffi.C.realpath(cur, nil)
    if r ~= nil then
      local out = ffi.string(r)
      ffi.C.free(r)
      for i = #rest, 1, -1 do out = (out == '/' and '' or out) .. '/' .. rest[i] end
      return out
    end
    local parent, name = cur:match('^(.-)/*([^/]+)/*$')
    if not name or name == '..' then return nil end  -- nothing to resolve it against
    if name ~= '.' then rest[#rest + 1] = name end
    cur = parent == '' and (cur:sub(1, 1) == '/' and '/' or '.') or parent
  end
end

-- The MPI rank of this process when mpirun (or srun) started it, else nil:
-- what a script can know of its place before its trainer exists.
function M.mpirun_rank()
  return tonumber(os.getenv('OMPI_COMM_WORLD_RANK') or os.getenv('PMIX_RANK') or os.getenv('PMI_RANK') or '')
end

-- What is at path itself (not through a link), as text, or nil when nothing
-- is: a file a script made is removed only while it is still the one it made.
function M.file_identity(path)
  need_string(path, 'file_identity', 'path')
  local len = ffi.new('size_t[1]')
  local buf = ffi.new('char[?]', 128)
  local st = C.ptdp_file_identity(path, buf, 128, len)
  if st == C.PTDP_ERR_IO then return nil end
  check(st)
  return ffi.string(buf, len[0])
end

-- Text as one printable line, as the engine writes every message: ill-formed
-- bytes and control characters (a name's newline or tab too) as \xNN.
function M.one_line(text)
  text = tostring(text)
  return read_text(function(buf, cap, len) return C.ptdp_one_line_text(text, #text, buf, cap, len) end)
end

-- A script's message to the user on stderr, one line whatever names it quotes
-- ('ptdp: ...', 'bench_pipeline: ...'; the line end is added).
function M.say(text)
  io.stderr:write(M.one_line(text) .. '\n')
end

-- Whether the output paths a and b name one file (links, hard links, ./ and
-- // spellings): a script's two outputs must not.
function M.same_output(a, b)
  need_string(a, 'same_output', 'a')
  need_string(b, 'same_output', 'b')
  local same = ffi.new('int32_t[1]')
  check(C.ptdp_same_output(a, b, same))
  return same[0] == 1
end

-- A script's small input file's bytes; a directory, FIFO or device is refused
-- (nothing waits on it). Missing: nil and the reason.
function M.read_file(path, what)
  need_string(path, 'read_file', 'path')
  need_string(what, 'read_file', 'what')
  local ok, bytes = pcall(read_text, function(buf, cap, len)
    return C.ptdp_read_file(path, what, buf, cap, len)
  end)
  if ok then return bytes end
  if tostring(bytes):match('No such file') then return nil, tostring(bytes) end
  error(bytes, 0)
end

-- mkdir -p without a shell: a path is data, never code. Returns path and the
-- directories it made (outermost first), for unmake_dirs when what was to go
-- in them is refused. Raises naming the directory that could not be made,
-- having removed the ones it made. Until keep_dirs, an interrupted run
-- (SIGTERM) removes them while they are empty.
ffi.cdef [[
int mkdir(const char *path, unsigned int mode);
int rmdir(const char *path);
char *strerror(int errnum);
]]

-- The directories this process's mkdirs made: path -> "device:inode" of what
-- it made there. The only ones unmake_dirs removes, whatever list it is given,
-- and only while that path is still the directory made (a link moved on the
-- way, or another directory put there, is not removed).
local made_by_mkdirs = {}
local function dev_ino(path) return (M.file_identity(path) or ''):match('^(%d+:%d+):') end
local function need_made(made, fn)
  if type(made) ~= 'table' then
    raise(string.format('ptdp.%s: give the list of directories mkdirs returned, got %s', fn, type(made)))
  end
  need_list(made, fn, 'made')
end

-- Removes the directories mkdirs made (its second result), innermost first,
-- each only while empty; a path mkdirs did not make is left alone.
function M.unmake_dirs(made)
  need_made(made, 'unmake_dirs')
  for i = #made, 1, -1 do
    need_string(made[i], 'unmake_dirs', 'made[' .. i .. ']')
    C.ptdp_hold_made_directory(made[i], 0)
    local id = made_by_mkdirs[made[i]]
    if id and dev_ino(made[i]) == id and ffi.C.rmdir(made[i]) == 0 then made_by_mkdirs[made[i]] = nil end
  end
end

-- Keeps them: off the interrupted run's cleanup (what they hold is done).
function M.keep_dirs(made)
  need_made(made, 'keep_dirs')
  for i = #made, 1, -1 do
    need_string(made[i], 'keep_dirs', 'made[' .. i .. ']')
    C.ptdp_hold_made_directory(made[i], 0)
  end
end

function M.mkdirs(path)
  need_string(path, 'mkdirs', 'path')
  -- By the writers' rules for a directory: not inside a checkpoint or named
  -- as one (a resume then stopped at an iter_N.old no save had made).
  check(C.ptdp_check_output(path, 'ptdp.mkdirs', 1))
  local EEXIST = 17
  local prefix, made = path:sub(1, 1) == '/' and '/' or '', {}
  local function refuse(msg)
    M.unmake_dirs(made)
    raise(msg)
  end
  -- A directory already there is looked at first: never made, never held.
  local function is_dir(p)
    local dir = io.open(p .. '/.', 'r')  -- opens only when p is a directory
    if dir then dir:close() end
    return dir ~= nil
  end
  for part in path:gmatch('[^/]+') do
    prefix = prefix .. part
    if is_dir(prefix) then goto next_part end
    if ffi.C.mkdir(prefix, tonumber('755', 8)) == 0 then
      -- Held once made, by its identity: the cleanup removes only the one
      -- made (held before, one another program made meanwhile would go).
      made[#made + 1] = prefix
      made_by_mkdirs[prefix] = dev_ino(prefix)
      C.ptdp_hold_made_directory(prefix, 1)
    else
      local err = ffi.errno()
      if err ~= EEXIST then
        refuse(string.format("cannot create directory '%s': %s", prefix, ffi.string(ffi.C.strerror(err))))
      end
      if not is_dir(prefix) then refuse(string.format("'%s' exists and is not a directory", prefix)) end
    end
    ::next_part::
    prefix = prefix .. '/'
  end
  return path, made
end

-- A new directory of this process's own under parent: parent .. '/' .. prefix
-- .. six random characters (mkdtemp: no shell, so any byte of a path but NUL
-- is data). An interrupted script's directory goes with all it holds (the
-- signal cleanup removes it whole); remove_temp_dir removes it at the end.
-- Raises naming parent when it cannot be made.
function M.make_temp_dir(parent, prefix)
  need_string(parent, 'make_temp_dir', 'parent')
  need_string(prefix, 'make_temp_dir', 'prefix')
  local cap = #parent + #prefix + 8
  local buf = ffi.new('char[?]', cap)
  check(C.ptdp_make_temp_dir(parent, prefix, buf, cap, nil))
  return ffi.string(buf)
end

-- Removes a directory make_temp_dir made, with all it holds (following no
-- link); any other path is refused and nothing is removed.
function M.remove_temp_dir(path)
  need_string(path, 'remove_temp_dir', 'path')
  check(C.ptdp_remove_temp_dir(path))
end

-- The project's directory (this module is in <project>/lua).
M.project_dir = here .. '/..'

-- The token dataset a script trains on: a ptdp file, a Megatron dataset
-- (PREFIX for PREFIX.bin + PREFIX.idx) or a blend 'W1 P1 W2 P2 ...' of them.
-- An existing dataset must be readable and is never replaced. A missing one
-- is tokenized from t.corpus only when that was asked for: the script's own
-- default dataset (resolved against the project, not the current directory),
-- or a path given together with an explicit corpus (t.create). Anything else
-- stops the run naming the path, so a mistyped --data-path never trains on
-- something else. Returns the path (or the blend), the directories made for a
-- dataset made now (for ptdp.unmake_dirs when the run is then refused) and
-- whether this call made the dataset.
--   ptdp.dataset{ path = ..., given = <--data-path given?>, create = <--corpus given?>,
--                 corpus = ..., format = ..., tokenizer = ..., vocab_file = ...,
--                 merge_file = ..., tokenizer_file = ... }  (what tokenizes a new one)
-- A dataset file that is there is held as this process's input (no writer of
-- any later run in it replaces it); checked without opening it, so a FIFO
-- never blocks. Missing: nil and the reason; any other refusal stops the run.
pcall(ffi.cdef, 'int usleep(unsigned int usec);')

-- Whether mpirun started this process: another process of the run may make
-- the dataset a moment before this one looks (the notes said "another command").
local function under_mpirun() return M.mpirun_rank() ~= nil end

local function readable(path)
  local status = C.ptdp_hold_input(path, '--data-path')
  if status == 0 then return true end
  local err = ffi.string(C.ptdp_last_error())
  if status == C.PTDP_ERR_IO and err:match('No such file') then return nil, err end
  check(status)
end

-- s as a number written in decimal digits, as the engine's options read one
-- (not 0x10 or 0x1p3, which tonumber takes), or nil.
function M.decimal_number(s)
  if type(s) ~= 'string' or not s:match('^[-+]?%d*%.?%d*[eE]?[-+]?%d*$') or not s:match('%d') or
     s:match('[eE]$') then
    return nil
  end
  return tonumber(s)
end

function M.dataset(t)
  if type(t) ~= 'table' then raise('ptdp.dataset: give a table { path = ..., ... }, got ' .. type(t)) end
  if t.create and (t.corpus == nil or t.corpus == '') then
    raise('ptdp.dataset: create = true makes the dataset from a corpus: give corpus too')
  end
  need_options(t, 'dataset', { 'path', 'given', 'create', 'corpus', 'format', 'tokenizer', 'vocab_file',
                               'merge_file', 'tokenizer_file' })
  local path = t.path
  need_string(path, 'dataset', 'path')
  local items = {}
  for item in path:gmatch('%S+') do items[#items + 1] = item end
  -- A weight as the engine reads one (decimal, and inf or nan to be named as such).
  local function weight(s)
    local l = s:lower():gsub('^[-+]', '')
    return l == 'inf' or l == 'infinity' or l == 'nan' or M.decimal_number(s)
  end
  if #items > 1 and tonumber(items[1]) and not weight(items[1]) then
    raise(string.format("--data-path '%s': the weight '%s' (item 1) is not a decimal number; a " ..
                        'blend is WEIGHT PREFIX pairs, e.g. 0.3 A 0.7 B', path, items[1]))
  end
  if #items > 1 and weight(items[1]) then  -- a blend: its form first, then every part there
    if t.create then
      raise(string.format("--data-path '%s' is a blend, and a blend is never made: --corpus %s " ..
                          'makes one dataset (give one --data-path with it, or leave --corpus out)',
                          path, tostring(t.corpus)))
    end
    for i = 1, #items, 2 do
      if not weight(items[i]) or not items[i + 1] then
        raise(string.format("--data-path blend '%s': %s; a blend is WEIGHT PREFIX pairs, e.g. " ..
                            "0.3 A 0.7 B", path, items[i + 1] and string.format(
                              "'%s' (item %d) is not a weight", items[i], i) or
                            string.format('%d items, an odd number', #items)))
      end
    end
    if readable(path) or readable(path .. '.idx') then  -- (as the trainer refuses it too)
      raise(string.format("--data-path '%s' names a dataset and also reads as a blend (weight " ..
                          "%s of '%s'): write './%s' for the dataset of that name, or rename it",
                          path, items[1], items[2], path))
    end
    for i = 2, #items, 2 do
      local p = items[i]
      if not readable(p) and not (readable(p .. '.idx') and readable(p .. '.bin')) then
        raise(string.format("--data-path blend: dataset '%s' does not exist (neither a file nor " ..
                            "a Megatron %s.bin + %s.idx); blend parts are never created", p, p, p))
      end
    end
    return path
  end
  if not t.given and path:sub(1, 1) ~= '/' then path = M.project_dir .. '/' .. path end
  local ok, err = readable(path)
  local missing = not ok and err:match('No such file') ~= nil
  -- A Megatron dataset is named by its prefix: PREFIX.idx + PREFIX.bin.
  if ok or (missing and (readable(path .. '.idx') or readable(path .. '.bin'))) then
    if t.create then  -- said, not silent: the same command run again reuses what it made
      M.say(string.format("ptdp: --data-path '%s' exists%s: training on it (--corpus %s " ..
                          "makes a dataset only where there is none)", path,
                          under_mpirun() and ' (made by another process of this run, or before it)' or '',
                          tostring(t.corpus)))
    end
    return path
  end
  if not missing or (t.given and not t.create) then
    raise(string.format("--data-path '%s': %s%s", path, (err:gsub('^.*: ', '')),
                        missing and ' (only the default dataset, or one given with --corpus, ' ..
                        'is created; or make one with `ptdp tokenize`; a Megatron dataset is ' ..
                        'given as PREFIX, for PREFIX.bin + PREFIX.idx' ..
                        (#items > 1 and '; a blend is WEIGHT PREFIX pairs, e.g. 0.3 A 0.7 B' or '') ..
                        ')' or ''))
  end
  local dir, made = path:match('^(.*)/[^/]*$'), {}
  if dir then _, made = M.mkdirs(dir) end
  -- A refused dataset leaves no directory made for it.
  -- new_only: a dataset another command made there meanwhile (a second run
  -- started beside this one, every process under mpirun) is not replaced but
  -- trained on, as one that was there before; this call did not make it.
  local function tokenize_new()
    return pcall(M.tokenize, { inputs = t.corpus, output = path, format = t.format, tokenizer = t.tokenizer,
                               vocab_file = t.vocab_file, merge_file = t.merge_file,
                               tokenizer_file = t.tokenizer_file, new_only = true })
  end
  local ok, docs, toks = tokenize_new()
  -- Another writer making it now (every process under mpirun at once: the
  -- one that came second was refused, and failed the job alone) is waited
  -- for, up to ten minutes, and its dataset trained on; made here if it gave up.
  for _ = 1, 6000 do
    if ok or readable(path) or not tostring(docs):find('is being written by another process', 1, true) then break end
    ffi.C.usleep(100000)
    if not readable(path) then ok, docs, toks = tokenize_new() end
  end
  if not ok and readable(path) then
    M.keep_dirs(made)
    M.say(string.format("ptdp: --data-path '%s' was made by another %s meanwhile: " ..
                        'training on it', path, under_mpirun() and 'process of this run, or command,' or 'command'))
    return path, {}, false
  end
  if not ok then
    M.unmake_dirs(made)
    error(docs, 0)
  end
  M.keep_dirs(made)
  print(string.format('tokenized %s: %d documents, %d tokens -> %s', M.one_line(t.corpus), docs, toks,
                      M.one_line(path)))
  return path, made, true
end

-- Draws a trace written by the `timeline` option as a PNG (width in pixels,
-- default 1600); returns png.
function M.render_timeline(trace, png, width)
  need_string(trace, 'render_timeline', 'trace')
  need_string(png, 'render_timeline', 'png')
  need_count(width, 'render_timeline', 'width', 0, 2 ^ 31 - 1)
  check(C.ptdp_render_timeline(trace, png, width or 0))
  return png
end

-- The disk's raw sequential write (fsync included) and cold read bandwidth
-- under dir, in GB/s, with a file of `bytes`.
function M.benchmark_disk(dir, bytes)
  need_string(dir, 'benchmark_disk', 'dir')
  if bytes == nil then raise('ptdp.benchmark_disk: give the bytes to write and read back') end
  need_count(bytes, 'benchmark_disk', 'bytes', 2 ^ 20, 2 ^ 53)  -- (at least 1 MiB: a measure of less is noise)
  local w, r = ffi.new('double[1]'), ffi.new('double[1]')
  check(C.ptdp_benchmark_disk(dir, bytes, w, r))
  return w[0], r[0]
end

function M.benchmark_sgemm(n, repeats)
  need_count(n, 'benchmark_sgemm', 'n', 1, 2 ^ 31 - 1)
  need_count(repeats, 'benchmark_sgemm', 'repeats', 1, 2 ^ 31 - 1)
  local v = ffi.new('double[1]')
  check(C.ptdp_benchmark_sgemm(n or 2048, repeats or 5, v))
  return v[0]
end

-- The planner (`ptdp plan`; ptdp_plan in the C ABI): options are Megatron's
-- names (num_layers = 24, hidden_size = 2048, num_attention_heads = 16,
-- global_batch_size = 512, num_gpus = 64, machine = 'selene', ...; the short
-- t, p, d, b, v; true for switches such as bf16 or calibrate). Returns
--   { layouts = { {rank = 1, tflops_per_gpu =, iteration_s =, memory_gib =,
--                  tensor =, pipeline =, data =, micro_batch =, virtual =,
--                  schedule =, recompute =, bubble =, tp_share =, pp_share =,
--                  dp_share =, days =, gpu_hours =, label =, ...}, ... },
--     best = layouts[1], too_big = {...}, invalid = { {label =, reason =}, ... },
--     explained = {...} (with explain = 'LAYOUT'),
--     text = the report `ptdp plan` prints (made when first read) }
function M.plan(t)
  if type(t) ~= 'table' then
    raise(string.format('ptdp.plan takes a table of options, e.g. { num_layers = 24, ... }; got a %s', type(t)))
  end
  if t.format ~= nil then
    raise("ptdp.plan returns records (layouts, best, text, ...): 'format' is `ptdp plan`'s option, " ..
          'not one of this function')
  end
  if t.help ~= nil then  -- (it returned no layouts and said nothing)
    raise("ptdp.plan: 'help' is `ptdp plan --help`, not an option of this function")
  end
  local function call(extra)
    local opts = {}
    for k, v in pairs(t) do
      -- (true/false as the words: the planner takes them for a switch only, as
      -- the command line; 1 would have planned num_layers = true as 1)
      if type(v) == 'boolean' then v = tostring(v) end
      if type(k) ~= 'string' or k:find('=', 1, true) then  -- (C splits each item at its first '=')
        raise(string.format("ptdp.plan: option names are texts without '=', got %s", tostring(k)))
      end
      if type(v) ~= 'string' and type(v) ~= 'number' then  -- (a table read as 'table: 0x...')
        raise(string.format('ptdp.plan: option %s takes a number, a text or true/false, got a %s', k, type(v)))
      end
      local item = k .. '=' .. tostring(v)
      if item:find('\0', 1, true) then  -- C would read the part before it
        raise(string.format('ptdp.plan: option %s holds a NUL byte', tostring(k)))
      end
      opts[#opts + 1] = item
    end
    table.sort(opts)
    for _, e in ipairs(extra) do opts[#opts + 1] = e end
    local arr = ffi.new('const char*[?]', #opts)
    for i, o in ipairs(opts) do arr[i - 1] = o end
    -- A large first buffer: a second call would plan (and calibrate) again.
    local len, cap = ffi.new('size_t[1]'), 65536
    while true do
      local buf = ffi.new('char[?]', cap)
      local st = C.ptdp_plan(arr, #opts, buf, cap, len)
      if st == 0 then return ffi.string(buf, len[0]) end
      if st ~= C.PTDP_ERR_BUFFER_TOO_SMALL then check(st) end
      cap = tonumber(len[0]) + 1
    end
  end
  local out = { layouts = {}, too_big = {}, invalid = {} }
  for line in call({ 'format=records' }):gmatch('[^\n]+') do
    local kind, rest = line:match('^(%S+) (.*)$')
    if kind == 'invalid' then
      local label, reason = rest:match('^label=(%S+) reason=(.*)$')
      out.invalid[#out.invalid + 1] = { label = label, reason = reason }
    elseif kind == 'layout' or kind == 'too_big' or kind == 'explained' then
      local r = {}
      for k, v in rest:gmatch('([%w_]+)=(%S+)') do r[k] = tonumber(v) or v end
      if kind == 'explained' then out.explained = r
      else table.insert(kind == 'layout' and out.layouts or out.too_big, r) end
    end
  end
  out.best = out.layouts[1]
  return setmetatable(out, { __index = function(self, k)
    if k ~= 'text' then return nil end
    local text = call({})
    rawset(self, 'text', text)
    return text
  end })
end

-- Every Trainer method checks its self first: trainer.step() (a dot, not a
-- colon) named as such instead of an error from inside the module.
for name, fn in pairs(Trainer) do
  if type(fn) == 'function' then
    Trainer[name] = function(self, ...)
      if getmetatable(self) ~= Trainer then
        raise(string.format('ptdp: call trainer:%s(...) with a colon; trainer.%s got %s where the ' ..
                            'trainer goes', name, name, type(self) == 'table' and 'a table' or
                            tostring(self)))
      end
      return fn(self, ...)
    end
  end
end

return M
