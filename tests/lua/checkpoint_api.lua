-- checkpoint_api.lua CORPUS TMPDIR LAUNCHER — checkpoints from the `ptdp` Lua
-- module: trainer:save / trainer:load (another layout), the save and
-- save_interval options, trainer:text, ptdp.checkpoint_inspect / _verify /
-- export_safetensors, and the `ptdp ckpt` command on the same checkpoint.
-- Exits non-zero (with the failed check) on the first failure
-- (tests/capi/tests.cmake: lua_checkpoint_api).
local ptdp = require 'ptdp'
local util = require 'testutil'
local check, expect_error = util.check, util.expect_error

local corpus, tmpdir = util.args('checkpoint_api.lua')
local launcher = assert(arg[3], 'usage: checkpoint_api.lua CORPUS TMPDIR LAUNCHER')
local data = tmpdir .. '/checkpoint_api.ptdp'
ptdp.tokenize { inputs = { corpus }, output = data, format = 'lines' }
local root = tmpdir .. '/checkpoint_api_ckpt'
os.execute('rm -rf "' .. root .. '" "' .. root .. '2" "' .. root .. '3" "' .. root .. '4"')

local function config(changes)
  return util.merged({
    model = { num_layers = 4, hidden_size = 32, num_attention_heads = 2, seq_length = 16,
              hidden_dropout = 0.1, attention_dropout = 0.1 },
    parallel = { t = 2, p = 2 },
    optimizer = { lr = 1e-2, min_lr = 1e-3, warmup_iters = 1 },
    data = { path = data },
    micro_batch_size = 1, global_batch_size = 4, train_iters = 10, eval_iters = 1,
    num_threads = 1, seed = 3,
  }, changes)
end

-- Save at (2, 2, 1) after 3 steps; load at (1, 1, 2); both go on alike.
local a = ptdp.trainer(config())
for _ = 1, 3 do a:step() end
local dir = a:save(root)
check(dir == root .. '/iter_0000003', 'save returns the checkpoint directory: ' .. dir)
check(a:text('last_checkpoint') == dir, "text('last_checkpoint') is that directory")
local b = ptdp.trainer(config { parallel = { t = 1, p = 1, d = 2 } })
local msg = b:load(root)
check(msg:find('saved with (t=2, p=2, d=1, v=1), loaded into (t=1, p=1, d=2, v=1)', 1, true),
      'load says which layouts: ' .. msg)
check(b:get('iteration') == 3, 'the loaded trainer is at iteration 3')
for i = 4, 5 do
  local la, lb = a:step().loss, b:step().loss
  check(math.abs(la - lb) <= 1e-5 * la, string.format('step %d after resharding: %.9g vs %.9g', i, la, lb))
end
expect_error('no checkpoint to open', 'load from a directory without checkpoints', b.load, b, tmpdir .. '/no_ckpt')
expect_error('ptdp.save: dir must be a string, got nil', 'save without a directory', a.save, a)
expect_error('hidden_size: checkpoint 32, this run 64', 'load into another model shape',
             function() ptdp.trainer(config { model = { hidden_size = 64 } }):load(root) end)

-- save + save_interval: the trainer saves by itself; keep_last_checkpoints prunes.
local c = ptdp.trainer(config { save = root .. '2', save_interval = 2, keep_last_checkpoints = 1 })
for _ = 1, 4 do c:step() end
check(c:text('last_checkpoint') == root .. '2/iter_0000004', 'saved at the interval')
check(c:text('last_save_error') == '', 'no save failed')
check(not io.open(root .. '2/iter_0000002/manifest.json'), 'keep_last_checkpoints = 1 removed iter 2')
-- One writer per save directory in a process too: a save into a live
-- trainer's --save is refused; one the script has let go or closed is not.
local d = ptdp.trainer(config { save = root .. '3' })
expect_error('being saved into by another trainer or writer of this process',
             'a save into a live trainer\'s --save', a.save, a, root .. '3')
d = nil
check(a:save(root .. '3') ~= '', 'a trainer let go holds its --save no more')
d = ptdp.trainer(config { save = root .. '4' })
d:close()
d:close()  -- (twice: nothing more to do)
expect_error('trainer', 'a call on a closed trainer', d.step, d)
check(a:save(root .. '4') ~= '', 'nor one closed')

-- The tools, from Lua and from the command line.
local report = ptdp.checkpoint_inspect(root)
check(report:find('/model/h.3.mlp.c_fc.weight', 1, true), 'inspect lists the datasets')
local ok, vreport = ptdp.checkpoint_verify(root)
check(ok, 'verify: ' .. vreport)
local st = root .. '/model.safetensors'
check(ptdp.export_safetensors(root, st) == st, 'export returns its path')
local f = assert(io.open(st, 'rb'))
local size = f:seek('end')
f:close()
check(size > 4 * a:get('num_parameters'), 'the export holds the parameters (' .. size .. ' bytes)')
local function run(cmd)
  local p = io.popen('"' .. launcher .. '" ' .. cmd .. ' 2>&1; echo "rc=$?"')
  local out = p:read('*a')
  p:close()
  return out
end
-- 16-bit exports: half the data of the float32 one, the dtype in the header.
local function header_and_data_size(path)
  local s = util.read_all(path)
  local n = 0
  for i = 8, 1, -1 do n = n * 256 + s:byte(i) end
  return s:sub(9, 8 + n), #s - 8 - n
end
local _, f32_bytes = header_and_data_size(st)
for _, dt in ipairs { 'bf16', 'f16' } do
  local p = root .. '/model_' .. dt .. '.safetensors'
  check(ptdp.export_safetensors(root, p, { dtype = dt }) == p, 'export as ' .. dt)
  local header, bytes = header_and_data_size(p)
  check(bytes * 2 == f32_bytes, dt .. ': half the data of f32 (' .. bytes .. ' bytes)')
  check(header:find('"dtype":"' .. dt:upper() .. '"', 1, true) and not header:find('"F32"', 1, true),
        dt .. ': every tensor says ' .. dt:upper())
end
expect_error('allowed: f32, bf16, f16', 'export as an unknown dtype', ptdp.export_safetensors,
             root, tmpdir .. '/f8.safetensors', { dtype = 'f8' })
expect_error('options are a table', 'export with a string for options', ptdp.export_safetensors,
             root, tmpdir .. '/x.safetensors', 'bf16')
local out = run('ckpt export-safetensors --dtype bf16 "' .. root .. '" "' .. tmpdir .. '/cli.safetensors"')
check(out:find('rc=0', 1, true) and out:find('(bf16)', 1, true), '`ptdp ckpt export-safetensors --dtype bf16`: ' .. out)
check(util.read_all(tmpdir .. '/cli.safetensors') == util.read_all(root .. '/model_bf16.safetensors'),
      'the command writes what the module does')
out = run('ckpt export-safetensors --dtype f8 "' .. root .. '" "' .. tmpdir .. '/cli_f8.safetensors"')
check(out:find('rc=1', 1, true) and out:find('allowed: f32, bf16, f16', 1, true),
      '`ptdp ckpt export-safetensors --dtype f8` fails: ' .. out)
out = run('ckpt verify "' .. root .. '"')
check(out:find('rc=0', 1, true), '`ptdp ckpt verify` passes: ' .. out)
out = run('ckpt inspect "' .. root .. '"')
check(out:find('/model/wte.weight', 1, true) and out:find('rc=0', 1, true), '`ptdp ckpt inspect`')
-- A flipped byte in the middle of the file: verify finds it and exits 1.
local h5 = dir .. '/model.h5'
local fh = assert(io.open(h5, 'r+b'))
local len = fh:seek('end')
fh:seek('set', math.floor(len * 0.6))
local byte = fh:read(1)
fh:seek('set', math.floor(len * 0.6))
fh:write(string.char((byte:byte() + 1) % 256))
fh:close()
ok, vreport = ptdp.checkpoint_verify(root)
check(not ok and vreport:find('checksum', 1, true), 'verify reports the flipped byte: ' .. vreport)
out = run('ckpt verify "' .. root .. '"')
check(out:find('rc=1', 1, true) and out:find('checksum', 1, true), '`ptdp ckpt verify` exits 1: ' .. out)
out = run('ckpt export-safetensors "' .. root .. '" "' .. tmpdir .. '/damaged.safetensors"')
check(out:find('rc=1', 1, true), '`ptdp ckpt export-safetensors` refuses a damaged checkpoint: ' .. out)

print(string.format('checkpoint_api: PASS (%d checks)', util.checks))
