-- Megatron-style command-line flags for ptdp scripts: `--num-layers 4` or
-- `--num-layers=4`. Flags naming an engine option go to the trainer config;
-- flags the script declares (with a default) go to the script's options;
-- Megatron's value-less switches (--no-scatter-gather-tensors-in-pipeline) set
-- their engine option; any other flag is an error listing what is allowed.
local ptdp = require 'ptdp'

local M = {}

local function flag_name(key) return '--' .. key:gsub('_', '-') end

-- Megatron's value-less switches that set an engine option.
local switches = {
  no_scatter_gather_tensors_in_pipeline = {
    key = 'scatter_gather_tensors_in_pipeline', value = 0,
    help = 'send whole boundary tensors between pipeline stages (= --scatter-gather-tensors-in-pipeline 0)' },
  no_accumulate_allreduce_grads_in_fp32 = {
    key = 'accumulate_allreduce_grads_in_fp32', value = 0,
    help = '16-bit runs: accumulate and all-reduce gradients in the 16-bit type' },
}

-- Engine options that Megatron spells as value-less switches (every 0/1 option
-- of the schema, ptdp.options()'s `switch`): `--bf16` alone means 1; `--bf16 0`
-- or `--bf16=0` still work.

-- Engine options that take several values, as Megatron's blend
-- `--data-path 0.3 A 0.7 B`: every argument up to the next flag, joined by spaces.
local multi_value = { data_path = true }

-- script_spec: { log_interval = { default = 10, help = '...' }, ... }; the type
-- of the default (number, string, boolean) is the type of the flag. A number
-- flag is always finite; `integer = true` makes it whole and `min`, `max`
-- bound it; a string flag's `choices` list its allowed values; `empty_ok`
-- lets a flag take an empty value. All checked here, before the script does
-- any work, with one line of error (no traceback).
-- Returns config (table of engine options), opts (script options) and given
-- (the keys set on the command line).
-- A flag given again: the last one is used (Megatron's argparse takes it so;
-- a wrapper script's later flag is an override), but said, naming both.
function M.note_given_again(first, again)
  ptdp.say(string.format('note: %s is given again as %s: the last one is used', first, again))
end

function M.parse(argv, script_spec, config_defaults)
  local engine = {}
  for _, o in ipairs(ptdp.options()) do engine[o.key] = o end
  local config, opts, given, given_as = {}, {}, {}, {}
  for k, v in pairs(config_defaults or {}) do config[k] = v end
  for k, s in pairs(script_spec) do opts[k] = s.default end

  local function allowed()  -- every flag name, '--' included
    local names = {}
    for k in pairs(engine) do names[#names + 1] = flag_name(k) end
    for k in pairs(script_spec) do names[#names + 1] = flag_name(k) end
    for k in pairs(switches) do names[#names + 1] = flag_name(k) end
    return names
  end

  -- The allowed flags closest to a mistyped one (edit distance), so the error
  -- names a few candidates rather than all of them.
  local function nearest(name)
    local function distance(a, b)
      local prev = {}
      for j = 0, #b do prev[j] = j end
      for i = 1, #a do
        local cur = { [0] = i }
        for j = 1, #b do
          local cost = a:sub(i, i) == b:sub(j, j) and 0 or 1
          cur[j] = math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
        end
        prev = cur
      end
      return prev[#b]
    end
    local scored = {}
    for _, flag in ipairs(allowed()) do
      scored[#scored + 1] = { flag = flag, d = distance('--' .. name, flag) }
    end
    table.sort(scored, function(x, y) return x.d < y.d or (x.d == y.d and x.flag < y.flag) end)
    local best = {}
    for k = 1, math.min(3, #scored) do best[k] = scored[k].flag end
    return 'did you mean ' .. table.concat(best, ', ') .. '?'
  end

  local i = 1
  while i <= #argv do
    local a = argv[i]
    if a == '--help' or a == '-h' then
      local lines = { 'flags (engine options, then script options):' }
      for _, o in ipairs(ptdp.options()) do
        -- The default this script uses, where it sets its own.
        local own = config_defaults and config_defaults[o.key]
        local default = own ~= nil and tostring(own) .. ' in this script' or
                        (o.default == '' and 'none' or o.default)
        lines[#lines + 1] = string.format('  %-36s %s (default %s)', flag_name(o.key), o.help, default)
      end
      for k, sw in pairs(switches) do
        lines[#lines + 1] = string.format('  %-36s %s', flag_name(k), sw.help)
      end
      local keys = {}
      for k in pairs(script_spec) do keys[#keys + 1] = k end
      table.sort(keys)
      for _, k in ipairs(keys) do
        lines[#lines + 1] = string.format('  %-36s %s (default %s)', flag_name(k),
                                          script_spec[k].help or '', tostring(script_spec[k].default))
      end
      print(table.concat(lines, '\n'))
      os.exit(0)
    end
    local name, value = a:match('^%-%-([%w%-]+)=(.*)$')
    if not name then name = a:match('^%-%-([%w%-]+)$') end
    if not name then
      local underscored = a:match('^%-%-([%w_%-]+)') -- (--num_layers: Python's spelling of --num-layers)
      if underscored and underscored:find('_', 1, true) then
        error(string.format("unexpected argument '%s': flags are written with '-', not '_': " ..
                            'did you mean --%s?', a, (underscored:gsub('_', '-'))), 0)
      end
      error(string.format("unexpected argument '%s': flags look like --name value", a), 0)
    end
    local key = name:gsub('%-', '_')
    local spec = script_spec[key]
    local switch = switches[key]
    if not engine[key] and not spec and not switch then
      error(string.format("unknown flag '--%s'; %s (--help lists all)", name, nearest(name)), 0)
    end
    if switch then
      if value ~= nil then
        error(string.format("flag '--%s' takes no value, got '%s'", name, value), 0)
      end
    elseif value == nil then
      if spec and type(spec.default) == 'boolean' then
        value = 'true'
      elseif engine[key] and engine[key].switch and (argv[i + 1] == nil or argv[i + 1]:match('^%-%-')) then
        value = '1'
      else
        i = i + 1
        value = argv[i]
        if value == nil then error(string.format("flag '--%s' needs a value", name), 0) end
      end
    end
    -- An empty value ('') would read as "not given" or 0, silently, and one
    -- of white space alone (' ') as "not set" or a file named ' '; only a
    -- flag that says so (empty_ok, e.g. the sample's --prompt) takes one.
    if value ~= nil and value:match('^%s*$') and not (spec and spec.empty_ok) then
      error(string.format("flag '--%s' is given an empty value (or white space alone); give one (--help)",
                          name), 0)
    end
    if multi_value[key] then
      while argv[i + 1] ~= nil and not argv[i + 1]:match('^%-%-') do
        i = i + 1
        value = value .. ' ' .. argv[i]
      end
    end
    -- (Two switches for one option, --no-X after --X, are one flag given again.)
    local set = switch and switch.key or key
    local as_given = '--' .. name .. (switch and '' or ' ' .. value)
    if given[set] then M.note_given_again(given_as[set], as_given) end
    given[set], given_as[set] = true, as_given
    if switch then
      config[switch.key] = switch.value
    elseif spec then
      local t = type(spec.default)
      if t == 'number' then
        -- Decimal, as the engine's options and Megatron's argparse read numbers.
        local n = ptdp.decimal_number(value)
        if not n then
          error(string.format("flag '--%s' must be a number in decimal digits, got '%s'", name, value), 0)
        end
        if n ~= n or n == math.huge or n == -math.huge then
          error(string.format("flag '--%s' must be a finite number, got '%s'", name, value), 0)
        end
        -- An integer is written in decimal digits, as the engine's integer
        -- options and Megatron's (argparse int) take it: not 1e3 or 0x10.
        if spec.integer and (n ~= math.floor(n) or not value:match('^%-?%d+$')) then
          error(string.format("flag '--%s' must be a whole number, got '%s'", name, value), 0)
        end
        if spec.min and n < spec.min then
          error(string.format("flag '--%s' must be >= %s, got %s", name, spec.min, value), 0)
        end
        if spec.max and n > spec.max then
          error(string.format("flag '--%s' must be <= %s, got %s", name, spec.max, value), 0)
        end
        opts[key] = n
      elseif t == 'boolean' then
        if value ~= 'true' and value ~= 'false' then
          error(string.format("flag '--%s' must be true or false, got '%s'", name, value), 0)
        end
        opts[key] = value == 'true'
      else
        if spec.choices then  -- one of a list: checked now, not when first used
          local ok = false
          for _, c in ipairs(spec.choices) do ok = ok or c == value end
          if not ok then
            error(string.format("flag '--%s' must be one of %s, got '%s'", name,
                                table.concat(spec.choices, ', '), value), 0)
          end
        end
        opts[key] = value
      end
    else
      config[key] = value
    end
    i = i + 1
  end
  -- given: the keys set on the command line (a default is not "given").
  return config, opts, given
end

-- A number in its shortest text that reads back the same (0.0002, not
-- 0.00020000000000000001); any other text as it is.
local function shortest(text)
  if text:match('^%-?%d+$') then return text end  -- (an integer as given: 2^53 + 1 is no double)
  local n = tonumber(text)
  if not n or text:match('^%s') or text:match('%s$') then return text end
  -- Whole numbers as integers (700, not the 7e+02 that %.1g reads back exactly).
  if n == math.floor(n) and math.abs(n) < 2 ^ 53 then return string.format('%d', n) end
  for digits = 1, 17 do
    local s = string.format('%.' .. digits .. 'g', n)
    if tonumber(s) == n then return s end
  end
  return text
end

-- The run's arguments as Megatron prints them at the start: every engine
-- option as the engine reads `config` (defaults filled in) and every script
-- option, sorted, one "  name ....... value" line each, between its rules.
function M.arguments(config, opts)
  local values = ptdp.config_values(config)
  for k, v in pairs(opts or {}) do values[k] = tostring(v) end
  local keys = {}
  for k in pairs(values) do keys[#keys + 1] = k end
  table.sort(keys)
  local lines = { '------------------------ arguments ------------------------' }
  for _, k in ipairs(keys) do
    local v = values[k] == '' and 'None' or ptdp.one_line(shortest(values[k]))
    lines[#lines + 1] = string.format('  %s %s %s', k, string.rep('.', math.max(1, 48 - #k)), v)
  end
  lines[#lines + 1] = '-------------------- end of arguments ---------------------'
  return table.concat(lines, '\n')
end

-- Options given that would have no effect in this run (the engine takes them
-- for the API's saves and loads, or under another option's value, which a
-- command line that gives them shows it did not mean): the message refusing
-- the first, or nil. One table, so that every script's flags follow it.
local function on(v) return v ~= nil and v ~= '' and tostring(v) ~= '0' and tostring(v) ~= 'false' end
local acts_only = {
  { 'keep_last_checkpoints', function(c) return on(c.save) end, "on the run's saves, and --save is not given",
    'give --save' },
  { 'verify_checkpoint', function(c) return on(c.load) end, "on the run's load, and --load is not given",
    'give --load' },
  { 'override_opt_param_scheduler', function(c) return on(c.load) end,
    "on the run's load, and --load is not given", 'give --load' },
  { 'override_opt_param_scheduler', function(c) return not on(c.finetune) end,
    "on a resumed run's schedule, and --finetune starts a new one", 'leave out --finetune' },
  { 'min_lr', function(c) return c.lr_decay_style ~= 'constant' end,
    'where the learning rate decays, and --lr-decay-style is constant', 'give --lr-decay-style linear or cosine' },
  { 'lr_decay_iters', function(c) return c.lr_decay_style ~= 'constant' end,
    'where the learning rate decays, and --lr-decay-style is constant', 'give --lr-decay-style linear or cosine' },
  { 'rotary_base', function(c) return c.position_embedding_type == 'rope' end,
    'on rotary position embeddings, and --position-embedding-type is not rope',
    'give --position-embedding-type rope' },
  { 'add_qkv_bias', function(c) return on(c.disable_bias_linear) end,
    'where the linear layers have no biases (the QKV projection has one otherwise), and ' ..
    '--disable-bias-linear is not given', 'give --disable-bias-linear' },
}
-- The optimizer's and the schedule's options, and dropout, act only on
-- training steps: a run of --train-iters 0 (evaluation, a sample) takes none.
local function trains(c) return c.train_iters == nil or tonumber(c.train_iters) ~= 0 end
for _, key in ipairs { 'lr', 'min_lr', 'lr_decay_style', 'lr_decay_iters', 'lr_warmup_iters', 'weight_decay',
                       'adam_beta1', 'adam_beta2', 'adam_eps', 'clip_grad', 'hidden_dropout',
                       'attention_dropout' } do
  acts_only[#acts_only + 1] = { key, trains, 'on training steps, and --train-iters is 0 (no step)',
                                'give --train-iters N' }
end
function M.unused_option(config, given)
  for _, o in ipairs(acts_only) do
    local key, acts, where, give = o[1], o[2], o[3], o[4]
    if given[key] and not acts(config) then
      return string.format('--%s acts only %s: %s, or leave it out', (key:gsub('_', '-')), where, give)
    end
  end
end

return M
