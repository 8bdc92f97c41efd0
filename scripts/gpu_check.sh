#!/usr/bin/env bash
# One call on a lent GPU machine (the device tool's `run`, carrying
# build/gpu_bundle.tar.xz from scripts/pack_gpu_bundle.sh), shaped for a
# 15-minute lease: the first call ends within PTDP_GPU_DEADLINE seconds (360
# by default) so a second, narrower call (--only) still fits.
# Steps, never-run code first; each capped, each cap cut to what is left:
#   build    configure + build the CUDA side with PTDP_GPU_ONLY (ninja -k 0;
#            meanwhile `trainer` runs the bundle, which needs no build)
#   trainer  the whole trainer on the GPU from the bundle (every layout on one
#            GPU against the CPU serial run; 20 s communicator timeout)
#   tests    the `gpu` tests one by one, the model first, each capped, output
#            line-buffered; a CUDA error reruns the case with
#            CUDA_LAUNCH_BLOCKING=1 so the log names the kernel
#   bench    ptdp's 1.3B training step: bf16 flash without recompute (the
#            like-for-like figure) first, unfused without recompute, 4
#            micro-batches a step, micro-batches of 8 sequences, then flash
#            with recompute + op profile
#   torch    PyTorch eager + flash on the same model, batch, clipping, AdamW
#   ops      bench_gpu_ops (GEMMs, element-wise kernels against copy)
#   sanitize compute-sanitizer memcheck + racecheck (only with --full or --only;
#            PTDP_SANITIZE="test_cuda_x ..." picks the tests)
# Logs and summary.txt go to $OUT (at most 8 files); the summary prints last.
#   usage: bash scripts/gpu_check.sh [--only STEP[,STEP]] [--skip STEP[,STEP]]
#                                    [--full] [--dry-run]
#   --full: also fp32/unfused variants, torch.compile, the sanitizer sweep
#   --dry-run: run on this machine's CPU (no GPU): builds nothing, prints the
#              summary's shape with every GPU step reported as skipped
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX")}  # the device tool sets OUT
mkdir -p "$OUT"
all_steps="build trainer tests bench torch ops sanitize"
only="" skip="" full=0 dry=0
while (($#)); do
  case $1 in
    --only) only=${2:?--only needs STEP[,STEP]}; shift 2 ;;
    --skip) skip=${2:?--skip needs STEP[,STEP]}; shift 2 ;;
    --full) full=1; shift ;;
    --dry-run) dry=1; shift ;;
    *) echo "gpu_check: unknown option '$1' (allowed: --only STEPS, --skip STEPS, --full, --dry-run;" \
         "steps: $all_steps)" >&2; exit 2 ;;
  esac
done
for s in ${only//,/ } ${skip//,/ }; do
  [[ " $all_steps " == *" $s "* ]] || { echo "gpu_check: unknown step '$s' (steps: $all_steps)" >&2; exit 2; }
done
wanted() {  # wanted STEP: is STEP selected by --only/--skip (sanitize needs --full or --only)
  [[ -n $only ]] && { [[ ",$only," == *",$1,"* ]]; return; }
  [[ ",$skip," == *",$1,"* ]] && return 1
  [[ $1 == sanitize ]] && ((!full)) && return 1
  return 0
}
start=$SECONDS
deadline=$((SECONDS + ${PTDP_GPU_DEADLINE:-360}))
declare -a summary=()
note() { summary+=("$(printf '%-10s %-24s %4ds  %s' "$1" "$2" "${3:-0}" "${4:-}")"); }
# again_if_cuda_error RC NAME LOG CMD...: after a step that failed with a CUDA
# error (illegal address, misaligned, launch failure), CMD once more with
# CUDA_LAUNCH_BLOCKING=1, so that the log names the kernel.
again_if_cuda_error() {
  local rc=$1 name=$2 log=$3
  shift 3
  ((rc != 0 && rc != 77 && rc != 124 && rc != 137)) || return 0
  tail -30 "$OUT/$log" | grep -qiE "illegal|misaligned|launch failure|cuda error" || return 0
  echo "== $name again, CUDA_LAUNCH_BLOCKING=1" >>"$OUT/$log"
  CUDA_LAUNCH_BLOCKING=1 step "$name!" 60 "$log" "$@"
}
capped() {  # capped LIMIT_S LOG CMD...: CMD under a time limit, line-buffered into LOG
  local limit=$1 log=$2
  shift 2
  timeout -k 5 "$limit" stdbuf -oL -eL "$@" >>"$OUT/$log" 2>&1
}
record() {  # record NAME RC LIMIT_S SECONDS LOG: a step's outcome into the summary
  local what
  case $2 in
    0) what=passed ;;
    77) what="skipped (no device)" ;;
    124 | 137) what="cut at ${3}s" ;;
    *) what="FAILED (exit $2)" ;;
  esac
  note "$1" "$what" "$4" "$5"
  echo "== $1: $what ($4 s)"
}
limit_for() { local left=$((deadline - SECONDS)); echo $(($1 < left ? $1 : left)); }
step() {  # step NAME LIMIT_S LOG CMD...: CMD under a time limit, its outcome recorded
  local name=$1 limit log=$3 t0=$SECONDS
  limit=$(limit_for "$2")
  shift 3
  if ((limit < 10)); then note "$name" "cut (out of time)" 0 "$log"; return 124; fi
  capped "$limit" "$log" "$@"
  local rc=$?
  record "$name" $rc "$limit" $((SECONDS - t0)) "$log"
  return $rc
}

if ((dry)); then  # the shape of the summary, on a machine without a GPU
  for s in $all_steps; do wanted "$s" && note "$s" "skipped (dry run)"; done
  if [[ -f build/gpu_bundle.tar.xz ]] && wanted trainer; then
    step trainer 300 trainer.log bash scripts/gpu_trainer_check.sh build/gpu_bundle.tar.xz cpu
  fi
else
  step probe 30 setup.log bash -c '
    nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,power.limit,temperature.gpu --format=csv
    nvcc --version | tail -1; uname -r
    python3 -c "import torch; print(\"torch\", torch.__version__, torch.version.cuda, torch.cuda.get_device_name())"'
  # The trainer from the bundle needs no build: it runs on the GPU while the CPU builds.
  trainer_pid=""
  if wanted trainer; then
    if [[ -f build/gpu_bundle.tar.xz ]]; then
      # (its communicators time out after 20 s: PTDP_TEST_COMM_TIMEOUT_S there)
      trainer_limit=$(limit_for 200)
      (t0=$SECONDS
       capped "$trainer_limit" trainer.log bash scripts/gpu_trainer_check.sh build/gpu_bundle.tar.xz
       echo "$? $((SECONDS - t0))" >"$OUT/trainer.rc") &
      trainer_pid=$!
    else
      note trainer "skipped (no bundle)" 0 "run scripts/pack_gpu_bundle.sh, carry build/gpu_bundle.tar.xz"
    fi
  fi
  need_build=0
  for s in build tests bench ops sanitize; do wanted "$s" && need_build=1; done
  if ((need_build)); then
    step build 240 build.log bash -c "cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DPTDP_GPU_ONLY=ON -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null &&
      cmake --build build-gpu -j$(nproc) -- -k 0"
  fi
  if [[ -n $trainer_pid ]]; then  # its exit status and time, from the subshell
    wait "$trainer_pid"
    read -r rc secs <"$OUT/trainer.rc"
    record trainer "$rc" "$trainer_limit" "$secs" trainer.log
    rm -f "$OUT/trainer.rc"
  fi
  g=build-gpu/tests/gpu
  if wanted tests; then
    for t in test_cuda_gpt test_cuda_flash_attention test_cuda_layers test_cuda_llama_ops \
             test_cuda_dropout test_cuda_loss test_cuda_gemm test_cuda_device; do
      if [[ ! -x $g/$t ]]; then note "$t" "FAILED (not built)" 0 build.log; continue; fi
      echo "== $t" >>"$OUT/tests.log"
      step "${t#test_cuda_}" 75 tests.log "$g/$t"
      again_if_cuda_error $? "${t#test_cuda_}" tests.log "$g/$t"
    done
  fi
  if wanted bench; then
    if [[ -x $g/bench_gpu_gpt ]]; then
      step bench_nr 75 bench_gpt.log $g/bench_gpu_gpt --steps 3 --bf16 1 --flash 1 --recompute 0
      # (small: 2 layers, one step)
      again_if_cuda_error $? bench_nr bench_gpt.log $g/bench_gpu_gpt --layers 2 --steps 1 --bf16 1 \
        --flash 1 --recompute 0
      # Unfused attention without recompute: faster than the fused kernels on an H200 (docs/gpu.md).
      step bench_unf_nr 60 bench_gpt.log $g/bench_gpu_gpt --steps 3 --bf16 1 --flash 0 --recompute 0
      # A training run's step: 4 micro-batches accumulated, then one optimizer pass.
      step bench_mb4 60 bench_gpt.log $g/bench_gpu_gpt --steps 2 --microbatches 4 --bf16 1 --flash 1 \
        --recompute 0
      # Micro-batches of 8 sequences, four a step: the headline figure (docs/gpu.md), with
      # PyTorch on the same batch in the torch step.
      step bench_b8 60 bench_gpt.log $g/bench_gpu_gpt --steps 2 --batch 8 --microbatches 4 --bf16 1 \
        --flash 1 --recompute 0
      step bench_rc 75 bench_gpt.log $g/bench_gpu_gpt --steps 2 --bf16 1 --flash 1 --profile 1
      if ((full)); then
        step bench_unf 90 bench_gpt.log $g/bench_gpu_gpt --steps 2 --bf16 1
        step bench_f32 90 bench_gpt.log $g/bench_gpu_gpt --steps 2 --flash 1
      fi
    else
      note bench "FAILED (not built)" 0 build.log
    fi
  fi
  if wanted torch; then
    if ((full)); then
      step torch 240 bench_torch.log env PYTHONUNBUFFERED=1 python3 scripts/bench_torch_gpu.py
    else
      step torch 70 bench_torch.log env PYTHONUNBUFFERED=1 python3 scripts/bench_torch_gpu.py \
        --skip-gemms --only-flash --steps 5
    fi
    # The same step as bench_b8 (b 8, 4 micro-batches accumulated).
    step torch_b8 60 bench_torch.log env PYTHONUNBUFFERED=1 python3 scripts/bench_torch_gpu.py \
      --skip-gemms --only-flash --steps 3 --batch 8 --microbatches 4
  fi
  wanted ops && step ops 50 bench_ops.log $g/bench_gpu_ops
  if wanted sanitize; then
    # The newest kernels only (tensor-core attention, the model's ops), each capped;
    # PTDP_SANITIZE names other test binaries.
    sanitize=${PTDP_SANITIZE:-test_cuda_flash_attention test_cuda_layers test_cuda_loss test_cuda_dropout}
    for t in $sanitize; do
      [[ -x $g/$t ]] || { note "mc:$t" "FAILED (not built)"; continue; }
      step "mc:${t#test_cuda_}" 60 memcheck.log compute-sanitizer --tool memcheck --print-limit 20 \
        --report-api-errors no --error-exitcode 1 "$g/$t"
    done
    for t in $sanitize; do
      [[ $t == test_cuda_dropout ]] && continue  # no shared memory
      [[ -x $g/$t ]] && step "rc:${t#test_cuda_}" 60 memcheck.log compute-sanitizer --tool racecheck \
        --print-limit 20 --error-exitcode 1 "$g/$t"
    done
  fi
  nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv >>"$OUT/setup.log" 2>&1
fi

{
  echo
  echo "== first failing lines"
  for log in build tests trainer bench_gpt memcheck; do
    [[ -f $OUT/$log.log ]] || continue
    # (not the passing tests' own tallies: "0 checks failed", "... refused  ok")
    grep -E "FAIL|Failure|failed|rror:|error |illegal|misaligned|not found|mismatch" "$OUT/$log.log" |
      grep -vE " ok$|(^| )0 (device )?checks failed|^0 failure|ERROR SUMMARY: 0 " | head -8 | sed "s/^/$log: /"
  done
  echo
  python3 scripts/gpu_summary.py "$OUT" 2>&1
  echo
  echo "== GPU after the run"; tail -2 "$OUT/setup.log" 2>/dev/null
  echo
  echo "== summary ($((SECONDS - start)) s; logs in $OUT)"
  printf '%s\n' "${summary[@]}"
} | tee "$OUT/summary.txt"
