#!/bin/sh
# bench_checkpoint_signal.sh LAUNCHER BENCH_CHECKPOINT WORKDIR — a signal while
# scripts/bench_checkpoint.lua holds checkpoints in its own directory removes
# that directory whole (ptdp.make_temp_dir's tree), and nothing else in --dir;
# a --dir it made goes at the end of a run.
launcher=$1 bench=$2 work=$3
rm -rf "$work" && mkdir -p "$work/dir" && cd "$work" || exit 1
echo "the user's" > dir/keep.txt
fail=0
# (Not INT: sh starts a background job with SIGINT ignored, and ptdp keeps it so.)
for sig in TERM HUP; do
  "$launcher" "$bench" --dir "$work/dir" --repeats 50 --num-layers 2 --hidden-size 64 \
    --num-attention-heads 2 --seq-length 32 >out.txt 2>&1 &
  pid=$!
  # Signalled once a round's checkpoint is there (its directory holds files).
  for i in $(seq 600); do
    [ -n "$(ls dir/ptdp_bench_checkpoint.*/round*/iter_*/model.h5 2>/dev/null)" ] && break
    sleep 0.05
  done
  kill -s $sig $pid
  wait $pid
  rc=$?
  left=$(ls -A dir)
  if [ $rc -ne 0 ] && [ "$left" = "keep.txt" ] && [ "$(cat dir/keep.txt)" = "the user's" ]; then
    echo "ok   SIG$sig during a round (exit $rc): its directory removed whole, the user's file kept"
  else
    echo "FAIL SIG$sig during a round: exit $rc, left in --dir: $left"; cat out.txt; fail=1
  fi
done
# A --dir the run made (an absolute made/sub) goes with a signal too: a save's
# commit had taken every directory above it off the cleanup's list.
"$launcher" "$bench" --dir "$work/made/sub" --repeats 50 --num-layers 2 --hidden-size 64 \
  --num-attention-heads 2 --seq-length 32 >out.txt 2>&1 &
pid=$!
for i in $(seq 600); do  # (past a commit: a committed iter_N has its manifest)
  [ -n "$(ls made/sub/ptdp_bench_checkpoint.*/round*/iter_[0-9]*[0-9]/manifest.json 2>/dev/null)" ] && break
  sleep 0.05
done
kill -s TERM $pid
wait $pid
rc=$?
if [ $rc -ne 0 ] && [ ! -e made ]; then
  echo "ok   SIGTERM with a --dir the run made: nothing left (exit $rc)"
else
  echo "FAIL SIGTERM with a --dir the run made: exit $rc, left: $(find made 2>/dev/null)"; cat out.txt; fail=1
fi
# A --dir the run made (new/sub) goes with it at the end; it stayed, empty.
"$launcher" "$bench" --dir "$work/new/sub" --repeats 1 --async-steps 4 --async-interval 2 --num-layers 2 \
  --hidden-size 32 --num-attention-heads 2 --seq-length 16 >out.txt 2>&1
rc=$?
if [ $rc -eq 0 ] && [ ! -e new ]; then
  echo "ok   a --dir the run made is removed at its end"
else
  echo "FAIL a --dir the run made: exit $rc, left: $(find new 2>/dev/null)"; cat out.txt; fail=1
fi
exit $fail
