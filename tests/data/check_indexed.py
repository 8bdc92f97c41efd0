#!/usr/bin/env python3
"""check_indexed.py PTDP DUMP_TOKENS TRAIN_GPT WORKDIR

Megatron-LM's indexed dataset (PREFIX.bin + PREFIX.idx) checked from outside
ptdp, with nothing but Python's struct module and the layout Megatron's
megatron/core/datasets/indexed_dataset.py writes (its IndexedDatasetBuilder
and _IndexWriter):

  .idx: b"MMIDIDX\\x00\\x00", <Q version 1, <B dtype code, <Q sequence count S,
        <Q document-index length D, <i4[S] lengths, <i8[S] byte pointers,
        <i8[D] document index (0, ..., S)
  .bin: the tokens; dtype codes 1 uint8 2 int8 3 int16 4 int32 5 int64 8 uint16

1. `ptdp tokenize --output-prefix` writes exactly the bytes Megatron's builder
   would for the same token ids (the byte tokenizer's ids are the UTF-8 bytes,
   256 the end of document), as tools/preprocess_data.py lays out documents.
2. An independent reader parses ptdp's files back to the text.
3. Datasets written here, in every integer dtype, read the same in ptdp
   (tests/data/dump_tokens prints what ptdp reads).
4. Damaged files: ptdp refuses each with a message naming the file, and no
   crash (exit status 1, not a signal).
5. ptdp trains on a dataset written here, and a dataset with ids beyond the
   byte tokenizer's vocabulary is refused unless --vocab-size covers them.
"""
import json
import os
import shutil
import struct
import subprocess
import sys

MAGIC = b"MMIDIDX\x00\x00"
DTYPES = {1: ("B", 1), 2: ("b", 1), 3: ("h", 2), 4: ("i", 4), 5: ("q", 8), 8: ("H", 2)}
EOD = 256

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from pycheck import check, result  # noqa: E402


def megatron_bytes(docs, code):
    """The .idx and .bin Megatron's builder writes for docs (each a list of
    sequences, each a list of ids): add_document(ids, lengths) per document."""
    fmt, size = DTYPES[code]
    lengths, doc_index, data = [], [0], bytearray()
    for seqs in docs:
        for s in seqs:
            data += struct.pack("<%d%s" % (len(s), fmt), *s)
            lengths.append(len(s))
        doc_index.append(len(lengths))
    pointers, p = [], 0
    for n in lengths:
        pointers.append(p)
        p += n * size
    idx = MAGIC + struct.pack("<QBQQ", 1, code, len(lengths), len(doc_index))
    idx += struct.pack("<%di" % len(lengths), *lengths)
    idx += struct.pack("<%dq" % len(pointers), *pointers)
    idx += struct.pack("<%dq" % len(doc_index), *doc_index)
    return idx, bytes(data)


def write_dataset(prefix, docs, code):
    idx, data = megatron_bytes(docs, code)
    with open(prefix + ".idx", "wb") as f:
        f.write(idx)
    with open(prefix + ".bin", "wb") as f:
        f.write(data)


def read_dataset(prefix):
    """An independent reader: (dtype code, sequences, document index)."""
    idx = open(prefix + ".idx", "rb").read()
    data = open(prefix + ".bin", "rb").read()
    assert idx[:9] == MAGIC, "bad magic"
    version, code, S, D = struct.unpack_from("<QBQQ", idx, 9)
    assert version == 1, "version %d" % version
    off = 34
    lengths = struct.unpack_from("<%di" % S, idx, off)
    off += 4 * S
    pointers = struct.unpack_from("<%dq" % S, idx, off)
    off += 8 * S
    doc_index = struct.unpack_from("<%dq" % D, idx, off)
    off += 8 * D
    assert off == len(idx), "index has %d trailing bytes" % (len(idx) - off)
    fmt, _ = DTYPES[code]
    seqs = [list(struct.unpack_from("<%d%s" % (n, fmt), data, p)) for n, p in zip(lengths, pointers)]
    return code, seqs, list(doc_index)


def byte_ids(text):
    return list(text.encode("utf-8"))


def preprocess(records, key, append_eod):
    """tools/preprocess_data.py's Encoder.encode with the byte tokenizer:
    a string is one sentence, a list is one each; empty ones are dropped;
    EOD joins the last sentence of a non-empty document."""
    docs = []
    for r in records:
        text = r[key]
        sentences = text if isinstance(text, list) else [text]
        seqs = [byte_ids(s) for s in sentences if byte_ids(s)]
        if seqs and append_eod:
            seqs[-1].append(EOD)
        docs.append(seqs)
    return docs


def run(cmd, **kw):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, **kw)
    return p.returncode, p.stdout


def dump(dump_tokens, path):
    """What ptdp reads: exit code, [doc tokens...], output."""
    rc, out = run([dump_tokens, path])
    docs = []
    for line in out.splitlines():
        if line.startswith("doc "):
            docs.append([int(x) for x in line.split(":", 1)[1].split()])
    return rc, docs, out


def main():
    ptdp, dump_tokens, train_gpt, work = sys.argv[1:5]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    os.chdir(work)

    # 1-2. ptdp tokenize against Megatron's layout, byte for byte.
    records = [
        {"text": "Hello, world!\n", "title": "greeting"},
        {"text": "caf\u00e9 \u65e5\u672c\u8a9e \U0001F600 \u00bd", "title": ""},
        {"text": "", "title": "empty text"},
        {"text": ["First sentence. ", "", "Second\tone,  with  runs   of spaces."], "title": "list"},
        {"text": "quotes \" and \\ backslashes \u0001 controls", "title": "esc"},
        {"text": "digits 0123456789 and don't won't y'all\r\n" * 3, "title": "t"},
        {"text": "x" * 70000, "title": "long"},  # longer than uint16 can count
    ]
    with open("in.jsonl", "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    for append_eod in (True, False):
        flags = ["--append-eod"] if append_eod else []
        prefix = "eod" if append_eod else "plain"
        rc, out = run([ptdp, "tokenize", "--format", "jsonl", "--json-keys", "text,title",
                       "--output-prefix", prefix, "in.jsonl"] + flags)
        check(rc == 0, "tokenize %s: exit 0 (%s)" % (prefix, out.strip()))
        for key in ("text", "title"):
            name = "%s_%s_document" % (prefix, key)
            want_idx, want_bin = megatron_bytes(preprocess(records, key, append_eod), 8)
            got_idx = open(name + ".idx", "rb").read() if os.path.exists(name + ".idx") else b""
            got_bin = open(name + ".bin", "rb").read() if os.path.exists(name + ".bin") else b""
            check(got_idx == want_idx, "%s.idx is byte for byte Megatron's (%d bytes)" % (name, len(want_idx)))
            check(got_bin == want_bin, "%s.bin is byte for byte Megatron's (%d bytes)" % (name, len(want_bin)))
            code, seqs, doc_index = read_dataset(name)
            check(code == 8, "%s: dtype uint16 (code 8)" % name)
            texts = []
            for d in range(len(doc_index) - 1):
                ids = [t for s in seqs[doc_index[d]:doc_index[d + 1]] for t in s if t != EOD]
                texts.append(bytes(ids).decode("utf-8"))
            want = []
            for r in records:
                v = r[key]
                want.append("".join(v) if isinstance(v, list) else v)
            check(texts == want, "%s decodes back to the JSON text of every document" % name)
            check(f"--data-path {name}" in out, "tokenize names %s for --data-path" % name)

    # 3. Datasets written here read the same in ptdp, in every integer dtype.
    docs = [[[1, 2, 3]], [], [[4], [5, 6]], [[7, 100, 0]]]
    for code in sorted(DTYPES):
        write_dataset("dt%d" % code, docs, code)
        rc, got, out = dump(dump_tokens, "dt%d" % code)
        want = [[t for s in d for t in s] for d in docs]
        check(rc == 0 and got == want, "dtype code %d: ptdp reads the documents written here" % code)
        check("format megatron" in out and "vocab 101" in out, "dtype code %d: format and vocabulary" % code)
    rc, got, _ = dump(dump_tokens, "dt8.idx")
    check(rc == 0 and len(got) == 4, "PREFIX.idx names the dataset too")

    # 4. Damaged files: refused with the file named, never a crash.
    idx, data = megatron_bytes(docs, 8)
    S = sum(len(d) for d in docs)  # 4 sequences

    def damaged(name, idx_bytes, bin_bytes, text):
        with open(name + ".idx", "wb") as f:
            f.write(idx_bytes)
        with open(name + ".bin", "wb") as f:
            f.write(bin_bytes)
        rc, _, out = dump(dump_tokens, name)
        check(rc == 1 and "error: corrupt data:" in out and name in out and text in out,
              "%s refused: %s (%s)" % (name, text, out.strip()))

    damaged("badmagic", b"MMIDIDY\x00\x00" + idx[9:], data, "bad magic")
    damaged("badversion", idx[:9] + struct.pack("<Q", 3) + idx[17:], data, "has version 3")
    damaged("floatdtype", idx[:17] + b"\x07" + idx[18:], data, "dtype code 7 (float32)")
    damaged("shortbin", idx, data[:-4], "the .bin is truncated")
    damaged("shortidx", idx[:40], data, "truncated")
    far = bytearray(idx)
    struct.pack_into("<q", far, 34 + 4 * S + 8 * (S - 1), 10 ** 6)  # the last sequence's pointer
    damaged("farpointer", bytes(far), data, "sequence 3 starts at byte 1000000 but the 6 tokens of uint16 before it end at byte 12")
    bad_end = bytearray(idx)
    struct.pack_into("<q", bad_end, len(idx) - 8, S - 1)
    damaged("docindex", bytes(bad_end), data, "ends at sequence 3 but there are 4")

    # 5. Training on a dataset written here (byte ids), then the vocabulary check.
    lines = [r["text"] if isinstance(r["text"], str) else "".join(r["text"]) for r in records[:6]]
    train_docs = []
    for i in range(120):
        train_docs.append([byte_ids("%d: %s\n" % (i, lines[i % len(lines)] or "-")) + [EOD]])
    write_dataset("pytrain", train_docs, 8)
    tiny = ["--num-layers", "1", "--hidden-size", "16", "--num-attention-heads", "2",
            "--seq-length", "16", "--micro-batch-size", "2", "--global-batch-size", "4",
            "--train-iters", "3", "--log-interval", "1", "--eval-iters", "1",
            "--eval-interval", "0", "--sample-tokens", "0", "--num-threads", "1"]
    rc, out = run([ptdp, train_gpt, "--data-path", "pytrain"] + tiny)
    check(rc == 0 and " iteration        3/       3 |" in out and "final validation loss" in out,
          "train_gpt.lua trains on a dataset written by this script")
    wide = [[[50256, 10, 20] * 10]] * 60
    write_dataset("gpt2ids", wide, 4)
    rc, out = run([ptdp, train_gpt, "--data-path", "gpt2ids"] + tiny)
    check(rc != 0 and "holds token ids up to 50256" in out and "set vocab_size to at least 50257" in out,
          "ids beyond the byte vocabulary are refused, saying what to set")
    rc, out = run([ptdp, train_gpt, "--data-path", "gpt2ids", "--vocab-size", "50257"] + tiny)
    check(rc == 0 and " iteration        3/       3 |" in out, "--vocab-size 50257 trains on them")

    return result()


if __name__ == "__main__":
    sys.exit(main())
