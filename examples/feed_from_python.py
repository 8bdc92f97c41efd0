#!/usr/bin/env python3
"""Training batches from a Python generator through the C ABI (ctypes only).

    python3 examples/feed_from_python.py LIBPTDP.so WORKDIR [--check]

An embedder with its own data loader hands each global batch to
ptdp_trainer_step_tokens: global_batch_size sequences of seq_length + 1 token
ids, one after another (sequence i is global sample consumed_samples + i; its
targets are its ids shifted by one). The step is the one ptdp_trainer_step
would run had the dataset given those sequences. Under mpirun every process
passes the same whole batch.

Here the generator streams the byte tokens of a few documents (byte tokenizer:
ids 0..255 are bytes, 256 ends a document). The trainer still opens a dataset
(data_path) for its validation split; this script makes a tiny one in a
directory of its own inside WORKDIR, and removes that directory at the end:
nothing else in WORKDIR is touched.

--check also asserts that the loss falls, that fed batches make the dataset's
run bit for bit, and that a bad batch is refused. Exits 1 on failure.
"""
import ctypes as C
import os
import shutil
import sys
import tempfile

SEQ, BATCH, EOD = 16, 8, 256

DOCS = [
    "The quick brown fox jumps over the lazy dog.",
    "A journey of a thousand miles begins with a single step.",
    "All that glitters is not gold.",
    "To be, or not to be, that is the question.",
]


def bind(path):
    lib = C.CDLL(path)
    vp = C.c_void_p
    sig = {
        "ptdp_last_error": (C.c_char_p, []),
        "ptdp_config_create": (C.c_int32, [C.POINTER(vp)]),
        "ptdp_config_destroy": (None, [vp]),
        "ptdp_config_set": (C.c_int32, [vp, C.c_char_p, C.c_char_p]),
        "ptdp_trainer_create": (C.c_int32, [vp, C.POINTER(vp)]),
        "ptdp_trainer_destroy": (None, [vp]),
        "ptdp_trainer_step": (C.c_int32, [vp, C.POINTER(C.c_double)]),
        "ptdp_trainer_step_tokens": (C.c_int32, [vp, C.POINTER(C.c_int32), C.c_size_t,
                                                 C.POINTER(C.c_double)]),
        "ptdp_trainer_get": (C.c_int32, [vp, C.c_char_p, C.POINTER(C.c_double)]),
        "ptdp_tokenize_options": (C.c_int32, [C.POINTER(C.c_char_p), C.c_int32,
                                              C.POINTER(C.c_char_p), C.c_int32,
                                              C.POINTER(C.c_int64), C.POINTER(C.c_int64)]),
    }
    for name, (res, args) in sig.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    return lib


class PtdpError(Exception):
    def __init__(self, status, message):
        super().__init__(f"status {status}: {message}")
        self.status = status


def call(lib, status):
    if status != 0:
        raise PtdpError(status, lib.ptdp_last_error().decode())


def make_trainer(lib, data_path, **options):
    opts = dict(num_layers=2, hidden_size=32, num_attention_heads=4, seq_length=SEQ,
                micro_batch_size=2, global_batch_size=BATCH, lr=1e-2, min_lr=1e-3,
                lr_warmup_iters=1, train_iters=40, num_threads=1, data_path=data_path)
    opts.update(options)
    cfg, tr = C.c_void_p(), C.c_void_p()
    call(lib, lib.ptdp_config_create(C.byref(cfg)))
    try:
        for k, v in opts.items():
            call(lib, lib.ptdp_config_set(cfg, k.encode(), str(v).encode()))
        call(lib, lib.ptdp_trainer_create(cfg, C.byref(tr)))
    finally:
        lib.ptdp_config_destroy(cfg)
    return tr


def step_tokens(lib, tr, ids):
    """One training step on a flat list of token ids; returns the loss."""
    arr = (C.c_int32 * len(ids))(*ids)
    loss = C.c_double()
    call(lib, lib.ptdp_trainer_step_tokens(tr, arr, len(ids), C.byref(loss)))
    return loss.value


def batches(docs):
    """Global batches from an endless stream of the documents' tokens, as the
    dataset cuts them: windows of SEQ + 1 tokens, one every SEQ tokens."""
    stream = []
    while True:
        for doc in docs:
            stream += list(doc.encode()) + [EOD]
        while len(stream) >= BATCH * SEQ + 1:
            batch = []
            for i in range(BATCH):
                batch += stream[i * SEQ:i * SEQ + SEQ + 1]
            del stream[:BATCH * SEQ]
            yield batch


def make_dataset(lib, workdir, lines, name):
    """A ptdp token dataset of the given lines (one document per line)."""
    txt, out = os.path.join(workdir, name + ".txt"), os.path.join(workdir, name + ".ptdp")
    with open(txt, "w") as f:
        f.write("".join(line + "\n" for line in lines))
    inputs = (C.c_char_p * 1)(txt.encode())
    options = (C.c_char_p * 3)(b"output=" + out.encode(), b"format=lines", b"tokenizer_type=byte")
    call(lib, lib.ptdp_tokenize_options(inputs, 1, options, 3, None, None))
    return out


def check(cond, what):
    if not cond:
        print(f"FAIL: {what}", file=sys.stderr)
        sys.exit(1)
    print(f"ok   {what}")


def main():
    if len(sys.argv) not in (3, 4) or (len(sys.argv) == 4 and sys.argv[3] != "--check"):
        print(__doc__, file=sys.stderr)
        return 2
    try:
        lib = bind(sys.argv[1])
        os.makedirs(sys.argv[2], exist_ok=True)
        # Its files in a directory of its own: a user's validation.txt in
        # WORKDIR (or a link there) was written over.
        workdir = tempfile.mkdtemp(prefix="feed_from_python.", dir=sys.argv[2])
    except OSError as e:
        print(f"feed_from_python: {e}", file=sys.stderr)
        return 1
    try:
        return run(lib, workdir, len(sys.argv) == 4)
    except PtdpError as e:
        print(f"feed_from_python: {e}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def run(lib, workdir, checking):
    data_path = make_dataset(lib, workdir, DOCS * 20, "validation")

    # The example: train on the generator's batches.
    tr = make_trainer(lib, data_path)
    losses = []
    for it, ids in enumerate(batches(DOCS), start=1):
        losses.append(step_tokens(lib, tr, ids))
        if it % 10 == 0:
            print(f"iteration {it:3d} | lm loss {losses[-1]:.4f}")
        if it == 40:
            break
    lib.ptdp_trainer_destroy(tr)
    if not checking:
        return 0
    check(losses[-1] < losses[0] - 2.0, f"the loss falls: {losses[0]:.3f} -> {losses[-1]:.3f}")

    # One line of 14 letters, its newline and EOD: 16 tokens per document, so
    # every dataset sample is the same 17 ids and the generator can give them.
    periodic = make_dataset(lib, workdir, ["abcdefghijklmn"] * 200, "periodic")
    for layout in ((1, 1, 1), (2, 2, 2)):
        t, p, d = layout
        par = dict(tensor_model_parallel_size=t, pipeline_model_parallel_size=p,
                   data_parallel_size=d, hidden_dropout=0.1, attention_dropout=0.1)
        data, fed = make_trainer(lib, periodic, **par), make_trainer(lib, periodic, **par)
        gen = batches(["abcdefghijklmn\n"])
        for k in range(3):
            a = C.c_double()
            call(lib, lib.ptdp_trainer_step(data, C.byref(a)))
            b = step_tokens(lib, fed, next(gen))
            check(a.value == b, f"t={t} p={p} d={d} step {k + 1}: loss {b!r} equals the dataset's")
        consumed = C.c_double()
        call(lib, lib.ptdp_trainer_get(fed, b"consumed_samples", C.byref(consumed)))
        check(consumed.value == 3 * BATCH, "consumed samples advance as the dataset's")
        lib.ptdp_trainer_destroy(data)
        lib.ptdp_trainer_destroy(fed)

    tr = make_trainer(lib, periodic)
    bad = next(batches(DOCS))
    bad[5] = 300
    try:
        step_tokens(lib, tr, bad)
        check(False, "an id outside the vocabulary is refused")
    except PtdpError as e:
        check(e.status == 1 and "token id 300 at index 5" in str(e), f"refused: {e}")
    try:
        step_tokens(lib, tr, bad[:-1])
        check(False, "a short batch is refused")
    except PtdpError as e:
        check(e.status == 1 and "got 135" in str(e), f"refused: {e}")
    lib.ptdp_trainer_destroy(tr)
    print("feed_from_python: PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
