#!/bin/sh
# run_account.sh LAUNCHER TRAIN_GPT CORPUS WORKDIR — what a run says it did is
# what it did: every checkpoint it committed is said (an exit's step commits
# an --async-save's and its own); a checkpoint's vocabulary is its tokenizer's
# (another vocab.json of the same size is refused where text goes through it);
# --train-iters 0 from scratch names no loaded checkpoint; a resume refused
# for the script's own warm-up says so; a corpus directory names what it
# leaves out.
bpe=$(cd "$(dirname "$0")/../fixtures/bpe" && pwd)
. "$(dirname "$0")/tiny_train_run.sh"
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }
has() { grep -qF -- "$2" "$1"; }

run --save as --save-interval 1 --async-save --exit-interval 2 --train-iters 4 >saves.txt 2>&1
has saves.txt " saved checkpoint as/iter_0000001" && has saves.txt " saved checkpoint as/iter_0000002" &&
  ok "an exit's step says both checkpoints it committed" || { cat saves.txt; bad "saves said"; }

"$launcher" "$script" --num-layers 1 --hidden-size 32 --num-attention-heads 2 --seq-length 16 \
  --micro-batch-size 2 --global-batch-size 4 --train-iters 0 --eval-iters 1 --sample-tokens 0 \
  --num-threads 1 --data-path d.ptdp >zero.txt 2>&1
has zero.txt "--train-iters 0: nothing to train; the model as initialized is evaluated" &&
  ! has zero.txt "the loaded checkpoint" && ok "--train-iters 0 from scratch" || { cat zero.txt; bad "--train-iters 0"; }
# --train-iters 0 with --load evaluates the checkpoint: its LR schedule (which
# only steps use) is not compared (it was refused, and the refusal's remedy,
# --lr-decay-iters, refused in turn).
run --save ev >/dev/null 2>&1
"$launcher" "$script" --num-layers 1 --hidden-size 32 --num-attention-heads 2 --seq-length 16 \
  --micro-batch-size 2 --global-batch-size 4 --train-iters 0 --eval-iters 1 --sample-tokens 0 \
  --num-threads 1 --data-path d.ptdp --load ev >eval_only.txt 2>&1 &&
  has eval_only.txt "final validation loss" && ok "--train-iters 0 --load: the checkpoint evaluated" ||
  { cat eval_only.txt; bad "--train-iters 0 --load"; }

# What the script says quoting a name with a line break stays one line (the
# engine's messages were; the script's own split in two).
nl=$(printf 'n\nl')
run --save "$nl" --log-json "$nl/latest" >nl.txt 2>&1
has nl.txt "ptdp: --log-json 'n\x0Al/latest' is also this run's --save tracker" &&
  ok "a script's message quoting a line break is one line" || { cat nl.txt; bad "one-line script message"; }
run --save "$nl" --exit-interval 1 >nl_saved.txt 2>&1
has nl_saved.txt " saved checkpoint n\x0Al/iter_0000001" &&
  has nl_saved.txt " exiting: --exit-interval 1 reached at iteration 1; saved n\x0Al/iter_0000001" &&
  [ "$(grep -c "saved checkpoint" nl_saved.txt)" = 1 ] &&
  ok "a --save holding a line break: one save said, on one line, and the exit's line too" ||
  { cat nl_saved.txt; bad "a --save holding a line break"; }

# Whole numbers past 2^53 are said as given (the arguments table and the run
# record rounded them through doubles: 9007199254740992).
run --seed 9007199254740993 --train-iters 9007199254740993 --exit-interval 1 --log-json big.jsonl >big.txt 2>&1
grep -q "seed \.* 9007199254740993$" big.txt && grep -q "train_iters \.* 9007199254740993$" big.txt &&
  grep -q '"kind": "run".*"train_iters": 9007199254740993,' big.jsonl &&
  ok "integers past 2^53 said as given" || { cat big.txt big.jsonl; bad "integers past 2^53"; }
run --train-iters 003 --log-json zeros.jsonl >zeros.txt 2>&1 &&
  grep -q '"kind": "run".*"train_iters": 3,' zeros.jsonl &&
  ok "--train-iters 003 with --log-json: a JSON run record" || { cat zeros.txt zeros.jsonl; bad "leading zeros"; }

# The fixture's vocabulary, and one of the same size with two ids swapped.
python3 - "$bpe/vocab.json" <<'EOF' || bad "permuted vocab.json"
import json, sys
v = json.load(open(sys.argv[1]))
v["a"], v["b"] = v["b"], v["a"]
json.dump(v, open("perm.json", "w"))
EOF
tok="--tokenizer-type GPT2BPETokenizer --merge-file $bpe/merges.txt"
run $tok --vocab-size 3072 --vocab-file "$bpe/vocab.json" --data-path bpe.ptdp --save ck >bpe.txt 2>&1 &&
  ok "a GPT-2 BPE run saves" || { cat bpe.txt; bad "GPT-2 BPE run"; }
"$launcher" generate --load ck --prompt "a b" --max-new-tokens 2 $tok --vocab-file perm.json >gen.txt 2>&1
[ $? -ne 0 ] && has gen.txt "the checkpoint was trained with another vocabulary (tokenizer_type GPT2BPETokenizer" &&
  ok "generate with another vocab.json: refused" || { cat gen.txt; bad "generate with another vocabulary"; }
"$launcher" generate --load ck --prompt "a b" --max-new-tokens 2 $tok --vocab-file "$bpe/vocab.json" >gen.txt 2>&1 &&
  ok "generate with its own vocab.json" || { cat gen.txt; bad "generate with its own vocabulary"; }
# The record goes with the model through an export and an import (it was
# dropped, and the permuted ids ran).
"$launcher" ckpt export-safetensors ck hf >/dev/null 2>&1 && "$launcher" ckpt import-safetensors hf imp >/dev/null 2>&1 ||
  bad "export and import"
"$launcher" generate --load imp --prompt "a b" --max-new-tokens 2 $tok --vocab-file perm.json >gen.txt 2>&1
[ $? -ne 0 ] && has gen.txt "the checkpoint was trained with another vocabulary" &&
  ok "after an export and an import too" || { cat gen.txt; bad "the record lost in an export and import"; }
run $tok --vocab-size 3072 --vocab-file perm.json --data-path perm.ptdp --load ck --finetune >ft.txt 2>&1
[ $? -ne 0 ] && has ft.txt "give the checkpoint's tokenizer_type and files to train on this run's data" &&
  ok "fine-tuning through another vocab.json: refused" || { cat ft.txt; bad "fine-tune with another vocabulary"; }

# A resume refused for a warm-up train_gpt.lua chose itself (a tenth of a
# short run; the user gave none) says so, and how to go on.
for iters in 10 30; do
  "$launcher" "$script" --num-layers 1 --hidden-size 32 --num-attention-heads 2 --seq-length 16 \
    --micro-batch-size 2 --global-batch-size 4 --train-iters $iters --lr-decay-iters 100 --eval-iters 1 \
    --sample-tokens 0 --num-threads 1 --data-path d.ptdp --save wu --load wu >wu.txt 2>&1
done
has wu.txt "lr_warmup_iters: checkpoint 1, this run 20" && has wu.txt "give --lr-warmup-iters 1 to go on" &&
  ok "a warm-up the script chose is named at a refused resume" || { cat wu.txt; bad "warm-up hint"; }

# A --data-path another writer is making from --corpus at that moment (every
# process under mpirun at once) is waited for and trained on: the one that
# came second was refused, and failed the job alone.
i=0; : >big.txt; while [ $i -lt 3000 ]; do cat "$corpus" >>big.txt; i=$((i + 1)); done
"$launcher" tokenize --output race.ptdp --format lines big.txt >race_a.txt 2>&1 &
sleep 0.1
"$launcher" "$script" --num-layers 1 --hidden-size 32 --num-attention-heads 2 --seq-length 16 \
  --micro-batch-size 2 --global-batch-size 4 --train-iters 1 --eval-iters 1 --sample-tokens 0 \
  --num-threads 1 --data-path race.ptdp --corpus big.txt --corpus-format lines >race_b.txt 2>&1
rc=$?
wait
[ $rc -eq 0 ] && ! has race_b.txt "is being written by another process" &&
  ok "a dataset another writer is making is waited for" || { cat race_a.txt race_b.txt; bad "dataset race"; }
rm -f big.txt race.ptdp

mkdir -p corpus/sub && cp "$corpus" corpus/a.txt && cp "$corpus" corpus/.hidden && ln -s /etc/hostname corpus/out
"$launcher" tokenize --output dir.ptdp corpus >dir.txt 2>&1
has dir.txt "corpus directory 'corpus': 3 of its entries not read: '.hidden' (a hidden file), 'out' (a symbolic link out of the directory), 'sub' (a directory)" &&
  ok "a corpus directory names what it leaves out" || { cat dir.txt; bad "corpus directory note"; }
exit $fail
