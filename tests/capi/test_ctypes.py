#!/usr/bin/env python3
"""The C ABI of libptdp.so from Python through ctypes (standard library only).

    python3 test_ctypes.py LIBPTDP.so CORPUS.txt TMPDIR

Binds the functions with argtypes/restype, tokenizes CORPUS (one document per
line) into TMPDIR, trains a tiny GPT a few steps and checks that the loss
falls, reads the log line and generated text through the size-query protocol,
and checks that misuse gives error codes with messages. Exits 1 on failure.
"""
import ctypes as C
import json
import math
import os
import struct
import sys

# Status codes of capi/ptdp.h.
OK, INVALID_ARGUMENT, UNKNOWN_OPTION, BAD_VALUE, INVALID_CONFIG, WRONG_STATE, IO, \
    CORRUPT_DATA, BUFFER_TOO_SMALL, OUT_OF_MEMORY, INTERNAL = range(11)

checks = 0


def fail(msg):
    print(f"FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def check(cond, what):
    global checks
    checks += 1
    if not cond:
        fail(what)
    print(f"ok   {what}")


def read_safetensors(path):
    """{name: (dtype, shape, raw bytes)} of a .safetensors file."""
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    body = data[8 + n:]
    return {k: (v["dtype"], v["shape"], body[v["data_offsets"][0]:v["data_offsets"][1]])
            for k, v in header.items()}


def bf16_bits(u):
    """float32 bits -> bfloat16 bits, round to nearest even (finite values)."""
    return (u + 0x7FFF + ((u >> 16) & 1)) >> 16


def bind(path):
    lib = C.CDLL(path)
    cfg_p, tr_p = C.c_void_p, C.c_void_p
    sig = {
        "ptdp_version": (C.c_char_p, []),
        "ptdp_version_number": (C.c_int32, []),
        "ptdp_status_string": (C.c_char_p, [C.c_int32]),
        "ptdp_last_error": (C.c_char_p, []),
        "ptdp_config_create": (C.c_int32, [C.POINTER(cfg_p)]),
        "ptdp_config_destroy": (None, [cfg_p]),
        "ptdp_config_set": (C.c_int32, [cfg_p, C.c_char_p, C.c_char_p]),
        "ptdp_config_set_int": (C.c_int32, [cfg_p, C.c_char_p, C.c_int64]),
        "ptdp_config_set_double": (C.c_int32, [cfg_p, C.c_char_p, C.c_double]),
        "ptdp_config_get": (C.c_int32, [cfg_p, C.c_char_p, C.c_char_p, C.c_size_t,
                                        C.POINTER(C.c_size_t)]),
        "ptdp_option_count": (C.c_int32, []),
        "ptdp_option_info": (C.c_int32, [C.c_int32, C.POINTER(C.c_char_p),
                                         C.POINTER(C.c_char_p), C.POINTER(C.c_char_p)]),
        "ptdp_trainer_create": (C.c_int32, [cfg_p, C.POINTER(tr_p)]),
        "ptdp_trainer_destroy": (None, [tr_p]),
        "ptdp_trainer_step": (C.c_int32, [tr_p, C.POINTER(C.c_double)]),
        "ptdp_trainer_evaluate": (C.c_int32, [tr_p, C.c_int64, C.POINTER(C.c_double)]),
        "ptdp_trainer_get": (C.c_int32, [tr_p, C.c_char_p, C.POINTER(C.c_double)]),
        "ptdp_trainer_rank_get": (C.c_int32, [tr_p, C.c_int32, C.c_char_p,
                                              C.POINTER(C.c_double)]),
        "ptdp_render_timeline": (C.c_int32, [C.c_char_p, C.c_char_p, C.c_int32]),
        "ptdp_trainer_log_line": (C.c_int32, [tr_p, C.c_char_p, C.c_size_t,
                                              C.POINTER(C.c_size_t)]),
        "ptdp_trainer_generate": (C.c_int32, [tr_p, C.c_char_p, C.c_int32, C.c_double,
                                              C.c_uint64, C.c_char_p, C.c_size_t,
                                              C.POINTER(C.c_size_t)]),
        "ptdp_tokenize": (C.c_int32, [C.POINTER(C.c_char_p), C.c_int32, C.c_char_p,
                                      C.c_char_p, C.c_char_p, C.POINTER(C.c_int64),
                                      C.POINTER(C.c_int64)]),
        "ptdp_tokenize_indexed": (C.c_int32, [C.POINTER(C.c_char_p), C.c_int32,
                                              C.POINTER(C.c_char_p), C.c_int32,
                                              C.POINTER(C.c_int64), C.POINTER(C.c_int64)]),
        "ptdp_benchmark_sgemm": (C.c_int32, [C.c_int32, C.c_int32, C.POINTER(C.c_double)]),
        "ptdp_trainer_save": (C.c_int32, [tr_p, C.c_char_p]),
        "ptdp_checkpoint_export_safetensors": (C.c_int32, [C.c_char_p, C.c_char_p]),
        "ptdp_checkpoint_export_safetensors_dtype": (C.c_int32, [C.c_char_p, C.c_char_p,
                                                                 C.c_char_p]),
    }
    for name, (restype, argtypes) in sig.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


def main():
    if len(sys.argv) != 4:
        print(f"usage: {sys.argv[0]} LIBPTDP.so CORPUS.txt TMPDIR", file=sys.stderr)
        return 2
    lib = bind(sys.argv[1])
    corpus, tmpdir = sys.argv[2], sys.argv[3]
    os.makedirs(tmpdir, exist_ok=True)

    def last_error():
        return lib.ptdp_last_error().decode()

    def expect(status, want, needle, what):
        global checks
        checks += 1
        msg = last_error()
        if status != want:
            fail(f"{what}: status {status} ({lib.ptdp_status_string(status).decode()}), "
                 f"expected {want} ({lib.ptdp_status_string(want).decode()}); "
                 f"last error: {msg!r}")
        if want != OK and not msg:
            fail(f"{what}: error status but empty ptdp_last_error()")
        if needle and needle not in msg:
            fail(f"{what}: message {msg!r} does not contain {needle!r}")
        print(f"ok   {what}" + (f" -> {msg[:140]}" if want != OK else ""))

    def ok(status, what):
        expect(status, OK, None, what)

    def read_text(fn, what):
        """Size-query protocol: ask with no buffer, then with exactly len+1 bytes; returns bytes."""
        need = C.c_size_t(0)
        expect(fn(None, 0, C.byref(need)), BUFFER_TOO_SMALL, "bytes needed", what + " size query")
        buf = C.create_string_buffer(need.value + 1)
        got = C.c_size_t(0)
        ok(fn(buf, len(buf), C.byref(got)), what)
        check(got.value == need.value and len(buf.value) == need.value,
              what + " has the announced length")
        return buf.value

    version = os.environ.get("PTDP_PROJECT_VERSION", "")  # the build's (CMake's, from the header)
    check(version != "" and lib.ptdp_version() == version.encode(), "version " + version)
    major, minor, patch = (int(x) for x in version.split("."))
    check(lib.ptdp_version_number() == major * 10000 + minor * 100 + patch,
          "version number of " + version)
    check(lib.ptdp_status_string(INVALID_CONFIG) == b"invalid configuration",
          "status string of INVALID_CONFIG")
    check(lib.ptdp_status_string(99) == b"unknown status code", "out-of-range status string")

    # tokenize
    data = os.path.join(tmpdir, "ctypes_test.ptdp").encode()
    inputs = (C.c_char_p * 1)(corpus.encode())
    docs, toks = C.c_int64(-1), C.c_int64(-1)
    ok(lib.ptdp_tokenize(inputs, 1, b"lines", b"byte", data, C.byref(docs), C.byref(toks)),
       "tokenize the corpus")
    check(docs.value >= 100 and toks.value > 10 * docs.value, "document and token counts")

    # An error that quotes a file's bytes is valid UTF-8 (last_error() decodes
    # strictly): a broken JSON line with ill-formed UTF-8 shows them as \xNN.
    bad = os.path.join(tmpdir, "ill_formed.jsonl")
    with open(bad, "wb") as f:
        f.write(b'{"text": "caf\xc3\xa9 \xff\xfe}\n')
    bad_in = (C.c_char_p * 1)(bad.encode())
    bad_opts = (C.c_char_p * 1)(b"output_prefix=" + os.path.join(tmpdir, "ill_formed").encode())
    expect(lib.ptdp_tokenize_indexed(bad_in, 1, bad_opts, 1, None, None), INVALID_ARGUMENT,
           "\\xFF", "tokenize_indexed: ill-formed UTF-8 quoted as \\xNN")

    # misuse
    cfg = C.c_void_p()
    expect(lib.ptdp_config_create(None), INVALID_ARGUMENT, "out", "config_create(NULL)")
    lib.ptdp_config_destroy(None)
    lib.ptdp_trainer_destroy(None)
    check(True, "destroy(NULL) returns")
    expect(lib.ptdp_config_set(None, b"num_layers", b"2"), INVALID_ARGUMENT, "config",
           "config_set(NULL config)")
    expect(lib.ptdp_trainer_step(None, None), INVALID_ARGUMENT, "trainer", "trainer_step(NULL)")
    ok(lib.ptdp_config_create(C.byref(cfg)), "config_create")
    check(cfg.value is not None, "config handle")
    expect(lib.ptdp_config_set(cfg, None, b"2"), INVALID_ARGUMENT, "key", "config_set(NULL key)")
    expect(lib.ptdp_config_set(cfg, b"no_such_option", b"1"), UNKNOWN_OPTION, "num_layers",
           "unknown option lists the known keys")
    expect(lib.ptdp_config_set(cfg, b"num_layers", b"abc"), BAD_VALUE,
           "num_layers must be an integer", "num_layers 'abc'")
    expect(lib.ptdp_config_set_int(cfg, b"num_layers", 0), BAD_VALUE, "num_layers",
           "num_layers 0")
    expect(lib.ptdp_config_set(cfg, b"lr_decay_style", b"cubic"), BAD_VALUE, "cosine",
           "bad lr_decay_style choice")
    # Without data_path the caller feeds every batch: a plain step says so.
    tr = C.c_void_p()
    ok(lib.ptdp_trainer_create(cfg, C.byref(tr)), "trainer without data_path")
    expect(lib.ptdp_trainer_step(tr, None), WRONG_STATE, "step_tokens", "step without a dataset")
    lib.ptdp_trainer_destroy(tr)

    settings = [("num_layers", 1), ("hidden_size", 32), ("num_attention_heads", 2),
                ("seq_length", 16), ("micro_batch_size", 2), ("global_batch_size", 4),
                ("train_iters", 10), ("lr_warmup_iters", 1), ("eval_iters", 1),
                ("num_threads", 1)]
    for k, v in settings:
        ok(lib.ptdp_config_set_int(cfg, k.encode(), v), f"set {k} {v}")
    for k, v in [("lr", 1e-2), ("min_lr", 1e-3), ("hidden_dropout", 0.0),
                 ("attention_dropout", 0.0)]:
        ok(lib.ptdp_config_set_double(cfg, k.encode(), v), f"set {k} {v}")
    ok(lib.ptdp_config_set(cfg, b"data_path", os.path.join(tmpdir, "ctypes_missing.ptdp").encode()),
       "set data_path to a missing file")
    expect(lib.ptdp_trainer_create(cfg, C.byref(tr)), IO, "cannot open dataset",
           "missing dataset")
    check(tr.value is None, "failed trainer_create leaves the handle NULL")
    ok(lib.ptdp_config_set_int(cfg, b"num_attention_heads", 3), "set num_attention_heads 3")
    ok(lib.ptdp_config_set(cfg, b"data_path", data), "set data_path")
    expect(lib.ptdp_trainer_create(cfg, C.byref(tr)), INVALID_CONFIG, "must divide hidden_size",
           "3 heads do not divide hidden 32")
    ok(lib.ptdp_config_set_int(cfg, b"num_attention_heads", 2), "set num_attention_heads 2")
    buf = C.create_string_buffer(64)
    n = C.c_size_t(0)
    ok(lib.ptdp_config_get(cfg, b"hidden_size", buf, len(buf), C.byref(n)), "config_get")
    check(buf.value == b"32" and n.value == 2, "config_get returns what was set")

    # train
    ok(lib.ptdp_trainer_create(cfg, C.byref(tr)), "trainer_create")
    lib.ptdp_config_destroy(cfg)
    v = C.c_double(-1)
    expect(lib.ptdp_trainer_get(tr, b"lm_loss", C.byref(v)), WRONG_STATE, "before the first",
           "lm_loss before the first step")
    expect(lib.ptdp_trainer_log_line(tr, None, 0, None), WRONG_STATE, "before the first",
           "log line before the first step")
    losses = []
    for i in range(10):
        loss = C.c_double(-1)
        ok(lib.ptdp_trainer_step(tr, C.byref(loss)), f"step {i + 1}: loss {loss.value:.4f}")
        check(math.isfinite(loss.value) and loss.value > 0, "finite loss")
        losses.append(loss.value)
    check(abs(losses[0] - math.log(257)) < 0.5, "first loss is about ln 257")
    check(sum(losses[-2:]) / 2 < sum(losses[:2]) / 2 - 0.5, "the loss falls by > 0.5 nats")
    for name, test in [("iteration", lambda x: x == 10), ("consumed_samples", lambda x: x == 40),
                       ("lm_loss", lambda x: x == losses[-1]), ("lr", lambda x: 0 < x <= 1e-2),
                       ("grad_norm", lambda x: math.isfinite(x) and x > 0),
                       ("num_parameters", lambda x: x > 1000)]:
        ok(lib.ptdp_trainer_get(tr, name.encode(), C.byref(v)), f"get {name}")
        check(test(v.value), f"{name} = {v.value}")
    expect(lib.ptdp_trainer_get(tr, b"bogus", C.byref(v)), INVALID_ARGUMENT, "lm_loss",
           "unknown metric name")
    for name, test in [("world_rank", lambda x: x == 0), ("pp_rank", lambda x: x == 0),
                       ("idle_fraction", lambda x: 0 <= x < 1),
                       ("peak_activation_bytes", lambda x: x > 0),
                       ("calls_embedding", lambda x: x == 0)]:
        ok(lib.ptdp_trainer_rank_get(tr, 0, name.encode(), C.byref(v)), f"rank_get {name}")
        check(test(v.value), f"{name} = {v.value}")
    expect(lib.ptdp_trainer_rank_get(tr, 1, b"idle_fraction", C.byref(v)), INVALID_ARGUMENT,
           "outside [0, 1)", "rank_get of local rank 1 with one rank")
    expect(lib.ptdp_trainer_rank_get(tr, 0, b"bogus", C.byref(v)), INVALID_ARGUMENT,
           "idle_fraction", "unknown rank value lists the known names")
    expect(lib.ptdp_render_timeline(os.path.join(tmpdir, "ctypes_no_trace.json").encode(),
                                    os.path.join(tmpdir, "ctypes.png").encode(), 0),
           IO, "ctypes_no_trace.json", "render_timeline of a missing trace")

    line = read_text(lambda b, c, n: lib.ptdp_trainer_log_line(tr, b, c, n), "log_line")
    print("     " + line.decode())
    check(b" iteration " in line and b"lm loss:" in line, "log line fields")
    ok(lib.ptdp_trainer_evaluate(tr, 0, C.byref(v)), "evaluate")
    check(math.isfinite(v.value) and v.value < math.log(257) - 0.5,
          f"validation loss {v.value:.4f} below ln 257 - 0.5")
    text = read_text(lambda b, c, n: lib.ptdp_trainer_generate(tr, b"The ", 16, 0.8, 7, b, c, n),
                     "generate")
    print(f"     sample: {text!r}")
    # Valid UTF-8 (a cut character is U+FFFD), at most one character per new byte token.
    chars = text.decode("utf-8")
    check(chars.startswith("The ") and len(chars) <= 4 + 16, "generated text continues the prompt")
    expect(lib.ptdp_trainer_generate(tr, b"x", -1, 0.0, 0, None, 0, None), INVALID_ARGUMENT,
           "max_new_tokens", "negative max_new_tokens")

    # Safetensors export in 16 bits: each value rounded to nearest even, by
    # Python's own conversions (struct's "e" rounds half to even).
    ckpt = os.path.join(tmpdir, "ctypes_ckpt").encode()
    ok(lib.ptdp_trainer_save(tr, ckpt), "save")
    paths = {dt: os.path.join(tmpdir, f"ctypes_{dt}.safetensors") for dt in ("f32", "bf16", "f16")}
    ok(lib.ptdp_checkpoint_export_safetensors(ckpt, paths["f32"].encode()), "export f32")
    for dt in ("bf16", "f16"):
        ok(lib.ptdp_checkpoint_export_safetensors_dtype(ckpt, paths[dt].encode(), dt.encode()),
           f"export {dt}")
    ref, exports = read_safetensors(paths["f32"]), {}
    for dt in ("bf16", "f16"):
        exports[dt] = read_safetensors(paths[dt])
        check(set(exports[dt]) == set(ref), f"{dt}: the same tensors as f32")
    bad = 0
    for name, (dtype, shape, raw) in ref.items():
        n = len(raw) // 4
        floats, bits = struct.unpack(f"<{n}f", raw), struct.unpack(f"<{n}I", raw)
        want = {"bf16": ("BF16", struct.pack(f"<{n}H", *map(bf16_bits, bits))),
                "f16": ("F16", struct.pack(f"<{n}e", *floats))}
        for dt, (st_dtype, data) in want.items():
            got = exports[dt][name]
            bad += got != (st_dtype, shape, data)
    check(bad == 0, "bf16 and f16 exports hold every value rounded to nearest even")
    expect(lib.ptdp_checkpoint_export_safetensors_dtype(ckpt, paths["f16"].encode(), b"fp8"),
           BAD_VALUE, "allowed: f32, bf16, f16", "export to an unknown dtype")

    lib.ptdp_trainer_destroy(tr)
    check(True, "trainer_destroy")
    print(f"PASS: {checks} checks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
