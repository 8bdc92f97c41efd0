#!/bin/sh
# preemption.sh LAUNCHER TRAIN_GPT CORPUS WORKDIR — Megatron's exit flags in
# train_gpt.lua: --exit-interval and --exit-duration-in-mins save and end the
# run with exit 0; SIGTERM under --exit-signal-handler finishes the step, saves
# it and exits 0, and the run resumes from that checkpoint; a metrics file that
# cannot be written does not stop training; a run whose every step skipped its
# update exits non-zero.
. "$(dirname "$0")/tiny_train_run.sh"
fail=0
check() {  # check WHAT CONDITION...
  what=$1
  shift
  if "$@"; then echo "ok   $what"; else echo "FAIL $what"; fail=1; fi
}

run --train-iters 5 --exit-interval 2 --save every2 >out_interval.txt 2>&1
rc=$?
cat out_interval.txt
check "--exit-interval: exit 0" [ $rc -eq 0 ]
check "--exit-interval: says why and what it saved" \
  grep -q "exiting: --exit-interval 2 reached at iteration 2; saved .*every2/iter_0000002" out_interval.txt
check "--exit-interval: no final evaluation" sh -c '! grep -q "final validation loss" out_interval.txt'
check "--exit-interval: the checkpoint is there" [ -d every2/iter_0000002 ]

run --train-iters 5 --exit-duration-in-mins 0.00001 >out_duration.txt 2>&1
rc=$?
cat out_duration.txt
check "--exit-duration-in-mins: exit 0 after the first step, nothing to save" \
  sh -c "[ $rc -eq 0 ] && grep -q 'exiting: --exit-duration-in-mins 1e-05: .* at iteration 1; nothing saved (no --save)' out_duration.txt"

# SIGTERM in the middle of a long run: the step in progress is finished and saved.
(run_exec --train-iters 1000000 --exit-signal-handler --save sig --log-interval 1 >out_signal.txt 2>&1) &
pid=$!
i=0
while ! grep -q "^ iteration" out_signal.txt 2>/dev/null && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
kill -TERM $pid
wait $pid
rc=$?
cat out_signal.txt
check "SIGTERM: exit 0" [ $rc -eq 0 ]
check "SIGTERM: the handler's message" grep -q "ptdp: signal received: the run ends after this step or evaluation" out_signal.txt
it=$(sed -n 's/.*exiting: SIGTERM received at iteration \([0-9]*\); saved .*sig\/iter_0*\([0-9]*\)$/\1 \2/p' out_signal.txt)
check "SIGTERM: the step in progress saved ($it)" sh -c "[ -n '$it' ] && [ \$(echo $it | cut -d' ' -f1) = \$(echo $it | cut -d' ' -f2) ]"
n=${it%% *}
run --train-iters 1000000 --load sig --log-interval 1 --exit-interval $((n + 1)) >out_resume.txt 2>&1
rc=$?
cat out_resume.txt
check "SIGTERM: the run resumes from iteration $n" \
  sh -c "[ $rc -eq 0 ] && grep -q '^ iteration *$((n + 1))/' out_resume.txt"

# SIGTERM during an evaluation (a long one, which the signal must cut short):
# the run ends there, the model saved, without another step or the rest of the
# evaluation. After the last step (the final evaluation) and between steps.
sigterm_in_eval() {  # sigterm_in_eval NAME ARGS...: the signal once iteration 2 is logged
  name=$1
  shift
  (run_exec --exit-signal-handler --log-interval 1 --eval-iters 2000000 "$@" >out_$name.txt 2>&1) &
  pid=$!
  i=0
  while ! grep -q "^ iteration *2/" out_$name.txt 2>/dev/null && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
  sleep 0.5
  kill -TERM $pid
  wait $pid
  rc=$?
  cat out_$name.txt
}
sigterm_in_eval final_eval --save fe
check "SIGTERM in the final evaluation: exit 0, it ends there, the last step's checkpoint named" \
  sh -c "[ $rc -eq 0 ] && grep -q 'exiting: SIGTERM received during the evaluation at iteration 2; saved .*fe/iter_0000002' out_final_eval.txt && ! grep -q 'final validation loss' out_final_eval.txt"
sigterm_in_eval mid_eval --train-iters 10 --eval-interval 2 --save-interval 1000 --save me
check "SIGTERM in an evaluation between steps: saved there, no further step" \
  sh -c "[ $rc -eq 0 ] && grep -q 'exiting: SIGTERM received during the evaluation at iteration 2; saved .*me/iter_0000002' out_mid_eval.txt && ! grep -q '^ iteration *3/' out_mid_eval.txt && [ -f me/iter_0000002/manifest.json ]"

# A metrics file that stops taking writes after its first record (a full
# disk: the file size limit, 1 block, passed by the first iteration's record).
# (The output goes through a pipe, which the limit does not cover.)
(trap '' XFSZ; ulimit -f 1; run --log-json metrics.jsonl --log-interval 1; echo $? >rc_log.txt) 2>&1 |
  cat >out_log.txt
rc=$(cat rc_log.txt)
cat out_log.txt
check "--log-json failing mid-run: reported, training goes on, exit 0" \
  sh -c "[ $rc -eq 0 ] && grep -q 'ptdp: --log-json: .*the run goes on without it' out_log.txt && grep -q 'final validation loss' out_log.txt"
check "--log-json failing mid-run: the file keeps whole records only" \
  python3 -c "import json, sys; [json.loads(l) for l in open('metrics.jsonl')]"

# fp16 with a static loss scale of 1e30: every gradient overflows.
run --fp16 --loss-scale 1e30 >out_skipped.txt 2>&1
rc=$?
cat out_skipped.txt
check "every step skipped: exit non-zero with the reason" \
  sh -c "[ $rc -ne 0 ] && grep -q 'every one of the 2 steps of this run skipped its update' out_skipped.txt"
# SIGTERM without --exit-signal-handler while a checkpoint is being written
# (a model large enough to catch it there): the run ends as the signal would
# end it, the unfinished iter_N.tmp goes with it, the earlier checkpoint stays.
(run_exec --num-layers 4 --hidden-size 512 --num-attention-heads 8 --train-iters 1000000 \
  --save inter --save-interval 1 >out_inter.txt 2>&1) &
pid=$!
tries=0
until [ -d inter/iter_0000002.tmp ] || [ $tries -ge 6000 ]; do tries=$((tries + 1)); sleep 0.005; done
kill -TERM $pid
wait $pid
rc=$?
check "SIGTERM while saving: exit 143" [ $rc -eq 143 ]
check "SIGTERM while saving: no iter_N.tmp left" sh -c "! ls -d inter/*.tmp 2>/dev/null"
check "SIGTERM while saving: the earlier checkpoint stays" [ -f inter/iter_0000001/manifest.json ]
# SIGTERM before any save: the --save directories the run made go with it.
(run_exec --train-iters 1000000 --save-interval 1000000 --save made/early >out_early.txt 2>&1) &
pid=$!
tries=0
until [ -d made/early ] || [ $tries -ge 6000 ]; do tries=$((tries + 1)); sleep 0.005; done
sleep 0.2
kill -TERM $pid
wait $pid
check "SIGTERM before a save: the directories the run made are gone" [ ! -e made ]
exit $fail
