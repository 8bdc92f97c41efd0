#!/usr/bin/env python3
"""Runs the bad inputs the test suite covers through the built launcher and
writes tests/BAD_INPUTS.md: for each, the input, the first line of what ptdp
prints about it (and the test that covers it), then its whole output (the
Megatron arguments block left out), so the catalogue is made from what ptdp
says today rather than written by hand, and nothing hides below a first line.

    python3 tests/bad_inputs.py build/ptdp [tests/BAD_INPUTS.md]

Every case must fail (non-zero exit) with a message and no Lua stack
traceback; one that does not is printed and makes the script exit 1. A case that no other test runs says so. Paths in messages read $WORK (the scratch directory) and
$REPO. Standard library only.
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

launcher = os.path.abspath(sys.argv[1])
repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
out_path = sys.argv[2] if len(sys.argv) > 2 else os.path.join(repo, "tests", "BAD_INPUTS.md")
work = tempfile.mkdtemp(prefix="ptdp_bad_inputs.")
corpus = os.path.join(repo, "tests", "fixtures", "capi_corpus.txt")
jsonl = os.path.join(repo, "tests", "fixtures", "capi_corpus.jsonl")
bpe = os.path.join(repo, "tests", "fixtures", "bpe")
hf = os.path.join(repo, "tests", "checkpoint", "hf")
train = [os.path.join(repo, "scripts", "train_gpt.lua")]
tiny = ["--num-layers", "1", "--hidden-size", "32", "--num-attention-heads", "2", "--seq-length",
        "16", "--micro-batch-size", "2", "--global-batch-size", "4", "--train-iters", "1",
        "--eval-interval", "0", "--sample-tokens", "0", "--num-threads", "1"]
sections, failures = [], []
ONLY = "this script only"  # no other test runs this input


def run(args):
    p = subprocess.run([launcher, *args], capture_output=True, text=True, cwd=work,
                       env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=120)
    return p.returncode, p.stderr + p.stdout


def first_line(text):
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    for i, l in enumerate(lines):
        if l.startswith("FAULTY:") and i + 1 < len(lines):  # ckpt verify: the fault is next
            return l + " " + lines[i + 1]
        if l.startswith("ptdp") or "error" in l.lower():
            return l
    return lines[0] if lines else "(nothing printed)"


def clean(msg):
    msg = msg.replace(work, "$WORK").replace(repo, "$REPO")
    return msg if len(msg) <= 240 else msg[:240] + " …"


def whole(text, limit=40):
    """The output as printed, paths made portable, the arguments block (every
    option's value, printed before training) left out, at most `limit` lines."""
    lines, skipping = [], False
    for l in text.replace(work, "$WORK").replace(repo, "$REPO").splitlines():
        if "arguments ----" in l and not l.strip().startswith("---- end"):
            skipping = "end of arguments" not in l
            lines.append("(the arguments block)" if skipping else l)
            continue
        if skipping:
            skipping = "end of arguments" not in l
            continue
        lines.append(l.rstrip())
    while lines and not lines[-1]:
        lines.pop()
    if len(lines) > limit:
        lines = lines[:limit] + [f"... ({len(lines) - limit} more lines)"]
    return "\n".join("    " + l for l in lines) if lines else "    (nothing printed)"


def section(title):
    sections.append((title, []))


def case(what, args, test):
    rc, text = run(args)
    if rc == 0:
        failures.append(f"{what}: exit 0\n{text}")
    if "stack traceback" in text:
        failures.append(f"{what}: a Lua stack traceback for a user's error\n{text}")
    sections[-1][1].append(f"- {what} → `{clean(first_line(text))}` ({test})\n\n{whole(text)}\n")


def write(name, data):
    path = os.path.join(work, name)
    with open(path, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)
    return path


def sh(args):  # a set-up step that must succeed
    rc, text = run(args)
    if rc != 0:
        sys.exit(f"bad_inputs.py: set-up {args} failed:\n{text}")


# ---- set-up: good inputs to spoil -------------------------------------------
sh(["tokenize", "--format", "lines", "--output", "good.ptdp", corpus])
sh(["tokenize", "--format", "lines", "--output-prefix", "meg", corpus])
sh(["ckpt", "import-safetensors", os.path.join(hf, "model.safetensors"), "ckpt"])
ptdp_file = open(os.path.join(work, "good.ptdp"), "rb").read()
idx = open(os.path.join(work, "meg_text_document.idx"), "rb").read()
bin_ = open(os.path.join(work, "meg_text_document.bin"), "rb").read()


def megatron(name, i, b):
    write(name + ".idx", i)
    write(name + ".bin", b)
    return name


S, D = struct.unpack("<QQ", idx[18:34])

section("Launcher and command line")
case("an unknown command: `ptdp frobnicate`", ["frobnicate"], "lua_launcher_unknown_command")
case("a script that does not exist", ["no_such_script.lua"], "lua_launcher_missing_script")
case("train_gpt.lua: an unknown flag `--num-layer 2`", train + ["--num-layer", "2"],
     "lua_train_gpt_unknown_flag")
case("train_gpt.lua: `--num-layers abc`", train + ["--num-layers", "abc"], "lua_train_gpt_bad_value")
case("train_gpt.lua: `--lr-decay-style exponential`", train + ["--lr-decay-style", "exponential"],
     "lua_bad_config_bad_choice")
case("train_gpt.lua: `--temperature -1`", train + ["--temperature", "-1"],
     "lua_train_gpt_bad_script_option")
case("train_gpt.lua: `--temperature nan`", train + ["--temperature", "nan"],
     "lua_train_gpt_nan_temperature")
case("train_gpt.lua: `--eval-interval 2.5`", train + ["--eval-interval", "2.5"],
     "lua_train_gpt_fractional_interval")
case("bench_checkpoint.lua: `--repeats 0`", [os.path.join(repo, "scripts", "bench_checkpoint.lua"),
     "--repeats", "0"], "lua_bench_checkpoint_zero_repeats")
case("train_gpt.lua: `--log-interval 0`", train + ["--log-interval", "0"],
     "lua_train_gpt_bad_log_interval")
case("train_gpt.lua: 3 heads for hidden size 32",
     train + ["--data-path", "good.ptdp"] + tiny + ["--num-attention-heads", "3"], "lua_bad_config_heads")
case("train_gpt.lua: global batch 5, micro batch 2",
     train + ["--data-path", "good.ptdp"] + tiny + ["--global-batch-size", "5"], "lua_bad_config_batch")
case("train_gpt.lua: `--num_layers 2` (Python's spelling)", train + ["--num_layers", "2"],
     "lua_train_gpt_underscored_flag")
case("train_gpt.lua: `--lr 1e-400` (0 in a double)", train + ["--data-path", "good.ptdp"] + tiny +
     ["--lr", "1e-400"], "lua_module_api")
case("train_gpt.lua: `--recompute-method block` without full recomputation",
     train + ["--data-path", "good.ptdp"] + tiny + ["--recompute-method", "block"], "Pipeline (test_pipeline)")
case("train_gpt.lua: fp16 at loss scale 1 and lr 10 (the model diverges)",
     train + ["--data-path", "good.ptdp"] + tiny + ["--train-iters", "20", "--lr", "10", "--min-lr", "10",
     "--clip-grad", "0", "--fp16", "--initial-loss-scale", "1", "--micro-batch-size", "1",
     "--global-batch-size", "2"], "lua_train_gpt_diverged")
case("train_gpt.lua: `--finetune` without `--load`",
     train + ["--data-path", "good.ptdp", "--finetune"] + tiny, "checkpoint_import_cli")
case("train_gpt.lua: `--exit-interval 1e9` (an integer written as a float)",
     train + ["--data-path", "good.ptdp", "--exit-interval", "1e9"] + tiny, "Trainer.ConfigErrorsNameTheProblem")
case("train_gpt.lua: `--async-save` without `--save`",
     train + ["--data-path", "good.ptdp", "--async-save"] + tiny, "Preemption.SaveOptionsWithoutASaveDirectoryAreRefused")
case("train_gpt.lua: `--save-interval 1` without `--save`",
     train + ["--data-path", "good.ptdp", "--save-interval", "1"] + tiny,
     "Preemption.SaveOptionsWithoutASaveDirectoryAreRefused")
case("train_gpt.lua: `--keep-last-checkpoints 1` without `--save`",
     train + ["--data-path", "good.ptdp", "--keep-last-checkpoints", "1"] + tiny, ONLY)
case("train_gpt.lua: `--prompt` with `--sample-tokens 0` (no sample)",
     train + ["--data-path", "good.ptdp", "--prompt", "xyz"] + tiny, "lua_train_gpt_prompt_without_sample")
case("train_gpt.lua: `--corpus` with a blend `--data-path` (a blend is never made)",
     train + ["--data-path", "1 good.ptdp", "--corpus", corpus] + tiny, "lua_train_gpt_corpus_with_blend")
case("train_gpt.lua: `--rotary-base 7` with learned positions",
     train + ["--data-path", "good.ptdp", "--rotary-base", "7"] + tiny, "lua_train_gpt_rotary_base_without_rope")
case("train_gpt.lua: `--min-lr` with `--lr-decay-style constant`",
     train + ["--data-path", "good.ptdp", "--lr-decay-style", "constant", "--min-lr", "0.0001"] + tiny,
     "lua_train_gpt_min_lr_with_constant_lr")
case("train_gpt.lua: `--add-qkv-bias 1` without `--disable-bias-linear`",
     train + ["--data-path", "good.ptdp", "--add-qkv-bias", "1"] + tiny, ONLY)
case("bench_pipeline.lua: `--timeline` (each schedule's run would replace it)",
     [os.path.join(repo, "scripts", "bench_pipeline.lua"), "--timeline", "tl.json"],
     "lua_bench_pipeline_timeline_is_its_own")
case("bench_plan_calibration.lua: `--num-layers 6` (its interleaved layout needs a multiple of 4)",
     [os.path.join(repo, "scripts", "bench_plan_calibration.lua"), "--num-layers", "6"],
     "lua_plan_bench_calibration_layouts_checked_first")
case("train_gpt.lua: `--verify-checkpoint 0` without `--load`",
     train + ["--data-path", "good.ptdp", "--verify-checkpoint", "0"] + tiny, ONLY)
case("bench_cpu.lua: `--save out` (a save inside the timed steps)",
     [os.path.join(repo, "scripts", "bench_cpu.lua"), "--save", "out"], ONLY)
case("`ptdp generate` with `--seed` and greedy decoding",
     ["generate", "--load", "ckpt", "--prompt", "x", "--seed", "5"], ONLY)
case("`ptdp generate` with `--top-k 5` and greedy decoding",
     ["generate", "--load", "ckpt", "--prompt", "x", "--top-k", "5"], "Trainer.SameSeedGivesBitIdenticalLosses")
case("bench_cpu.lua: `--verify-checkpoint 0` without `--load`",
     [os.path.join(repo, "scripts", "bench_cpu.lua"), "--verify-checkpoint", "0"], ONLY)
case("train_gpt.lua: `--sample-tokens +5` (a sign on a whole number)",
     train + ["--data-path", "good.ptdp", "--sample-tokens", "+5"] + tiny, ONLY)
case("`ptdp tokenize --workers +2`", ["tokenize", "--format", "lines", "--output", "w.ptdp",
     "--workers", "+2", corpus], ONLY)
case("`ptdp plan --train-tokens ' 3M'` (a leading space)",
     ["plan", "--num-layers", "4", "--hidden-size", "64", "--num-attention-heads", "4",
      "--global-batch-size", "8", "--num-gpus", "4", "--train-tokens", " 3M"], ONLY)
case("train_gpt.lua: `--device cuda:-0`", train + ["--data-path", "good.ptdp", "--device", "cuda:-0"] + tiny,
     ONLY)
os.mkfifo(os.path.join(work, "fifo.lua"))
case("a script that is a FIFO", ["fifo.lua"], ONLY)
case("`ptdp ckpt frobnicate`", ["ckpt", "frobnicate"], "lua_ckpt_cli_unknown_subcommand")
case("`ptdp timeline-png` of a trace that does not exist", ["timeline-png", "no_such_trace.json", "t.png"],
     "lua_timeline_png_cli_missing")
write("tid.json", '[{"ph": "X", "tid": 1e300, "ts": 1, "dur": 2}]')
case("`ptdp timeline-png` of a trace whose tid is 1e300", ["timeline-png", "tid.json", "t.png"],
     "TimelinePng.ClearErrors")
case("train_gpt.lua: `--train-iters 0 --hidden-dropout 0.2`", train + ["--data-path", "good.ptdp"] + tiny +
     ["--train-iters", "0", "--hidden-dropout", "0.2"], "lua_train_gpt_dropout_without_steps")
case("train_gpt.lua: a constant learning rate whose warm-up outlasts the run", train + ["--data-path", "good.ptdp"]
     + tiny + ["--train-iters", "3", "--lr-decay-style", "constant", "--lr-warmup-iters", "100"],
     "lua_train_gpt_warmup_outlasting_a_constant_rate")
case("train_gpt.lua: `--bf16 --hysteresis 5` (no dynamic loss scale)", train + ["--data-path", "good.ptdp"] + tiny
     + ["--bf16", "--hysteresis", "5"], "MixedPrecision.BadOptionsAreClearErrors")
case("bench_cpu.lua: `--train-iters 1` (a benchmark times its own steps)",
     [os.path.join(repo, "scripts", "bench_cpu.lua"), "--train-iters", "1"], "lua_bench_cpu_train_iters_refused")

section("Datasets (ptdp token files, Megatron indexed datasets, blends, tokenize)")
case("a blend weight in hex: `--data-path \"0x10 good.ptdp 1 good.ptdp\"`",
     train + ["--data-path", "0x10 good.ptdp 1 good.ptdp"] + tiny, "lua_train_gpt_blend_hex_weight")
case("`--data-path` that does not exist", train + ["--data-path", "nope.ptdp"] + tiny,
     "lua_bad_config_missing, data_path_safety.sh")
case("`--data-path ' '` (white space alone)", train + ["--data-path", " "] + tiny, "data_path_safety.sh")
case("`--save ' '` (white space alone)", train + ["--save", " "] + tiny, "data_path_safety.sh")
write("trunc.ptdp", ptdp_file[:-7])
case("a ptdp token file missing its last 7 bytes", train + ["--data-path", "trunc.ptdp"] + tiny,
     "lua_bad_config_truncated")
case("Megatron .idx with a bad magic", train + ["--data-path", megatron("magic", b"X" + idx[1:], bin_)]
     + tiny, "test_indexed_dataset")
case("Megatron .idx cut inside its header", train + ["--data-path", megatron("short", idx[:20], bin_)]
     + tiny, "test_indexed_dataset")
case("Megatron .idx of version 2", train + ["--data-path", megatron(
    "version", idx[:9] + struct.pack("<Q", 2) + idx[17:], bin_)] + tiny, "test_indexed_dataset")
case("Megatron .idx with dtype code 6 (float64)", train + ["--data-path", megatron(
    "dtype", idx[:17] + b"\x06" + idx[18:], bin_)] + tiny, "test_indexed_dataset")
case("Megatron .idx missing its last byte", train + ["--data-path", megatron("idxcut", idx[:-1], bin_)]
     + tiny, "test_indexed_dataset")
case("Megatron .bin missing its last token", train + ["--data-path", megatron("bincut", idx, bin_[:-2])]
     + tiny, "test_indexed_dataset")
case("Megatron .bin with a trailing byte", train + ["--data-path", megatron("binlong", idx, bin_ + b"\0")]
     + tiny, "test_indexed_dataset")
doc0 = 34 + 12 * S
case("Megatron document index starting at 1", train + ["--data-path", megatron(
    "doc", idx[:doc0] + struct.pack("<q", 1) + idx[doc0 + 8:], bin_)] + tiny, "test_indexed_dataset")
case("Megatron sequence with a negative length", train + ["--data-path", megatron(
    "neglen", idx[:34] + struct.pack("<i", -1) + idx[38:], bin_)] + tiny, "test_indexed_dataset")
ptr1 = 34 + 4 * S + 8  # sequence 1's pointer
case("Megatron pointers off the lengths (sequence 1 one byte late)", train + ["--data-path", megatron(
    "misptr", idx[:ptr1] + struct.pack("<q", struct.unpack("<q", idx[ptr1:ptr1 + 8])[0] + 1)
    + idx[ptr1 + 8:], bin_)] + tiny, "test_indexed_dataset")
case("a byte-tokenized dataset under GPT2BPETokenizer", train + ["--data-path", "good.ptdp",
     "--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", os.path.join(bpe, "vocab.json"),
     "--merge-file", os.path.join(bpe, "merges.txt")] + tiny, "test_indexed_dataset")
case("a blend whose weights sum to 0", train + ["--data-path", "0", "meg_text_document", "0",
     "meg_text_document"] + tiny, "data_blend_zero_weights")
case("a blend weight past a double's range (`1e309`)", train + ["--data-path", "1e309",
     "meg_text_document", "1", "meg_text_document"] + tiny, "DataPath.ParsesOnePathOrAWeightedBlend")
case("`--split 1,1,1,1` (four parts)", train + ["--data-path", "good.ptdp", "--split", "1,1,1,1"] + tiny,
     "Split.Parse")
case("a blend naming a prefix that does not exist", train + ["--data-path", "0.5", "meg_text_document",
     "0.5", "no_such_prefix"] + tiny, "data_blend_missing_part")
case("`tokenize --format jsonl --output X.ptdp`", ["tokenize", "--format", "jsonl", "--output", "x.ptdp",
     jsonl], "data_tokenize_jsonl_needs_prefix")
case("`tokenize --json-keys body` of lines without it", ["tokenize", "--json-keys", "body",
     "--output-prefix", "nokey", jsonl], "data_tokenize_missing_key")
case("`tokenize --format lines` of text that is not UTF-8 (Latin-1)", ["tokenize", "--format", "lines",
     "--output", "x.ptdp", write("latin1.txt", b"caf\xc3\xa9\nna\xefve\n")], "Corpus.PlainTextFormatsKeepTheInputsBytes")
case("`tokenize` of a jsonl line with ill-formed UTF-8", ["tokenize", "--output-prefix", "ill",
     write("ill.jsonl", b'{"text": "\xff\xfe"}\n')], "capi_ctypes")
case("`tokenize` of an input that does not exist", ["tokenize", "--output", "x.ptdp", "no_such.txt"],
     "lua_tokenize_cli_missing")
case("`tokenize --output` naming its own input", ["tokenize", "--format", "lines", "--output", "good.ptdp",
     "good.ptdp"], "data_path_safety.sh")

section("GPT-2 BPE tokenizer files")
bpe_args = lambda v, m: ["tokenize", "--format", "lines", "--output", "bpe.ptdp", "--tokenizer-type",
                         "GPT2BPETokenizer", "--vocab-file", v, "--merge-file", m, corpus]
vocab = json.load(open(os.path.join(bpe, "vocab.json"), encoding="utf-8"))
merges = os.path.join(bpe, "merges.txt")
case("GPT2BPETokenizer without files", ["tokenize", "--format", "lines", "--output", "x.ptdp",
     "--tokenizer-type", "GPT2BPETokenizer", corpus], "data_tokenize_bpe_no_files")
case("the byte tokenizer given `--vocab-file`", train + ["--data-path", "good.ptdp", "--vocab-file",
     os.path.join(bpe, "vocab.json")] + tiny, "data_train_byte_with_vocab")
case("vocab.json that is not JSON", bpe_args(write("v_text.json", "{\"a\": 1,"), merges),
     "test_bpe_tokenizer")
case("vocab.json with a string id", bpe_args(write("v_str.json", json.dumps({"a": "1"})), merges),
     ONLY)
v = dict(vocab)
del v["<|endoftext|>"]
case("vocab.json without <|endoftext|>", bpe_args(write("v_noeod.json", json.dumps(v)), merges),
     "test_bpe_tokenizer")
v = {t: i for t, i in vocab.items() if t != "A"}
case("vocab.json lacking the byte 'A'", bpe_args(write("v_nobyte.json", json.dumps(v)), merges),
     ONLY)
v = dict(vocab, zzzq=vocab["a"])
case("vocab.json giving two tokens one id", bpe_args(write("v_dup.json", json.dumps(v)), merges),
     "test_fuzz_regressions")
case("merges.txt with a line of three tokens", bpe_args(os.path.join(bpe, "vocab.json"),
     write("m_three.txt", "#version: 0.2\na b c\n")), "test_bpe_tokenizer")
case("merges.txt naming a token not in vocab.json", bpe_args(os.path.join(bpe, "vocab.json"),
     write("m_unknown.txt", "#version: 0.2\nq \u4e2d\n")), "test_bpe_tokenizer")
tok_args = lambda path: ["tokenize", "--format", "lines", "--output", "tj.ptdp", "--tokenizer-type",
                         "GPT2BPETokenizer", "--tokenizer-file", path, corpus]
tj = json.load(open(os.path.join(bpe, "tokenizer.json"), encoding="utf-8"))
case("tokenizer.json without a model", tok_args(write("t_nomodel.json", "{}")), ONLY)
t = json.loads(json.dumps(tj))
t["model"]["type"] = "WordPiece"
case("tokenizer.json of a WordPiece model", tok_args(write("t_wp.json", json.dumps(t))), "test_bpe_tokenizer")
t = json.loads(json.dumps(tj))
t["pre_tokenizer"]["add_prefix_space"] = True
case("tokenizer.json with add_prefix_space", tok_args(write("t_prefix.json", json.dumps(t))),
     "test_bpe_tokenizer")
t = json.loads(json.dumps(tj))
t["added_tokens"].append({"id": 5, "content": "<|pad|>"})
case("tokenizer.json with an added token on a vocabulary id", tok_args(write("t_added.json", json.dumps(t))),
     "test_fuzz_regressions")

section("Checkpoints (manifest, model.h5, `ptdp ckpt`)")
case("`ptdp ckpt inspect` of a directory without checkpoints", ["ckpt", "inspect", "empty_dir_x"],
     "lua_ckpt_cli_missing")
shutil.copytree(os.path.join(work, "ckpt"), os.path.join(work, "edited"))
man_path = os.path.join(work, "edited", "iter_0000000", "manifest.json")
m = json.load(open(man_path))
m["iteration"] = 7
json.dump(m, open(man_path, "w"), indent=1)
case("a manifest.json edited after the save (iteration changed)", ["ckpt", "verify", "edited"],
     "lua_ckpt_verify_bad_manifest")
del m["manifest_crc32c"]  # an older manifest: the rules that need no checksum
m["iteration"] = 0
m["file"] = "../model.h5"
json.dump(m, open(man_path, "w"), indent=1)
case("a manifest.json naming `../model.h5` as its file", ["ckpt", "verify", "edited"],
     "test_checkpoint_trainer")
m["file"] = "model.h5"
m["iteration"] = 7
json.dump(m, open(man_path, "w"), indent=1)
case("a manifest.json of iteration 7 in iter_0000000 (no manifest checksum)", ["ckpt", "verify", "edited"],
     "test_checkpoint_trainer")
write("edited/iter_0000000/manifest.json", "{\"format\": \"ptdp-checkpoint\", ")
case("a manifest.json that is not JSON", ["ckpt", "verify", "edited"], "test_checkpoint_trainer")
shutil.copytree(os.path.join(work, "ckpt"), os.path.join(work, "shortfile"))
h5 = os.path.join(work, "shortfile", "iter_0000000", "model.h5")
os.truncate(h5, os.path.getsize(h5) - 100)
case("a model.h5 missing its last 100 bytes", ["ckpt", "verify", "shortfile"], "test_checkpoint_trainer")
write("afile", "x")
case("train_gpt.lua `--save` under a file", train + ["--data-path", "good.ptdp", "--save", "afile/ck"]
     + tiny, "lua_train_gpt_save_under_a_file")
case("train_gpt.lua `--load` of a file", train + ["--data-path", "good.ptdp", "--load", "afile"] + tiny,
     "lua_train_gpt_load_a_file")
case("`--timeline` inside a checkpoint directory", train + ["--data-path", "good.ptdp", "--timeline",
     "ckpt/iter_0000000/manifest.json"] + tiny, "lua_train_gpt_checkpoint_guard")
case("`--log-json` onto a save directory's tracker", train + ["--data-path", "good.ptdp", "--log-json",
     "ckpt/latest"] + tiny, "OutputFile.NoWriterPutsAFileAmongACheckpointsFiles")
os.link(os.path.join(work, "ckpt", "iter_0000000", "model.h5"), os.path.join(work, "shared.jsonl"))
case("`--log-json` a hard link of a checkpoint's model.h5", train + ["--data-path", "good.ptdp",
     "--log-json", "shared.jsonl"] + tiny, "OutputFile.RefusesSharedFilesAndPlacesNoFileCanBeMade")
case("`--timeline` a name too long for the writer's temporary file", train + ["--data-path",
     "good.ptdp", "--timeline", "t" * 250 + ".json"] + tiny,
     "OutputFile.RefusesSharedFilesAndPlacesNoFileCanBeMade")
case("`--log-json /dev/stdout`", train + ["--data-path", "good.ptdp", "--log-json", "/dev/stdout"]
     + tiny, "OutputFile.RefusesTheProcesssStreams")
shutil.copy(os.path.join(work, "good.ptdp"), os.path.join(work, "1 good.ptdp"))
case("`--data-path '1 good.ptdp'` (a dataset of that name, and a blend of good.ptdp)", train +
     ["--data-path", "1 good.ptdp"] + tiny, "Blend.ADataPathThatIsAlsoABlendIsRefused")
os.makedirs(os.path.join(work, "saves", "iter_0000002.old"))
write(os.path.join("saves", "iter_0000002.old", "manifest.json"), "{}")
case("`--save` holding a user's copy named iter_0000002.old", train + ["--data-path", "good.ptdp",
     "--save", "saves"] + tiny, "Commit.ASaveDirectorysNamesAreCheckedUpFront")
case("`--save` inside a checkpoint directory", train + ["--data-path", "good.ptdp", "--save",
     "ckpt/iter_0000000/nested"] + tiny, "lua_train_gpt_checkpoint_guard")
shutil.copytree(os.path.join(work, "ckpt", "iter_0000000"), os.path.join(work, "best"))
case("`--save` into a copy of a checkpoint under another name (best/)", train + ["--data-path", "good.ptdp",
     "--save", "best", "--load", "best"] + tiny, "lua_train_gpt_checkpoint_guard")
sh(train + ["--data-path", "good.ptdp", "--save", "own"] + tiny)
case("a run from scratch whose `--save` holds its own run's checkpoints", train + ["--data-path", "good.ptdp",
     "--save", "own"] + tiny, "lua_train_gpt_checkpoint_guard")
case("a mistyped `--load` beside a `--save` holding the run's checkpoints", train + ["--data-path", "good.ptdp",
     "--save", "own", "--load", "own_typo"] + tiny, "lua_train_gpt_checkpoint_guard")
case("`ptdp ckpt import-safetensors` into a checkpoint directory", ["ckpt", "import-safetensors",
     os.path.join(hf, "model.safetensors"), "ckpt/iter_0000000"], "Commit.CheckpointsNeverNest")
case("`--load` of a checkpoint of another shape", train + ["--data-path", "good.ptdp", "--load", "ckpt"]
     + tiny, "test_checkpoint_trainer")
case("`ptdp ckpt export-safetensors ckpt ckpt` (into a save directory)", ["ckpt", "export-safetensors", "ckpt",
     "ckpt"], "CheckpointExport.UnwritableDestination")
sh(train + ["--data-path", "good.ptdp", "--save", "line", "--save-interval", "1", "--train-iters", "3"]
   + tiny[:-8] + ["--eval-interval", "0", "--sample-tokens", "0", "--num-threads", "1"])
write(os.path.join("line", "iter_0000003", "notes.txt"), "mine")
case("a rewind (`--load line/iter_0000001 --save line`) whose saves would replace a checkpoint holding a "
     "user's file", train + ["--data-path", "good.ptdp", "--save", "line", "--load", "line/iter_0000001",
     "--save-interval", "1", "--train-iters", "3"] + tiny[:-8] + ["--eval-interval", "0", "--sample-tokens",
     "0", "--num-threads", "1"], "CheckpointRetention.ARewindNamesTheNewerCheckpointsItsSavesReplace")
shutil.copytree(os.path.join(work, "ckpt"), os.path.join(work, "linked"))
os.rename(os.path.join(work, "linked", "iter_0000000", "manifest.json"), os.path.join(work, "manifest_copy.json"))
os.symlink(os.path.join(work, "manifest_copy.json"), os.path.join(work, "linked", "iter_0000000", "manifest.json"))
case("a checkpoint whose manifest.json is a symbolic link", ["ckpt", "verify", "linked/iter_0000000"],
     "Commit.DirectoryWithoutManifestIsSkipped")

section("Hugging Face safetensors import (`ptdp ckpt import-safetensors`)")
model = os.path.join(hf, "model.safetensors")
config = json.load(open(os.path.join(hf, "config.json")))
imp = lambda f, c, d: ["ckpt", "import-safetensors", f, c, d]
sh(["ckpt", "export-safetensors", "ckpt", "exported"])
c = json.load(open(os.path.join(work, "exported", "config.json")))
c["layer_norm_epsilon"] = 1e-3
write("exported/config.json", json.dumps(c))
case("a model directory whose config.json and its file's own config disagree",
     ["ckpt", "import-safetensors", "exported", "i_disagree"],
     "CheckpointImport.TheFilesOwnConfigAndConfigJsonMustAgree")
c = dict(config)
del c["n_head"]
case("config.json without n_head", imp(model, write("c_nohead.json", json.dumps(c)), "i1"),
     "checkpoint_import_cli")
case("config.json with activation relu", imp(model, write("c_relu.json", json.dumps(dict(
    config, activation_function="relu"))), "i2"), "checkpoint_import_cli")
case("config.json with n_head 5 (does not divide n_embd 32)", imp(model, write("c_heads.json", json.dumps(
    dict(config, n_head=5))), "i3"), ONLY)
raw = open(model, "rb").read()
case("a safetensors file of 4 bytes", imp(write("short.safetensors", raw[:4]), os.path.join(hf, "config.json"),
     "i4"), "test_checkpoint_import")
case("a safetensors header longer than the file", imp(write("hdr.safetensors", raw[:1000]),
     os.path.join(hf, "config.json"), "i5"), ONLY)
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
header.pop("transformer.h.1.mlp.c_fc.bias")
text = json.dumps(header).encode()
case("a safetensors file without h.1.mlp.c_fc.bias", imp(write("missing.safetensors", struct.pack(
    "<Q", len(text)) + text + raw[8 + n:]), os.path.join(hf, "config.json"), "i6"), "checkpoint_import_cli")
case("`ptdp ckpt import-safetensors` with one path", ["ckpt", "import-safetensors", model],
     "checkpoint_import_cli")
llama = os.path.join(hf, "llama")
lconfig = json.load(open(os.path.join(llama, "config.json")))
case("a LLaMA config.json with attention_bias but not mlp_bias", imp(
    os.path.join(llama, "model.safetensors.index.json"),
    write("l_bias.json", json.dumps(dict(lconfig, attention_bias=True))), "i7"), "LlamaImport.RefusesWhatItCannotImport")
case("a LLaMA config.json with both biases, the weights without them", imp(
    os.path.join(llama, "model.safetensors.index.json"),
    write("l_biases.json", json.dumps(dict(lconfig, attention_bias=True, mlp_bias=True))), "i8"),
    "LlamaImport.RefusesWhatItCannotImport")
# Tensors whose bytes overlap: the format says they tile the data.
hdr = dict(header)
first = min((k for k in hdr if k != "__metadata__"), key=lambda k: hdr[k]["data_offsets"][0])
hdr[first] = dict(hdr[first])
b0, e0 = hdr[first]["data_offsets"]
hdr[first]["data_offsets"] = [b0 + 4, e0 + 4]
text = json.dumps(hdr).encode()
case("a safetensors file whose first tensor is moved 4 bytes on (a gap before it, an overlap after)", imp(write("overlap.safetensors",
     struct.pack("<Q", len(text)) + text + raw[8 + n:]), os.path.join(hf, "config.json"), "i9"),
     "CheckpointImport.RefusesWhatItCannotImport")
case("config.json with tie_word_embeddings \"yes\"", imp(model, write("c_tie.json", json.dumps(
    dict(config, tie_word_embeddings="yes"))), "i10"), "CheckpointImport.RefusesWhatItCannotImport")
case("`finetune_llama.lua` with a misspelt engine flag", [os.path.join(repo, "scripts", "finetune_llama.lua"),
     "--hf-model", llama, "--corpus", jsonl, "--workdir", "ft", "--num-layerz", "2"], "finetune_recipe")

section("The planner (`ptdp plan`)")
plan = ["plan", "--num-layers", "24", "--hidden-size", "2048", "--num-attention-heads", "16",
        "--global-batch-size", "512", "--num-gpus", "64"]
case("`--fp16 0` and no other precision", plan + ["--fp16", "0"], "PlanBadInput")
case("`--device cpu` without `--calibrate`", plan + ["--device", "cpu"], "PlanBadInput")
case("`--add-qkv-bias` without `--disable-bias-linear`", plan + ["--add-qkv-bias"],
     "PlanBadInput.OptionsTheTrainerRefusesAreRefused")
case("`--explain t=8,p=1,b=1` with `--tensor-model-parallel-size 2`", plan +
     ["--tensor-model-parallel-size", "2", "--explain", "t=8,p=1,b=1"], "PlanBadInput")
case("`--explain t=1,p=2,b=1,gpipe,1f1b` (two schedules)", plan + ["--explain", "t=1,p=2,b=1,gpipe,1f1b"],
     "PlanBadInput")
case("`--machine` beside `--calibrate --device cpu`", plan + ["--calibrate", "--device", "cpu", "--machine",
     "no_such.json"], "PlanBadInput")
case("`--pipeline-schedule interleaved` at `--pipeline-model-parallel-size 1`", plan +
     ["--pipeline-schedule", "interleaved", "--pipeline-model-parallel-size", "1"],
     "PlanBadInput.OptionsTheTrainerRefusesAreRefused")
selene = json.loads(subprocess.run([launcher] + plan + ["--save-machine", os.path.join(work, "selene.json")],
                                   capture_output=True, text=True, cwd=work).stdout and
                    open(os.path.join(work, "selene.json")).read())
selene["gemm"]["tile_m"] = 0.5
case("a plan that finds no layout, with `--save-machine` (nothing is written)",
     ["plan", "--num-layers", "2", "--hidden-size", "256", "--num-attention-heads", "2", "--global-batch-size",
      "1", "--num-gpus", "8", "--save-machine", "never.json"], "PlanBadInput.SaveMachineFollowsTheWritersRules")
case("a machine file with a GEMM tile of 0.5", plan + ["--machine", write("half_tile.json", json.dumps(selene))],
     "PlanMachines")

section("`ptdp plot` of a --log-json file")
write("text.jsonl", "not json\n")
write("m.jsonl", "{\"type\": \"run\"}\n")
write("huge.jsonl", "{\"kind\": \"train\", \"iteration\": 9223372036854775808, \"lm_loss\": 1}\n")
os.makedirs(os.path.join(work, "adir"), exist_ok=True)
for args in (["none.jsonl", "x.png"], ["text.jsonl", "x.png"], ["m.jsonl", "x.png"],
             ["m.jsonl", "adir"], ["m.jsonl", "/dev/null"], ["m.jsonl", "m.jsonl"], ["huge.jsonl", "x.png"]):
    case(f"`ptdp plot {' '.join(args)}`", ["plot", *args], "data_plot")

with open(out_path, "w") as f:
    f.write("# Bad inputs and what ptdp says\n\n"
            "Made by `python3 tests/bad_inputs.py build/ptdp` (do not edit by hand): each input\n"
            "below was run through the launcher: the line is the first line of its message,\n"
            "followed by the test that covers the case, and below it the whole output (the\n"
            "arguments block left out). The C ABI returns the same text from\n"
            "`ptdp_last_error()`.\n")
    for title, lines in sections:
        f.write(f"\n## {title}\n\n" + "\n".join(lines) + "\n")
shutil.rmtree(work)
if failures:
    sys.exit("bad_inputs.py: inputs that did not fail:\n" + "\n".join(failures))
print(f"bad_inputs.py: wrote {out_path}")
