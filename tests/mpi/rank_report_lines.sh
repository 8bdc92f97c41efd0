#!/usr/bin/env bash
# train_gpt.lua under mpirun prints its per-rank report lines (" rank N (tp ..")
# from the process of world rank 0 only: one line per world rank, in order,
# contiguous, after the last iteration line, so they cannot interleave with
# rank 0's log (each process's stdout reaches mpirun on its own).
#   rank_report_lines.sh PTDP MPIRUN NP WORKDIR CORPUS TRAIN_GPT [layout flags...]
set -euo pipefail
ptdp=$1 mpirun=$2 np=$3 work=$4 corpus=$5 script=$6
shift 6
rm -rf "$work"
mkdir -p "$work"
cd "$work"
"$ptdp" tokenize --format lines --output d.ptdp "$corpus" >/dev/null
# --output-filename: each process's stdout also lands in out/<job>/rank.<process>/stdout.
timeout 120 $mpirun -np "$np" --allow-run-as-root --oversubscribe --output-filename "$work/out" \
  "$ptdp" "$script" --num-layers 2 --hidden-size 32 --num-attention-heads 2 --seq-length 16 \
  --micro-batch-size 1 --global-batch-size 4 --train-iters 3 --log-interval 1 \
  --lr-warmup-iters 1 --eval-iters 1 --eval-interval 0 --sample-tokens 0 --num-threads 1 \
  --data-path d.ptdp "$@" >all.txt

fail() { echo "FAIL: $*" >&2; cat all.txt >&2; exit 1; }
# "layout: t=2 p=2 d=1, 4 ranks (1 in this process) | ..."
world=$(sed -n 's/^layout: .*, \([0-9][0-9]*\) ranks .*/\1/p' all.txt)
[ -n "$world" ] || fail "no layout line"
first=$(ls -d out/*/rank.0 | head -n 1)
[ -n "$first" ] || fail "no per-process output under out/"

# The report lines of one output, in order, must be ranks 0..world-1 on
# consecutive lines, all after the last iteration line.
check_lines() {
  awk -v world="$world" -v what="$1" '
    BEGIN { n = 0 }
    /^ iteration / { last_iter = NR }
    /^ rank [0-9]+ \(tp / {
      if (n > 0 && NR != prev + 1) { print what ": rank line " NR " does not follow line " prev; bad = 1 }
      if ($2 != n) { print what ": line " NR " reports rank " $2 ", expected rank " n; bad = 1 }
      if (n == 0) first_rank = NR
      prev = NR; n++
    }
    END {
      if (n != world) { print what ": " n " rank lines, expected " world; bad = 1 }
      if (!last_iter) { print what ": no iteration line"; bad = 1 }
      else if (n > 0 && first_rank < last_iter) { print what ": rank lines before the last iteration line " last_iter; bad = 1 }
      exit bad
    }' "$2" || fail "$1"
}
check_lines "mpirun's output" all.txt
check_lines "world rank 0's process" "$first/stdout"
for d in out/*/rank.*; do
  [ "$d" = "$first" ] && continue
  if grep -q '^ rank [0-9]' "$d/stdout"; then fail "$d printed report lines"; fi
done
echo "PASS: $world rank lines in order, from world rank 0's process only"
