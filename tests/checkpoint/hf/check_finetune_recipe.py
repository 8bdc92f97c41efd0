#!/usr/bin/env python3
"""scripts/finetune_llama.lua end to end, without transformers.

    check_finetune_recipe.py LAUNCHER REPO WORKDIR

The recipe's input is made here: a small LLaMA-shaped model (4 query heads over
2 key/value groups, rope, SwiGLU, untied) trained two steps from scratch by
ptdp with the vocabulary of the LLaMA-3-style tokenizer.json fixture
(tests/fixtures/llama_tok/llama3.json), exported as a model directory, given that
tokenizer.json and bos/eos ids in its config.json. The recipe imports it,
tokenizes a JSON-lines corpus with the tokenizer, fine-tunes at (t, p) = (2,
2) and exports: the export has the input's tensors (names and shapes, new
values), its config fields and its bos/eos ids, and the tokenizer beside it. A
second run into the same work directory refuses to replace the first's
checkpoints; with them moved away it reuses the import and the dataset. Flags
that contradict the model or that the recipe sets, a missing tokenizer.json
and missing flags are errors naming them. Standard library only.
"""
import json
import os
import shutil
import struct
import sys

from cli_check import Cli

launcher, repo, work = sys.argv[1:4]
cli = Cli(launcher, work)
recipe = os.path.join(repo, "scripts", "finetune_llama.lua")


def tensors(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    return {k: (v["shape"], data[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in header.items() if k != "__metadata__"}


model = ["--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "4",
         "--num-query-groups", "2", "--ffn-hidden-size", "48", "--normalization", "RMSNorm",
         "--position-embedding-type", "rope", "--rotary-base", "500000", "--swiglu",
         "--disable-bias-linear", "--untie-embeddings-and-output-weights", "--vocab-size", "700",
         "--max-position-embeddings", "64"]
cli.expect("the base model", [os.path.join(repo, "scripts", "train_gpt.lua"), *model,
                              "--seq-length", "32", "--micro-batch-size", "2", "--global-batch-size", "4",
                              "--train-iters", "2", "--eval-iters", "1", "--sample-tokens", "0",
                              "--save", "base", "--data-path", "bytes.ptdp", "--corpus",
                              os.path.join(repo, "tests", "fixtures", "capi_corpus.txt"),
                              "--corpus-format", "lines"], True)
cli.expect("its export", ["ckpt", "export-safetensors", "base", "hf"], True)
hf = os.path.join(work, "hf")
shutil.copy(os.path.join(repo, "tests", "fixtures", "llama_tok", "llama3.json"),
            os.path.join(hf, "tokenizer.json"))
config = json.load(open(os.path.join(hf, "config.json")))
config["bos_token_id"], config["eos_token_id"] = 0, 1  # <|begin_of_text|>, <|end_of_text|>
json.dump(config, open(os.path.join(hf, "config.json"), "w"), indent=2)
text = open(os.path.join(repo, "tests", "fixtures", "llama_tok", "text.txt"), encoding="utf-8").read()
with open(os.path.join(work, "corpus.jsonl"), "w", encoding="utf-8") as f:
    for para in text.split("\n\n"):
        if para.strip():
            f.write(json.dumps({"text": para}) + "\n")

run = [recipe, "--hf-model", "hf", "--corpus", "corpus.jsonl", "--workdir", "run",
       "--train-iters", "3", "--seq-length", "32", "--global-batch-size", "4", "--lr", "1e-3",
       "--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2"]
cli.expect("the recipe", run, True, "imported hf -> run/imported", "tokenized corpus.jsonl",
           "to fine-tune: iteration 0", "exported run/finetuned -> run/hf")
out = os.path.join(work, "run", "hf")
if os.path.exists(os.path.join(out, "model.safetensors")):
    before, after = tensors(os.path.join(hf, "model.safetensors")), tensors(os.path.join(out, "model.safetensors"))
    if sorted(before) != sorted(after):
        cli.failures.append(f"export: tensors {sorted(after)}, the input's {sorted(before)}")
    elif any(before[k][0] != after[k][0] for k in before):
        cli.failures.append("export: a tensor's shape changed")
    elif all(before[k][1] == after[k][1] for k in before):
        cli.failures.append("export: no weight changed in 3 steps at lr 1e-3")
    got = json.load(open(os.path.join(out, "config.json")))
    for k in ("model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
              "num_attention_heads", "num_key_value_heads", "rms_norm_eps", "tie_word_embeddings",
              "rope_theta", "max_position_embeddings", "bos_token_id", "eos_token_id"):
        if got.get(k) != config.get(k):
            cli.failures.append(f"export: config.json {k} = {got.get(k)}, the input's {config.get(k)}")
    gen = json.load(open(os.path.join(out, "generation_config.json")))
    if (gen.get("bos_token_id"), gen.get("eos_token_id")) != (0, 1):
        cli.failures.append(f"export: generation_config.json {gen}")
    if not os.path.exists(os.path.join(out, "tokenizer.json")):
        cli.failures.append("export: no tokenizer.json beside the model")
else:
    cli.failures.append("the recipe wrote no run/hf/model.safetensors")

cli.expect("run again into the same work directory", run, False, "run/finetuned' exists")
shutil.move(os.path.join(work, "run", "finetuned"), os.path.join(work, "first_finetuned"))
shutil.move(os.path.join(work, "run", "hf"), os.path.join(work, "first_hf"))
cli.expect("run again, its outputs moved away", run, True, "reusing the import in run/imported",
           "reusing the dataset run/data_text_document")
# A fine-tuning stopped before --train-iters is not exported; the same command
# resumes it and exports at the end. The model named as ./hf is the same model.
shutil.move(os.path.join(work, "run", "finetuned"), os.path.join(work, "third_finetuned"))
shutil.move(os.path.join(work, "run", "hf"), os.path.join(work, "third_hf"))
same = [a if a != "hf" else "./hf" for a in run]
cli.expect("stopped by --exit-interval", same + ["--exit-interval", "1"], True,
           "reusing the import in run/imported", "the fine-tuning stopped at iteration 1 of 3")
if os.path.exists(os.path.join(work, "run", "hf")):
    cli.failures.append("a fine-tuning stopped at iteration 1 of 3 was exported")
cli.expect("the same command again", same, True, "resuming the fine-tuning in run/finetuned",
           "exported run/finetuned -> run/hf")
# An export stopped before its weights (a signal after the tokenizer files,
# which go first): the same command finishes it, the tokenizer file kept.
for name in ("model.safetensors", "config.json", "generation_config.json"):
    os.remove(os.path.join(work, "run", "hf", name))
cli.expect("an export stopped before its weights", same, True, "resuming the fine-tuning in run/finetuned",
           "exported run/finetuned -> run/hf")
if not os.path.exists(os.path.join(work, "run", "hf", "model.safetensors")):
    cli.failures.append("the stopped export was not finished")
# ... also one killed between its renames (its configs in place, not its
# weights): the configs are the export's own, byte for byte, and kept.
os.remove(os.path.join(work, "run", "hf", "model.safetensors"))
cli.expect("an export killed between its renames", same, True, "exported run/finetuned -> run/hf")
# The recipe's record is its own file in W: never written through a link (to
# a file outside W), nor over a file that is no record.
with open(os.path.join(work, "precious.txt"), "w") as f:
    f.write("precious")
os.makedirs(os.path.join(work, "w_link"))
os.symlink(os.path.join(work, "precious.txt"), os.path.join(work, "w_link", "recipe_inputs.txt"))
cli.expect("a link at the recipe's record", [recipe, "--hf-model", "hf", "--corpus", "corpus.jsonl",
                                            "--workdir", "w_link"], False, "recipe_inputs.txt' is a symbolic link")
os.makedirs(os.path.join(work, "w_notes"))
with open(os.path.join(work, "w_notes", "recipe_inputs.txt"), "w") as f:
    f.write("my notes\n")
cli.expect("a user's file at the recipe's record", [recipe, "--hf-model", "hf", "--corpus", "corpus.jsonl",
                                                   "--workdir", "w_notes"], False,
           "recipe_inputs.txt' exists and is not this recipe's record")
if (open(os.path.join(work, "precious.txt")).read() != "precious" or
        open(os.path.join(work, "w_notes", "recipe_inputs.txt")).read() != "my notes\n"):
    cli.failures.append("the recipe wrote through a link or over a user's file")
# Another model at the same path (its files are others) is another input.
shutil.move(os.path.join(work, "run", "finetuned"), os.path.join(work, "fourth_finetuned"))
shutil.move(os.path.join(work, "run", "hf"), os.path.join(work, "fourth_hf"))
shutil.move(hf, os.path.join(work, "hf_kept"))
shutil.copytree(os.path.join(work, "hf_kept"), hf)
cli.expect("another model at the same path", run, False, "holds the import and dataset of other inputs (hf_config: recorded ")
shutil.rmtree(hf)
shutil.move(os.path.join(work, "hf_kept"), hf)
cli.expect("the first model again", run + ["--train-iters", "1"], True, "reusing the import in run/imported")

# Its inputs, also when reused, are never its outputs: the corpus (its dataset
# reused) and the model's files (a --log-json replaced config.json).
corpus_before = open(os.path.join(work, "corpus.jsonl"), "rb").read()
config_before = open(os.path.join(work, "hf", "config.json"), "rb").read()
cli.expect("--log-json onto the reused corpus", run + ["--log-json", "./corpus.jsonl"], False,
           "is the --corpus")
cli.expect("--log-json onto the model's config.json", run + ["--log-json", "hf/config.json"], False,
           "is the --hf-model file")
if (open(os.path.join(work, "corpus.jsonl"), "rb").read() != corpus_before or
        open(os.path.join(work, "hf", "config.json"), "rb").read() != config_before):
    cli.failures.append("an input of the recipe changed")
# The run's options are checked with the model's shape before the tokenization.
cli.expect("a batch the micro-batches do not divide",
           [recipe, "--hf-model", "hf", "--corpus", "corpus.jsonl", "--workdir", "w5",
            "--global-batch-size", "5", "--micro-batch-size", "2"], False,
           "global_batch_size (5) must be divisible by micro_batch_size x data_parallel_size")
if os.path.exists(os.path.join(work, "w5", "data_text_document.bin")):
    cli.failures.append("the refused run tokenized its corpus first")
# A flag that changes the model: refused naming --hf-model, before the tokenization.
cli.expect("a contradicting flag", [recipe, "--hf-model", "hf", "--corpus", "corpus.jsonl",
                                    "--workdir", "w2", "--num-layers", "3"], False,
           "the flags give another model than --hf-model 'hf' (num_layers: checkpoint 2, this run 3;")
if os.path.exists(os.path.join(work, "w2", "data_text_document.bin")):
    cli.failures.append("the run refused for its model flags tokenized its corpus first")
cli.expect("a flag the recipe sets", [recipe, "--hf-model", "hf", "--corpus", "corpus.jsonl",
                                      "--workdir", "w3", "--load", "x"], False,
           "--load is set by the recipe")
cli.expect("no --workdir", [recipe, "--hf-model", "hf", "--corpus", "corpus.jsonl"], False,
           "--workdir is required")
cli.expect("a work directory inside the model's", [recipe, "--hf-model", "hf", "--corpus", "corpus.jsonl",
                                                  "--workdir", "hf/w"], False,
           "is the model's directory or inside it")
# The model where the recipe writes its import (W/imported): its import went into the model's folder.
shutil.copytree(os.path.join(work, "hf"), os.path.join(work, "w_in", "imported"))
cli.expect("the model in the recipe's import folder", [recipe, "--hf-model", "w_in/imported", "--corpus",
                                                       "corpus.jsonl", "--workdir", "w_in"], False,
           "where the recipe writes its import")
if os.path.exists(os.path.join(work, "w_in", "imported", "latest")):
    cli.failures.append("the refused recipe wrote into the model's folder")
cli.expect("--train-iters 0 (nothing to export)", [recipe, "--hf-model", "hf", "--corpus", "corpus.jsonl",
                                                   "--workdir", "w_zero", "--train-iters", "0"], False,
           "--train-iters 0 trains nothing")
cli.expect("a work directory that is a file", [recipe, "--hf-model", "hf", "--corpus", "corpus.jsonl",
                                               "--workdir", "corpus.jsonl"], False,
           "is not a directory")
with open(os.path.join(work, "other.jsonl"), "w") as f:
    f.write(json.dumps({"text": "another corpus"}) + "\n")
shutil.move(os.path.join(work, "run", "finetuned"), os.path.join(work, "second_finetuned"))
shutil.move(os.path.join(work, "run", "hf"), os.path.join(work, "second_hf"))
cli.expect("another corpus into the same work directory",
           [recipe, "--hf-model", "hf", "--corpus", "other.jsonl", "--workdir", "run"], False,
           "holds the import and dataset of other inputs (corpus: recorded ")
cli.expect("a flag without its value", [recipe, "--hf-model", "--corpus", "corpus.jsonl",
                                        "--workdir", "w5"], False, "--hf-model needs a value")
cli.expect("a bad --corpus-format", [recipe, "--hf-model", "hf", "--corpus", "corpus.jsonl",
                                     "--workdir", "w6", "--corpus-format", "csv"], False,
           "allowed: jsonl, lines, file, fortune")
if os.path.exists(os.path.join(work, "w6")):
    cli.failures.append("a bad --corpus-format made its work directory (checked after the import?)")
cli.expect("an unknown engine flag", [recipe, "--hf-model", "hf", "--corpus", "corpus.jsonl",
                                     "--workdir", "w7", "--num-layerz", "3"], False,
           "unknown flag '--num-layerz'")
cli.expect("a bad value of train_gpt.lua's own flag",
           [recipe, "--hf-model", "hf", "--corpus", "corpus.jsonl", "--workdir", "w7",
            "--log-interval", "0.5"], False, "--log-interval' must be a whole number")
cli.expect("a bad value of an engine flag", [recipe, "--hf-model", "hf", "--corpus", "corpus.jsonl",
                                          "--workdir", "w7", "--lr", "abc"], False, "lr")
if os.path.exists(os.path.join(work, "w7")):
    cli.failures.append("a bad engine flag made its work directory (checked after the import?)")
os.makedirs(os.path.join(work, "no_tok"))
shutil.copy(os.path.join(hf, "config.json"), os.path.join(work, "no_tok", "config.json"))
cli.expect("no tokenizer.json", [recipe, "--hf-model", "no_tok", "--corpus", "corpus.jsonl",
                                 "--workdir", "w4"], False, "has no tokenizer.json")
cli.finish("check_finetune_recipe")
