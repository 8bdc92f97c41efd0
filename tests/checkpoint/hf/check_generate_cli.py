#!/usr/bin/env python3
"""`ptdp generate --load` on the command line, over the Qwen2 fixture imported
from its model directory (make_llama_fixtures.py), and the LLaMA export there.

    check_generate_cli.py LAUNCHER WORKDIR

The model's options come from the checkpoint: greedy text is the same in the
serial layout and at (t, p) = (2, 2), sampling with a seed is reproducible,
top-k 1 is greedy; bad inputs (no checkpoint, a token outside the model's
vocabulary, a bad top_p) fail naming the problem. Standard library only.
"""
import os
import sys

from cli_check import Cli

launcher, work = sys.argv[1:3]
here = os.path.dirname(os.path.abspath(__file__))
cli = Cli(launcher, work)

cli.expect("import", ["ckpt", "import-safetensors", os.path.join(here, "qwen2"), "ckpt"], True,
           "wrote ckpt/iter_0000000")
gen = ["generate", "--load", "ckpt", "--prompt", "ABC ", "--max-new-tokens", "12"]
serial = cli.expect("greedy", gen, True, "ABC ")
split = cli.expect("greedy at t=2, p=2", gen + ["--tensor-model-parallel-size", "2",
                                                "--pipeline-model-parallel-size", "2"], True)
k1 = cli.expect("top-k 1", gen + ["--temperature", "3", "--top-k", "1", "--seed", "5"], True)
sample = gen + ["--temperature", "1", "--top-p", "0.9", "--seed", "5"]
s1, s2 = cli.expect("sampled", sample, True), cli.expect("sampled again", sample, True)
for name, ok in [("the same text at t=2, p=2", split == serial),
                 ("top-k 1 is greedy at any temperature", k1 == serial),
                 ("sampling with a seed is reproducible", s1 == s2)]:
    if not ok:
        cli.failures.append(name)
cli.expect("no checkpoint", ["generate", "--load", "nothing", "--prompt", "x"], False,
           "no checkpoint to open")
cli.expect("outside the vocabulary", ["generate", "--load", "ckpt", "--prompt", "The "], False,
           "token 104 at position 1 is outside the vocabulary [0, 103)")
cli.expect("top_p 0", gen + ["--temperature", "1", "--top-p", "0"], False, "top_p must be in (0, 1]")
# Command-line errors: one line, exit status 2, never a wrapped-around seed.
cli.expect("a negative seed", gen + ["--seed", "-1"], False, "the seed is 0 to 2^64-1, got -1")
cli.expect("a seed past 2^64-1", gen + ["--seed", "18446744073709551616"], False,
           "--seed: takes a whole number of 64 bits (at most 18446744073709551615), "
           "got '18446744073709551616'")
cli.expect("not a number", gen + ["--top-k", "x"], False,
           "ptdp generate: --top-k: takes a whole number in decimal digits, got 'x'")
# Decimal digits only, as Megatron's argparse reads them: not octal, not hex.
cli.expect("a hex number", gen + ["--top-k", "0x10"], False,
           "ptdp generate: --top-k: takes a whole number in decimal digits, got '0x10'")
# Past 64 bits: the value given, not the largest int64 CLI11 would hold.
cli.expect("a number past 64 bits", gen + ["--top-k", "99999999999999999999"], False,
           "ptdp generate: --top-k: takes a whole number of 64 bits (at most 9223372036854775807), "
           "got '99999999999999999999'")
cli.expect("a hex float", gen + ["--temperature", "0x1p3"], False,
           "ptdp generate: --temperature: takes a finite number in decimal digits, got '0x1p3'")
cli.expect("an empty number", gen + ["--top-k", ""], False,
           "ptdp generate: --top-k is given an empty value")
# A checkpoint trained with its own schedule and seed loads (generation needs
# the weights only); one trained with another tokenizer is refused by name.
repo = os.path.normpath(os.path.join(here, "..", "..", ".."))
cli.expect("a trained model", [os.path.join(repo, "scripts", "train_gpt.lua"), "--num-layers", "2",
                               "--hidden-size", "32", "--num-attention-heads", "4", "--seq-length", "32",
                               "--micro-batch-size", "2", "--global-batch-size", "4", "--train-iters", "2",
                               "--lr", "0.002", "--min-lr", "0.0002", "--seed", "7", "--eval-iters", "1",
                               "--sample-tokens", "0", "--save", "trained", "--data-path", "bytes.ptdp",
                               "--corpus", os.path.join(repo, "tests", "fixtures", "capi_corpus.txt"),
                               "--corpus-format", "lines"], True)
cli.expect("generate from it", ["generate", "--load", "trained", "--prompt", "The ",
                                "--max-new-tokens", "5"], True, "The ")
cli.expect("generate with another tokenizer", ["generate", "--load", "trained", "--prompt", "The ",
                                               "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-file",
                                               os.path.join(repo, "tests", "fixtures", "llama_tok", "llama3.json")],
           False, "trained with tokenizer_type byte, this run has HuggingFaceTokenizer")
cli.expect("export", ["ckpt", "export-safetensors", "ckpt", "exported"], True)
for f in ("model.safetensors", "config.json", "generation_config.json"):
    if not os.path.exists(os.path.join(work, "exported", f)):
        cli.failures.append(f"export: no {f}")
cli.finish("check_generate_cli")
