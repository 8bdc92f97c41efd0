#!/usr/bin/env python3
"""ptdp's LLaMA-family export against transformers' semantics, where
transformers itself is not installed.

    check_llama_export_reference.py LAUNCHER WORKDIR

First the plain-Python reference (hf_llama_reference.py) must give
transformers' own logits of the fixtures (logits.bin of tests/checkpoint/hf/
llama and qwen2, made with transformers): that is what makes it a reference.
Then, for each block shape ptdp exports in the LLaMA layout (no linear biases;
every linear bias = LLaMA's attention_bias + mlp_bias; QKV's alone = Qwen2),
a model trained two steps at (t, p) = (2, 2) with grouped queries, an untied
head and a vocabulary the padding does not divide is exported; the exported
directory must hold exactly the tensors the config's architecture has (no
missing or unexpected keys) and give ptdp's logits under the reference.
Tolerance 1e-5 relative (L2): fp32 against double, as the import tests.
Standard library only.
"""
import json
import os
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import hf_llama_reference as ref  # noqa: E402

launcher, work = sys.argv[1:3]
os.makedirs(work, exist_ok=True)
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


# 1. The reference against transformers.
for d in ["llama", "qwen2"]:
    config, tensors = ref.read_model(os.path.join(here, d))
    check(set(tensors) == ref.expected_keys(config), d + " fixture: the reference's key set")
    for ids, want in ref.read_logits_bin(os.path.join(here, d, "logits.bin"), config["vocab_size"]):
        rel = ref.relative_l2(ref.logits(config, tensors, ids), want)
        check(rel <= 1e-5, "%s fixture, %d tokens: reference vs transformers rel %.2e" % (d, len(ids), rel))

# 2. ptdp's exports against the reference.
SCRIPT = r"""
local ptdp = require 'ptdp'
local out, variant = arg[1], arg[2]
local c = { num_layers = 4, hidden_size = 32, num_attention_heads = 4, num_query_groups = 2,
            ffn_hidden_size = 48, normalization = 'RMSNorm', layernorm_epsilon = 1e-5,
            position_embedding_type = 'rope', rotary_base = 500000, swiglu = 1,
            untie_embeddings_and_output_weights = 1, vocab_size = 103, seq_length = 16,
            max_position_embeddings = 32, micro_batch_size = 1, global_batch_size = 4,
            lr = 1e-2, min_lr = 1e-3, lr_warmup_iters = 0, hidden_dropout = 0,
            attention_dropout = 0, tensor_model_parallel_size = 2,
            pipeline_model_parallel_size = 2, num_threads = 1 }
c.disable_bias_linear = variant == 'biases' and 0 or 1
c.add_qkv_bias = variant == 'qkv_bias' and 1 or 0
local tr = ptdp.trainer(c)
local n = 4 * 17
for step = 1, 2 do  -- the biases move off their zero init
  local ids = {}
  for i = 1, n do ids[i] = (i * 7 + step * 13) % 103 end
  tr:step_tokens(ids)
end
local prompt = { 5, 17, 42, 3, 99, 64, 8, 77, 1 }
local rows = tr:logits(prompt)
tr:save(out .. '/ckpt')
ptdp.export_safetensors(out .. '/ckpt', out .. '/hf')
local f = assert(io.open(out .. '/logits.json', 'w'))
local parts = {}
for r, row in ipairs(rows) do
  local vals = {}
  for j, v in ipairs(row) do vals[j] = string.format('%.9g', v) end
  parts[r] = '[' .. table.concat(vals, ',') .. ']'
end
f:write('{"ids": [' .. table.concat(prompt, ',') .. '], "logits": [' .. table.concat(parts, ',') .. ']}\n')
f:close()
"""
script = os.path.join(work, "export_variant.lua")
with open(script, "w") as f:
    f.write(SCRIPT)
for variant, arch in [("none", "LlamaForCausalLM"), ("biases", "LlamaForCausalLM"),
                      ("qkv_bias", "Qwen2ForCausalLM")]:
    out = os.path.join(work, variant)
    if os.path.exists(out):
        subprocess.run(["rm", "-rf", out], check=True)
    os.makedirs(out)
    run = subprocess.run([launcher, script, out, variant], capture_output=True, text=True,
                         env=dict(os.environ, OMP_NUM_THREADS="1"))
    if run.returncode != 0:
        check(False, "%s: the export script failed:\n%s%s" % (variant, run.stdout, run.stderr))
        continue
    config, tensors = ref.read_model(os.path.join(out, "hf"))
    check(config["architectures"] == [arch], "%s: architecture %s" % (variant, config["architectures"]))
    want_keys = ref.expected_keys(config)
    missing, unexpected = want_keys - set(tensors), set(tensors) - want_keys
    check(not missing and not unexpected,
          "%s: no missing or unexpected keys (missing %s, unexpected %s)" %
          (variant, sorted(missing)[:4], sorted(unexpected)[:4]))
    if variant == "biases":
        check(config.get("attention_bias") is True and config.get("mlp_bias") is True,
              "biases: attention_bias and mlp_bias true")
        check(any(v != 0 for v in tensors["model.layers.1.mlp.up_proj.bias"][1]),
              "biases: the up_proj bias trained off zero")
    with open(os.path.join(out, "logits.json")) as f:
        mine = json.load(f)
    got = ref.logits(config, tensors, mine["ids"])
    rel = ref.relative_l2(got, mine["logits"])
    check(rel <= 1e-5, "%s: ptdp's logits vs the reference on its export, rel %.2e" % (variant, rel))

if failures:
    print("check_llama_export_reference: %d failure(s)" % len(failures))
    sys.exit(1)
print("check_llama_export_reference: all passed")
