#!/usr/bin/env bash
# The same training run serially and under mpirun with a parallel layout:
# losses and gradient norms agree step by step.
#   train_equivalence.sh PTDP MPIRUN NP WORKDIR CORPUS [layout flags...]
set -euo pipefail
ptdp=$1 mpirun=$2 np=$3 work=$4 corpus=$5
shift 5
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$work"
cd "$work"
"$ptdp" tokenize --format fortune --output data.ptdp "$corpus" >/dev/null
"$ptdp" "$here/losses.lua" --data-path data.ptdp > serial.txt
timeout 120 $mpirun -np "$np" --allow-run-as-root --oversubscribe \
  "$ptdp" "$here/losses.lua" --data-path data.ptdp "$@" > mpi.txt
# fp32 sums in another order: 1e-5 relative (as the multirank thread tests).
paste serial.txt mpi.txt | awk '
  function rel(a, b) { d = a - b; if (d < 0) d = -d; return d / (a < 0 ? -a : a) }
  { n++; if (NF != 4 || rel($1, $3) > 1e-5 || rel($2, $4) > 1e-3) { print "step " n ": serial " $1 " " $2 ", mpi " $3 " " $4; bad = 1 } }
  END { if (n != 10) { print "expected 10 steps, got " n; bad = 1 } if (bad) exit 1; print n " steps agree" }'
