#!/usr/bin/env python3
"""Writes the fuzzers' seed corpora (tests/fuzz/corpus/<fuzzer>/) from the
repository's real files: small, so that libFuzzer's inputs stay small.

    make_seeds.py LAUNCHER     # a built `ptdp` (build/ptdp)

  - indexed_dataset: `ptdp tokenize --output-prefix` of a few lines of
    tests/fixtures/capi_corpus.txt (byte and GPT-2 BPE tokens), plus a multimodal
    copy (a mode byte per sequence) and one whose sequences lie out of order;
  - manifest: the manifest.json of `ptdp ckpt import-safetensors` of the
    Hugging Face fixture (tests/checkpoint/hf), and one cut to two datasets;
  - safetensors: the fixture's names, dtypes and config scaled down to a
    one-layer GPT-2 of width 4, with its GPT2Config as gpt2_config metadata;
  - bpe_*: the fixture BPE (tests/fixtures/bpe) cut to its bytes, <|endoftext|>
    and its first merges; the round trip gets lines of its text.
A seed holding two files is split2() of fuzz_util.h: a 2-byte length, the
first file, the second. Standard library only.
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

launcher = os.path.abspath(sys.argv[1])
here = os.path.dirname(os.path.abspath(__file__))
tests = os.path.dirname(here)
corpus = os.path.join(here, "corpus")
bpe = os.path.join(tests, "fixtures", "bpe")
hf = os.path.join(tests, "checkpoint", "hf")
work = tempfile.mkdtemp(prefix="ptdp_seeds.")


def seed(fuzzer, name, data):
    d = os.path.join(corpus, fuzzer)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def two(a, b):
    assert len(a) < 65536
    return struct.pack("<H", len(a)) + a + b


def run(*args):
    subprocess.run([launcher, *args], check=True, capture_output=True, cwd=work)


shutil.rmtree(corpus, ignore_errors=True)

# ---- Megatron indexed datasets ---------------------------------------------
lines = open(os.path.join(tests, "fixtures", "capi_corpus.txt"), encoding="utf-8").read().splitlines()
with open(os.path.join(work, "few.txt"), "w", encoding="utf-8") as f:
    f.write("\n".join(lines[:4]) + "\n\n")  # an empty line: an empty document
bpe_flags = ["--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", bpe + "/vocab.json",
             "--merge-file", bpe + "/merges.txt"]
for name, flags in [("byte", []), ("bpe", bpe_flags)]:
    run("tokenize", "--format", "lines", "--append-eod", "--output-prefix", name, *flags, "few.txt")
    idx = open(os.path.join(work, name + "_text_document.idx"), "rb").read()
    bin_ = open(os.path.join(work, name + "_text_document.bin"), "rb").read()
    seed("fuzz_indexed_dataset", name, two(idx, bin_))
    s, d = struct.unpack("<QQ", idx[18:34])
    seed("fuzz_indexed_dataset", name + "_multimodal", two(idx + bytes(s), bin_))
    if name == "byte":
        # The sequences stored last to first: pointers not back to back.
        lens = struct.unpack(f"<{s}i", idx[34:34 + 4 * s])
        ptrs = struct.unpack(f"<{s}q", idx[34 + 4 * s:34 + 12 * s])
        size = idx[17] == 8 and 2 or 4
        parts, new_ptrs, at = [], [0] * s, 0
        for i in reversed(range(s)):
            new_ptrs[i] = at
            parts.append(bin_[ptrs[i]:ptrs[i] + lens[i] * size])
            at += lens[i] * size
        idx2 = idx[:34 + 4 * s] + struct.pack(f"<{s}q", *new_ptrs) + idx[34 + 12 * s:]
        seed("fuzz_indexed_dataset", "byte_reordered", two(idx2, b"".join(parts)))

# ---- ptdp's own token datasets -----------------------------------------------
run("tokenize", "--format", "lines", "--output", "few.ptdp", "few.txt")
seed("fuzz_token_dataset", "byte_u16", open(os.path.join(work, "few.ptdp"), "rb").read())
run("tokenize", "--format", "lines", "--output", "few_bpe.ptdp", *bpe_flags, "few.txt")
seed("fuzz_token_dataset", "bpe_u16", open(os.path.join(work, "few_bpe.ptdp"), "rb").read())
# 4-byte tokens (a vocabulary over 65,535 ids), written by hand: two documents.
docs = [[70000, 5, 69999], [1, 69999]]
toks = [t for d in docs for t in d]
offs = [0, len(docs[0]), len(toks)]
seed("fuzz_token_dataset", "u32",
     b"PTDPTOK\0" + struct.pack("<IIIIQQ", 1, 4, 70001, 0, len(docs), len(toks)) + bytes(24)
     + struct.pack(f"<{len(offs)}Q", *offs) + struct.pack(f"<{len(toks)}I", *toks))

# ---- the checkpoint manifest -----------------------------------------------
run("ckpt", "import-safetensors", os.path.join(hf, "model.safetensors"), "ckpt")
man = open(os.path.join(work, "ckpt", "iter_0000000", "manifest.json")).read()


def crc32c(data):
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    c = 0xFFFFFFFF
    for b in data:
        c = table[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def checksummed(m):
    """m with the manifest_crc32c ptdp writes (over nlohmann's compact, sorted dump)."""
    m = dict(m)
    m.pop("manifest_crc32c", None)
    text = json.dumps(m, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    m["manifest_crc32c"] = "%08x" % crc32c(text.encode())
    return m


m = json.loads(man)
assert checksummed(m)["manifest_crc32c"] == m["manifest_crc32c"]
m["training"]["imported_from"] = "tests/checkpoint/hf/model.safetensors"  # not this machine's path
m["datasets"] = m["datasets"][:3]  # the whole manifest is 40 kB
seed("fuzz_manifest", "hf_import_cut", json.dumps(checksummed(m), indent=1))
del m["manifest_crc32c"]  # an older manifest: no checksum
seed("fuzz_manifest", "hf_import_cut_unchecksummed", json.dumps(m, indent=1))

# ---- safetensors -------------------------------------------------------------
cfg = json.load(open(os.path.join(hf, "config.json")))
cfg.update(n_embd=4, n_head=2, n_layer=1, n_positions=4, vocab_size=8)
data = open(os.path.join(hf, "model.safetensors"), "rb").read()
header = json.loads(data[8:8 + struct.unpack("<Q", data[:8])[0]])
scale = {32: 4, 96: 12, 128: 16, 260: 8}


def safetensors(dtype, prefix, extra):
    tensors, blob = {}, b""
    for name, v in sorted(header.items()):
        if name == "__metadata__" or (".h." in name and ".h.0." not in name):
            continue
        shape = [scale[k] for k in v["shape"]]
        if name.endswith("wpe.weight"):
            shape = [4, 4]
        n = 1
        for k in shape:
            n *= k
        size = n * (4 if dtype == "F32" else 2)
        tensors[prefix + name[len("transformer."):]] = {
            "dtype": dtype, "shape": shape, "data_offsets": [len(blob), len(blob) + size]}
        blob += bytes((i * 7) % 61 for i in range(size))
    for name, (dtype2, shape, size) in extra.items():
        tensors[name] = {"dtype": dtype2, "shape": shape, "data_offsets": [len(blob), len(blob) + size]}
        blob += bytes(size)
    tensors["__metadata__"] = {"format": "pt", "gpt2_config": json.dumps(cfg)}
    h = json.dumps(tensors, separators=(",", ":")).encode()
    return struct.pack("<Q", len(h)) + h + blob


seed("fuzz_safetensors", "tiny_f32", safetensors("F32", "transformer.", {}))
seed("fuzz_safetensors", "tiny_bf16_buffers", safetensors("BF16", "", {"h.0.attn.bias": ("BOOL", [1, 1, 4, 4], 16)}))

# ---- GPT-2 BPE -----------------------------------------------------------------
vocab = json.load(open(os.path.join(bpe, "vocab.json"), encoding="utf-8"))
merges = open(os.path.join(bpe, "merges.txt"), encoding="utf-8").read().splitlines()[1:41]
small = {t: i for t, i in vocab.items() if len(t) == 1 or t == "<|endoftext|>"}
for mline in merges:
    a, b = mline.split(" ")
    small[a + b] = vocab[a + b]
small = {t: i for i, t in enumerate(sorted(small, key=lambda t: vocab[t]))}  # ids 0..n-1
vjson = json.dumps(small, ensure_ascii=False).encode()
mtext = ("#version: 0.2\n" + "\n".join(merges) + "\n").encode()
seed("fuzz_bpe_vocab_merges", "fixture_cut", two(vjson, mtext))
tj = json.load(open(os.path.join(bpe, "tokenizer.json"), encoding="utf-8"))
tj["model"]["vocab"] = small
tj["model"]["merges"] = [m.split(" ") for m in merges]
tj["added_tokens"][0]["id"] = small["<|endoftext|>"]
seed("fuzz_bpe_tokenizer_json", "fixture_cut", json.dumps(tj, ensure_ascii=False, indent=1))
tj["model"]["merges"] = merges  # the older "left right" spelling
seed("fuzz_bpe_tokenizer_json", "fixture_cut_string_merges", json.dumps(tj, ensure_ascii=False))
text = open(os.path.join(bpe, "text.txt"), "rb").read().split(b"\n")
for i, chunk in enumerate([b"\n".join(text[0:3]), b"\n".join(text[40:44]),
                           "caf\u00e9 \u4e2d\u6587  \t\n x<|endoftext|>y's 123".encode(),
                           b"\xff\xfe\xc3 \xe2\x82 ok\r\n"]):
    seed("fuzz_bpe_roundtrip", f"text{i}", chunk)
shutil.rmtree(work)
