#!/usr/bin/env python3
"""check_train_log.py PTDP TRAIN_GPT CORPUS WORKDIR — what train_gpt.lua's log shows:

1. its arguments first, as Megatron prints them: every engine and script
   option, sorted, "  name ..... value", between the two rules;
2. the lm loss of a log line is the mean over the log interval (--log-interval 3
   against the per-step losses of --log-interval 1), not the last step's;
3. lines are flushed as printed: through a pipe, the first log line arrives
   while the run is still busy (a long validation after iteration 1), and a
   run killed then has left every line it printed whole.
"""
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from pycheck import check, result  # noqa: E402


def losses(out):
    return {int(m.group(1)): float(m.group(2))
            for m in re.finditer(r"^ iteration +(\d+)/ +\d+ \|.*? lm loss: (\S+) \|", out, re.M)}


def main():
    ptdp, train_gpt, corpus, work = sys.argv[1:5]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    os.chdir(work)
    base = [ptdp, train_gpt, "--num-layers", "1", "--hidden-size", "32", "--num-attention-heads", "2",
            "--seq-length", "16", "--micro-batch-size", "2", "--global-batch-size", "4",
            "--lr-warmup-iters", "1", "--eval-iters", "1", "--sample-tokens", "0",
            "--num-threads", "1", "--data-path", "data.ptdp", "--corpus", corpus,
            "--corpus-format", "lines"]

    # 1 and 2
    runs = {}
    for interval in (1, 3):
        p = subprocess.run(base + ["--train-iters", "6", "--eval-interval", "0",
                                   "--log-interval", str(interval)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
        print(p.stdout)
        check(p.returncode == 0, "the run with --log-interval %d succeeds" % interval)
        runs[interval] = p.stdout
    out = runs[3]
    start = out.find("------------------------ arguments ------------------------\n")
    end = out.find("-------------------- end of arguments ---------------------\n")
    check(0 <= start < end < out.find(" iteration "), "the arguments block comes before training")
    args = out[start:end].splitlines()[1:]
    names = [re.match(r"^  (\w+) \.+ ", a).group(1) if re.match(r"^  (\w+) \.+ ", a) else a for a in args]
    check(names == sorted(names), "arguments sorted by name")
    for want in ("  hidden_size ..................................... 32",
                 "  log_interval .................................... 3",
                 "  min_lr .......................................... 0.0002",
                 "  lr .............................................. 0.002",
                 "  data_path ....................................... data.ptdp",
                 "  load ............................................ None"):
        check(want in args, "argument line %r" % want)
    step, interval = losses(runs[1]), losses(runs[3])
    check(sorted(step) == [1, 2, 3, 4, 5, 6] and sorted(interval) == [3, 6],
          "log lines at every step / at 3 and 6: %s / %s" % (sorted(step), sorted(interval)))
    for it in (3, 6):
        mean = sum(step[i] for i in range(it - 2, it + 1)) / 3
        check(abs(interval.get(it, 0) - mean) <= 2e-6 * mean,
              "iteration %d logs the interval's mean %.6E (got %s, the last step's is %.6E)"
              % (it, mean, interval.get(it), step[it]))
        check(abs(interval.get(it, 0) - step[it]) > 1e-5 * step[it],
              "... which is not the last step's loss")

    # 3: a validation of 1e9 batches after iteration 1 keeps the run busy.
    p = subprocess.Popen(base + ["--train-iters", "100", "--log-interval", "1", "--eval-interval", "1",
                                 "--eval-iters", "1000000000"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    got, seen, deadline = b"", False, time.time() + 60
    while not seen and time.time() < deadline and p.poll() is None:
        ready, _, _ = select.select([p.stdout], [], [], 1.0)
        if ready:
            chunk = os.read(p.stdout.fileno(), 65536)
            got += chunk
            seen = re.search(rb"^ iteration +1/ +100 \|", got, re.M) is not None
    busy = p.poll() is None
    p.send_signal(signal.SIGKILL)
    rest = p.stdout.read()
    p.wait()
    got += rest
    print(got.decode(errors="replace")[-2000:])
    check(seen and busy, "the first log line arrived through the pipe while the run was busy")
    check(b"end of arguments" in got and got.endswith(b"\n"), "the killed run left whole lines")
    return result()


if __name__ == "__main__":
    sys.exit(main())
