#!/bin/sh
# gpu_ab_prepare.sh GPU_AB WORKDIR — `gpu_ab.sh prepare REV FILE...` writes only
# inside gpu_ab_base/: a FILE outside the repository ('..', absolute, '.') or
# not in REV is refused before anything is written (a '../X' was emptied), and
# the named files are copied.
set -u
gpu_ab=$1 work=$2
rm -rf "$work" && mkdir -p "$work/repo/scripts" && cd "$work/repo" || exit 1
cp "$gpu_ab" scripts/gpu_ab.sh
echo tracked >a.txt
git init -q && git add -A && git -c user.email=t@t -c user.name=t commit -qm init || exit 1
echo notes >README.local
echo keep >../outside.txt
fail=0
check() {  # check WHAT CONDITION...
  what=$1
  shift
  if "$@"; then echo "ok   $what"; else echo "FAIL $what"; fail=1; fi
}
for f in ../README.local ../../outside.txt /etc/hostname ./a.txt a.txt/.. missing.txt scripts; do
  bash scripts/gpu_ab.sh prepare HEAD a.txt "$f" >out.txt 2>&1
  rc=$?
  check "prepare HEAD a.txt '$f': refused (exit 2)" [ $rc -eq 2 ]
  check "prepare HEAD a.txt '$f': says why" grep -q "gpu_ab: '$f' is not" out.txt
  check "prepare HEAD a.txt '$f': nothing written" [ ! -e gpu_ab_base ]
done
check "the files beside and outside the repository are as they were" \
  sh -c '[ "$(cat README.local)" = notes ] && [ "$(cat ../outside.txt)" = keep ]'
bash scripts/gpu_ab.sh prepare HEAD a.txt scripts/gpu_ab.sh >out.txt 2>&1
check "prepare of files of HEAD: copied" sh -c \
  'cmp -s a.txt gpu_ab_base/a.txt && cmp -s scripts/gpu_ab.sh gpu_ab_base/scripts/gpu_ab.sh'
exit $fail
