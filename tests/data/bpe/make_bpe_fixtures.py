#!/usr/bin/env python3
"""Makes the GPT-2 BPE fixtures of tests/data/test_bpe_tokenizer.cpp with Hugging
Face's tokenizers (CI has no tokenizers; the outputs are committed):

    python3 tests/data/bpe/make_bpe_fixtures.py [/usr/share/games/fortunes]

- vocab.json, merges.txt, tokenizer.json: a byte-level BPE of 3000 tokens
  trained on Debian's fortunes, set up as GPT-2's (ByteLevel pre-tokenizer with
  add_prefix_space=False and GPT-2's regex, ByteLevel decoder, the special token
  <|endoftext|>);
- text.txt: a test text, hand-written lines (accents, CJK, emoji, Arabic,
  combining marks, whitespace runs, contractions in odd cases, digits,
  punctuation, <|endoftext|> inside text) and then fortunes;
- text_ids.bin: tokenizer.encode(text).ids, little-endian int32;
- line_ids.txt: for a selection of the text's lines (split on '\\n' only): the
  line's number (0-based), a tab, its ids separated by spaces.

tokenizers splits the special token out of the text before pre-tokenizing (its
default, split_special_tokens=False): "a<|endoftext|>b" is [a, EOT, b]. ptdp does
the same. The script also checks that vocab.json + merges.txt, loaded into
tokenizers with <|endoftext|> added as a special token, give the same ids.
"""
import array
import os
import sys

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
EOT = "<|endoftext|>"


def fortune_files(root):
    out = []
    for name in sorted(os.listdir(root)):
        p = os.path.join(root, name)
        if name.endswith(".dat") or os.path.islink(p) or not os.path.isfile(p):
            continue
        out.append(p)
    return out


HANDWRITTEN = [
    "Hello, world! It's a test.",
    "don't DON'T Don'T 'S 'T 'RE 'Ve 'll 'LL 'd 'D 'm 'M ''s '' 's's 're've",
    "I'm you're we've they'll he'd it's",
    "  leading spaces and trailing spaces   ",
    "tabs\tand\t\tmore\t \t tabs",
    "a  b   c    d     e",
    " x\u00a0y\u2003z\u3000w\u2028v\u2029u\u0085t\x0bs\x0cr\x1cq\x1fp",
    "caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00c5ngstr\u00f6m Stra\u00dfe \u0141\u00f3d\u017a",
    "e\u0301 a\u0308 n\u0303 \u0915\u094d\u0937 combining: o\u0302\u0323 Z\u0335\u0321\u0327a\u0336\u031bl\u0334go",
    "\u4e2d\u6587\u6d4b\u8bd5 \u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8 \ud55c\uad6d\uc5b4 \u6f22\u5b57\u3002\u3001",
    "emoji: \U0001f600\U0001f680 \U0001f44d\U0001f3fd \U0001f468\u200d\U0001f469\u200d\U0001f467 \u2764\ufe0f \U0001f1e9\U0001f1ea",
    "\u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645 \u0661\u0662\u0663",
    "\u05e2\u05d1\u05e8\u05d9\u05ea \u0420\u0443\u0441\u0441\u043a\u0438\u0439 \u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac \u0e44\u0e17\u0e22",
    "digits 0 12 345 6789 3.14159 1,000,000 2024-01-01 \u00bd \u2167 \u2460 \u0967\u0968",
    "punctuation!!! ??? ... --- *** ((( ))) [[]] {{}} <<>> @#$%^&*_+=|\\/~`",
    "mixed:abc123def!!!456 x=1;y=2 f(x)=x^2",
    "<|endoftext|>",
    "before<|endoftext|>after",
    " <|endoftext|> spaced <|endoftext|>",
    "<|endoftext|><|endoftext|>twice",
    "almost <|endoftext| and <|endoftext and |endoftext|> and <|ENDOFTEXT|>",
    "the end.<|endoftext|>",
    "\u00a0\u00a0nbsp run\u00a0\u00a0",
    "   ",
    "\t",
    "",
    "x",
    "'",
    " '",
    "a'b's'c",
    "lone surrogate-free but odd: \ufeffBOM \u200bzero\u200bwidth \ufffd replacement",
    "\U00031350\U00031351 CJK ext H, \U0001e030 modifier, \u1c89 new letter",
    "math: \u2200x\u2208\u211d, x\u00b2\u22650 \u221e \u2211 \U0001d400\U0001d401",
]


def build_text(files):
    parts = ["\n".join(HANDWRITTEN), "\n\n\n", "trailing newline runs\n\n\n\nx\r\ncarriage\rreturn\r\n"]
    size = sum(len(p.encode()) for p in parts)
    # Fortunes from every file in turn, until about 200 KB.
    chunks = [open(f, encoding="utf-8").read() for f in files]
    pos = [0] * len(chunks)
    i = 0
    while size < 200_000:
        c = chunks[i % len(chunks)]
        j = pos[i % len(chunks)]
        piece = c[j : j + 4000]
        pos[i % len(chunks)] = j + 4000
        i += 1
        if not piece:
            continue
        parts.append(piece)
        size += len(piece.encode())
    return "".join(parts)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "/usr/share/games/fortunes"
    files = fortune_files(root)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=3000, special_tokens=[EOT],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train(files, trainer)
    tok.save(os.path.join(HERE, "tokenizer.json"))
    tok.model.save(HERE)  # vocab.json, merges.txt

    text = build_text(files)
    with open(os.path.join(HERE, "text.txt"), "w", encoding="utf-8", newline="") as f:
        f.write(text)
    ids = tok.encode(text).ids
    array.array("i", ids).tofile(open(os.path.join(HERE, "text_ids.bin"), "wb"))
    assert sys.byteorder == "little"
    assert tok.decode(ids, skip_special_tokens=False) == text

    # The same ids from vocab.json + merges.txt (as GPT2TokenizerFast loads them).
    tok2 = Tokenizer(models.BPE.from_file(os.path.join(HERE, "vocab.json"),
                                          os.path.join(HERE, "merges.txt")))
    tok2.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok2.add_special_tokens([AddedToken(EOT, special=True, normalized=False)])
    assert tok2.encode(text).ids == ids

    lines = text.split("\n")
    chosen = list(range(len(HANDWRITTEN) + 8)) + list(range(len(HANDWRITTEN) + 8, len(lines), 3))
    with open(os.path.join(HERE, "line_ids.txt"), "w") as f:
        for n in chosen:
            f.write(f"{n}\t{' '.join(map(str, tok.encode(lines[n]).ids))}\n")
    print(f"vocab {tok.get_vocab_size()}, text {len(text.encode())} bytes, {len(ids)} ids, "
          f"{len(chosen)} of {len(lines)} lines, EOT id {tok.token_to_id(EOT)}")


main()
