#!/usr/bin/env bash
# Runs a command that must fail: under `timeout 60`, asserts a non-zero exit code
# that is not 124 (124 = the command hung and timeout killed it), that it ended
# within --max-seconds, and that its combined stdout+stderr contains every
# --expect text (fixed strings, not patterns).
#   expect_failure.sh [--max-seconds S] [--expect TEXT]... -- COMMAND [ARGS...]
set -u
max_seconds=55
expects=()
while [ $# -gt 0 ]; do
  case "$1" in
    --max-seconds) max_seconds=$2; shift 2 ;;
    --expect) expects+=("$2"); shift 2 ;;
    --) shift; break ;;
    *) echo "expect_failure.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
[ $# -gt 0 ] || { echo "expect_failure.sh: no command" >&2; exit 2; }

start_ms=$(( $(date +%s%N) / 1000000 ))
out=$(timeout -k 5 60 "$@" 2>&1)
rc=$?
elapsed_ms=$(( $(date +%s%N) / 1000000 - start_ms ))
elapsed=$(printf "%d.%03d" $((elapsed_ms / 1000)) $((elapsed_ms % 1000)))
printf '%s\n' "$out"
echo "---- expect_failure.sh: exit code $rc after ${elapsed} s"

status=0
if [ "$rc" -eq 0 ]; then
  echo "FAIL: the command succeeded; it should have failed"; status=1
elif [ "$rc" -eq 124 ] || [ "$elapsed_ms" -ge 60000 ]; then
  # (137 = 128 + SIGKILL is also what mpirun returns when a rank was killed, so
  # only the time tells that timeout had to use SIGKILL)
  echo "FAIL: the command hung (killed by timeout 60)"; status=1
fi
if [ "$elapsed_ms" -gt $((max_seconds * 1000)) ]; then
  echo "FAIL: took ${elapsed} s, more than ${max_seconds} s"; status=1
fi
for text in "${expects[@]}"; do
  if ! printf '%s\n' "$out" | grep -F -q -- "$text"; then
    echo "FAIL: the output does not contain: $text"; status=1
  fi
done
[ $status -eq 0 ] && echo "PASS"
exit $status
