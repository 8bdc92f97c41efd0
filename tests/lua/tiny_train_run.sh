# Sourced by the train_gpt.lua shell tests (`. "$(dirname "$0")/tiny_train_run.sh"`):
# takes the caller's LAUNCHER TRAIN_GPT CORPUS WORKDIR, starts in a fresh
# WORKDIR, and defines run ARGS...: a 2-iteration run of a one-layer model on
# CORPUS (tokenized into d.ptdp on first use) with ARGS added.
set -u
launcher=$1 script=$2 corpus=$3 work=$4
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
run() {
  "$launcher" "$script" --num-layers 1 --hidden-size 32 --num-attention-heads 2 --seq-length 16 \
    --micro-batch-size 2 --global-batch-size 4 --train-iters 2 --lr-warmup-iters 1 --eval-iters 1 \
    --eval-interval 0 --sample-tokens 0 --num-threads 1 --data-path d.ptdp --corpus "$corpus" \
    --corpus-format lines "$@"
}
# The same as the process itself (for `(run_exec ...) &`: $! is the launcher, to signal).
run_exec() {
  exec "$launcher" "$script" --num-layers 1 --hidden-size 32 --num-attention-heads 2 --seq-length 16 \
    --micro-batch-size 2 --global-batch-size 4 --train-iters 2 --lr-warmup-iters 1 --eval-iters 1 \
    --eval-interval 0 --sample-tokens 0 --num-threads 1 --data-path d.ptdp --corpus "$corpus" \
    --corpus-format lines "$@"
}
