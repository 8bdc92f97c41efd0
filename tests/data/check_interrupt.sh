#!/bin/sh
# check_interrupt.sh PTDP WORKDIR: `ptdp tokenize` killed by SIGTERM while it
# writes leaves no temporary file beside its outputs, the outputs that were
# there before it keep their bytes, and it ends as the signal would end it.
set -eu
ptdp=$1 dir=$2
rm -rf "$dir"
mkdir -p "$dir"
cd "$dir"
# About 100 MB: long enough to be caught writing.
awk 'BEGIN { for (i = 0; i < 1200000; i++) print "a line of text to tokenize, number " i }' >big.txt
# The earlier outputs: a dataset of the same name from an earlier tokenize
# (a writer replaces only its own kind of file).
printf 'an earlier\ndataset\n' >small.txt
"$ptdp" tokenize --format lines --output-prefix out small.txt >/dev/null
before=$(cat out_text_document.bin out_text_document.idx | cksum)
"$ptdp" tokenize --format lines --output-prefix out big.txt >log.txt 2>&1 &
pid=$!
tries=0
until ls out_text_document.bin.tmp.* >/dev/null 2>&1; do
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "tokenize ended before its temporary file was seen"
    exit 1
  fi
  tries=$((tries + 1))
  [ "$tries" -lt 3000 ] || { echo "no temporary file after 30 s"; kill "$pid"; exit 1; }
  sleep 0.01
done
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
left=$(ls | grep '\.tmp\.' || true)
[ -z "$left" ] || { echo "left behind: $left"; exit 1; }
[ "$rc" -eq 143 ] || { echo "exit status $rc, not 143 (SIGTERM)"; cat log.txt; exit 1; }
[ "$(cat out_text_document.bin out_text_document.idx | cksum)" = "$before" ] ||
  { echo "the earlier out_text_document.bin/.idx were changed"; exit 1; }
echo "SIGTERM while writing: no temporary file left, the earlier outputs kept"
cd /
rm -rf "$dir"
