#!/bin/sh
# save_failure.sh LAUNCHER TRAIN_GPT CORPUS WORKDIR — a failed save fails the
# run: with the file size limited (every write past it fails with EFBIG, as on
# a full disk), train_gpt.lua trains on, reports the failure, repeats it at the
# end and exits non-zero; with room, the same run exits 0.
. "$(dirname "$0")/tiny_train_run.sh"
fail=0
run --save room >out_ok.txt 2>&1
rc=$?
cat out_ok.txt
[ $rc -eq 0 ] && echo "ok   a save with room: exit 0" || { echo "FAIL a save with room: exit $rc"; fail=1; }
# 40 blocks: the dataset fits, the checkpoint (about 300 KB) does not.
(trap '' XFSZ; ulimit -f 40; run --save full) >out_full.txt 2>&1
rc=$?
cat out_full.txt
[ $rc -ne 0 ] && echo "ok   a failed final save: exit $rc" || { echo "FAIL a failed final save: exit 0"; fail=1; }
grep -q "1 checkpoint save failed in this run; the final one: checkpoint of iteration 2 not saved" out_full.txt &&
  echo "ok   repeated at the end" || { echo "FAIL not repeated at the end"; fail=1; }
grep -q "final validation loss" out_full.txt && echo "ok   training went on" ||
  { echo "FAIL training stopped"; fail=1; }
exit $fail
