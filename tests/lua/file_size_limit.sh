#!/bin/sh
# file_size_limit.sh LAUNCHER CORPUS — past the file size limit (ulimit -f),
# a write fails (EFBIG) and is reported, its temporary removed (SIGXFSZ's
# default had killed the process without a word, leaving it behind).
launcher=$1 corpus=$2
rm -f fsize.ptdp
( ulimit -f 1; "$launcher" tokenize --output fsize.ptdp --format lines "$corpus" )
echo "exit $?"
ls fsize.ptdp.tmp.* 2>/dev/null && echo "LEFT a temporary file"
exit 0
