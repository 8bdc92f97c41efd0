#!/usr/bin/env python3
"""check_plot.py PTDP TRAIN_GPT CORPUS WORKDIR [TRAINING FLAGS...] — `ptdp plot`:

1. a short real run's --log-json file plots to a PNG that decodes (signature,
   IHDR, every chunk's CRC, the zlib stream) and is not blank: the training
   loss, validation loss and learning-rate colours and dark ink for the axes;
2. bad inputs (missing file, not JSON lines, no iteration logged, an output that
   is a directory, a device or the log itself) fail with clear messages and
   leave the log as it was;
3. `ptdp --help` lists the command; `ptdp plan --plot` decodes the same way.
The PNG is read with Python's zlib and struct only (no PIL).
"""
import os
import shutil
import struct
import subprocess
import sys
import zlib

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from pycheck import check, result  # noqa: E402


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
    print("$ " + " ".join(cmd) + "\n" + p.stdout)
    return p.returncode, p.stdout


def decode_png(path):
    """(width, height, rgb bytes) of an 8-bit RGB PNG with filter-0 rows, or raises."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "PNG signature"
    at, chunks = 8, []
    while at < len(data):
        n, kind = struct.unpack(">I4s", data[at:at + 8])
        body = data[at + 8:at + 8 + n]
        crc, = struct.unpack(">I", data[at + 8 + n:at + 12 + n])
        assert crc == zlib.crc32(kind + body) & 0xffffffff, "CRC of %s" % kind
        chunks.append((kind, body))
        at += 12 + n
    assert chunks[0][0] == b"IHDR" and chunks[-1][0] == b"IEND", "IHDR first, IEND last"
    w, h, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", chunks[0][1])
    assert (depth, colour, interlace) == (8, 2, 0), "8-bit RGB, not interlaced"
    raw = zlib.decompress(b"".join(b for k, b in chunks if k == b"IDAT"))
    assert len(raw) == h * (1 + 3 * w), "IDAT holds h rows of 1 + 3w bytes"
    rows = [raw[y * (1 + 3 * w):(y + 1) * (1 + 3 * w)] for y in range(h)]
    assert all(r[0] == 0 for r in rows), "filter 0 rows"
    return w, h, b"".join(r[1:] for r in rows)


def colours(rgb):
    counts = {}
    for i in range(0, len(rgb), 3):
        c = rgb[i:i + 3]
        counts[c] = counts.get(c, 0) + 1
    return counts


def main():
    ptdp, train_gpt, corpus, work = sys.argv[1:5]
    tiny = sys.argv[5:]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    os.chdir(work)

    # 1. A real run, its log plotted.
    rc, out = run([ptdp, train_gpt, "--data-path", "data.ptdp", "--corpus", corpus, "--corpus-format", "lines"]
                  + tiny + ["--train-iters", "8", "--eval-interval", "4", "--log-json", "m.jsonl"])
    check(rc == 0, "the training run succeeds")
    if rc != 0:
        return 1
    rc, out = run([ptdp, "plot", "m.jsonl", "m.png"])
    check(rc == 0 and "wrote m.png" in out, "ptdp plot m.jsonl m.png succeeds")
    try:
        w, h, rgb = decode_png("m.png")
        check(True, "the PNG decodes")
    except (AssertionError, OSError, zlib.error, struct.error) as e:
        check(False, "the PNG decodes: %s" % e)
        w, h, rgb = 0, 0, b""
    check(w == 1000 and 600 < h < 1000, "the PNG is 1000 px wide (%d x %d)" % (w, h))
    counts = colours(rgb)
    white = counts.get(b"\xff\xff\xff", 0)
    check(w * h > 0 and white < 0.97 * w * h, "the PNG is not blank (%d of %d pixels white)" % (white, w * h))
    for name, c, least in [("training loss", b"\x1f\x77\xb4", 200), ("validation loss", b"\xe6\x6e\x00", 50),
                           ("learning rate", b"\x2c\xa0\x2c", 200), ("axes, numbers and titles", b"\x28\x28\x28", 3000)]:
        check(counts.get(c, 0) >= least, "%s drawn (%d pixels)" % (name, counts.get(c, 0)))

    # 2. Bad inputs: exit 1, the message naming what is wrong, nothing replaced.
    with open("text.jsonl", "w") as f:
        f.write("iteration 1 loss 5.5\n")
    with open("m.jsonl") as f:
        first = f.readline()
    with open("run_only.jsonl", "w") as f:
        f.write(first)
    os.makedirs("adir", exist_ok=True)
    log_before = open("m.jsonl", "rb").read()
    for args, text in [
            (["none.jsonl", "x.png"], "ptdp plot: I/O error: cannot read 'none.jsonl': No such file or directory"),
            (["text.jsonl", "x.png"], "ptdp plot: corrupt data: 'text.jsonl' line 1 is not JSON"),
            (["run_only.jsonl", "x.png"], "'run_only.jsonl' has no \"train\" records (no iteration was logged)"),
            (["m.jsonl", "adir"], "ptdp plot: invalid argument: plot output 'adir' exists and is a directory"),
            (["m.jsonl", "/dev/null"], "plot output '/dev/null' exists and is a character device"),
            (["m.jsonl", "m.jsonl"], "plot output 'm.jsonl' is the metrics log 'm.jsonl' this run reads: refusing to overwrite an input")]:
        rc, out = run([ptdp, "plot"] + args)
        check(rc == 1 and text in out, "ptdp plot %s: exit 1 and '%s'" % (" ".join(args), text))
    check(open("m.jsonl", "rb").read() == log_before, "the log is untouched")
    check(not os.path.exists("x.png") and os.path.isdir("adir"), "no output written on an error")
    rc, out = run([ptdp, "plot", "m.jsonl"])
    check(rc != 0 and "png is required" in out, "a missing argument is a usage error")

    # 3. The command list, and the planner's plot.
    rc, out = run([ptdp, "--help"])
    check(rc == 0 and "ptdp plot LOG.jsonl OUT.png" in out, "ptdp --help lists ptdp plot")
    rc, out = run([ptdp, "plan", "--num-layers", "24", "--hidden-size", "2304", "--num-attention-heads", "24",
                   "--global-batch-size", "512", "--num-gpus", "64", "--plot", "plan.png"])
    check(rc == 0 and "wrote plan.png" in out, "ptdp plan --plot plan.png succeeds")
    try:
        w, h, rgb = decode_png("plan.png")
        ink = colours(rgb).get(b"\x28\x28\x28", 0)
        check(w > 1000 and h > 300 and ink > 4000, "the plan's plot decodes and has labelled axes (%d x %d, %d ink)"
              % (w, h, ink))
    except (AssertionError, OSError, zlib.error, struct.error) as e:
        check(False, "the plan's plot decodes: %s" % e)

    return result()


if __name__ == "__main__":
    sys.exit(main())
