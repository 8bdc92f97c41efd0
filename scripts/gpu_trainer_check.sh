#!/usr/bin/env bash
# The trainer on a GPU, from the bundle scripts/pack_gpu_bundle.sh makes (the
# GPU machine lacks LuaJIT, HDF5, Open MPI and OpenBLAS): unpacks it, runs
# test_cuda_trainer (every layout on the one GPU against the CPU's serial run),
# then the launcher's training script in bf16 with (t, p, d) = (2, 2, 1), its
# loss falling. Called by scripts/gpu_check.sh; exit 1 when anything failed.
#   usage: bash scripts/gpu_trainer_check.sh [BUNDLE.tar.xz] [DEVICE]
#   (DEVICE cpu: a dry run of the script itself on a machine without a GPU)
set -uo pipefail
cd "$(dirname "$0")/.."
bundle=${1:-build/gpu_bundle.tar.xz}
device=${2:-cuda}
dir=$(mktemp -d -t ptdp_bundle.XXXXXX)  # under $TMPDIR
trap 'rm -rf -- "$dir"' EXIT  # (also on an early exit or a signal's)
trap 'exit 143' TERM
trap 'exit 130' INT
tar -C "$dir" -xJf "$bundle" || exit 1
bin=$dir/gpu_bundle/bin
export LD_LIBRARY_PATH=$dir/gpu_bundle/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
# The CUDA 13 libraries of PyTorch's wheels (nvidia/*/lib), where the toolkit's
# own directory lacks one.
wheels=$(python3 -c 'import glob, os, nvidia; print(":".join(sorted(glob.glob(os.path.join(list(nvidia.__path__)[0], "*", "lib")))))' 2>/dev/null)
[[ -n $wheels ]] && LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$wheels
# A deadlock is an error naming the rank and op within 20 s, not a cut step.
export PTDP_TEST_COMM_TIMEOUT_S=${PTDP_TEST_COMM_TIMEOUT_S:-20}
export PTDP_LUA_PATH=$PWD/lua PTDP_TEST_DATA_DIR=$PWD/tests/fixtures PTDP_TEST_GPU_DEVICE=$device
if ldd "$bin/test_cuda_trainer" "$bin/test_nccl_comm" "$bin/ptdp" | grep "not found"; then
  echo "libraries missing on this machine (above): the bundle needs them too"
  exit 1
fi
rc=0
echo "== test_cuda_trainer (device $device)"
"$bin/test_cuda_trainer" || rc=1

echo "== scripts/train_gpt.lua --device $device --bf16, (t, p, d) = (2, 2, 1)"
"$bin/ptdp" tokenize --format fortune --output "$dir/tiny.ptdp" tests/fixtures/tiny_corpus.txt || rc=1
"$bin/ptdp" scripts/train_gpt.lua --device "$device" --bf16 --data-path "$dir/tiny.ptdp" \
  --num-layers 4 --hidden-size 128 --num-attention-heads 4 --seq-length 64 \
  --micro-batch-size 4 --global-batch-size 16 --tensor-model-parallel-size 2 \
  --pipeline-model-parallel-size 2 --train-iters 60 --lr 3e-3 --log-interval 20 \
  --eval-interval 0 --eval-iters 2 --sample-tokens 40 --comm-timeout "$PTDP_TEST_COMM_TIMEOUT_S" \
  --log-json "$dir/log.jsonl" || rc=1
# The loss must fall: the first logged interval's mean above the last's.
python3 - "$dir/log.jsonl" <<'EOF' || rc=1
import json, sys
train = [r for r in map(json.loads, open(sys.argv[1])) if r.get("kind") == "train"]
first, last = train[0]["lm_loss"], train[-1]["lm_loss"]
print(f"lm loss {first:.3f} -> {last:.3f}")
sys.exit(0 if last < first - 0.3 else 1)
EOF
# What the planner's DGX H100 preset (data-sheet figures, not yet calibrated on
# a GPU) predicts for gpu_check's bench_gpt run (1.3B, b=2, bf16, full
# recomputation): compare its iteration_s with bench_gpt.log's step time.
bench=(--num-gpus 1 --num-layers 24 --hidden-size 2048 --num-attention-heads 16
  --seq-length 2048 --vocab-size 50304 --global-batch-size 2 --micro-batch-size 2
  --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --bf16
  --recompute-granularity full)
echo "== ptdp plan's prediction for bench_gpu_gpt --bf16 1 (dgx-h100 preset)"
"$bin/ptdp" plan --machine dgx-h100 "${bench[@]}" | tail -1
# The same with this GPU measured through ptdp's ops (--calibrate; off a GPU
# the dry run measures the CPU): its iteration_s against bench_gpt's step.
echo "== the same, calibrated on this device (ptdp plan --calibrate --device $device)"
"$bin/ptdp" plan --calibrate --device "$device" --machine dgx-h100 "${bench[@]}" |
  grep -E "calibrated|^tflops_per_gpu" || rc=1

# Last, and cut short (one GPU runs only its one-rank cases): the trainer's
# checks above matter more within gpu_check's time limit.
echo "== test_nccl_comm (the communicator conformance suite on NCCL, one rank per GPU)"
timeout -k 5 45 "$bin/test_nccl_comm"
nccl_rc=$?
[[ $nccl_rc == 0 || $nccl_rc == 77 ]] || rc=1
exit $rc
