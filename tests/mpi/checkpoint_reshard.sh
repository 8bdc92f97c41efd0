#!/usr/bin/env bash
# Checkpoints under mpirun (parallel HDF5 over MPI-IO): saved by one layout,
# loaded by others, the continued run is the serial run.
#   checkpoint_reshard.sh PTDP MPIRUN WORKDIR CORPUS
# 1. serial: 10 steps
# 2. np 8 at (t, p, d, v) = (2, 2, 2, 2): 5 steps, saves iteration 5
#    -> np 4 at (1, 4, 1) loads it and runs steps 6-10
#    -> one process at (4, 1, 2) (thread ranks) loads it and runs steps 6-10
#    -> np 2 at (2, 1, 1) loads it and runs steps 6-10
# 3. np 2 hosting (2, 2, 2) as 4 thread ranks each: 5 steps, saves
#    -> one serial process loads it and runs steps 6-10
# Each continued run equals the serial run's steps 6-10 up to summation order.
set -euo pipefail
ptdp=$1 mpirun=$2 work=$3 corpus=$4
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work"
mkdir -p "$work"
cd "$work"
mpi() { local np=$1; shift; timeout 120 $mpirun -np "$np" --allow-run-as-root --oversubscribe "$ptdp" "$here/losses.lua" --data-path data.ptdp "$@"; }
"$ptdp" tokenize --format fortune --output data.ptdp "$corpus" >/dev/null
"$ptdp" "$here/losses.lua" --data-path data.ptdp > serial.txt

mpi 8 --steps 5 --save ck8 --save-interval 5 --tensor-model-parallel-size 2 \
  --pipeline-model-parallel-size 2 --data-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1 > a.txt
mpi 4 --steps 5 --load ck8 --pipeline-model-parallel-size 4 > b.txt
"$ptdp" "$here/losses.lua" --data-path data.ptdp --steps 5 --load ck8 \
  --tensor-model-parallel-size 4 --data-parallel-size 2 > c.txt
# each process one tensor rank: it reads only its column blocks (strided)
mpi 2 --steps 5 --load ck8 --tensor-model-parallel-size 2 > f.txt
mpi 2 --steps 5 --save ck2 --save-interval 5 --tensor-model-parallel-size 2 \
  --pipeline-model-parallel-size 2 --data-parallel-size 2 > d.txt
"$ptdp" "$here/losses.lua" --data-path data.ptdp --steps 5 --load ck2 > e.txt
"$ptdp" ckpt verify ck8 >/dev/null
"$ptdp" ckpt verify ck2 >/dev/null

# fp32 sums in another order: 1e-5 relative on the loss, 1e-3 on the grad norm
# (as train_equivalence.sh).
compare() {
  paste serial.txt <(cat "$1" "$2") | awk -v name="$3" '
    function rel(a, b) { d = a - b; if (d < 0) d = -d; return d / (a < 0 ? -a : a) }
    { n++; if (NF != 4 || rel($1, $3) > 1e-5 || rel($2, $4) > 1e-3) { print name " step " n ": serial " $1 " " $2 ", resumed " $3 " " $4; bad = 1 } }
    END { if (n != 10) { print name ": expected 10 steps, got " n; bad = 1 } if (bad) exit 1; print name ": 10 steps agree" }'
}
compare a.txt b.txt "np8 (2,2,2,v2) -> np4 (1,4,1)"
compare a.txt c.txt "np8 (2,2,2,v2) -> threads (4,1,2)"
compare a.txt f.txt "np8 (2,2,2,v2) -> np2 (2,1,1)"
compare d.txt e.txt "np2 x 4 threads (2,2,2) -> serial"

# generate under mpirun: every process generates, the process of world rank 0
# prints (the text came out once per process), the same text as one process's.
"$ptdp" generate --load ck2 --prompt "The " --max-new-tokens 8 > gen1.txt
timeout 120 $mpirun -np 2 --allow-run-as-root --oversubscribe "$ptdp" generate --load ck2 --prompt "The " \
  --max-new-tokens 8 --tensor-model-parallel-size 2 > gen2.txt
if ! cmp -s gen1.txt gen2.txt; then
  echo "generate under mpirun printed:"; cat gen2.txt; echo "one process printed:"; cat gen1.txt
  exit 1
fi
echo "generate under mpirun: one copy of the text"
