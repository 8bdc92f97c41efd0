#!/usr/bin/env bash
# One call on a lent GPU machine (the device tool's `run`, carrying
# build/gpu_bundle.tar.xz from scripts/pack_gpu_bundle.sh): probe the machine,
# build the CUDA ops with PTDP_GPU_ONLY (that machine has CUDA, cuBLAS, CMake,
# ninja and PyTorch, but none of LuaJIT, HDF5, MPI or OpenBLAS), run the `gpu`
# test label, the trainer on the GPU (from the bundle), time ptdp's own training
# step and PyTorch's on the same model, benchmark the ops, run compute-sanitizer,
# and print a summary table last. Logs go to $OUT (or ./gpu_check_out).
# Each step has a time limit, and every limit is cut to what is left of 9 minutes,
# so the summary always prints; the steps run most-wanted first.
#   usage: bash scripts/gpu_check.sh [--quick|--no-torch]
#   (--quick: no torch.compile and fewer steps; --no-torch: skip the PyTorch baseline)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu_check_out}
mkdir -p "$OUT"
quick=0 torch=1
[[ "${1:-}" == --quick ]] && quick=1
[[ "${1:-}" == --no-torch ]] && torch=0
declare -a summary=()
deadline=$((SECONDS + 530))
step() {  # step NAME LIMIT_S LOG CMD...: runs CMD with a time limit, records its outcome
  local name=$1 limit=$2 log=$3
  shift 3
  local t0=$SECONDS left=$((deadline - SECONDS))
  if ((left < 10)); then
    summary+=("$(printf '%-22s %-28s %4ds  %s' "$name" "SKIPPED (out of time)" 0 "$log")")
    return 1
  fi
  ((limit > left)) && limit=$left
  timeout -k 10 "$limit" "$@" >"$OUT/$log" 2>&1  # -k: a step deaf to SIGTERM is killed
  local rc=$?
  local what=ok
  ((rc == 124 || rc == 137)) && what="TIMED OUT after ${limit}s"
  ((rc != 0 && rc != 124 && rc != 137)) && what="FAILED (exit $rc)"
  summary+=("$(printf '%-22s %-28s %4ds  %s' "$name" "$what" $((SECONDS - t0)) "$log")")
  echo "== $name: $what ($((SECONDS - t0)) s)"
  return $rc
}

jobs=$(nproc)
# The machine, then the GPU-only configure (one log: the device tool returns at most 8 files).
step setup 150 setup.log bash -c '
  nvidia-smi; nvcc --version; cmake --version | head -1; ninja --version; uname -a
  nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,power.limit --format=csv
  python3 -c "import torch; print(\"torch\", torch.__version__, torch.version.cuda, torch.cuda.get_device_name())"
  python3 -c "import nvidia.nccl, os; d=list(nvidia.nccl.__path__)[0]; print(\"nccl wheel:\", d); [print(\" \", r, f) for r,_,fs in os.walk(d) for f in fs if \"nccl\" in f]"
  ls /usr/local/cuda/lib64 | grep -E "cublas|nccl|cudart" || true
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DPTDP_GPU_ONLY=ON -DCMAKE_CUDA_ARCHITECTURES=90'
step build 300 build.log cmake --build build-gpu -j"$jobs"
step tests 180 tests.log ctest --test-dir build-gpu -L gpu --output-on-failure
# The whole trainer on the GPU, from the full build packed on the development
# machine (scripts/pack_gpu_bundle.sh; carried as build/gpu_bundle.tar.xz).
if [[ -f build/gpu_bundle.tar.xz ]]; then
  step trainer 150 trainer.log bash scripts/gpu_trainer_check.sh build/gpu_bundle.tar.xz
else
  summary+=("$(printf '%-22s %-28s %4ds  %s' trainer "SKIPPED (no bundle)" 0 \
    "build/gpu_bundle.tar.xz: run scripts/pack_gpu_bundle.sh, carry it")")
fi
# ptdp's own training step of the 1.3B GPT: bf16 (GEMMs and flash attention on
# tensor cores) with full recompute, then without it (PyTorch's eager flash
# run recomputes nothing: the like-for-like ratio), bf16 with unfused
# attention, then fp32. (One log for all: the device tool returns at most 8 files.)
step bench_gpt 240 bench_gpt.log bash -c "rc=0
  build-gpu/tests/gpu/bench_gpu_gpt --steps $((quick ? 2 : 3)) --bf16 1 --flash 1 --profile 1 || rc=1
  build-gpu/tests/gpu/bench_gpu_gpt --steps 2 --bf16 1 --flash 1 --recompute 0 || rc=1
  build-gpu/tests/gpu/bench_gpu_gpt --steps 2 --bf16 1 || rc=1
  build-gpu/tests/gpu/bench_gpu_gpt --steps 2 --flash 1 || rc=1
  exit \$rc"
if ((!torch)); then
  :
elif ((quick)); then
  step bench_torch 300 bench_torch.log env PYTHONUNBUFFERED=1 python3 scripts/bench_torch_gpu.py --skip-compile --steps 5
else
  step bench_torch 180 bench_torch.log env PYTHONUNBUFFERED=1 python3 scripts/bench_torch_gpu.py
fi

step bench_ops 90 bench_ops.log build-gpu/tests/gpu/bench_gpu_ops
step memcheck 210 memcheck.log bash -c 'rc=0
  mkdir -p build-gpu/memcheck
  for t in build-gpu/tests/gpu/test_cuda_*; do
    [[ -f "$t" && -x "$t" ]] || continue
    # The whole model under memcheck takes too long for one call; its ops are covered.
    [[ $(basename "$t") == test_cuda_gpt ]] && continue
    log=build-gpu/memcheck/$(basename "$t").log
    # API errors off: the device tests provoke out-of-memory on purpose.
    compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 1 "$t" >"$log" 2>&1 ||
      { rc=1; cat "$log"; }
    echo "$(basename "$t"): $(grep "ERROR SUMMARY" "$log")"
  done
  # racecheck: shared-memory hazards of the kernels that reduce in shared
  # memory (layernorm, softmax, the loss, flash attention), each cut to 60 s.
  for name in test_cuda_layers test_cuda_loss test_cuda_flash_attention; do
    t=build-gpu/tests/gpu/$name
    [[ -x "$t" ]] || continue
    log=build-gpu/memcheck/$name.racecheck.log
    timeout -k 5 60 compute-sanitizer --tool racecheck --error-exitcode 1 "$t" >"$log" 2>&1
    r=$?
    if ((r == 124 || r == 137)) && ! grep -q "Race reported\|hazard" "$log"; then
      echo "$name racecheck: cut at 60 s, no hazard reported until then"  # not a failure
    else
      ((r != 0)) && { rc=1; tail -40 "$log"; }
      echo "$name racecheck: $(grep "RACECHECK SUMMARY\|ERROR SUMMARY" "$log" | tail -1)"
    fi
  done; exit $rc'
echo
grep -hE -A1 "FAIL|rror" "$OUT/tests.log" "$OUT/trainer.log" "$OUT/memcheck.log" 2>/dev/null | head -60
echo
python3 scripts/gpu_summary.py "$OUT" 2>&1
echo
echo "== summary (logs in $OUT)"
printf '%s\n' "${summary[@]}"
