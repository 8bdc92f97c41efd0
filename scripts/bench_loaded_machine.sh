#!/usr/bin/env bash
# A CPU training run on a machine whose cores are busy with other work: the
# time per step with every core free, then beside one busy process per core
# (a fair scheduler gives the run half of each core: 2x slower is its share),
# with the launcher's default (waiting OpenMP threads sleep) and with
# OMP_WAIT_POLICY=ACTIVE (they spin, OpenMP's usual default).
#   bash scripts/bench_loaded_machine.sh [build/ptdp] [ITERS]
# Works in a temporary directory of its own, removed at the end; prints
#   idle_step_ms=... loaded_step_ms=... loaded_active_step_ms=... fair_share_x=2
set -euo pipefail
ptdp=$(realpath "${1:-build/ptdp}")
iters=${2:-20}
# Checked before any work (a bad value had ended the script silently: the
# run's error went into the pipe that reads its log line).
if ! [[ $iters =~ ^[0-9]{1,6}$ ]] || ((10#$iters < 1 || 10#$iters > 100000)); then
  echo "bench_loaded_machine: ITERS must be a whole number in [1, 100000], got '$iters'" >&2
  exit 2
fi
[[ -x $ptdp ]] || { echo "bench_loaded_machine: '$ptdp' is not the ptdp launcher (an executable file)" >&2; exit 2; }
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/ptdp_bench_loaded.XXXXXX")
busy=()
cleanup() {
  for p in "${busy[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
cd "$work"
# (nproc without OMP_NUM_THREADS and OMP_THREAD_LIMIT, which GNU nproc reports instead.)
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
"$ptdp" tokenize --format lines --output d.ptdp "$repo/tests/fixtures/capi_corpus.txt" >/dev/null
# The mean step time over the run's last $iters steps (its one log line).
step_ms() {
  env "$@" "$ptdp" "$repo/scripts/train_gpt.lua" --num-layers 2 --hidden-size 256 \
    --num-attention-heads 4 --seq-length 128 --micro-batch-size 4 --global-batch-size 8 \
    --train-iters "$iters" --log-interval "$iters" --eval-iters 1 --eval-interval 0 \
    --sample-tokens 0 --num-threads "$cores" --data-path d.ptdp |  # (its errors to stderr, said)
    sed -n 's/.*elapsed time per iteration (ms): *\([0-9.]*\).*/\1/p' | tail -1
}
idle=$(step_ms)
[[ -n $idle ]] || { echo "bench_loaded_machine: the run printed no step time (run it alone to see why)" >&2; exit 1; }
for ((i = 0; i < cores; i++)); do
  sh -c 'while :; do :; done' &
  busy+=($!)
done
loaded=$(step_ms)
active=$(step_ms OMP_WAIT_POLICY=ACTIVE)
echo "$cores cores; a step of a small model (h 256, 2 layers, s 128) on $cores OpenMP threads:"
echo "  every core free: $idle ms"
echo "  beside $cores busy processes, waiting threads asleep (the default): $loaded ms" \
     "= $(awk "BEGIN{printf \"%.1f\", $loaded / $idle}")x (a fair share is 2x)"
echo "  beside $cores busy processes, OMP_WAIT_POLICY=ACTIVE: $active ms" \
     "= $(awk "BEGIN{printf \"%.1f\", $active / $idle}")x"
echo "idle_step_ms=$idle loaded_step_ms=$loaded loaded_active_step_ms=$active fair_share_x=2"
