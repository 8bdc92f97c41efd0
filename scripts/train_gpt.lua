-- Train a small GPT on a text corpus (default: Debian's fortunes) and report
-- validation loss against the corpus's unigram entropy, then sample text.
--   build/ptdp scripts/train_gpt.lua [--num-layers 4 --hidden-size 256 ...]
-- Every engine option is a Megatron-style flag; --help lists them all.
local ptdp = require 'ptdp'
local flags = require 'ptdp.flags'
local ffi = require 'ffi'
pcall(ffi.cdef, 'int access(const char *path, int mode);')
pcall(ffi.cdef, 'int rmdir(const char *path);')
-- An error's line on stderr in one write: under mpirun the processes' lines
-- stay whole (in three writes they ran together, "ptdp: ptdp: ...").
local function say_error(err)
  ptdp.say('ptdp: ' .. (tostring(err):gsub('^ptdp: ', '')))
end

local spec = require 'ptdp.train_gpt_flags'
local config, opts, given = flags.parse(arg, spec.script, spec.defaults)
-- Under mpirun, the process of MPI rank 0 hosts world rank 0, which writes
-- the metrics log: the others neither write nor check it (another process's
-- working directory without the log's directory failed that process alone).
local writes_log = opts.log_json ~= '' and (ptdp.mpirun_rank() or 0) == 0
-- A short run (--train-iters 3) without its own --lr-warmup-iters warms up for
-- a tenth of it: the default 20 steps would outlast the run. (Flag values are
-- strings, so a number here is the default.)
-- (A --train-iters that is no number is left to the engine's check.)
local train_iters = tonumber(config.train_iters)
if type(config.lr_warmup_iters) == 'number' and train_iters and train_iters <= config.lr_warmup_iters then
  config.lr_warmup_iters = math.floor(train_iters / 10)
end

-- The default dataset (data/fortunes.ptdp in the project) is tokenized from
-- --corpus on first use, and so is a --data-path given with --corpus; any
-- other --data-path must exist. An existing file is never replaced. It is
-- tokenized with the run's tokenizer; the default dataset is bytes, so another
-- tokenizer needs its own --data-path.
local tokenizer = config.tokenizer_type or 'byte'
ptdp.check_config(config)  -- every value checked now, together, before any file is made
-- Options that act only on this run's saves or its load would be ignored
-- without --save or --load.
local unused = flags.unused_option(config, given)
-- So would the final sample's options without a sample.
for _, key in ipairs { 'prompt', 'temperature' } do
  if not unused and given[key] and opts.sample_tokens == 0 then
    unused = string.format('--%s acts on the final sample, and --sample-tokens is 0 (no sample): ' ..
                           'give --sample-tokens N, or leave --%s out', key, key)
  end
end
if unused then
  ptdp.say('ptdp: ' .. unused)
  os.exit(2)
end
-- and every output: a refused run makes nothing (no dataset, no --save directory).
-- A file whose directory is not there yet may only go into the --save
-- directory the run makes (that directory is checked; the file again when
-- written); any other missing directory is refused now, before a dataset is
-- made, and so is the run's own tracker --save/latest.
-- (Paths compared as written, less repeated slashes and "./" parts.)
local function tidy(p) return ((p:gsub('/+', '/'):gsub('/%./', '/'):gsub('^%./', ''):gsub('(.)/$', '%1'))) end
local save_dir = (config.save or '') ~= '' and tidy(config.save) or nil
local function check_file(path, what, kind)
  local dir = tidy(path):match('^(.*)/[^/]*$') or '.'
  if save_dir and tidy(path) == save_dir .. '/latest' then
    ptdp.say(string.format("ptdp: %s '%s' is also this run's --save tracker (its saves " ..
                           "write it): give another path", what, path))
    os.exit(1)
  end
  if ffi.C.access(dir, 0) == 0 or dir ~= save_dir then ptdp.check_output(path, what, false, kind)
  else ptdp.check_output(dir, what, true) end
end
if writes_log then check_file(opts.log_json, '--log-json', 'metrics_log') end
for key, kind in pairs { timeline = 'trace', profile_ops = 'op_profile' } do
  if (config[key] or '') ~= '' then check_file(config[key], '--' .. key:gsub('_', '-'), kind) end
end
if (config.save or '') ~= '' then ptdp.check_output(config.save, '--save', true) end
-- A --data-path this run will make from --corpus is an output too: checked
-- now against the others, not after it is written (it was left behind).
if given.corpus and given.data_path and ffi.C.access(config.data_path, 0) ~= 0 and
   ffi.C.access(config.data_path .. '.idx', 0) ~= 0 then
  local data = config.data_path
  -- Inside --save under any spelling or link: a directory on the way is it.
  local inside = false
  local up = tidy(data)
  while save_dir and not inside and up do
    inside = ptdp.same_output(up, config.save)
    up = up:match('^(.+)/[^/]*$')
  end
  if inside then
    ptdp.say(string.format("ptdp: --data-path '%s' would be made inside --save '%s', whose " ..
                           'names are the saves\'; give a path outside it', data, config.save))
    os.exit(1)
  end
  -- (A missing directory is made for it, as before.)
  -- (One another writer is making now, every process under mpirun at once,
  -- is waited for by ptdp.dataset, not refused here.)
  if ffi.C.access(tidy(data):match('^(.*)/[^/]*$') or '.', 0) == 0 then
    local ok, err = pcall(ptdp.check_output, data, '--data-path (made from --corpus)')
    if not ok and not tostring(err):find('is being written by another process', 1, true) then error(err, 0) end
  end
  for _, o in ipairs { { opts.log_json, '--log-json' }, { config.timeline, '--timeline' },
                       { config.profile_ops, '--profile-ops' } } do
    if (o[1] or '') ~= '' and ptdp.same_output(data, o[1]) then
      ptdp.say(string.format("ptdp: --data-path '%s' (made from --corpus) is also the %s: " ..
                             'give each its own path', data, o[2]))
      os.exit(1)
    end
  end
end
if tokenizer ~= 'byte' and not given.data_path then
  ptdp.say(string.format('ptdp: --tokenizer-type %s needs a --data-path tokenized with it ' ..
                         '(the default %s holds bytes): make one with `ptdp tokenize ' ..
                         '--tokenizer-type %s ...`, or give --data-path FILE --corpus TEXT ' ..
                         'to make it on first use', tokenizer, config.data_path, tokenizer))
  os.exit(1)
end
local function exists(path) return ffi.C.access(path, 0) == 0 end
local data_dirs, data_made_now
config.data_path, data_dirs, data_made_now = ptdp.dataset { path = config.data_path, given = given.data_path,
                                  create = given.corpus, corpus = opts.corpus,
                                  format = opts.corpus_format, tokenizer = tokenizer,
                                  vocab_file = config.vocab_file, merge_file = config.merge_file,
                                  tokenizer_file = config.tokenizer_file }
if given.corpus_format and not given.corpus and not data_made_now then  -- said, not silent
  ptdp.say(string.format("ptdp: --data-path '%s' exists: training on it (--corpus-format " ..
                         'reads a corpus only when a dataset is made)', config.data_path))
end

-- What this command made goes again if the run is refused before its first
-- step: the dataset made from --corpus and the directories made for it, the
-- --save directory (only while empty).
-- (The dataset by its identity: a file another command put there since is not ours.)
local data_made = data_made_now and ptdp.file_identity(config.data_path)
local save_made = (config.save or '') ~= '' and not exists(config.save)
local save_id  -- the --save directory the started trainer made, by its identity
local function unmake()
  if data_made and ptdp.file_identity(config.data_path) == data_made then
    os.remove(config.data_path)
    ptdp.unmake_dirs(data_dirs or {})  -- (only while empty)
  end
  -- (A trainer that fails to start removes what it made itself; a directory
  -- at --save then is another program's.)
  if save_id and ptdp.file_identity(config.save) == save_id then ffi.C.rmdir(config.save) end
end
local made_ok, trainer = pcall(ptdp.trainer, config)
if not made_ok then
  unmake()
  -- A resume refused for a warm-up this script chose (above, from
  -- --train-iters) says so: the user gave none.
  local warmup = not given.lr_warmup_iters and tostring(trainer):match('lr_warmup_iters: checkpoint (%d+)')
  if warmup then
    trainer = tostring(trainer) .. string.format(' (this run\'s lr_warmup_iters is train_gpt.lua\'s: 20, or ' ..
      'a tenth of --train-iters up to 20; give --lr-warmup-iters %s to go on as the checkpoint did)', warmup)
  end
  say_error(trainer)
  os.exit(1)
end
if save_made then save_id = ptdp.file_identity(config.save) end
-- Under mpirun, this script's own options that shape what all ranks run
-- together (evaluations, the sample) are every process's (a different
-- --eval-interval crashed in MPI; the engine's options are compared by the
-- trainer), and so is the log the first process writes (one given to another
-- process was ignored in silence).
-- Every process checks --log-json against the run's outputs claimed by now
-- (under mpirun each process's --timeline PATH.rankN), before the agreement,
-- whose barrier keeps the first process from writing it meanwhile: refused by
-- all at once, not by the first alone after the start (the others waited in
-- their first step until the communicator timeout).
local log_ok, log_err = true, nil
if writes_log then
  log_ok, log_err = pcall(ptdp.check_output, opts.log_json, '--log-json', false, 'metrics_log')
end
-- The corpus a dataset is made from, by what it holds (its size and its first
-- and last 64 KiB, as a dataset's fingerprint reads it; each process may name
-- it by its own path): processes making one --data-path race, and one with
-- another --corpus trained in silence on the winner's dataset. A corpus
-- directory, by the directory it names.
local function corpus_fingerprint()
  if not given.corpus then return '' end
  local function adler32(s)
    local a, b = 1, 0
    for i = 1, #s do a = (a + s:byte(i)) % 65521; b = (b + a) % 65521 end
    return b * 65536 + a
  end
  local f = io.open(opts.corpus, 'rb')
  local size = f and f:seek('end')
  local head = size and f:seek('set', 0) and f:read(65536)
  local tail = head and f:seek('set', math.max(0, size - 65536)) and f:read(65536)
  if f then f:close() end
  if tail or (head == nil and size == 0) then
    return string.format('%d bytes, %d %d', size, adler32(head or ''), adler32(tail or ''))
  end
  return ptdp.real_path(opts.corpus) or opts.corpus  -- (a directory: no bytes of its own)
end
do
  local ok, err = pcall(trainer.agree, trainer, { eval_interval = opts.eval_interval,
    sample_tokens = opts.sample_tokens, prompt = opts.prompt, temperature = opts.temperature,
    corpus = corpus_fingerprint(), corpus_format = given.corpus and opts.corpus_format or '',
    -- (The log by the file it names: m.json and ./m.json are one, m.json
    -- from two working directories two.)
    log_json = opts.log_json ~= '' and (ptdp.real_path(opts.log_json) or opts.log_json) or '',
    log_json_refused = log_ok and '' or tostring(log_err) })
  if not ok or not log_ok then
    unmake()
    say_error(log_ok and err or log_err)
    os.exit(1)
  end
end
local layout = trainer:layout()
-- Under mpirun every process runs this script: the first rank reports.
local print = layout.rank == 0 and print or function() end
-- What this run uses, as Megatron shows it first (the launcher flushes each
-- line, so a piped or killed run keeps its log).
print(flags.arguments(config, opts))
local iters = trainer:get('train_iters')
local entropy = trainer:get('unigram_entropy')
print(string.format('ptdp %s | parameters: %d | padded vocab: %d | train samples: %d | valid samples: %d',
                    ptdp.version(), trainer:get('num_parameters'), trainer:get('padded_vocab_size'),
                    trainer:get('train_samples'), trainer:get('valid_samples')))
print(string.format('layout: t=%d p=%d d=%d, %d ranks (%d in this process) | device: %s', layout.t,
                    layout.p, layout.d, layout.world_size, layout.local_ranks, trainer:text('device')))
print(string.format('unigram entropy of the training split: %.4f nats/token (%.4f bits)',
                    entropy, entropy / math.log(2)))

-- (A --load that found nothing to load the engine has said on stderr.)
local loaded = trainer:text('loaded_checkpoint')
local loaded_one = loaded ~= '' and not loaded:find('^load: ')
if loaded_one then print(ptdp.one_line(loaded)) end
-- Each checkpoint this run commits is said once, in order (a step that exits
-- may commit two: an --async-save's and its own).
local saves_said = 0
local function say_saves()
  local n = 0
  -- (Each entry ends in its iter_N and a line end: a --save holding a line
  -- break is still one entry.)
  for dir in trainer:text('saved_checkpoints'):gmatch('(.-/iter_%d%d%d%d%d%d%d%d*)\n') do
    n = n + 1
    if n > saves_said then print(string.format(' saved checkpoint %s', ptdp.one_line(dir))) end
  end
  saves_said = n
end

-- --log-json FILE (JSON lines, for plots): a "run" record, then one "train"
-- record per logged iteration (the log line's fields) and one "valid" record
-- per evaluation. A fresh run replaces the file; a resumed one (--load)
-- appends to it. The first process writes it.
local log_json = opts.log_json ~= '' and layout.rank == 0
-- The run record is written before the first step: a path that cannot be a
-- metrics file (a directory, an input of the run, a missing folder) stops the
-- run there. A later write that fails (a full disk) is reported once and the
-- file dropped: the training, not its log, is what the run is for.
local function log_record(line, fresh)
  if not log_json then return end
  local ok, err = pcall(ptdp.append_line, opts.log_json, line, fresh)
  if not ok then
    ptdp.say(string.format('ptdp: --log-json: %s; the run goes on without it', tostring(err)))
    log_json = false
  end
end
local function json_number(x)
  if x ~= x or x == math.huge or x == -math.huge then return 'null' end
  return string.format('%.17g', x)
end
local function json_string(s)
  return '"' .. s:gsub('[%c"\\]', function(c) return string.format('\\u%04x', c:byte()) end) .. '"'
end
if log_json then
  local fields = { '"kind": "run"', '"version": ' .. json_string(ptdp.version()),
                   '"data_path": ' .. json_string(config.data_path) }
  -- (train_iters as the engine's option text: a count past 2^53 is no double.)
  local train_iters = ptdp.config_values(config).train_iters
  for _, k in ipairs { 'iteration', 'train_iters', 'num_parameters', 'world_size',
                       'tensor_model_parallel_size', 'pipeline_model_parallel_size',
                       'data_parallel_size', 'train_samples', 'valid_samples', 'unigram_entropy' } do
    fields[#fields + 1] = string.format('"%s": %s', k, k == 'train_iters' and train_iters or
                                                         json_number(trainer:get(k)))
  end
  local ok, err = pcall(ptdp.append_line, opts.log_json, '{' .. table.concat(fields, ', ') .. '}',
                        trainer:get('iteration') == 0)
  if not ok then  -- refused before the first step
    unmake()
    say_error(err)
    os.exit(1)
  end
end

local exit_reason = ''
-- The loss of the validation split, or nil when --exit-signal-handler's signal
-- cut the evaluation short (the trainer has saved, and says so in exit_reason).
local function validate(it)
  local loss = trainer:evaluate()
  exit_reason = trainer:text('exit_reason')
  if exit_reason ~= '' then  -- (its save said before the exit's line, as a step's is)
    say_saves()
    return nil
  end
  if loss ~= loss then loss = math.abs(loss) end  -- a NaN prints 'nan', not '-nan' (its sign bit)
  local ppl = math.exp(math.min(20, loss))  -- (capped as Megatron caps it)
  print(string.format(' validation loss at iteration %d | lm loss: %.6E | lm loss PPL: %.3f | unigram entropy: %.4f',
                      it, loss, ppl, entropy))
  log_record(string.format('{"kind": "valid", "iteration": %d, "lm_loss": %s, "lm_loss_ppl": %s}',
                           it, json_number(loss), json_number(ppl)))
  return loss
end

local loss
-- A resumed run (--load) goes on from the checkpoint's iteration; with --save
-- the trainer saves every --save-interval iterations and after the last. A
-- step that meets --exit-signal-handler's signal, --exit-interval or
-- --exit-duration-in-mins has saved (with --save) and ends the run here, as
-- does that signal during an evaluation.
local first = trainer:get('iteration') + 1  -- past iters: a finished run, resumed again
if first > iters and loaded_one then  -- (loaded at or past --train-iters: said, not a silent no-op)
  ptdp.say(string.format('ptdp: note: the loaded checkpoint is at iteration %d and --train-iters is %d: ' ..
                         'nothing to train; the model of iteration %d is evaluated', first - 1, iters,
                         first - 1))
elseif first > iters then  -- --train-iters 0, nothing loaded
  ptdp.say('ptdp: note: --train-iters 0: nothing to train; the model as initialized is evaluated')
end
for it = first, iters do
  trainer:step()
  exit_reason = trainer:text('exit_reason')
  if it % opts.log_interval == 0 or it == iters or exit_reason ~= '' then
    print(trainer:log_line())
    log_record(trainer:log_json())
  end
  say_saves()
  if exit_reason ~= '' then break end
  if opts.eval_interval > 0 and it % opts.eval_interval == 0 and it ~= iters then
    validate(it)
    if exit_reason ~= '' then break end
  end
end
-- Every step of this run skipped its update (fp16 overflow, NaN): nothing was
-- learned, which is a failure however the run ends.
local taken, skipped = trainer:get('steps_taken'), trainer:get('steps_skipped')
if taken > 0 and skipped == taken then
  trainer:wait_for_saves()  -- an --async-save in flight ends on disk first
  ptdp.say(string.format('ptdp: every one of the %d step%s of this run skipped its update ' ..
                         '(a gradient overflow or NaN each time): nothing was learned',
                         taken, taken == 1 and '' or 's'))
  os.exit(1)
end
-- A failed save fails the run: the final checkpoint is what the user asked
-- for, and earlier failures are repeated here (each was reported as it came).
local function fail_on_failed_saves()
  trainer:wait_for_saves()  -- an --async-save in flight: the run ends when it is on disk
  say_saves()
  local failed = trainer:get('failed_saves')
  if failed > 0 then
    local last = trainer:text('last_save_error')
    ptdp.say(string.format('ptdp: %d checkpoint save%s failed in this run%s', failed,
                           failed == 1 and '' or 's',
                           last ~= '' and '; the final one: ' .. last or
                             ' (the final checkpoint was saved)'))
    os.exit(1)
  end
end
-- Ended early: the checkpoint is what matters; no final evaluation or sample
-- (every process agreed on the exit, so none waits in a collective).
local function say_exit() print(' exiting: ' .. ptdp.one_line(exit_reason)) end
if exit_reason ~= '' then
  say_exit()
else
  -- Where each rank spent the last step, one line per rank in world-rank order,
  -- all printed by world rank 0's process: under mpirun each process's output
  -- reaches the terminal on its own, so lines printed by several would interleave.
  -- (rank_reports is collective: every process calls it.) A run that was
  -- already finished ran no step: it has no last step to report.
  if layout.world_size > 1 and first <= iters then
    local reports = trainer:rank_reports()
    for i = 0, reports and layout.world_size - 1 or -1 do
      local r = reports[i]
      local mb = function(g) return r.bytes[g] / 1e6 end
      io.stdout:write(string.format(
        ' rank %d (tp %d, pp %d, dp %d) | idle: %.1f%% of the last step | peak activations: %.1f MB | ' ..
        'MB sent: tp %.2f, pp %.2f, dp %.2f, embedding %.2f\n', r.world_rank, r.tp_rank, r.pp_rank,
        r.dp_rank, 100 * r.idle_fraction, r.peak_activation_bytes / 1e6, mb('tp'), mb('pp'), mb('dp'),
        mb('embedding')))
    end
  end
  loss = validate(trainer:get('iteration'))  -- (the model's own: past iters after such a load)
  if loss then
    print(string.format('final validation loss %.4f nats/token vs unigram entropy %.4f nats/token (%.1f%% of it)',
                        loss, entropy, 100 * loss / entropy))
  else
    say_exit()
  end
  if loss and opts.sample_tokens > 0 then
    local text = trainer:generate(opts.prompt, { max_new_tokens = opts.sample_tokens,
                                                 temperature = opts.temperature, seed = 1 })
    print('---- sample (prompt ' .. ptdp.one_line(string.format('%q', opts.prompt)) .. ') ----')
    print(text)
    print('----')
  end
end
fail_on_failed_saves()
-- A model whose loss is no number has diverged: a failure however many of its
-- steps were taken (its checkpoint, if saved, is of that model).
if loss and (loss ~= loss or loss == math.huge) then
  ptdp.say(string.format('ptdp: the final validation loss is %s: the model diverged (lower ' ..
                         '--lr, set --clip-grad, or use bf16 or a larger --initial-loss-scale ' ..
                         'under fp16)%s', tostring(loss),
                         trainer:text('last_checkpoint') ~= '' and "; the last checkpoint, '" ..
                           trainer:text('last_checkpoint') .. "', holds the diverged model" or ''))
  os.exit(1)
end
-- For a script that runs this one (dofile): how the run ended. An exit
-- before train_iters (--exit-interval, --exit-signal-handler, ...) is not the
-- finished run (finetune_llama.lua exports only a finished one).
return { exit_reason = exit_reason, iteration = trainer:get('iteration'), train_iters = iters }
