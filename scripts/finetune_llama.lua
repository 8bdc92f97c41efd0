-- Fine-tune a Hugging Face model of the LLaMA family (LLaMA 2 and 3, Mistral,
-- Qwen2) on a corpus tokenized with its own tokenizer, and export it back:
--
--   build/ptdp scripts/finetune_llama.lua --hf-model DIR --corpus FILE.jsonl --workdir W \
--       [--train-iters 100 --lr 1e-5 --tensor-model-parallel-size 2 ... any engine flag]
--
-- DIR is a model directory as save_pretrained writes it (config.json, the
-- safetensors and their index, tokenizer.json). In W, each made once and
-- reused by a later run of the recipe:
--   W/imported     the import: a ptdp checkpoint at iteration 0
--   W/data_text_document.{bin,idx}   the corpus as a Megatron indexed dataset
-- (only for the same --hf-model, --corpus and --corpus-format, recorded in
-- W/recipe_inputs.txt by what they are: real paths and the files' identity)
-- and made by this run:
--   W/finetuned    the fine-tuned checkpoints (--finetune --load W/imported);
--                  a run that stopped early (--exit-interval, a signal under
--                  --exit-signal-handler) is resumed from them by the same
--                  command, and exported only when it reaches --train-iters
--   W/hf           the export: model.safetensors, config.json, generation_config.json
-- The model's options come from the import; a flag that contradicts its shape
-- or function is an error. Training runs through scripts/train_gpt.lua, so every flag it takes
-- works here too. One process (thread ranks, any t, p, d); not under mpirun.
local ptdp = require 'ptdp'
local flags = require 'ptdp.flags'

local recipe = {
  hf_model = { default = '', help = 'the Hugging Face model directory (config.json, safetensors, tokenizer.json)' },
  corpus = { default = '', help = 'the text to fine-tune on, tokenized with the model\'s tokenizer.json' },
  corpus_format = { default = 'jsonl', help = 'jsonl (one {"text": ...} a line) | lines | file | fortune' },
  workdir = { default = '', help = 'where the import, the dataset, the checkpoints and the export go' },
}
-- The recipe's own flags, and the engine flags it decides, are taken out of
-- the command line; the rest go to train_gpt.lua as they are.
local own = {}
for k in pairs(recipe) do own['--' .. k:gsub('_', '-')] = k end
local decided = { ['--load'] = true, ['--save'] = true, ['--finetune'] = true, ['--data-path'] = true,
                  ['--tokenizer-type'] = true, ['--tokenizer-file'] = true }

local function fail(msg)
  ptdp.say('finetune_llama: ' .. msg)
  os.exit(1)
end
for _, var in ipairs { 'OMPI_COMM_WORLD_SIZE', 'PMI_SIZE' } do
  if tonumber(os.getenv(var) or '1') > 1 then
    fail('runs in one process (thread ranks give any t, p, d); not under mpirun')
  end
end

local opts, rest, given, given_own = {}, {}, {}, {}
for k, s in pairs(recipe) do opts[k] = s.default end
local i = 1
while i <= #arg do
  local a = arg[i]
  local name, value = a:match('^(%-%-[%w%-]+)=(.*)$')
  name = name or a
  if a == '--help' or a == '-h' then
    print('usage: ptdp scripts/finetune_llama.lua --hf-model DIR --corpus FILE --workdir W [engine flags]')
    for k, s in pairs(recipe) do print(string.format('  --%-16s %s', k:gsub('_', '-'), s.help)) end
    print('  (engine flags: build/ptdp scripts/train_gpt.lua --help)')
    os.exit(0)
  elseif own[name] then
    if not value then
      i = i + 1
      value = arg[i]
      if value == nil or value:match('^%-%-') then fail(name .. ' needs a value') end
    end
    if given_own[own[name]] then  -- (as train_gpt.lua's flags)
      flags.note_given_again(name .. ' ' .. given_own[own[name]], name .. ' ' .. value)
    end
    given_own[own[name]] = value
    opts[own[name]] = value
  elseif decided[name] then
    fail(name .. ' is set by the recipe (from --hf-model, --corpus and --workdir); leave it out')
  else
    rest[#rest + 1] = a
    local key = a:match('^%-%-([%w%-]+)')
    if key then given[key:gsub('%-', '_')] = true end
  end
  i = i + 1
end
for _, k in ipairs { 'hf_model', 'corpus', 'workdir' } do
  if opts[k] == '' then fail('--' .. k:gsub('_', '-') .. ' is required (--help lists the flags)') end
end
-- The flags for train_gpt.lua are checked now, as it will check them, not
-- after the import and the tokenization: their names, train_gpt.lua's own
-- values, and each engine option's value (what needs the model's shape, as
-- t dividing the heads, can only be checked once the import is there).
do
  local ok, err = pcall(function()
    -- (The recipe's own flags join train_gpt.lua's, taken out of `rest`
    -- above, so that a mistyped --hf-modle is offered --hf-model.)
    local spec = {}
    for k, s in pairs(require('ptdp.train_gpt_flags').script) do spec[k] = s end
    for k, s in pairs(recipe) do spec[k] = s end
    local engine = flags.parse(rest, spec, {})
    ptdp.config(engine)
    -- The recipe exports what it fine-tuned: a run of no step saves nothing.
    if engine.train_iters ~= nil and tonumber(engine.train_iters) == 0 then
      error('--train-iters 0 trains nothing, and the recipe exports the fine-tuned checkpoint: give at ' ..
            'least 1', 0)
    end
  end)
  if not ok then fail((tostring(err):gsub('^[^:]+:%d+: ', ''))) end  -- the message, not this line
end

-- Whether path is there, without opening it (opening a FIFO would wait).
local ffi = require 'ffi'
pcall(ffi.cdef, 'int access(const char *path, int mode);')
local function exists(path) return ffi.C.access(path, 0) == 0 end
local tokenizer_file = opts.hf_model .. '/tokenizer.json'
if not exists(opts.hf_model .. '/config.json') then
  fail(string.format("--hf-model '%s' has no config.json: give the model directory as " ..
                     'save_pretrained writes it', opts.hf_model))
end
if not exists(tokenizer_file) then
  fail(string.format("--hf-model '%s' has no tokenizer.json: the recipe tokenizes the corpus " ..
                     "with the model's own tokenizer", opts.hf_model))
end
local formats = { jsonl = true, lines = true, file = true, fortune = true }
if not formats[opts.corpus_format] then
  fail(string.format("--corpus-format '%s' (allowed: jsonl, lines, file, fortune)", opts.corpus_format))
end
if not exists(opts.corpus) then fail(string.format("--corpus '%s' cannot be read", opts.corpus)) end
local W = opts.workdir
-- The work directory is the recipe's own: never the model's directory or a
-- folder inside it (the user's files stay as they are).
-- Compared as real paths: links, "." and ".." resolved (a part of W that does
-- not exist yet is taken as written, its first existing folder resolved).
local real = ptdp.real_path
local model_dir, work_dir = real(opts.hf_model), real(W)
if not model_dir or not work_dir or work_dir == model_dir or
   work_dir:sub(1, #model_dir + 1) == model_dir .. '/' then
  fail(string.format("--workdir '%s' is the model's directory or inside it; give a directory of " ..
                     'its own', W))
end
-- The corpus and the model's files are inputs of this run from now on, also
-- when W's dataset or import is reused: no output of the run replaces them
-- (a reused dataset left the corpus unheld, and a --log-json replaced it).
local function hold(path, what)
  if ptdp.C.ptdp_hold_input(path, what) ~= 0 then fail(ffi.string(ptdp.C.ptdp_last_error())) end
end
hold(opts.corpus, '--corpus')
for _, name in ipairs { 'config.json', 'tokenizer.json', 'model.safetensors', 'model.safetensors.index.json',
                        'generation_config.json', 'tokenizer_config.json', 'special_tokens_map.json' } do
  if exists(opts.hf_model .. '/' .. name) then hold(opts.hf_model .. '/' .. name, '--hf-model file') end
end
-- The run's own outputs among the engine flags, checked before the import,
-- the tokenization and the load (they were refused only after all three):
-- outside --workdir, whose files are the recipe's (a --log-json there replaced
-- its record), and each by the writers' rules.
local kinds = { ['--log-json'] = 'metrics_log', ['--timeline'] = 'trace', ['--profile-ops'] = 'op_profile' }
for i, a in ipairs(rest) do
  local name, value = a:match('^(%-%-[%w%-]+)=(.*)$')
  if not name then name, value = a, rest[i + 1] end
  if name == '--log-json' or name == '--timeline' or name == '--profile-ops' then
    if not value then fail(name .. ' needs a value') end
    local at = real(value)
    if at and (at == work_dir or at:sub(1, #work_dir + 1) == work_dir .. '/') then
      fail(string.format("%s '%s' is inside --workdir '%s', whose files are the recipe's: give a " ..
                         'path outside it', name, value, W))
    end
    local ok, err = pcall(ptdp.check_output, value, name, false, kinds[name])
    if not ok then fail(tostring(err)) end
  end
end
local imported, prefix = W .. '/imported', W .. '/data'
local finetuned, export = W .. '/finetuned', W .. '/hf'
-- Nor the model inside one of the recipe's own outputs (W/imported as the
-- model had the import write its checkpoints among the model's files).
for _, out in ipairs { imported, finetuned, export } do
  local at = real(out)
  if at and (model_dir == at or model_dir:sub(1, #at + 1) == at .. '/') then
    fail(string.format("--hf-model '%s' is inside '%s', where the recipe writes its %s; move the model " ..
                       'out of --workdir, or give another --workdir', opts.hf_model, out,
                       out == imported and 'import' or out == finetuned and 'checkpoints' or 'export'))
  end
end
-- (A link there counts, one to nothing too: the save and the export would stop at it.)
pcall(ffi.cdef, 'long readlink(const char *path, char *buf, size_t size);')
local link_buf = ffi.new('char[1]')
local function is_link(path) return ffi.C.readlink(path, link_buf, 1) >= 0 end
-- A fine-tuning that stopped before its end is resumed, and so is one stopped
-- in its export: that is done once its weights are in place, which go last
-- (after the tokenizer files).
local exported = exists(export .. '/model.safetensors') or is_link(export)
local resuming = exists(finetuned .. '/latest') and not exported
for _, dir in ipairs(resuming and {} or { finetuned, export }) do
  if exists(dir) or is_link(dir) then
    fail(string.format("'%s' exists: a recipe run makes it afresh; give another --workdir, or " ..
                       'move it away', dir))
  end
end
local ok, err = pcall(ptdp.mkdirs, W)
if not ok then fail('--workdir: ' .. tostring(err)) end

-- What W's import and dataset were made from: a later run reuses them only
-- for the same --hf-model, --corpus and --corpus-format.
-- By what they are, not how they were spelled: the real paths (./hf and
-- an absolute hf are one model) and the files' identity (another model moved
-- to the same path is another).
local function identity(path) return ptdp.file_identity(path) or 'none' end
local weights = exists(opts.hf_model .. '/model.safetensors') and opts.hf_model .. '/model.safetensors' or
                opts.hf_model .. '/model.safetensors.index.json'
local record, made_from = W .. '/recipe_inputs.txt', string.format(
  'hf_model=%s\nhf_config=%s\nhf_weights=%s\ncorpus=%s (%s)\ncorpus_format=%s\n', model_dir,
  identity(opts.hf_model .. '/config.json'), identity(weights), real(opts.corpus) or opts.corpus,
  identity(opts.corpus), opts.corpus_format)
-- The record, the import and the dataset are the recipe's own in W: a link
-- there (to outside W) is never written through, and a file that is no
-- record (a user's) never written over.
for _, path in ipairs { record, imported, prefix .. '_text_document.bin', prefix .. '_text_document.idx' } do
  if is_link(path) then
    fail(string.format("'%s' is a symbolic link: the recipe makes its files in --workdir itself; " ..
                       'move the link away, or give another --workdir', path))
  end
end
local was = ptdp.read_file(record, 'the recipe\'s record')
if was and not was:match('^hf_model=[^\n]*\nhf_config=[^\n]*\nhf_weights=') then
  fail(string.format("'%s' exists and is not this recipe's record (hf_model=..., hf_config=..., ...): " ..
                     'move it away, or give another --workdir', record))
end
-- The record guards what was made from it: with nothing made yet (an import
-- refused before it was done), a record of other inputs is only replaced.
local made = exists(imported .. '/latest') or exists(prefix .. '_text_document.idx')
if was and was ~= made_from and made then
  -- Which inputs differ, each with both values (the whole record hid it).
  local function fields(text)
    local t = {}
    for k, v in text:gmatch('([%w_]+)=([^\n]*)\n') do t[k] = v end
    return t
  end
  local recorded, now, differ = fields(was), fields(made_from), {}
  for _, k in ipairs { 'hf_model', 'hf_config', 'hf_weights', 'corpus', 'corpus_format' } do
    if recorded[k] ~= now[k] then
      differ[#differ + 1] = string.format('%s: recorded %s, this run %s', k, recorded[k] or '(none)', now[k])
    end
  end
  if #differ == 0 then differ[1] = 'its record:\n' .. was end  -- (a record of another form)
  fail(string.format("'%s' holds the import and dataset of other inputs (%s): give another --workdir",
                     W, table.concat(differ, '; ')))
elseif not was and made then
  fail(string.format("'%s' holds an import or a dataset this recipe did not record; give another " ..
                     '--workdir', W))
elseif was ~= made_from then
  ptdp.write_file(record, made_from, "the recipe's record")
end

-- 1. The import (once).
if exists(imported .. '/latest') then
  print('reusing the import in ' .. imported)
else
  ptdp.import_safetensors(opts.hf_model, imported)
  print(string.format('imported %s -> %s', opts.hf_model, imported))
end

-- 2. The model's options, from the import; a flag given on the command line
-- wins (seq_length, dropout), and one that would change the model's shape or
-- function is refused below (as the engine's load would), naming both values.
local argv = {}
for key, value in pairs(ptdp.model_options(imported)) do
  if not given[key] then
    argv[#argv + 1] = '--' .. key:gsub('_', '-')
    argv[#argv + 1] = value
  end
end

local data = prefix .. '_text_document'
-- 4a. The fine-tuning run's options: the model's, the recipe's, then the user's.
-- A new fine-tuning starts from the import; a stopped one resumes from its own.
local recipe_flags = resuming and { { 'load', finetuned } } or { { 'finetune', '1' }, { 'load', imported } }
if resuming then print('resuming the fine-tuning in ' .. finetuned) end
for _, kv in ipairs {
  { 'save', finetuned }, { 'data-path', data },
  { 'tokenizer-type', 'HuggingFaceTokenizer' }, { 'tokenizer-file', tokenizer_file },
} do recipe_flags[#recipe_flags + 1] = kv end
for _, kv in ipairs(recipe_flags) do
  argv[#argv + 1] = '--' .. kv[1]
  argv[#argv + 1] = kv[2]
end
local defaults = { micro_batch_size = 1, global_batch_size = 8, train_iters = 100, lr = 1e-5,
                   min_lr = 1e-6, lr_warmup_iters = 0, sample_tokens = 0 }
for key, value in pairs(defaults) do
  if not given[key] then
    argv[#argv + 1] = '--' .. key:gsub('_', '-')
    argv[#argv + 1] = tostring(value)
  end
end
for _, a in ipairs(rest) do argv[#argv + 1] = a end
-- Checked together now, with the model's shape, before the tokenization (a
-- batch that micro-batches do not divide was refused only after it), and a
-- flag that changes the model against the import (the load refused it after
-- the tokenization, naming the import's checkpoint).
do
  local differ
  local ok, err = pcall(function()
    local engine = flags.parse(argv, require('ptdp.train_gpt_flags').script, {})
    ptdp.check_config(engine)
    differ = ptdp.model_differences(engine, imported)
  end)
  if not ok then fail((tostring(err):gsub('^[^:]+:%d+: ', ''))) end
  if differ ~= '' then
    fail(string.format("the flags give another model than --hf-model '%s' (%s; \"checkpoint\" is its " ..
                       "import): the recipe takes the model's shape from --hf-model; leave those flags out",
                       opts.hf_model, differ))
  end
end

-- 3. The corpus as a Megatron dataset, with the model's tokenizer (once).
if exists(data .. '.idx') and exists(data .. '.bin') then
  print('reusing the dataset ' .. data)
else
  local docs, toks = ptdp.tokenize { inputs = opts.corpus, output_prefix = prefix,
                                     format = opts.corpus_format, append_eod = true,
                                     tokenizer = 'HuggingFaceTokenizer',
                                     tokenizer_file = tokenizer_file }
  print(ptdp.one_line(string.format('tokenized %s: %d documents, %d tokens -> %s', opts.corpus, docs, toks, data)))
end

-- 4b. Fine-tuning, through train_gpt.lua with those options.
arg = argv
local run = dofile(ptdp.project_dir .. '/scripts/train_gpt.lua')
-- Stopped early, or asked to stop (a signal in the final evaluation): no
-- export yet (a preempted job has no time for one).
if run.iteration < run.train_iters or run.exit_reason ~= '' then
  print(ptdp.one_line(string.format('the fine-tuning stopped at iteration %d of %d (%s): no export yet; ' ..
                                    'the same command resumes it from %s', run.iteration, run.train_iters,
                                    run.exit_reason ~= '' and run.exit_reason or 'ended early', finetuned)))
  os.exit(0)
end

-- 5. The export, beside the checkpoints, with the model's tokenizer files (so
-- AutoTokenizer loads from the same directory as from_pretrained). Those go
-- first and the weights last: an export stopped between them has no weights,
-- and the same command finishes it (a tokenizer file already there, from that
-- stopped export, is kept when it has the model's bytes).
do
  local ok, err = pcall(ptdp.mkdirs, export)
  if not ok then fail('the export: ' .. tostring(err)) end
end
for _, name in ipairs { 'tokenizer.json', 'tokenizer_config.json', 'special_tokens_map.json' } do
  local from, to = opts.hf_model .. '/' .. name, export .. '/' .. name
  local bytes = ptdp.read_file(from, '--hf-model tokenizer file')
  if bytes then
    if exists(to) or is_link(to) then
      if is_link(to) or ptdp.read_file(to, 'the export\'s tokenizer file') ~= bytes then
        fail(string.format("'%s' exists and is not the model's %s; the export is left as it is", to, name))
      end
    else
      ptdp.write_file(to, bytes, 'the export\'s tokenizer file')
    end
  end
end
ptdp.export_safetensors(finetuned, export)
print(string.format('exported %s -> %s', finetuned, export))
