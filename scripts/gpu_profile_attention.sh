#!/usr/bin/env bash
# Nsight Compute profile of the tensor-core attention kernels on a lent GPU
# machine, after `gpu_check.sh --only build` (it uses build-gpu): the first
# forward, dK dV and dQ kernel launches of `bench_gpu_ops attention` (b 2, 16 heads,
# s 2048, hd 128, bf16, dropout 0.1), with their stall reasons, and the SASS of
# flash_attention_mma.cu. Writes $OUT/ncu_attention.txt and
# $OUT/attention_sass.txt.xz; prints the headline figures last.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX")}  # the device tool sets OUT
mkdir -p "$OUT"
bench=build-gpu/tests/gpu/bench_gpu_ops
[[ -x $bench ]] || { echo "gpu_profile_attention: $bench is not built (run gpu_check.sh --only build first)" >&2; exit 2; }
# One launch of each kernel (the forward runs many times before the backward).
: >"$OUT/ncu_attention.txt"
for kernel in 3fwd 8bwd_dkdv 6bwd_dq; do
  timeout -k 5 "${PTDP_PROFILE_LIMIT:-60}" ncu --kernel-name-base mangled \
    --kernel-name "regex:flash_attention_mma_cu.*${kernel}I" --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
    --section SchedulerStats --section ComputeWorkloadAnalysis --section InstructionStats \
    --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' \
    "$bench" attention >>"$OUT/ncu_attention.txt" 2>&1
  echo "ncu $kernel: exit $?"
done
obj=$(find build-gpu -name 'flash_attention_mma.cu.o' | head -1)
[[ -n $obj ]] && cuobjdump -sass "$obj" | xz >"$OUT/attention_sass.txt.xz"
# Headline: per kernel, its time, throughputs, occupancy and the largest stall reasons.
grep -E "^  _ZN4ptdp|Executed Instructions  |Duration|Compute \(SM\) Throughput|Memory Throughput|Achieved Occupancy|Registers Per Thread|Warp Cycles Per Issued|Issued Ipc|Executed Ipc|No Eligible" \
  "$OUT/ncu_attention.txt" | cut -c1-150
grep -E "issue_stalled" "$OUT/ncu_attention.txt" | awk '$NF+0 >= 0.3' | cut -c1-150
