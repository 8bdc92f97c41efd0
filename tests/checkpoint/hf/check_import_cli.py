#!/usr/bin/env python3
"""`ptdp ckpt import-safetensors` and `--finetune` from the command line.

    check_import_cli.py LAUNCHER TRAIN_GPT.lua CORPUS WORKDIR

Bad inputs made from the fixture beside this script (a config field missing,
an activation ptdp does not compute, a tensor missing, a tensor of the wrong
shape) each fail naming the problem and leave no checkpoint; the fixture
itself imports, verifies, and fine-tunes through scripts/train_gpt.lua.
Standard library only.
"""
import json
import os
import re
import struct
import sys

from cli_check import Cli

launcher, train_gpt, corpus, work = sys.argv[1:5]
here = os.path.dirname(os.path.abspath(__file__))
model, config = os.path.join(here, "model.safetensors"), os.path.join(here, "config.json")
cli = Cli(launcher, work)
failures, expect = cli.failures, cli.expect


def write_config(name, edit):
    cfg = json.load(open(config))
    edit(cfg)
    path = os.path.join(work, name + ".json")
    json.dump(cfg, open(path, "w"))
    return path


def write_model(name, edit):
    """The fixture's tensors, edited ({name: [dtype, shape, bytes]}), as a new file."""
    data = open(model, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    tensors = {}
    for k, v in header.items():
        if k != "__metadata__":
            b, e = v["data_offsets"]
            tensors[k] = [v["dtype"], v["shape"], data[8 + n + b:8 + n + e]]
    edit(tensors)
    out, blob = {}, b""
    for k, (dtype, shape, raw) in tensors.items():
        out[k] = {"dtype": dtype, "shape": shape, "data_offsets": [len(blob), len(blob) + len(raw)]}
        blob += raw
    text = json.dumps(out).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    path = os.path.join(work, name + ".safetensors")
    open(path, "wb").write(struct.pack("<Q", len(text)) + text + blob)
    return path


def bad(name, model_file, config_file, *texts):
    target = os.path.join(work, name)
    expect(name, ["ckpt", "import-safetensors", model_file, config_file, target], False, *texts)
    if os.path.exists(target):
        failures.append(f"{name}: '{target}' was created")


no_head = write_config("no_n_head", lambda c: c.pop("n_head"))
bad("missing_field", model, no_head, f"config '{no_head}': field 'n_head' is missing")
relu = write_config("relu", lambda c: c.update(activation_function="relu"))
bad("wrong_activation", model, relu, 'activation_function is "relu"', "gelu_new")
missing = write_model("missing", lambda t: t.pop("transformer.h.1.mlp.c_fc.bias"))
bad("missing_tensor", missing, config, f"tensor 'h.1.mlp.c_fc.bias' is missing from '{missing}'")


def narrow(t):  # c_attn.weight as [32, 64]: two thirds of its bytes
    w = t["transformer.h.0.attn.c_attn.weight"]
    w[1], w[2] = [32, 64], w[2][:32 * 64 * 4]


shape = write_model("shape", narrow)
bad("wrong_shape", shape, config,
    f"tensor 'transformer.h.0.attn.c_attn.weight' in '{shape}' is [32, 64] but config "
    f"'{config}' makes it [32, 96] (GPT-2's Conv1D weights are [in, out])")
expect("usage", ["ckpt", "import-safetensors", model], False,
       "takes 2 or 3 arguments, MODEL_DIR|MODEL.safetensors [config.json] DIR; got 1")
expect("too many", ["ckpt", "import-safetensors", model, config, "a", "b"], False,
       "takes 2 or 3 arguments, MODEL_DIR|MODEL.safetensors [config.json] DIR; got 4")

# The fixture: imported (config.json found beside it), sound, and fine-tuned.
expect("import", ["ckpt", "import-safetensors", model, "imported"], True,
             "wrote imported/iter_0000000")
expect("verify", ["ckpt", "verify", "imported"], True, "OK: ")
# The same through the Lua module (ptdp_checkpoint_import_safetensors), and its error.
# The imported files are inputs of the run from then on: no output of it
# replaces them (a recipe's --log-json once replaced the model's config.json).
copy = os.path.join(work, "copy.safetensors")
open(copy, "wb").write(open(model, "rb").read())
open(os.path.join(work, "import.lua"), "w").write(f"""
local ptdp = require 'ptdp'
assert(ptdp.import_safetensors('{copy}', 'from_copy', {{ config = '{config}' }}) == 'from_copy')
local wrote, why = pcall(ptdp.write_file, '{copy}', 'x', 'note')
assert(not wrote and why:find("is the imported model's file", 1, true), why)
assert(ptdp.import_safetensors('{model}', 'from_lua', {{ config = '{config}' }}) == 'from_lua')
assert(ptdp.checkpoint_verify('from_lua'))
local ok, err = pcall(ptdp.import_safetensors, '{missing}', 'bad_lua', {{ config = '{config}' }})
assert(not ok and err:find("tensor 'h.1.mlp.c_fc.bias' is missing", 1, true), err)
print('import.lua: PASS')
""")
expect("lua", ["import.lua"], True, "import.lua: PASS")
train = [train_gpt, "--num-layers", "4", "--hidden-size", "32", "--num-attention-heads", "4",
         "--seq-length", "16", "--max-position-embeddings", "32", "--vocab-size", "260",
         "--micro-batch-size", "2", "--global-batch-size", "4", "--train-iters", "2",
         "--log-interval", "1", "--eval-iters", "1", "--eval-interval", "0", "--sample-tokens", "0",
         "--num-threads", "1", "--data-path", "corpus.ptdp", "--corpus", corpus,
         "--corpus-format", "lines"]
expect("finetune_without_load", train + ["--finetune"], False, "finetune is set but load is not")
out = expect("finetune", train + ["--finetune", "--load", "imported", "--seed", "99"], True,
             "loaded the weights of imported/iter_0000000", "to fine-tune: iteration 0")
if not re.search(r"^ iteration +1/ +2 \| consumed samples: +4 \|", out, re.M):
    failures.append("finetune: no log line of iteration 1:\n" + out)

cli.finish("check_import_cli")
