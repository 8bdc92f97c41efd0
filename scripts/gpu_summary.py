#!/usr/bin/env python3
"""Joins the "bench key=value" lines of gpu_check.sh's logs into one table:
ptdp's cuBLASLt GEMMs beside torch.matmul on the same shapes, the element-wise
kernels against the copy ceiling, ptdp's and PyTorch's training-step figures."""
import os
import sys


def read(path):
    rows = []
    if not os.path.exists(path):
        return rows
    for line in open(path, errors="replace"):
        if line.startswith("bench "):
            rows.append(dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv))
    return rows


def op_profile(path, top=14):
    """The first rows of bench_gpu_gpt's --profile table: where a step's GPU time goes."""
    if not os.path.exists(path):
        return []
    lines = open(path, errors="replace").read().splitlines()
    for i, line in enumerate(lines):
        if line.startswith("op profile of one step"):
            table = lines[i:i + 2 + top]
            ends = [l for l in lines[i:] if l.startswith(("gemm (all shapes)", "total (device time"))]
            return table + ends[:2]
    return []


def main(out):
    ops, torch = read(os.path.join(out, "bench_ops.log")), read(os.path.join(out, "bench_torch.log"))
    gpt = read(os.path.join(out, "bench_gpt.log"))
    ref = {(r["dtype"], r["shape"], r["ta"], r["tb"]): float(r["tflops"])
           for r in torch if r.get("name") == "torch_gemm"}
    print(f"{'GEMM (MxNxKxbatch)':34s} {'dtype':5s} {'ptdp TFLOP/s':>12s} {'torch':>8s} {'ratio':>6s}")
    for r in ops:
        if r.get("name") != "gemm":
            continue
        t = ref.get((r["dtype"], r["shape"], r["ta"], r["tb"]))
        mine = float(r["tflops"])
        trans = ("T" if r["ta"] == "1" else "N") + ("T" if r["tb"] == "1" else "N")
        print(f"{r['shape'] + ' ' + trans:34s} {r['dtype']:5s} {mine:12.1f} "
              f"{t if t else float('nan'):8.1f} {mine / t if t else float('nan'):6.2f}")
    for r in ops:
        if r.get("name") == "attention":  # times, not a bandwidth
            print(f"{'attention (ms)':34s} {r.get('dtype', 'f32'):5s} unfused fwd "
                  f"{r.get('unfused_fwd_ms')}, fused fwd {r.get('fused_fwd_ms')}, "
                  f"fused bwd {r.get('fused_bwd_ms')}")
        elif r.get("name") == "attention_mma":
            label = "attention, tensor cores" + (", p=0" if r.get("dropout") == "0" else "") + " (ms)"
            print(f"{label:34s} {r.get('dtype')} fused fwd "
                  f"{r.get('fused_fwd_ms')}, fused bwd {r.get('fused_bwd_ms')} "
                  f"(dQ kernel {r.get('fused_bwd_dq_kernel_ms')})")
        elif "gbs" not in r:
            continue
        elif r.get("name") not in ("gemm", "copy"):
            print(f"{r['name']:34s} {r.get('dtype', 'f32'):5s} {float(r['gbs']):9.0f} GB/s  "
                  f"{100 * float(r['of_copy']):4.0f}% of copy")
        elif r.get("name") == "copy":
            print(f"{'copy ceiling':34s}       {float(r['gbs']):9.0f} GB/s")
    for r in gpt:
        print(f"ptdp train {r['variant']:23s} {float(r['tokens_per_s']):9.0f} tokens/s "
              f"{float(r['tflops']):6.1f} TFLOP/s MFU {100 * float(r['mfu']):4.1f}% "
              f"(HFU {100 * float(r.get('hfu', r['mfu'])):4.1f}%) {r['mem_gib']} GiB "
              f"({100 * float(r['of_fp32_peak']):.0f}% of fp32 peak)")
    for line in op_profile(os.path.join(out, "bench_gpt.log")):
        print(line)
    for r in torch:
        if r.get("name") == "torch_train":
            batch = f"{r['variant']} b{r.get('micro_batch', '2')}x{r.get('microbatches', '1')}"
            print(f"torch train {batch:22s} {float(r['tokens_per_s']):9.0f} tokens/s "
                  f"{float(r['tflops']):6.1f} TFLOP/s MFU {100 * float(r['mfu']):4.1f}% {r['mem_gib']} GiB")
    # ptdp against PyTorch eager + flash measured in the same call, with the same
    # micro-batch size and micro-batches a step (a ratio across batches is not one).
    def shape(r):
        return r.get("micro_batch", "2"), r.get("microbatches", "1")
    eager = {shape(r): float(r["tokens_per_s"]) for r in torch
             if r.get("name") == "torch_train" and r.get("variant") == "eager+flash"}
    for r in gpt:
        if shape(r) in eager:
            print(f"ptdp {r['variant']:28s} / torch eager+flash (b {shape(r)[0]} x {shape(r)[1]}): "
                  f"{float(r['tokens_per_s']) / eager[shape(r)]:.2f}x")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "gpu_check_out")
