#!/usr/bin/env python3
"""Makes the LLaMA-family fixtures for the import, export and tokenizer tests.

    python3 make_llama_fixtures.py OUTDIR

Needs torch, transformers, safetensors and tokenizers; CI has none of them, so
the outputs are committed (the lent GPU machine has them: run it there). Each
part is made on its own, so one that fails (printed, exit 1) leaves the others:

  llama/    LlamaForCausalLM.save_pretrained of a small random model, sharded
            (model.safetensors.index.json and its shards): 4 layers, h 32,
            4 query heads over 2 key/value heads, SwiGLU of 48, rope_theta
            500000, untied head, vocab 103 (not a multiple of ptdp's padding);
            logits.bin as GPT-2's fixture (int32 count, then per sequence int32
            n, int32 ids[n], float32 logits[n][vocab]).
  qwen2/    Qwen2ForCausalLM (QKV biases, tied embedding, rope_theta 1e6),
            one file, logits.bin.
  tok/      llama3.json: a byte-level BPE set up as LLaMA 3's (the Split
            pre-tokenizer with its regex, then ByteLevel without its regex,
            ignore_merges, <|begin_of_text|> added by the post-processor);
            sp_metaspace.json and sp_normalizer.json: one SentencePiece-style
            BPE (byte fallback, <unk> <s> </s>, then <0x00>..<0xFF>) set up
            as Mistral's (Metaspace pre-tokenizer) and as LLaMA 2's (Prepend +
            Replace normalizer, no pre-tokenizer); text.txt (the GPT-2 BPE
            fixture's Unicode-heavy text); <name>_ids.bin: the ids of
            encode(text, add_special_tokens=True), little-endian int32.
  versions.txt  the library versions that made them.

The weights are drawn at initializer_range 0.2 and the norms' weights
perturbed, so that every tensor and head order shows in the logits.
"""
import array
import json
import os
import struct
import sys
import traceback

OUT = sys.argv[1]
HERE = os.path.dirname(os.path.abspath(__file__))
TEXT = os.path.join(HERE, "..", "..", "fixtures", "bpe", "text.txt")
failed = []


def part(name):
    def wrap(fn):
        try:
            fn()
            print(f"{name}: made")
        except Exception:  # one part's failure must not lose the others
            failed.append(name)
            print(f"{name}: FAILED")
            traceback.print_exc()
        return fn
    return wrap


def write_logits(model, vocab, path, seed):
    import torch
    gen = torch.Generator().manual_seed(seed)
    sequences = [torch.randint(0, vocab, (n,), generator=gen) for n in (32, 7)]
    with open(path, "wb") as f:
        f.write(struct.pack("<i", len(sequences)))
        for ids in sequences:
            with torch.no_grad():
                logits = model(ids[None, :]).logits[0].to(torch.float32).contiguous()
            assert logits.shape == (len(ids), vocab)
            f.write(struct.pack("<i", len(ids)))
            f.write(ids.to(torch.int32).numpy().astype("<i4").tobytes())
            f.write(logits.numpy().astype("<f4").tobytes())


def perturb_norms(model):
    import torch
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith(".bias"):
                p.add_(0.1 * torch.randn_like(p))


@part("llama")
def llama():
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(1234)
    cfg = LlamaConfig(vocab_size=103, hidden_size=32, intermediate_size=48, num_hidden_layers=4,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=False,
                      initializer_range=0.2, bos_token_id=1, eos_token_id=2,
                      attention_bias=False, torch_dtype="float32")
    model = LlamaForCausalLM(cfg).eval()
    perturb_norms(model)
    out = os.path.join(OUT, "llama")
    model.save_pretrained(out, safe_serialization=True, max_shard_size="60KB")
    assert os.path.exists(os.path.join(out, "model.safetensors.index.json")), "not sharded"
    write_logits(model, cfg.vocab_size, os.path.join(out, "logits.bin"), 4321)


@part("qwen2")
def qwen2():
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM
    torch.manual_seed(99)
    cfg = Qwen2Config(vocab_size=103, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True,
                      use_sliding_window=False, initializer_range=0.2, bos_token_id=1,
                      eos_token_id=2, torch_dtype="float32")
    model = Qwen2ForCausalLM(cfg).eval()
    perturb_norms(model)
    out = os.path.join(OUT, "qwen2")
    model.save_pretrained(out, safe_serialization=True)
    write_logits(model, cfg.vocab_size, os.path.join(out, "logits.bin"), 8765)


def training_lines():
    with open(TEXT, encoding="utf-8") as f:
        text = f.read()
    return text, [l for l in text.split("\n") if l] * 3


def save_and_encode(tok_json, name, text):
    from tokenizers import Tokenizer
    out = os.path.join(OUT, "tok")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, name + ".json"), "w", encoding="utf-8") as f:
        json.dump(tok_json, f, ensure_ascii=False, indent=1)
    tok = Tokenizer.from_file(os.path.join(out, name + ".json"))
    ids = tok.encode(text, add_special_tokens=True).ids
    with open(os.path.join(out, name + "_ids.bin"), "wb") as f:
        f.write(array.array("i", ids).tobytes())
    with open(os.path.join(out, "text.txt"), "w", encoding="utf-8") as f:
        f.write(text)


LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


@part("tok_llama3")
def tok_llama3():
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    text, lines = training_lines()
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    specials = ["<|begin_of_text|>", "<|end_of_text|>"]
    tok.train_from_iterator(lines, trainers.BpeTrainer(
        vocab_size=700, special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    bos = tok.token_to_id(specials[0])
    tok.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
        special_tokens=[(specials[0], bos)])
    j = json.loads(tok.to_str())
    j["model"]["ignore_merges"] = True  # as LLaMA 3's: a word in the vocabulary is one token
    save_and_encode(j, "llama3", text)


@part("tok_sentencepiece")
def tok_sentencepiece():
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    text, lines = training_lines()
    byte_tokens = [f"<0x{i:02X}>" for i in range(256)]
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first")
    tok.train_from_iterator(lines, trainers.BpeTrainer(
        vocab_size=900, special_tokens=["<unk>", "<s>", "</s>"] + byte_tokens,
        show_progress=False))
    j = json.loads(tok.to_str())
    # The byte tokens are vocabulary entries (ids 3..258), not added tokens.
    j["added_tokens"] = [t for t in j["added_tokens"] if t["content"] not in byte_tokens]
    assert j["model"]["vocab"]["<0x00>"] == 3 and j["model"]["vocab"]["<0xFF>"] == 258
    j["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                   {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                 {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "<s>", "type_id": 1}},
                 {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}
    j["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    save_and_encode(j, "sp_metaspace", text)
    # LLaMA 2's form of the same: the normalizer puts the "▁"s in, no pre-tokenizer.
    j["pre_tokenizer"] = None
    j["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "\u2581"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}
    save_and_encode(j, "sp_normalizer", text)


def versions():
    lines = []
    for mod in ("torch", "transformers", "tokenizers", "safetensors"):
        try:
            lines.append(f"{mod} {__import__(mod).__version__}")
        except Exception as e:
            lines.append(f"{mod} unavailable: {e}")
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "versions.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("; ".join(lines))


versions()
for root, _, files in sorted(os.walk(OUT)):
    for name in sorted(files):
        p = os.path.join(root, name)
        print(os.path.relpath(p, OUT), os.path.getsize(p))
if failed:
    print("failed parts:", ", ".join(failed))
    sys.exit(1)
