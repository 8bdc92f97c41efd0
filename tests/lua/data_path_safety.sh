#!/bin/sh
# data_path_safety.sh LAUNCHER TRAIN_GPT CORPUS WORKDIR — a --data-path never
# destroys or swaps the user's data, and a path is never run as shell code:
#  1. a mistyped path (no --corpus) stops the run naming it and creates nothing;
#  2. a directory stops the run and stays as it was;
#  3. an existing file is never replaced, even with --corpus (the run may fail
#     reading it, but its bytes stay);
#  4. an unreadable file stops the run and stays (skipped as root);
#  5. the corpus tokenized for the run is an input: a --log-json naming it is refused;
#  6. shell code in a path is not run: the directory is made with that literal name.
set -u
launcher=$1 script=$2 corpus=$3 work=$4
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
fail=0
check() { if eval "$2"; then echo "ok   $1"; else echo "FAIL $1"; fail=1; fi; }
# Sequences longer than the corpus: the run stops at the trainer, after the
# data path is dealt with (a bad option alone stops it before any file is made).
run() { "$launcher" "$script" --seq-length 8000 "$@" >out.txt 2>&1; echo $? >rc.txt; cat out.txt; }

run --data-path typo.ptdp
check "mistyped path: non-zero exit" '[ "$(cat rc.txt)" != 0 ]'
check "mistyped path: named, with what to do" 'grep -q "typo.ptdp.*No such file or directory (only the default dataset" out.txt'
check "mistyped path: nothing created" '[ ! -e typo.ptdp ]'

mkdir adir && touch adir/keep
run --data-path adir --corpus "$corpus" --corpus-format lines
check "directory: non-zero exit, says so" '[ "$(cat rc.txt)" != 0 ] && grep -q "is a directory, not a file to read" out.txt'
check "directory: untouched" '[ -d adir ] && [ -f adir/keep ]'

# A FIFO is refused without being opened (an open would wait for a writer),
# alone or as a blend's part.
mkfifo afifo
run --data-path afifo
check "FIFO: refused by kind, not waited on" '[ "$(cat rc.txt)" != 0 ] && grep -q "is a FIFO, not a file to read" out.txt'
run --data-path "1 afifo 1 afifo"
check "FIFO in a blend: refused" '[ "$(cat rc.txt)" != 0 ] && grep -q "is a FIFO, not a file to read" out.txt'

printf 'my precious data\n' >mine.ptdp
run --data-path mine.ptdp --corpus "$corpus" --corpus-format lines
check "existing file: not replaced" '[ "$(cat mine.ptdp)" = "my precious data" ]'

if [ "$(id -u)" != 0 ]; then
  printf 'secret\n' >locked.ptdp && chmod 000 locked.ptdp
  run --data-path locked.ptdp --corpus "$corpus" --corpus-format lines
  chmod 600 locked.ptdp
  check "unreadable file: non-zero exit, says so" '[ "$(cat rc.txt)" != 0 ] && grep -q "Permission denied" out.txt'
  check "unreadable file: not replaced" '[ "$(cat locked.ptdp)" = secret ]'
else
  echo "skip unreadable file (running as root)"
fi

# The corpus a run tokenizes stays its input: an output of the run naming it is refused.
cp "$corpus" mycorpus.txt
"$launcher" "$script" --num-layers 1 --hidden-size 32 --num-attention-heads 2 --seq-length 16 \
  --micro-batch-size 2 --global-batch-size 4 --train-iters 1 --sample-tokens 0 --eval-interval 0 \
  --num-threads 1 --data-path fresh.ptdp --corpus mycorpus.txt --corpus-format lines \
  --log-json mycorpus.txt >out.txt 2>&1
echo $? >rc.txt
cat out.txt
check "--log-json naming the --corpus: refused" \
  '[ "$(cat rc.txt)" != 0 ] && grep -qE "is the tokenized corpus|is not a metrics log" out.txt'
check "--log-json naming the --corpus: the corpus stays" 'cmp -s mycorpus.txt "$corpus"'

run --data-path '$(touch INJECTED)x/f.ptdp' --corpus "$corpus" --corpus-format lines
check "shell in a path: not run" '[ ! -e INJECTED ]'
check "shell in a path: a directory of that literal name made" \
  'grep -q "tokenized .* -> .*\$(touch INJECTED)x/f.ptdp" out.txt'
# (The run is refused, its split too short: the dataset and the directory made for it go.)
check "shell in a path: refused, what it made goes" '[ ! -e "\$(touch INJECTED)x" ]'

# A run refused for its options, or for an empty value, makes no dataset (and
# no directory for it): every option is checked before the corpus is tokenized.
run --data-path made/new.ptdp --corpus "$corpus" --corpus-format lines --num-attention-heads 3
check "refused options: says why" 'grep -q "num_attention_heads (3) must divide" out.txt'
check "refused options: no dataset made" '[ ! -e made ]'
run --data-path made/new.ptdp --corpus "$corpus" --corpus-format lines --save ''
check "an empty --save: refused by name" 'grep -q "flag .--save. is given an empty value" out.txt'
check "an empty --save: no dataset made" '[ ! -e made ]'
# White space alone is no value either (' ' was "not set" as --data-path and a
# directory named ' ' as --save).
run --data-path ' '
check "a blank --data-path: refused as such" 'grep -q "flag .--data-path. is given an empty value (or white space alone)" out.txt'
run --data-path made/new.ptdp --corpus "$corpus" --corpus-format lines --save ' '
check "a blank --save: refused by name" 'grep -q "flag .--save. is given an empty value (or white space alone)" out.txt'
check "a blank --save: nothing made" '[ ! -e made ] && [ ! -e " " ]'
# Refused later, by the trainer (sequences longer than the corpus): the
# dataset made for it goes again.
run --data-path later.ptdp --corpus "$corpus" --corpus-format lines
check "refused by the trainer: says why" '[ "$(cat rc.txt)" != 0 ] && grep -q "tokenized" out.txt'
check "refused by the trainer: the dataset made for it goes" '[ ! -e later.ptdp ]'
exit $fail
