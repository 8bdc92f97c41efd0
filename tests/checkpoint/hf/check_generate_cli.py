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
import shutil
import subprocess
import sys

launcher, work = sys.argv[1:3]
here = os.path.dirname(os.path.abspath(__file__))
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
failures = []


def run(*args):
    p = subprocess.run([launcher, *args], capture_output=True, text=True, cwd=work)
    return p.returncode, p.stdout + p.stderr


def check(ok, what, output=""):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)
        print(output)


rc, out = run("ckpt", "import-safetensors", os.path.join(here, "qwen2"), "ckpt")
check(rc == 0, "the Qwen2 model directory imports", out)
gen = ["generate", "--load", "ckpt", "--prompt", "ABC ", "--max-new-tokens", "12"]
rc, serial = run(*gen)
check(rc == 0 and serial.startswith("ABC "), "greedy generation from the checkpoint's options", serial)
rc, split = run(*gen, "--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2")
check(rc == 0 and split == serial, "the same text at t=2, p=2", split)
rc, k1 = run(*gen, "--temperature", "3", "--top-k", "1", "--seed", "5")
check(rc == 0 and k1 == serial, "top-k 1 is greedy at any temperature", k1)
rc, s1 = run(*gen, "--temperature", "1", "--top-p", "0.9", "--seed", "5")
rc2, s2 = run(*gen, "--temperature", "1", "--top-p", "0.9", "--seed", "5")
check(rc == 0 and rc2 == 0 and s1 == s2, "sampling with a seed is reproducible", s1 + s2)
rc, out = run("generate", "--load", "nothing", "--prompt", "x")
check(rc == 1 and "no checkpoint to open" in out, "a missing checkpoint is named", out)
rc, out = run("generate", "--load", "ckpt", "--prompt", "The ")
check(rc == 1 and "token 104 at position 1 is outside the vocabulary [0, 103)" in out,
      "a prompt the model's vocabulary lacks is refused", out)
rc, out = run(*gen, "--temperature", "1", "--top-p", "0")
check(rc == 1 and "top_p must be in (0, 1]" in out, "top_p 0 is refused", out)
rc, out = run("ckpt", "export-safetensors", "ckpt", "exported")
check(rc == 0 and all(os.path.exists(os.path.join(work, "exported", f))
                      for f in ("model.safetensors", "config.json", "generation_config.json")),
      "the export writes a model directory", out)
if failures:
    print(f"{len(failures)} failed")
    sys.exit(1)
