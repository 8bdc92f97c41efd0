#!/usr/bin/env python3
"""check_log_json.py PTDP TRAIN_GPT CORPUS WORKDIR — train_gpt.lua --log-json FILE:

1. one JSON object per line: a "run" record, a "train" record per logged
   iteration holding what its log line shows, a "valid" record per evaluation;
2. a run resumed with --load appends to the file (a fresh run replaces it);
3. a directory as --log-json stops the run before the first iteration.
"""
import json
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from pycheck import check, result  # noqa: E402


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
    print(p.stdout)
    return p.returncode, p.stdout


def records(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def main():
    ptdp, train_gpt, corpus, work = sys.argv[1:5]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    os.chdir(work)
    base = [ptdp, train_gpt, "--num-layers", "1", "--hidden-size", "16", "--num-attention-heads", "2",
            "--seq-length", "16", "--micro-batch-size", "2", "--global-batch-size", "4",
            "--lr-warmup-iters", "1", "--lr-decay-iters", "10", "--log-interval", "2",
            "--eval-interval", "3", "--eval-iters", "1", "--sample-tokens", "0", "--num-threads", "1",
            "--data-path", "data.ptdp", "--corpus", corpus, "--corpus-format", "lines",
            "--save", "ckpt", "--save-interval", "3"]
    # A file that is no metrics log is never replaced (a model's config.json,
    # a user's notes); an earlier run's log is.
    with open("m.jsonl", "w") as f:
        f.write("old contents of a user's notes\n")
    rc, out = run(base + ["--train-iters", "6", "--log-json", "m.jsonl"])
    check(rc != 0 and "exists and is not a metrics log" in out and
          open("m.jsonl").read() == "old contents of a user's notes\n",
          "a --log-json that is not a metrics log is refused and kept")
    with open("m.jsonl", "w") as f:
        f.write('{"kind": "run", "iteration": 0, "note": "an earlier run"}\n')
    rc, out = run(base + ["--train-iters", "6", "--log-json", "m.jsonl"])
    check(rc == 0, "the run succeeds")
    recs = records("m.jsonl")
    kinds = [(r["kind"], r["iteration"]) for r in recs]
    check(kinds == [("run", 0), ("train", 2), ("valid", 3), ("train", 4), ("train", 6), ("valid", 6)],
          "records: run, train every 2 iterations, valid at 3 and the end: %s" % kinds)
    # Each train record holds what its log line printed.
    lines = {int(m.group(1)): m for m in re.finditer(
        r"iteration +(\d+)/ +\d+ \| consumed samples: +(\d+) .*?learning rate: (\S+) .*?lm loss: (\S+) .*?grad norm: (\S+) ",
        out)}
    for r in recs:
        if r["kind"] != "train":
            continue
        m = lines.get(r["iteration"])
        same = m is not None and int(m.group(2)) == r["consumed_samples"] and \
            abs(float(m.group(3)) - r["lr"]) <= 1e-3 * r["lr"] and \
            abs(float(m.group(4)) - r["lm_loss"]) <= 1e-6 * r["lm_loss"] and \
            abs(float(m.group(5)) - r["grad_norm"]) <= 1e-3 * r["grad_norm"] + 1e-3
        check(same, "iteration %d: the record matches the log line" % r["iteration"])
    valid = [r for r in recs if r["kind"] == "valid"]
    printed = [float(x) for x in re.findall(r"validation loss at iteration \d+ \| lm loss: (\S+)", out)]
    check([round(v["lm_loss"], 5) for v in valid] == [round(x, 5) for x in printed],
          "valid records hold the printed validation losses")
    check(recs[0]["train_iters"] == 6 and recs[0]["num_parameters"] > 0 and recs[0]["data_path"] == "data.ptdp",
          "the run record says what ran")

    rc, out = run(base + ["--train-iters", "8", "--load", "ckpt", "--log-json", "m.jsonl"])
    recs2 = records("m.jsonl")
    check(rc == 0 and recs2[:len(recs)] == recs, "a resumed run keeps the earlier records")
    check([(r["kind"], r["iteration"]) for r in recs2[len(recs):]] == [("run", 6), ("train", 8), ("valid", 8)],
          "and appends its own after them")

    os.makedirs("adir")
    rc, out = run(base + ["--train-iters", "2", "--log-json", "adir"])
    check(rc != 0 and "is a directory" in out and " iteration " not in out,
          "a directory as --log-json stops the run before the first iteration")

    return result()


if __name__ == "__main__":
    sys.exit(main())
