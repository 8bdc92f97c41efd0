"""A plain-Python LlamaForCausalLM / Qwen2ForCausalLM forward, read from a model
directory as transformers reads it (config.json; model.safetensors or an index
with shards), written from transformers' modeling_llama semantics, in double:
RMSNorm, rotary embeddings by rotate_half with inv_freq = theta^(-2i/hd),
grouped-query attention (key/value head j // (heads / groups)), causal softmax
scaled by 1/sqrt(hd), SwiGLU down(silu(gate x) * up x), the biases the config
asks for (LLaMA: attention_bias on q, k, v, o; mlp_bias on gate, up, down;
Qwen2: q, k, v), an untied head unless tie_word_embeddings.

It is checked against transformers' own logits of the fixtures (logits.bin,
made by make_llama_fixtures.py), then used where transformers is not
installed. Standard library only.
"""
import json
import math
import os
import struct


def read_safetensors(path):
    """{name: (shape, [float])} of an F32 or BF16 safetensors file."""
    with open(path, "rb") as f:
        b = f.read()
    n = struct.unpack("<Q", b[:8])[0]
    header = json.loads(b[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        s, e = t["data_offsets"]
        raw = b[8 + n + s:8 + n + e]
        if t["dtype"] == "F32":
            vals = list(struct.unpack("<%df" % (len(raw) // 4), raw))
        elif t["dtype"] == "BF16":
            halves = struct.unpack("<%dH" % (len(raw) // 2), raw)
            vals = [struct.unpack("<f", struct.pack("<I", h << 16))[0] for h in halves]
        else:
            raise ValueError("%s: dtype %s" % (name, t["dtype"]))
        out[name] = (t["shape"], vals)
    return out


def read_model(model_dir):
    """(config, {name: (shape, values)}) of a model directory."""
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    tensors = {}
    for name in files:
        tensors.update(read_safetensors(os.path.join(model_dir, name)))
    return config, tensors


def biases(config):
    """Which linear layers have biases: (q/k/v, o, mlp)."""
    if config["model_type"] == "qwen2":
        return True, False, False
    attention = bool(config.get("attention_bias", False))
    return attention, attention, bool(config.get("mlp_bias", False))


def expected_keys(config):
    """The state dict of LlamaForCausalLM / Qwen2ForCausalLM for this config."""
    qkv_b, o_b, mlp_b = biases(config)
    keys = {"model.embed_tokens.weight", "model.norm.weight"}
    if not config.get("tie_word_embeddings", False):
        keys.add("lm_head.weight")
    for i in range(config["num_hidden_layers"]):
        p = "model.layers.%d." % i
        keys |= {p + "input_layernorm.weight", p + "post_attention_layernorm.weight"}
        for proj, has_bias in [("self_attn.q_proj", qkv_b), ("self_attn.k_proj", qkv_b),
                               ("self_attn.v_proj", qkv_b), ("self_attn.o_proj", o_b),
                               ("mlp.gate_proj", mlp_b), ("mlp.up_proj", mlp_b),
                               ("mlp.down_proj", mlp_b)]:
            keys.add(p + proj + ".weight")
            if has_bias:
                keys.add(p + proj + ".bias")
    return keys


def linear(x, w, b=None):
    """x [in] @ W^T + b, W [out, in] as (shape, flat values)."""
    (out_dim, in_dim), v = w
    y = []
    for o in range(out_dim):
        row = v[o * in_dim:(o + 1) * in_dim]
        acc = sum(a * c for a, c in zip(row, x))
        y.append(acc + (b[1][o] if b else 0.0))
    return y


def rms_norm(x, w, eps):
    scale = 1.0 / math.sqrt(sum(e * e for e in x) / len(x) + eps)
    return [e * scale * g for e, g in zip(x, w[1])]


def rope(x, pos, hd, theta):
    """One head's vector rotated as transformers' apply_rotary_pos_emb."""
    half = hd // 2
    out = list(x)
    for i in range(half):
        freq = pos * theta ** (-2.0 * i / hd)
        c, s = math.cos(freq), math.sin(freq)
        out[i] = x[i] * c - x[i + half] * s
        out[i + half] = x[i + half] * c + x[i] * s
    return out


def rope_theta(config):
    if "rope_theta" in config:
        return float(config["rope_theta"])
    return float(config["rope_parameters"]["rope_theta"])


def logits(config, t, ids):
    """[len(ids)][vocab] logits."""
    h, heads = config["hidden_size"], config["num_attention_heads"]
    groups = config.get("num_key_value_heads", heads)
    hd = config.get("head_dim") or h // heads
    eps, theta = float(config["rms_norm_eps"]), rope_theta(config)
    qkv_b, o_b, mlp_b = biases(config)
    emb = t["model.embed_tokens.weight"]
    xs = [list(emb[1][i * h:(i + 1) * h]) for i in ids]
    for layer in range(config["num_hidden_layers"]):
        p = "model.layers.%d." % layer

        def lin(name, x, has_bias):
            return linear(x, t[p + name + ".weight"], t[p + name + ".bias"] if has_bias else None)

        ks, vs, qs = [], [], []
        for pos, x in enumerate(xs):
            n = rms_norm(x, t[p + "input_layernorm.weight"], eps)
            q, k, v = (lin("self_attn.q_proj", n, qkv_b), lin("self_attn.k_proj", n, qkv_b),
                       lin("self_attn.v_proj", n, qkv_b))
            qs.append([rope(q[a * hd:(a + 1) * hd], pos, hd, theta) for a in range(heads)])
            ks.append([rope(k[g * hd:(g + 1) * hd], pos, hd, theta) for g in range(groups)])
            vs.append([v[g * hd:(g + 1) * hd] for g in range(groups)])
        out = []
        for pos, x in enumerate(xs):
            ctx = []
            for a in range(heads):
                g = a // (heads // groups)
                scores = [sum(qe * ke for qe, ke in zip(qs[pos][a], ks[u][g])) / math.sqrt(hd)
                          for u in range(pos + 1)]
                top = max(scores)
                weights = [math.exp(s - top) for s in scores]
                z = sum(weights)
                ctx += [sum(weights[u] / z * vs[u][g][e] for u in range(pos + 1)) for e in range(hd)]
            o = lin("self_attn.o_proj", ctx, o_b)
            mid = [a + b for a, b in zip(x, o)]
            n = rms_norm(mid, t[p + "post_attention_layernorm.weight"], eps)
            gate, up = lin("mlp.gate_proj", n, mlp_b), lin("mlp.up_proj", n, mlp_b)
            act = [g_ / (1 + math.exp(-g_)) * u for g_, u in zip(gate, up)]
            out.append([a + b for a, b in zip(mid, lin("mlp.down_proj", act, mlp_b))])
        xs = out
    head = t["model.embed_tokens.weight"] if config.get("tie_word_embeddings", False) else t["lm_head.weight"]
    return [linear(rms_norm(x, t["model.norm.weight"], eps), head) for x in xs]


def relative_l2(got, want):
    d = sum((a - b) ** 2 for ra, rb in zip(got, want) for a, b in zip(ra, rb))
    w = sum(b * b for rb in want for b in rb)
    return math.sqrt(d / w)


def read_logits_bin(path, vocab):
    """The fixtures' logits.bin: [(ids, [[logit] * vocab] * len(ids))]."""
    with open(path, "rb") as f:
        b = f.read()
    at, out = 4, []
    for _ in range(struct.unpack("<i", b[:4])[0]):
        n = struct.unpack("<i", b[at:at + 4])[0]
        at += 4
        ids = list(struct.unpack("<%di" % n, b[at:at + 4 * n]))
        at += 4 * n
        flat = struct.unpack("<%df" % (n * vocab), b[at:at + 4 * n * vocab])
        at += 4 * n * vocab
        out.append((ids, [list(flat[i * vocab:(i + 1) * vocab]) for i in range(n)]))
    return out
