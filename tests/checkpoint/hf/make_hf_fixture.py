#!/usr/bin/env python3
"""Makes the Hugging Face GPT-2 fixture that test_checkpoint_import reads.

    python3 make_hf_fixture.py [OUTDIR]     # default: this script's directory

Needs torch, transformers and safetensors (pip install torch transformers
safetensors); CI has none of them, so the output is committed:

  model.safetensors, config.json  GPT2LMHeadModel.save_pretrained of a small
                                  random GPT-2 (4 layers so that p=2 with v=2
                                  splits it; vocab 260, above the byte
                                  tokenizer's 257, padded by ptdp to 384 or 512)
  logits.bin                      token sequences and transformers' fp32 logits:
                                  int32 count, then per sequence int32 n,
                                  int32 ids[n], float32 logits[n][vocab_size]
                                  (all little-endian)

The weights are drawn at initializer_range 0.2 rather than GPT-2's 0.02, and
the LayerNorm parameters and biases (1 and 0 at init) are perturbed, so that
attention is far from uniform and every tensor, bias and head order shows in
the logits: a wrong transpose or q/k/v order cannot hide.
"""
import os
import struct
import sys

import torch
from transformers import GPT2Config, GPT2LMHeadModel

out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
os.makedirs(out, exist_ok=True)
torch.manual_seed(1234)
cfg = GPT2Config(vocab_size=260, n_positions=32, n_embd=32, n_layer=4, n_head=4,
                 activation_function="gelu_new", layer_norm_epsilon=1e-5,
                 resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, initializer_range=0.2,
                 bos_token_id=256, eos_token_id=256)
model = GPT2LMHeadModel(cfg).eval()
with torch.no_grad():
    for name, p in model.named_parameters():
        if ".ln_" in name or name.startswith("transformer.ln_f") or name.endswith(".bias"):
            p.add_(0.1 * torch.randn_like(p))
model.save_pretrained(out, safe_serialization=True)
if os.path.exists(os.path.join(out, "generation_config.json")):
    os.remove(os.path.join(out, "generation_config.json"))  # not read by ptdp

gen = torch.Generator().manual_seed(4321)
sequences = [torch.randint(0, cfg.vocab_size, (n,), generator=gen) for n in (32, 7)]
with open(os.path.join(out, "logits.bin"), "wb") as f:
    f.write(struct.pack("<i", len(sequences)))
    for ids in sequences:
        with torch.no_grad():
            logits = model(ids[None, :]).logits[0].to(torch.float32).contiguous()
        assert logits.shape == (len(ids), cfg.vocab_size)
        f.write(struct.pack("<i", len(ids)))
        f.write(ids.to(torch.int32).numpy().astype("<i4").tobytes())
        f.write(logits.numpy().astype("<f4").tobytes())
for name in sorted(os.listdir(out)):
    print(name, os.path.getsize(os.path.join(out, name)))
