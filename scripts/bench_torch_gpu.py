#!/usr/bin/env python3
"""PyTorch baseline on the GPU, for scripts/gpu_check.sh.

1. The GEMMs of tests/gpu/bench_gpu_ops.cu (same shapes, bf16 and fp32 without
   TF32) through torch.matmul: TFLOP/s, to put ptdp's cuBLASLt calls beside.
2. One training step of a 1.3B GPT (h 2048, 24 layers, 16 heads, s 2048,
   V 50304, micro-batches of --batch (2) sequences, --microbatches (1) a step
   with gradients accumulated, dropout 0.1, AdamW) under bf16 autocast with fp32
   master weights, as a PyTorch user trains it: eager with unfused ("math")
   attention, eager with scaled_dot_product_attention (flash), and the latter
   under torch.compile. Tokens/s and model TFLOP/s (Eq. 3 of the paper without
   recomputation: 72 B s l h^2 (1 + s/6h + V/12lh)), MFU against --peak.

3. With --attention, only one layer's causal attention through
   scaled_dot_product_attention's flash backend (bench_gpu_ops attention's
   shape and FLOP count, dropout 0.1 and 0): forward and backward times.

Prints a table and one "bench key=value ..." line per figure.
"""
import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def time_ms(fn, warm=3, reps=20):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def bench_gemms(h, a, s, b, V):
    f, d, N = 4 * h, h // a, s * b
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    # name, ta, tb, M, N, K, batch (row-major C[M,N] = op(A) op(B)), as bench_gpu_ops.
    shapes = [("qkv", 0, 0, N, 3 * h, h, 1), ("scores", 0, 1, s, s, d, b * a),
              ("context", 0, 0, s, d, s, b * a), ("proj", 0, 0, N, h, h, 1),
              ("fc1", 0, 0, N, f, h, 1), ("fc2", 0, 0, N, h, f, 1), ("fc1_dX", 0, 1, N, h, f, 1),
              ("fc1_dW", 1, 0, h, f, N, 1), ("logits", 0, 1, N, V, h, 1),
              ("square", 0, 0, 8192, 8192, 8192, 1)]
    for dt, name in ((torch.bfloat16, "bf16"), (torch.float32, "f32")):
        for label, ta, tb, M, Nn, K, batch in shapes:
            A = torch.rand(batch, *((K, M) if ta else (M, K)), device="cuda", dtype=dt) * 2 - 1
            B = torch.rand(batch, *((Nn, K) if tb else (K, Nn)), device="cuda", dtype=dt) * 2 - 1
            opA = A.transpose(1, 2) if ta else A
            opB = B.transpose(1, 2) if tb else B
            if batch == 1:
                opA, opB = opA[0], opB[0]
            ms = time_ms(lambda: torch.matmul(opA, opB))
            tflops = 2.0 * M * Nn * K * batch / ms / 1e9
            print(f"torch {name:5s} {label:8s} {M}x{Nn}x{K}x{batch:<4d} {ms:9.3f} ms {tflops:8.1f} TFLOP/s")
            print(f"bench name=torch_gemm dtype={name} shape={M}x{Nn}x{K}x{batch} ta={ta} tb={tb} "
                  f"tflops={tflops:.2f}")
            del A, B, opA, opB
    torch.cuda.empty_cache()


def bench_attention(h, a, s, b):
    """One layer's causal attention through scaled_dot_product_attention (its
    flash backend), bf16, the shape and FLOP count of bench_gpu_ops'
    tensor-core attention: the reference for ptdp's kernels."""
    hd = h // a
    fwd_flops = 2.0 * b * a * s * s * hd  # causal: half of 4 b a s^2 hd
    q, k, v = (torch.randn(b, a, s, hd, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    grad = torch.randn(b, a, s, hd, device="cuda", dtype=torch.bfloat16)
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        for p in (0.1, 0.0):
            attend = lambda: F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
            fwd = time_ms(attend)
            both = time_ms(lambda: attend().backward(grad))
            bwd = both - fwd
            what = "" if p > 0 else ", no dropout"
            print(f"torch bf16 attention fwd flash{what:13s} {fwd:9.3f} ms {fwd_flops / fwd / 1e9:8.1f} TFLOP/s")
            print(f"torch bf16 attention bwd flash{what:13s} {bwd:9.3f} ms "
                  f"{2.5 * fwd_flops / bwd / 1e9:8.1f} TFLOP/s")
            print(f"bench name=torch_attention dtype=bf16 dropout={p:g} fwd_ms={fwd:.3f} bwd_ms={bwd:.3f}")


class Block(nn.Module):
    def __init__(self, h, a, p, flash):
        super().__init__()
        self.a, self.p, self.flash = a, p, flash
        self.ln1, self.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
        self.qkv, self.proj = nn.Linear(h, 3 * h), nn.Linear(h, h)
        self.fc1, self.fc2 = nn.Linear(h, 4 * h), nn.Linear(4 * h, h)

    def attention(self, x):
        B, S, H = x.shape
        q, k, v = self.qkv(x).view(B, S, 3, self.a, H // self.a).permute(2, 0, 3, 1, 4)
        p = self.p if self.training else 0.0
        if self.flash:
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        else:
            att = (q @ k.transpose(-1, -2)) / math.sqrt(H // self.a)
            mask = torch.ones(S, S, dtype=torch.bool, device=x.device).triu(1)
            att = F.dropout(att.masked_fill(mask, float("-inf")).softmax(-1), p, self.training)
            y = att @ v
        return self.proj(y.transpose(1, 2).reshape(B, S, H))

    def forward(self, x):
        x = x + F.dropout(self.attention(self.ln1(x)), self.p, self.training)
        mlp = self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))
        return x + F.dropout(mlp, self.p, self.training)


class GPT(nn.Module):
    def __init__(self, l, h, a, s, V, p, flash):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, h), nn.Embedding(s, h)
        self.blocks = nn.ModuleList(Block(h, a, p, flash) for _ in range(l))
        self.lnf, self.p = nn.LayerNorm(h), p

    def forward(self, idx, targets):
        x = F.dropout(self.wte(idx) + self.wpe.weight[: idx.shape[1]], self.p, self.training)
        for blk in self.blocks:
            x = blk(x)
        logits = self.lnf(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.reshape(-1))


def bench_train(l, h, a, s, V, b, flash, compile_, peak, steps, m=1):
    """One step: m micro-batches of b sequences, gradients accumulated, then clip and AdamW
    (as bench_gpu_gpt --batch b --microbatches m)."""
    torch.manual_seed(0)
    model = GPT(l, h, a, s, V, 0.1, flash).cuda()
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1, fused=True)
    fwd = torch.compile(model) if compile_ else model
    idx = torch.randint(0, V, (m, b, s + 1), device="cuda")

    def step():
        for i in range(m):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = fwd(idx[i, :, :-1], idx[i, :, 1:]) / m
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)  # as ptdp's step
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    t0 = time.time()
    torch.cuda.reset_peak_memory_stats()
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    warm_s = time.time() - t0
    ms = time_ms(step, warm=0, reps=steps)
    flops = 72.0 * m * b * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h))
    tflops = flops / ms / 1e9
    name = ("compile+" if compile_ else "eager+") + ("flash" if flash else "math")
    mem = torch.cuda.max_memory_allocated() / 2**30
    print(f"torch train {name:14s} {params/1e9:.2f}B b={b} x {m} s={s}: {ms:8.1f} ms/step "
          f"{m*b*s/ms*1e3:9.0f} tokens/s {tflops:6.1f} TFLOP/s MFU {100*tflops/peak:4.1f}% "
          f"peak mem {mem:.1f} GiB (warm-up {warm_s:.0f} s)")
    print(f"bench name=torch_train variant={name} params={params} micro_batch={b} microbatches={m} ms={ms:.2f} "
          f"tokens_per_s={m*b*s/ms*1e3:.0f} tflops={tflops:.2f} mfu={tflops/peak:.4f} mem_gib={mem:.2f}")
    del model, opt, fwd
    torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--peak", type=float, default=989.0, help="dense bf16 TFLOP/s (H100 SXM: 989)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--skip-gemms", action="store_true")
    ap.add_argument("--skip-compile", action="store_true")
    ap.add_argument("--only-flash", action="store_true", help="eager + flash only (like for like)")
    ap.add_argument("--attention", action="store_true",
                    help="only one layer's SDPA flash attention (bench_gpu_ops attention's shape)")
    ap.add_argument("--batch", type=int, default=2, help="sequences per micro-batch")
    ap.add_argument("--microbatches", type=int, default=1, help="micro-batches per step (accumulated)")
    args = ap.parse_args()
    if args.batch < 1 or args.microbatches < 1:
        ap.error(f"--batch and --microbatches must be >= 1 (got {args.batch}, {args.microbatches})")
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
    h, a, s, V, l, b = 2048, 16, 2048, 50304, 24, args.batch
    if args.attention:
        bench_attention(h, a, s, b)
        return
    if not args.skip_gemms:
        bench_gemms(h, a, s, b, V)
    variants = [(False, False), (True, False)] + ([] if args.skip_compile else [(True, True)])
    if args.only_flash:
        variants = [(True, False)]
    for flash, compile_ in variants:
        try:
            bench_train(l, h, a, s, V, b, flash, compile_, args.peak, args.steps, args.microbatches)
        except Exception as e:  # an OOM or a compile failure must not hide the others
            print(f"torch train flash={flash} compile={compile_} FAILED: {type(e).__name__}: {e}")
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
