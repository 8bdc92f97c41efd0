#!/bin/sh
# module_unopenable.sh LAUNCHER SCRIPT — under descriptor limits tight enough
# that one of ptdp's Lua modules cannot be opened, the launcher says so in one
# line with the reason (require had said the file was missing, with a
# traceback); never a traceback at any limit. (The limits where that happens
# depend on the descriptors the caller left open, so a range is tried.)
launcher=$1 script=$2
found=0
n=6
while [ $n -le 40 ]; do
  out=$( (ulimit -n $n && exec "$launcher" "$script" --help) 2>&1 )
  case "$out" in
    *traceback*) echo "FAIL at ulimit -n $n: a traceback"; echo "$out"; exit 1 ;;
    *"cannot load the Lua module 'ptdp"*"is there but cannot be opened (Too many open files)"*) found=1 ;;
  esac
  n=$((n + 1))
done
[ $found = 1 ] && echo "ok   a module that cannot be opened is named with the reason, no traceback" && exit 0
echo "FAIL: no limit in 6..40 reached the module loading"; exit 1
