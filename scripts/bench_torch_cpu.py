"""PyTorch baseline for scripts/bench_cpu.lua: the same GPT (pre-LN, learned
positions, tanh-GeLU MLP, tied embedding, dropout 0.1, AdamW) and shape,
full training steps on the CPU. Run with Debian's python3-torch:
    /usr/bin/python3 scripts/bench_torch_cpu.py [--iters 10]
Prints one line: torch_tokens_per_s=..."""
import argparse
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, h, a, p):
        super().__init__()
        self.a, self.p = a, p
        self.ln1, self.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
        self.qkv, self.proj = nn.Linear(h, 3 * h), nn.Linear(h, h)
        self.fc1, self.fc2 = nn.Linear(h, 4 * h), nn.Linear(4 * h, h)
        self.register_buffer('mask', torch.triu(torch.ones(4096, 4096, dtype=torch.bool), 1))

    def forward(self, x):  # x: [b, s, h]
        b, s, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(h, dim=2)
        q, k, v = (t.view(b, s, self.a, h // self.a).transpose(1, 2) for t in (q, k, v))
        # Explicit attention: Debian's torch 1.13 has no scaled_dot_product_attention.
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(h // self.a))
        att = att.masked_fill(self.mask[:s, :s], float('-inf'))
        att = F.dropout(F.softmax(att, dim=-1), self.p, self.training)
        y = att @ v
        x = x + F.dropout(self.proj(y.transpose(1, 2).reshape(b, s, h)), self.p, self.training)
        m = self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate='tanh'))
        return x + F.dropout(m, self.p, self.training)


class GPT(nn.Module):
    def __init__(self, layers, h, a, s, vocab, p):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, h), nn.Embedding(s, h)
        self.blocks = nn.ModuleList(Block(h, a, p) for _ in range(layers))
        self.lnf, self.p = nn.LayerNorm(h), p

    def forward(self, idx, targets):
        s = idx.shape[1]
        x = F.dropout(self.wte(idx) + self.wpe(torch.arange(s)), self.p, self.training)
        for blk in self.blocks:
            x = blk(x)
        logits = self.lnf(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--iters', type=int, default=10)
    ap.add_argument('--warmup', type=int, default=2)
    ap.add_argument('--threads', type=int, default=os.cpu_count())
    args = ap.parse_args()
    L, h, a, s, b, V = 6, 384, 6, 256, 8, 8192
    torch.set_num_threads(args.threads)  # Debian's build defaults to 1 here
    torch.manual_seed(0)
    model = GPT(L, h, a, s, V, 0.1)
    for name, w in model.named_parameters():  # GPT-2 init, as ptdp's
        if w.dim() == 2:
            nn.init.normal_(w, std=0.02)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    idx = torch.randint(0, V, (b, s))
    tgt = torch.randint(0, V, (b, s))
    times = []
    for i in range(args.warmup + args.iters):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if i >= args.warmup:
            times.append(time.perf_counter() - t0)
    mean = sum(times) / len(times)
    print(f'torch {torch.__version__}, threads {torch.get_num_threads()}: '
          f'mean step {mean * 1e3:.1f} ms, loss {loss.item():.3f}')
    print(f'torch_tokens_per_s={b * s / mean:.1f}')


if __name__ == '__main__':
    main()
