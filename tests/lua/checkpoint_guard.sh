#!/bin/sh
# checkpoint_guard.sh LAUNCHER TRAIN_GPT CORPUS WORKDIR — through train_gpt.lua
# and `ptdp ckpt`: --save into another run's checkpoints stops the run before
# its first step (naming the directory and what differs) and the same run may
# save there; no other output goes among a checkpoint's files; an edited
# manifest field is caught by verify, inspect and --load.
. "$(dirname "$0")/tiny_train_run.sh"
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }
has() { grep -qF -- "$2" "$1"; }

run --save ck >first.txt 2>&1 && ok "first run saves" || { cat first.txt; bad "first run"; }
run --save ck --hidden-size 64 >other.txt 2>&1
rc=$?
cat other.txt
[ $rc -ne 0 ] && ok "another model into ck: exit $rc" || bad "another model into ck: exit 0"
has other.txt "--save 'ck' holds checkpoints of another run (newest: 'ck/iter_0000002', iteration 2; hidden_size: checkpoint 32, this run 64" &&
  ok "the message names ck and what differs" || bad "message"
grep -q "^ iteration " other.txt && bad "it trained" || ok "refused before the first step"
# The same run from scratch (no --load, or a mistyped one) would replace its
# checkpoints and move 'latest' back: refused before its first step.
run --save ck --micro-batch-size 1 >same.txt 2>&1
[ $? -ne 0 ] && has same.txt "--save 'ck' holds this run's checkpoints (newest: 'ck/iter_0000002'), but this run loaded none" &&
  ! grep -q "^ iteration " same.txt && ok "the same run from scratch: refused" || { cat same.txt; bad "same run from scratch"; }
run --save ck --load ck_typo >typo.txt 2>&1
[ $? -ne 0 ] && has typo.txt "but this run loaded none" && has ck/latest iter_0000002 &&
  ok "a mistyped --load: refused, 'latest' kept" || { cat typo.txt; bad "mistyped --load"; }
run --save ck --load ck --micro-batch-size 1 --train-iters 2 >same.txt 2>&1 && ok "the same run (other micro-batch size) resumes there" ||
  { cat same.txt; bad "the same run was refused"; }
run --save ck --load ck --train-iters 4 --lr-decay-iters 2 >resume.txt 2>&1 &&
  has resume.txt "loaded ck/iter_0000002" && ok "a resume (--load ck) saves there" ||
  { cat resume.txt; bad "the resume"; }

# A checkpoint's files are a save's: not another output's, before the first
# save either (the tracker of a fresh --save directory is claimed by the run).
run --save fresh --log-json fresh/latest >claim.txt 2>&1
[ $? -ne 0 ] && has claim.txt "--log-json 'fresh/latest' is also this run's --save tracker" &&
  ok "--log-json onto the run's own tracker-to-be: refused" || { cat claim.txt; bad "tracker claim"; }
run --timeline ck/iter_0000002/manifest.json >inside.txt 2>&1
[ $? -ne 0 ] && has inside.txt "is inside the checkpoint directory" && has ck/iter_0000002/manifest.json '"iteration"' &&
  ok "--timeline inside a checkpoint: refused, the manifest kept" || { cat inside.txt; bad "inside a checkpoint"; }
run --save ck/iter_0000002/nested >nested.txt 2>&1
[ $? -ne 0 ] && has nested.txt "is inside the checkpoint directory" && [ ! -e ck/iter_0000002/nested ] &&
  ok "--save inside a checkpoint: refused, nothing made" || { cat nested.txt; bad "nested --save"; }
# A finished run started again (a job script's `--save X --load X`) runs no
# step and ends well, in a layout of several ranks too (it asked for the last
# step's rank reports, which a load does not bring).
run --save fin --load fin --tensor-model-parallel-size 2 >fin1.txt 2>&1 &&
  run --save fin --load fin --tensor-model-parallel-size 2 >fin2.txt 2>&1 && has fin2.txt "loaded fin/iter_0000002" &&
  has fin2.txt "the loaded checkpoint is at iteration 2 and --train-iters is 2: nothing to train" &&
  has fin2.txt "validation loss at iteration 2" &&
  ok "a finished t=2 run started again: exit 0, nothing to train said" || { cat fin1.txt fin2.txt; bad "finished run again"; }
# Loaded past --train-iters: said, and the evaluation is the loaded model's
# iteration (it read iteration 1, exit 0, without a word).
run --save fin --load fin --train-iters 1 --lr-decay-iters 2 >past.txt 2>&1 &&
  has past.txt "the loaded checkpoint is at iteration 2 and --train-iters is 1: nothing to train" &&
  has past.txt "validation loss at iteration 2" &&
  ok "loaded past --train-iters: said, evaluated at its own iteration" || { cat past.txt; bad "loaded past --train-iters"; }

# A resumed run on other data goes on, said (it was silent, and rotation
# then kept the earlier data's checkpoints as another run's).
head -n 40 "$corpus" > other_corpus.txt
run --save fin --load fin --train-iters 3 --lr-decay-iters 2 --data-path other.ptdp --corpus other_corpus.txt \
  >other_data.txt 2>&1 && has other_data.txt "this run's data is not what checkpoint" &&
  ok "a resumed run on other data: said" || { cat other_data.txt; bad "resumed on other data"; }
rm -rf fin && run --save fin >/dev/null 2>&1  # (the next checks start from a two-iteration run)

# A resumed run's per-step outputs after its saves replaced the 'latest' it
# read (the freed inode went to the new output, refused as that input).
run --save fin --load fin --train-iters 6 --lr-decay-iters 2 --save-interval 1 --profile-ops prof.txt \
  --timeline tl.json >prof.txt.log 2>&1 && has prof.txt.log "saved checkpoint fin/iter_0000006" &&
  ok "a resumed run with --profile-ops and --timeline past its saves: exit 0" || { cat prof.txt.log; bad "resumed per-step outputs"; }

# A copy of a checkpoint under another name ("best") is a checkpoint: --load
# takes it, so no save, import or other writer goes into it.
cp -a ck/iter_0000002 best
run --save best --load best >best.txt 2>&1
[ $? -ne 0 ] && has best.txt "'best' is a checkpoint directory (it holds a checkpoint's manifest.json and model.h5)" &&
  [ ! -e best/iter_0000002 ] && ok "--save into a copied checkpoint: refused" || { cat best.txt; bad "--save best"; }
sum=$(cksum <best/manifest.json)
run --log-json best/manifest.json >bestlog.txt 2>&1
[ $? -ne 0 ] && has bestlog.txt "best' (it holds a checkpoint's manifest.json and model.h5)" && [ "$(cksum <best/manifest.json)" = "$sum" ] &&
  ok "--log-json onto a copied checkpoint's manifest: refused, kept" || { cat bestlog.txt; bad "--log-json best/manifest.json"; }
"$launcher" ckpt export-safetensors ck hf >/dev/null 2>&1 &&
  "$launcher" ckpt import-safetensors hf/model.safetensors best >bestimp.txt 2>&1
[ $? -ne 0 ] && has bestimp.txt "checkpoint directory" && [ "$(cksum <best/manifest.json)" = "$sum" ] &&
  ok "an import into a copied checkpoint: refused" || { cat bestimp.txt; bad "import into best"; }

"$launcher" ckpt verify ck >verify_ok.txt 2>&1 && has verify_ok.txt "manifest checksum: matches its fields" &&
  ok "verify: manifest checksum matches" || { cat verify_ok.txt; bad "verify of a sound checkpoint"; }
m=ck/iter_0000004/manifest.json
sed 's/"iteration": 4/"iteration": 3/' $m >m.tmp && mv m.tmp $m
for cmd in verify inspect; do
  "$launcher" ckpt $cmd ck >$cmd.txt 2>&1
  rc=$?
  cat $cmd.txt
  [ $rc -ne 0 ] && has $cmd.txt "ck/iter_0000004/manifest.json': its fields do not match its checksum" &&
    ok "ckpt $cmd: an edited iteration is damage (exit $rc)" || bad "ckpt $cmd of an edited manifest"
done
run --save ck --load ck --train-iters 4 --lr-decay-iters 2 >load.txt 2>&1
rc=$?
cat load.txt
[ $rc -ne 0 ] && has load.txt "its fields do not match its checksum" && ok "--load of it: exit $rc" ||
  bad "--load of an edited manifest"
exit $fail
