#!/bin/sh
# run_lua_test.sh — runs a command and checks its exit code and output.
#
#   run_lua_test.sh [--rc N | --rc nonzero] [--expect TEXT]... [--match ERE]...
#                   [--reject TEXT]... [--clean PATH]... -- COMMAND [ARG]...
#
#   --rc N        the exit code must be N (default 0); "nonzero": anything but 0
#   --expect TEXT stdout+stderr must contain TEXT (fixed string)
#   --match ERE   some line of stdout+stderr must match the extended regex ERE
#   --reject TEXT stdout+stderr must not contain TEXT
#   --clean PATH  remove PATH (a file) before running, so a run starts afresh
#
# Prints the command's output; on a failed check says which and exits 1.
set -u

want_rc=0
expects=$(mktemp "${TMPDIR:-/tmp}/ptdp_luatest.XXXXXX") || exit 1
out=$(mktemp "${TMPDIR:-/tmp}/ptdp_luatest.XXXXXX") || exit 1
trap 'rm -f "$expects" "$out"' EXIT INT TERM

while [ $# -gt 0 ]; do
  case $1 in
    --rc) want_rc=$2; shift 2 ;;
    --expect) printf 'E %s\n' "$2" >>"$expects"; shift 2 ;;
    --match) printf 'M %s\n' "$2" >>"$expects"; shift 2 ;;
    --reject) printf 'R %s\n' "$2" >>"$expects"; shift 2 ;;
    --clean) rm -f "$2"; shift 2 ;;
    --) shift; break ;;
    *) echo "run_lua_test.sh: unknown option '$1' (see the header of $0)" >&2; exit 2 ;;
  esac
done
if [ $# -eq 0 ]; then
  echo "run_lua_test.sh: no command given after --" >&2
  exit 2
fi

echo "run: $*"
"$@" >"$out" 2>&1
rc=$?
echo "---- output (exit code $rc) ----"
cat "$out"
echo "----"

status=0
if [ "$want_rc" = nonzero ]; then
  if [ $rc -eq 0 ]; then
    echo "FAIL: expected a non-zero exit code, got 0"
    status=1
  else
    echo "ok   non-zero exit code ($rc)"
  fi
elif [ $rc -ne "$want_rc" ]; then
  echo "FAIL: expected exit code $want_rc, got $rc"
  status=1
else
  echo "ok   exit code $rc"
fi

while IFS= read -r line; do
  kind=${line%% *}
  text=${line#* }
  case $kind in
    E)
      if grep -qF -- "$text" "$out"; then echo "ok   output contains '$text'"
      else echo "FAIL: output does not contain '$text'"; status=1; fi ;;
    M)
      if grep -qE -- "$text" "$out"; then echo "ok   output matches /$text/"
      else echo "FAIL: no output line matches /$text/"; status=1; fi ;;
    R)
      if grep -qF -- "$text" "$out"; then echo "FAIL: output contains '$text'"; status=1
      else echo "ok   output does not contain '$text'"; fi ;;
  esac
done <"$expects"

[ $status -eq 0 ] && echo "PASS"
exit $status
