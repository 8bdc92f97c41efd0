-- bad_config.lua CASE CORPUS TMPDIR — builds a trainer from a bad config
-- through ptdp.trainer{...} and lets the error escape: the launcher must exit
-- non-zero and print a clear message positioned at this script's line
-- (tests/CMakeLists: lua_bad_config_CASE checks the message).
--   heads         3 heads do not divide hidden 32
--   seq_length    seq_length 32 > max_position_embeddings 16
--   batch         global batch 5 not divisible by micro batch 2
--   missing       data path that does not exist
--   truncated     a dataset copy missing its last bytes
--   vocab         a dataset whose vocabulary (1000) is larger than the model's (257)
--   token         a dataset with token ids outside its declared vocabulary
--   unknown       an unknown option key inside the model group
--   bad_value     num_layers = 'abc'
--   position      the same as bad_value (its own dataset file, for a second test)
--   bad_choice    optimizer.decay = 'exponential'
--   ok            a valid config (control: must succeed)
local ptdp = require 'ptdp'
local util = require 'testutil'

local case = arg[1]
local corpus, tmpdir = util.args('bad_config.lua CASE', 2)

local data = tmpdir .. '/bad_config_' .. tostring(case) .. '.ptdp'
ptdp.tokenize { inputs = corpus, output = data, format = 'lines' }

local cfg = {
  model = { num_layers = 1, hidden_size = 32, num_attention_heads = 2, seq_length = 32,
            hidden_dropout = 0, attention_dropout = 0 },
  optimizer = { lr = 1e-3, warmup_iters = 1 },
  data = { path = data },
  micro_batch_size = 2, global_batch_size = 4, train_iters = 2, num_threads = 1,
}

if case == 'heads' then
  cfg.model.num_attention_heads = 3
elseif case == 'seq_length' then
  cfg.model.max_position_embeddings = 16
elseif case == 'batch' then
  cfg.global_batch_size = 5
elseif case == 'missing' then
  cfg.data.path = tmpdir .. '/bad_config_does_not_exist.ptdp'
  os.remove(cfg.data.path)
elseif case == 'truncated' then
  cfg.data.path = tmpdir .. '/bad_config_truncated_copy.ptdp'
  util.truncated_copy(data, cfg.data.path, 5)
elseif case == 'vocab' then
  cfg.data.path = tmpdir .. '/bad_config_vocab1000.ptdp'
  local toks = {}
  for i = 1, 400 do toks[i] = (i * 7) % 1000 end
  util.write_dataset(cfg.data.path, 1000, toks)
elseif case == 'token' then
  cfg.data.path = tmpdir .. '/bad_config_token300.ptdp'
  local toks = {}
  for i = 1, 400 do toks[i] = (i * 7) % 301 end
  util.write_dataset(cfg.data.path, 257, toks)
elseif case == 'unknown' then
  cfg.model.num_layer = 2
elseif case == 'bad_value' or case == 'position' then
  cfg.model.num_layers = 'abc'
elseif case == 'bad_choice' then
  cfg.optimizer.decay = 'exponential'
elseif case ~= 'ok' then
  error('bad_config.lua: unknown case ' .. tostring(case), 0)
end

local trainer = ptdp.trainer(cfg) -- every bad case fails here
print(string.format('trainer created: %d parameters', trainer:get('num_parameters')))
