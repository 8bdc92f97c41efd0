-- module_api.lua CORPUS TMPDIR — the `ptdp` Lua module used directly:
-- tokenize, config errors, a tiny trainer stepped a few times, metrics, log
-- line, evaluation and generation, each result asserted. Exits non-zero (with
-- the failed check) on the first failure (tests/CMakeLists: lua_module_api).
local ptdp = require 'ptdp'
local ffi = require 'ffi'
local util = require 'testutil'
local check, expect_error = util.check, util.expect_error

local corpus, tmpdir = util.args('module_api.lua')
local ln257 = math.log(257)

-- module facts
check(ptdp.version() == ptdp.header_version and ptdp.version():match('^%d+%.%d+%.%d+$'),
      'ptdp.version() is the header\'s MAJOR.MINOR.PATCH')
local opts = ptdp.options()
local by_key = {}
for _, o in ipairs(opts) do by_key[o.key] = o end
check(#opts >= 20, 'ptdp.options() lists the schema')
check(by_key.num_layers and by_key.num_layers.default == '4' and by_key.num_layers.help ~= '',
      'num_layers has default 4 and help text')
check(by_key.lr_decay_style and by_key.data_path, 'lr_decay_style and data_path are options')

-- tokenize
local data = tmpdir .. '/module_api.ptdp'
local docs, toks = ptdp.tokenize { inputs = { corpus }, output = data, format = 'lines' }
check(type(docs) == 'number' and docs >= 100, 'tokenize returns the document count (' .. docs .. ')')
check(type(toks) == 'number' and toks > 10 * docs, 'tokenize returns the token count (' .. toks .. ')')
expect_error('does not exist', 'tokenize a missing corpus', ptdp.tokenize,
             { inputs = tmpdir .. '/module_api_no_such.txt', output = tmpdir .. '/x.ptdp',
               format = 'lines' })
expect_error('unknown corpus format', 'tokenize with a bad format', ptdp.tokenize,
             { inputs = corpus, output = tmpdir .. '/x.ptdp', format = 'csv' })

-- a script's own small files: written and read as every writer and reader
-- does; the running script is an input (the launcher holds it), a directory
-- or FIFO is refused by kind, a missing file reads as nil and the reason.
local note = tmpdir .. '/module_api_note.txt'
ptdp.write_file(note, 'a\0b\n', 'note')
check(ptdp.read_file(note, 'note') == 'a\0b\n', 'write_file then read_file: the same bytes (a NUL too)')
local missing, why = ptdp.read_file(tmpdir .. '/module_api_absent', 'note')
check(missing == nil and why:match('No such file'), 'read_file of a missing file: nil and the reason')
expect_error("'" .. tmpdir .. "' is a directory", 'read_file of a directory', ptdp.read_file, tmpdir, 'note')
expect_error('exists and is a directory', 'write_file onto a directory', ptdp.write_file, tmpdir, 'x', 'note')
expect_error("the script '", 'write_file onto the running script', ptdp.write_file, arg[0], 'x', 'note')
-- the Lua files the script loaded are inputs of its run too
local testutil_file = package.searchpath('testutil', package.path)
expect_error("is the Lua file '", 'write_file onto a loaded module', ptdp.write_file,
             testutil_file, 'x', 'note')
-- outputs checked before anything is made; nothing is written
ptdp.check_output(tmpdir .. '/module_api_new.txt', 'note')
check(io.open(tmpdir .. '/module_api_new.txt', 'r') == nil, 'check_output writes nothing')
expect_error('exists and is a directory', 'check_output of a directory', ptdp.check_output, tmpdir, 'note')
expect_error('is named as a checkpoint directory', 'check_output of a checkpoint-named root',
             ptdp.check_output, tmpdir .. '/ck2/iter_0000003', '--save', true)
ptdp.check_output(tmpdir .. '/not/yet/there', '--save', true)
expect_error('is longer than a directory', 'check_output of a directory whose name cannot be',
             ptdp.check_output, tmpdir .. '/' .. string.rep('x', 300) .. '/below', '--save', true)
expect_error('ptdp.same_output: a is empty', 'same_output of empty paths', ptdp.same_output, '', '')
-- a file whose size says 0 (/proc's) is read whole
check(#ptdp.read_file('/proc/self/status', 'status') > 0, 'read_file of /proc/self/status has bytes')
-- wrong argument types are named
expect_error('ptdp.write_file: bytes must be a string, got nil', 'write_file without bytes',
             ptdp.write_file, note, nil, 'note')
expect_error('ptdp.read_file: path must be a string, got number', 'read_file of a number',
             ptdp.read_file, 12, 'note')
expect_error('ptdp.dataset: path must be a string, got nil', 'dataset without a path', ptdp.dataset, {})
-- a dataset refused where it was to be made leaves no directory made for it
expect_error('checkpoint directory', 'a dataset inside a checkpoint', ptdp.dataset,
             { path = tmpdir .. '/made/iter_0000002/x.ptdp', given = true, create = true,
               corpus = corpus, format = 'lines' })
check(io.open(tmpdir .. '/made/.', 'r') == nil, 'the refused dataset left no directory behind')
expect_error('is inside the checkpoint directory', 'write_file inside a checkpoint',
             ptdp.write_file, (function()  -- (made by hand: mkdirs refuses it)
               os.execute("mkdir -p '" .. tmpdir .. "/ck/iter_0000001'")
               return tmpdir .. '/ck/iter_0000001'
             end)() .. '/x', 'x', 'note')
expect_error('is named as a checkpoint directory', 'mkdirs of a checkpoint name', ptdp.mkdirs,
             tmpdir .. '/ck2/iter_0000009.old')
expect_error('is inside the checkpoint directory', 'mkdirs inside a checkpoint', ptdp.mkdirs,
             tmpdir .. '/ck/iter_0000001/sub')
-- Every writer's rule, for a temporary directory and the disk measurement's file too.
expect_error('checkpoint directory', 'make_temp_dir inside a checkpoint', ptdp.make_temp_dir,
             tmpdir .. '/ck/iter_0000001', 'tmp.')
expect_error('checkpoint directory', 'benchmark_disk inside a checkpoint', ptdp.benchmark_disk,
             tmpdir .. '/ck/iter_0000001/../iter_0000001', 2 ^ 20)
do
  local ls = io.popen("ls -A '" .. tmpdir .. "/ck/iter_0000001'")
  check(ls:read('*a') == '', 'nothing was made inside the checkpoint')
  ls:close()
end
expect_error("'help' is `ptdp plan --help`", 'ptdp.plan with help', ptdp.plan, { help = false })
expect_error("ptdp.plan: option names are texts without '='", "a plan key holding '='", ptdp.plan,
             { ['num_layers=2 x'] = 3 })
expect_error('ptdp.plan: option num_layers holds a NUL byte', 'a NUL in a plan value', ptdp.plan,
             { num_layers = '2\0x', hidden_size = 64, num_attention_heads = 2, global_batch_size = 8,
               num_gpus = 1 })

-- make_temp_dir: a directory of its own under any parent (a newline in the
-- parent's name made a script read another directory's name from mktemp's
-- output, then remove that directory).
local parent = ptdp.mkdirs(tmpdir .. '/module_api_odd\nname')
local made = ptdp.make_temp_dir(parent, 'bench.')
check(made:sub(1, #parent + 7) == parent .. '/bench.' and #made == #parent + 13,
      'make_temp_dir: parent .. "/bench." .. six characters (' .. made .. ')')
check(io.open(made .. '/.', 'r') ~= nil, 'make_temp_dir made the directory')
check(ptdp.make_temp_dir(parent, 'bench.') ~= made, 'make_temp_dir: a new name each call')
expect_error('cannot make a directory under', 'make_temp_dir under a missing parent',
             ptdp.make_temp_dir, tmpdir .. '/module_api_absent_dir', 'x.')

expect_error("holds a '/'", 'make_temp_dir with a path as its prefix', ptdp.make_temp_dir,
             parent, 'a/b')
-- remove_temp_dir: the directory made, whole; nothing else.
ptdp.mkdirs(made .. '/sub/deeper')
assert(io.open(made .. '/sub/deeper/f', 'w')):close()
expect_error('is not a directory this process made', 'remove_temp_dir of a directory it did not make',
             ptdp.remove_temp_dir, parent)
ptdp.remove_temp_dir(made)
check(io.open(made .. '/.', 'r') == nil, 'remove_temp_dir removed the directory and all it held')
check(io.open(parent .. '/.', 'r') ~= nil, 'remove_temp_dir left its parent')
expect_error('removed already', 'remove_temp_dir twice', ptdp.remove_temp_dir, made)
-- A NUL in a path would cut it short (a sweep wrote 'wf' for 'wf\0.txt'); bytes may hold one.
expect_error('holds a NUL byte', 'a path with a NUL', ptdp.write_file,
             tmpdir .. '/module_api_nul\0.txt', 'x', 'note')
-- Numbers are decimal (strtod also reads C's hex floats: 0x1p-9) and shown as given.
expect_error('(decimal digits)', 'a hex learning rate', ptdp.check_config, { lr = '0x1p-9' })
expect_error('got 10.2', 'a learning rate past its range, shown as given', ptdp.check_config,
             { lr = 10.2 })
expect_error("'format' is `ptdp plan`'s option", 'ptdp.plan with a format', ptdp.plan,
             { num_layers = 2, format = 'text' })
expect_error('plan option tensor_model_parallel_size is given twice', 'ptdp.plan with t and its full name',
             ptdp.plan, { num_layers = 24, hidden_size = 2048, num_attention_heads = 16,
                          global_batch_size = 512, num_gpus = 64, t = 4, tensor_model_parallel_size = 2 })
-- true is a switch's value only: num_layers = true had planned one layer.
expect_error("num_layers must be a whole number in [1, 100000], got 'true'", 'ptdp.plan with a number option true',
             ptdp.plan, { num_layers = true, hidden_size = 64, num_attention_heads = 2, global_batch_size = 4,
                          num_gpus = 1 })
check(ptdp.plan { num_layers = 2, hidden_size = 64, num_attention_heads = 2, global_batch_size = 4,
                  num_gpus = 1, bf16 = true }.best ~= nil, 'ptdp.plan takes true for a switch')
-- A value that is not a number is named as what it is.
expect_error("got the string '64'", 'a count given as a text', ptdp.benchmark_sgemm, '64', 1)
expect_error("data_path takes a text (a path, or a blend table", 'a number for data_path', ptdp.check_config,
             { data_path = 5 })
expect_error("got 'nan'", "a NaN shown without printf's sign", ptdp.check_config, { num_layers = 0 / 0 })
-- A blend's form is checked with the options (ptdp_config_check passed '-1 A').
expect_error('is negative; weights are >= 0', 'a negative blend weight in check_config', ptdp.check_config,
             { data_path = { -1, tmpdir .. '/x.ptdp' } })
expect_error('they must sum to a positive number', 'blend weights of sum 0 in check_config',
             ptdp.check_config, { data_path = '0 A 0 B' })
-- --corpus makes one dataset: with a blend it was ignored.
expect_error('a blend is never made', 'ptdp.dataset creating a blend', ptdp.dataset,
             { path = '1 ' .. arg[0], given = true, create = true, corpus = arg[0] })

-- config errors (through pcall: the message, not the position)
expect_error("unknown option 'no_such_option'", 'unknown flat key', ptdp.config,
             { no_such_option = 1 })
expect_error('num_layers, hidden_size', 'unknown key lists the known keys', ptdp.config,
             { model = { layers = 2 } })
expect_error('num_layers must be an integer', 'non-integer num_layers', ptdp.config,
             { num_layers = 2.5 })
expect_error('num_layers must be in', 'num_layers out of range', ptdp.config, { num_layers = 0 })
expect_error("num_layers must be a number in [1, 4096] without spaces, got ' 4'", 'a leading space',
             ptdp.config, { num_layers = ' 4' })
expect_error('lr_decay_style must be one of', 'bad decay choice', ptdp.config,
             { optimizer = { decay = 'step' } })
expect_error('lr must be a number', 'non-numeric lr', ptdp.config, { lr = 'fast' })
expect_error('lr is 1e-400, too small to be told from 0', 'an lr that underflows to 0', ptdp.config,
             { lr = '1e-400' })
-- A file's identity changes when another file takes its name (how a script
-- removes only the file it made); nothing there is nil.
local ident_path = tmpdir .. '/identity.txt'
ptdp.write_file(ident_path, 'one', 'identity test')
local ident = ptdp.file_identity(ident_path)
check(ident ~= nil and ident == ptdp.file_identity(ident_path), 'file_identity of a file is stable')
ptdp.write_file(ident_path, 'another', 'identity test')  -- a new file renamed over it
check(ptdp.file_identity(ident_path) ~= ident, 'file_identity tells a replaced file apart')
os.remove(ident_path)
check(ptdp.file_identity(ident_path) == nil, 'file_identity of nothing is nil')
expect_error("a kind is a file's, not a directory's", 'check_output of a directory with a kind',
             ptdp.check_output, tmpdir .. '/outdir', 'out', true, 'png')
expect_error('create = true makes the dataset from a corpus: give corpus too',
             'dataset to create without a corpus', ptdp.dataset,
             { path = tmpdir .. '/never.ptdp', given = true, create = true })
check(ptdp.config { num_layers = 2, lr = 1e-3, optimizer = { beta2 = 0.99 }, data = { tokenizer = 'byte' } } ~= nil,
      'a good config with groups and aliases builds')
-- One option under two spellings: which one won depended on the table's order.
expect_error("option 'num_layers' is given twice", 'num_layers flat and in model', ptdp.config,
             { num_layers = 2, model = { num_layers = 4 } })
expect_error("option 'tensor_model_parallel_size' is given twice", 'parallel.t and its full name',
             ptdp.config, { parallel = { t = 2 }, tensor_model_parallel_size = 1 })

-- Numbers reach C whole and finite, tables only with known keys (the FFI
-- made a NaN width INT_MIN and cut 2.5 to 2; a mistyped key was ignored).
expect_error('ptdp.render_timeline: width must be a whole number', 'a NaN width',
             ptdp.render_timeline, tmpdir .. '/t.json', tmpdir .. '/t.png', 0 / 0)
expect_error('ptdp.render_timeline: trace must be a string, got table', 'a table as trace',
             ptdp.render_timeline, {}, tmpdir .. '/t.png')
expect_error('ptdp.benchmark_sgemm: n must be a whole number', 'sgemm n = 2.5', ptdp.benchmark_sgemm, 2.5)
expect_error('ptdp.benchmark_disk: bytes must be a whole number', 'disk bytes = 1e300',
             ptdp.benchmark_disk, tmpdir, 1e300)
expect_error('ptdp.tokenize: inputs[2] must be a string, got number', 'a number among the inputs',
             ptdp.tokenize, { inputs = { corpus, 5 }, output = tmpdir .. '/x.ptdp' })
expect_error("ptdp.tokenize: unknown option 'ouput'", 'a mistyped tokenize key', ptdp.tokenize,
             { inputs = corpus, ouput = tmpdir .. '/x.ptdp' })
expect_error('ptdp.checkpoint_inspect: dir must be a string, got nil', 'inspect without a dir',
             ptdp.checkpoint_inspect)
-- The ninth sweep: an empty path made make_temp_dir's directory in /; a
-- boolean or a list became a number; a comma in a JSON key overran the C
-- side's arrays (two keys where Lua sized one).
expect_error('ptdp.make_temp_dir: parent is empty', 'make_temp_dir under ""', ptdp.make_temp_dir, '', 'x.')
expect_error('ptdp.config: lr takes a value, not true', 'lr = true', ptdp.config, { lr = true })
expect_error('ptdp.config: num_layers takes one value, not a table', 'num_layers = {4}', ptdp.config,
             { num_layers = { 4 } })
expect_error('ptdp.config: option keys are names', 'a list as the config', ptdp.config, { 'num_layers', 4 })
expect_error('ptdp.config: data_path holds a NUL byte', 'a NUL in a value', ptdp.config,
             { data_path = 'a\0b' })
expect_error("json_keys[1] 'text,title' holds a comma", 'a comma in a JSON key', ptdp.tokenize,
             { inputs = corpus, output_prefix = tmpdir .. '/jk', json_keys = 'text,title' })
-- The third sweep: a script's output checked by the writer's kind up front;
-- the C headers every run reads are its inputs; lists and switches are what
-- they say.
expect_error('is not a --timeline trace', 'check_output of notes as a trace', ptdp.check_output, note,
             'trace', false, 'trace')
expect_error("output kind 'text' (allowed: ", 'an unknown output kind', ptdp.check_output, note, 'x',
             false, 'text')
expect_error('is the C header', 'the C header as an output', ptdp.check_output,
             ptdp.project_dir .. '/capi/ptdp.h', 'x')
expect_error('inputs is a list, 1 to 1; it has the key 3', 'a hole in the inputs', ptdp.tokenize,
             { inputs = { corpus, [3] = corpus }, output = tmpdir .. '/holes.ptdp' })
expect_error('append_eod is true or false', "append_eod = 'no'", ptdp.tokenize,
             { inputs = corpus, output_prefix = tmpdir .. '/eod', append_eod = 'no' })
expect_error("ptdp.dataset: unknown option 'corpos'", 'a mistyped dataset key', ptdp.dataset,
             { path = tmpdir .. '/x.ptdp', corpos = corpus })
expect_error('a JSON-lines record must be one JSON object', 'append_line of a non-JSON line',
             ptdp.append_line, tmpdir .. '/lines.jsonl', 'hello', true)
-- Bytes that are not UTF-8 (a path's) reach the log as U+FFFD: the file stays JSON.
do
  local log = tmpdir .. '/latin1.jsonl'
  ptdp.append_line(log, '{"kind": "run", "data_path": "/data/caf\233.ptdp"}', true)
  ptdp.append_line(log, '{"kind": "train", "iteration": 1, "lm_loss": 5.0, "lr": 0.001}')
  local f = assert(io.open(log, 'rb'))
  local text = f:read('*a')
  f:close()
  check(text:find('caf\239\191\189.ptdp', 1, true) ~= nil and not text:find('\233', 1, true),
        'a byte that is not UTF-8 is written as U+FFFD')
end
expect_error('json_keys picks the keys of a jsonl corpus for output_prefix', 'json_keys with output',
             ptdp.tokenize, { inputs = corpus, output = tmpdir .. '/jk.ptdp', json_keys = 'text' })
expect_error('ptdp.model_options: dir must be a string, got number', 'model_options(5)',
             ptdp.model_options, 5)
expect_error('parallel.v (model chunks per pipeline rank) must be a whole number in [1, num_layers',
             'parallel.v = 1e300', ptdp.config, { parallel = { v = 1e300 } })

local base = {
  model = { num_layers = 1, hidden_size = 32, num_attention_heads = 2, seq_length = 16,
            hidden_dropout = 0, attention_dropout = 0 },
  optimizer = { lr = 1e-2, min_lr = 1e-3, warmup_iters = 1, decay = 'cosine' },
  data = { path = data, tokenizer = 'byte' },
  micro_batch_size = 2, global_batch_size = 4, train_iters = 10, eval_iters = 2,
  num_threads = 1, seed = 7,
}
local function with(changes) return util.merged(base, changes) end

-- Trainer errors are positioned at the calling line: call from this file.
-- (Not a tail call: that would drop this frame and with it the position.)
local function make(cfg)
  local t = ptdp.trainer(cfg) -- errors point at this line
  return t
end
local make_line = debug.getinfo(make, 'S').linedefined + 1
local err = expect_error('must divide hidden_size', 'heads not dividing hidden', make,
                         with { model = { num_attention_heads = 3 } })
check(err:find('module_api.lua:' .. make_line .. ':', 1, true) ~= nil,
      'the error is positioned at the calling script line')
expect_error('longer than max_position_embeddings', 'seq_length > max_position_embeddings', make,
             with { model = { max_position_embeddings = 8 } })
expect_error('divisible by micro_batch_size', 'global batch not divisible', make,
             with { global_batch_size = 6, micro_batch_size = 4 })
expect_error('cannot open dataset', 'missing dataset', make,
             with { data = { path = tmpdir .. '/module_api_missing.ptdp' } })
util.truncated_copy(data, tmpdir .. '/module_api_truncated.ptdp', 3)
expect_error('truncated', 'truncated dataset', make,
             with { data = { path = tmpdir .. '/module_api_truncated.ptdp' } })

-- a tiny run
local trainer = make(base)
check(getmetatable(trainer) ~= nil and trainer.handle ~= nil, 'ptdp.trainer returns a trainer')
check(trainer:get('iteration') == 0, 'iteration 0 before the first step')
check(trainer:get('train_iters') == 10, 'train_iters 10')
check(trainer:get('padded_vocab_size') == 384, 'padded vocab 384')
check(trainer:get('num_parameters') > 1000, 'num_parameters ' .. trainer:get('num_parameters'))
local entropy = trainer:get('unigram_entropy')
check(entropy > 1 and entropy < ln257, string.format('unigram entropy %.3f nats', entropy))
check(trainer:get('train_samples') > 0 and trainer:get('valid_samples') > 0, 'both splits have samples')
expect_error('wrong call order', 'lm_loss before the first step', trainer.get, trainer, 'lm_loss')
expect_error('before the first', 'log_line before the first step', trainer.log_line, trainer)
expect_error('unknown trainer value', 'unknown metric name', trainer.get, trainer, 'bogus')

local e0 = trainer:evaluate()
check(math.abs(e0 - ln257) < 0.5, string.format('untrained validation loss %.4f ~ ln 257', e0))

local losses = {}
for i = 1, 10 do
  local m = trainer:step()
  check(type(m) == 'table', 'step returns a metrics table')
  check(m.iteration == i and m.consumed_samples == 4 * i, 'iteration and consumed samples of step ' .. i)
  check(m.loss == m.lm_loss and m.loss > 0 and m.loss < math.huge,
        string.format('step %d loss %.4f is finite', i, m.loss))
  check(m.lr > 0 and m.lr <= 1e-2, 'lr within (0, 1e-2]')
  check(m.grad_norm > 0 and m.grad_norm < math.huge, 'grad norm finite')
  check(m.skipped_iters == 0 and m.nan_iters == 0, 'no skipped or nan iterations')
  check(m.elapsed_ms > 0 and m.tokens_per_s > 0, 'timings positive')
  losses[i] = m.loss
end
check(math.abs(losses[1] - ln257) < 0.5, 'first loss ~ ln 257')
check((losses[9] + losses[10]) / 2 < (losses[1] + losses[2]) / 2 - 0.5,
      string.format('loss falls: %.4f -> %.4f', losses[1], losses[10]))
check(trainer:get('lm_loss') == losses[10], 'get lm_loss is the last step loss')

local line = trainer:log_line()
print('     ' .. line)
check(type(line) == 'string' and line:match('^ iteration +10/ +10 |') ~= nil, 'log line starts with the iteration')
check(line:find('lm loss: ', 1, true) and line:find('grad norm: ', 1, true), 'log line has the Megatron fields')

local e1 = trainer:evaluate()
check(e1 < e0 - 0.5, string.format('validation loss fell: %.4f -> %.4f', e0, e1))
check(trainer:evaluate(2) == e1, 'evaluate() uses eval_iters = 2 and is deterministic')
local e3 = trainer:evaluate(3)
check(e3 > 0 and e3 < math.huge, 'evaluate(3)')

-- Logits: every position's rows, or the last alone (equal to the last row).
local rows = trainer:logits({ 84, 104, 101 })
local last = trainer:logits({ 84, 104, 101 }, { last = true })
check(#rows == 3 and #rows[1] == 257 and #last == 257, 'logits: 3 rows of 257, and the last row')
local same = true
for j = 1, 257 do same = same and rows[3][j] == last[j] end
check(same, 'the last-only logits are the last row')
expect_error('outside', 'a token outside the vocabulary', trainer.logits, trainer, { 84, 300 })
-- A list with a hole is refused (# would cut it short), and last is a boolean.
expect_error('ids is a list', 'ids with a hole', trainer.logits, trainer, { 84, nil, 101 })
expect_error('last is true or false, got no', "last = 'no'", trainer.logits, trainer, { 84 }, { last = 'no' })
expect_error('ids is a list', 'step_tokens ids with a hole', trainer.step_tokens, trainer, { 84, nil, 101 })
expect_error('count 34 is more than the array holds (2 ids)', 'step_tokens count past its array',
             trainer.step_tokens, trainer, ffi.new('int32_t[2]'), 34)
expect_error('data_path is a list with a hole', 'a blend with a hole', ptdp.config,
             { data_path = { 0.5, 'a.ptdp', nil, 'b.ptdp' } })
expect_error('data_path is an empty list', 'an empty blend', ptdp.config, { data_path = {} })
expect_error('give the bytes to write and read back', 'benchmark_disk without bytes', ptdp.benchmark_disk, tmpdir)
expect_error('bytes must be a whole number in [1048576', 'benchmark_disk of one byte', ptdp.benchmark_disk, tmpdir, 1)
expect_error('ptdp.plan: option machine takes a number, a text or true/false, got a table',
             'a plan value that is a table', ptdp.plan, { machine = {} })
expect_error('not a token id', 'a fractional id', trainer.logits, trainer, { 84.5 })

local g1 = trainer:generate('The ', { max_new_tokens = 20 })
local g2 = trainer:generate('The ', { max_new_tokens = 20, temperature = 0 })
print(string.format('     greedy: %q', g1))
-- (at most 20 byte tokens; one cut from a character comes back as U+FFFD, 3 bytes)
check(g1:sub(1, 4) == 'The ' and #g1 <= 4 + 3 * 20, 'greedy text continues the prompt')
check(g1 == g2, 'greedy generation is deterministic')
local s1 = trainer:generate('Anna ', { max_new_tokens = 20, temperature = 0.9, seed = 11 })
local s2 = trainer:generate('Anna ', { max_new_tokens = 20, temperature = 0.9, seed = 11 })
print(string.format('     sampled: %q', s1))
check(s1 == s2 and s1:sub(1, 5) == 'Anna ', 'sampling with a seed is reproducible')
check(trainer:generate('Hello', { max_new_tokens = 0 }) == 'Hello', 'max_new_tokens 0 returns the prompt')
-- top_k 1 is greedy whatever the temperature; top_p 1 and top_k 0 are the plain draw.
check(trainer:generate('The ', { max_new_tokens = 20, temperature = 5, top_k = 1, seed = 3 }) == g1,
      'top_k 1 samples the most likely token: greedy')
check(trainer:generate('Anna ', { max_new_tokens = 20, temperature = 0.9, seed = 11, top_k = 0, top_p = 1 }) == s1,
      'top_k 0 and top_p 1 keep every token: the plain draw')
expect_error('top_p', 'top_p 0', trainer.generate, trainer, 'x', { temperature = 1, top_p = 0 })
expect_error('top_k', 'negative top_k', trainer.generate, trainer, 'x', { temperature = 1, top_k = -2 })
expect_error('seed keys the sampling, and temperature 0 samples nothing', 'a seed with greedy decoding',
             trainer.generate, trainer, 'x', { seed = 5 })
expect_error("data_path item 2 'g 1 x.ptdp' is empty or holds white space", 'a blend item with a space',
             ptdp.config, { data_path = { 1, 'g 1 x.ptdp' } })
expect_error("data_path item 1 'a.ptdp' is not a weight", 'a blend table of two paths',
             ptdp.config, { data_path = { 'a.ptdp', 'b.ptdp' } })
expect_error('data_path item 2 is the number 2, not a path', 'a blend table of two weights',
             ptdp.config, { data_path = { 1, 2 } })
expect_error('give the list of directories mkdirs returned, got nil', 'unmake_dirs of nothing',
             ptdp.unmake_dirs, nil)
os.execute("mkdir '" .. tmpdir .. "/notmine'")
ptdp.unmake_dirs { tmpdir .. '/notmine' }  -- mkdirs did not make it: it stays
check(io.open(tmpdir .. '/notmine/.', 'r') ~= nil, 'unmake_dirs leaves a directory mkdirs did not make')
-- Nor one reached through a link moved since (rmdir went through it).
os.execute("rm -rf '" .. tmpdir .. "/o1' '" .. tmpdir .. "/o2' '" .. tmpdir .. "/lnk' && mkdir -p '" ..
           tmpdir .. "/o1' '" .. tmpdir .. "/o2/new' && ln -s o1 '" .. tmpdir .. "/lnk'")
local _, via = ptdp.mkdirs(tmpdir .. '/lnk/new')  -- makes o1/new
os.execute("ln -sfn o2 '" .. tmpdir .. "/lnk'")
ptdp.unmake_dirs(via)
check(io.open(tmpdir .. '/o2/new/.', 'r') ~= nil, 'unmake_dirs removes nothing through a link moved since')
expect_error("max_new_tokens must be a number (a whole number in [0", 'a count given as a text',
             trainer.generate, trainer, 'x', { max_new_tokens = '5' })
expect_error('temperature 0 samples none', 'top_k with greedy decoding', trainer.generate, trainer,
             'x', { top_k = 5 })
expect_error('new_only is for output', 'tokenize new_only with output_prefix', ptdp.tokenize,
             { inputs = 'x.txt', output_prefix = 'p', new_only = true })
-- A prompt longer than the position window and the module's first 256-byte buffer.
local long = string.rep('The cat sleeps. ', 30)
local g3 = trainer:generate(long, { max_new_tokens = 4 })
check(#g3 >= #long and g3:sub(1, #long) == long, 'a 480-byte prompt comes back whole (buffer growth)')
expect_error('max_new_tokens', 'negative max_new_tokens', trainer.generate, trainer, 'x',
             { max_new_tokens = -1 })
expect_error('temperature', 'negative temperature', trainer.generate, trainer, 'x',
             { temperature = -1 })

-- a count that is no whole number, or out of range, is named (not the default)
expect_error('ptdp.evaluate: iters must be a whole number in [1,', 'evaluate(-1)', trainer.evaluate,
             trainer, -1)
expect_error('ptdp.generate: max_new_tokens must be a whole number', 'max_new_tokens 1.5',
             trainer.generate, trainer, 'x', { max_new_tokens = 1.5 })
expect_error('ptdp.generate: prompt must be a string, got number', 'generate(5)', trainer.generate,
             trainer, 5)
expect_error("ptdp.generate: unknown option 'max_tokens'", 'a mistyped generate option',
             trainer.generate, trainer, 'x', { max_tokens = 5 })
expect_error('ptdp.generate: seed must be a whole number', 'a negative seed', trainer.generate,
             trainer, 'x', { seed = -1 })
expect_error('ptdp.generate: temperature must be a finite number', 'a NaN temperature',
             trainer.generate, trainer, 'x', { temperature = 0 / 0 })
expect_error('ptdp.rank_report: local_rank must be a whole number', 'rank 0.5',
             trainer.rank_report, trainer, 0.5)
expect_error('ptdp.get: name must be a string, got nil', 'get(nil)', trainer.get, trainer)
expect_error('call trainer:step(...) with a colon', 'trainer.step()', trainer.step)
expect_error('call trainer:evaluate(...) with a colon', 'trainer.evaluate(2)', trainer.evaluate, 2)

-- Stepping on after train_iters keeps counting; handles are freed by the GC.
trainer:step()
check(trainer:get('iteration') == 11, 'a step after train_iters still counts')
trainer = nil
collectgarbage()
collectgarbage()
check(true, 'trainer collected')

print(string.format('module_api: PASS (%d checks)', util.checks))
