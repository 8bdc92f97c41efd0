-- train_gpt.lua's flags: its own (beside every engine option) and the
-- engine defaults of its main job. A module, so that a script that hands
-- flags on to train_gpt.lua (scripts/finetune_llama.lua) checks them first.
return {
  script = {
    log_interval = { default = 10, integer = true, min = 1, help = 'iterations between log lines' },
    eval_interval = { default = 100, integer = true, min = 0,
                      help = 'iterations between validation runs (0 = only at the end)' },
    corpus = { default = '/usr/share/games/fortunes', help = 'text tokenized into the dataset when it does not exist yet' },
    corpus_format = { default = 'fortune', choices = { 'fortune', 'lines', 'file' },
                      help = 'fortune | lines | file' },
    prompt = { default = 'The ', empty_ok = true, help = 'prompt of the final sample' },
    sample_tokens = { default = 300, integer = true, min = 0, max = 1048576,  -- PTDP_MAX_NEW_TOKENS
                      help = 'tokens of the final sample (0 = none)' },
    temperature = { default = 0.8, min = 0, help = 'sampling temperature (0 = greedy)' },
    log_json = { default = '', help = 'metrics file, JSON lines: the run, then each logged iteration and evaluation' },
  },
  defaults = {
    -- Defaults for the main job: about five minutes on 2 cores.
    num_layers = 4, hidden_size = 256, num_attention_heads = 4, seq_length = 128,
    micro_batch_size = 8, global_batch_size = 32, train_iters = 300,
    lr = 2e-3, min_lr = 2e-4, lr_warmup_iters = 20, lr_decay_style = 'cosine',
    weight_decay = 0.1, clip_grad = 1.0, hidden_dropout = 0.0, attention_dropout = 0.0,
    data_path = 'data/fortunes.ptdp', eval_iters = 10, seed = 1234,
  },
}
