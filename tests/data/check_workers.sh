#!/bin/sh
# check_workers.sh PTDP BPE_DIR TEXT JSONL WORKDIR: `ptdp tokenize` with
# --workers 1, 2 and 3 writes byte-identical files (.ptdp and Megatron's
# .bin/.idx), with the byte tokenizer and the BPE fixture. The inputs are
# repeated so that they span several chunks (256 KiB each).
set -eu
ptdp=$1 bpe=$2 text=$3 jsonl=$4 dir=$5
mkdir -p "$dir"
big="$dir/big.jsonl"
: >"$big"
for _ in $(seq 100); do cat "$jsonl" >>"$big"; done
for tok in byte bpe; do
  set --
  [ "$tok" = bpe ] && set -- --tokenizer-type GPT2BPETokenizer \
    --vocab-file "$bpe/vocab.json" --merge-file "$bpe/merges.txt"
  for w in 1 2 3; do
    "$ptdp" tokenize --workers "$w" "$@" --format lines --output "$dir/$tok-w$w.ptdp" \
      "$text" "$text" "$text" "$text" "$text" "$text"
    "$ptdp" tokenize --workers "$w" "$@" --append-eod --output-prefix "$dir/$tok-w$w" "$big"
  done
  for w in 2 3; do
    cmp "$dir/$tok-w1.ptdp" "$dir/$tok-w$w.ptdp"
    cmp "$dir/$tok-w1_text_document.bin" "$dir/$tok-w${w}_text_document.bin"
    cmp "$dir/$tok-w1_text_document.idx" "$dir/$tok-w${w}_text_document.idx"
  done
  echo "workers 1, 2, 3: identical files ($tok)"
done
rm -rf "$dir"
