#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang in build-fuzz/ and runs
# each for SECONDS (default 20), one after another: first over the committed
# regression inputs and seeds, then fuzzing from the seeds. Exits non-zero if
# any target crashes, throws something other than ptdp::Error, trips ASan or
# UBSan, hangs (10 s per input) or runs out of memory; the input that did it is
# left in build-fuzz/crash-*.
#   tests/fuzz/run_fuzz.sh [SECONDS] [FUZZER...]
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-20}
shift || true
build=$(realpath -m "${PTDP_FUZZ_BUILD:-build-fuzz}")
fuzzers=("$@")
if [ ${#fuzzers[@]} -eq 0 ]; then
  fuzzers=(fuzz_indexed_dataset fuzz_token_dataset fuzz_manifest fuzz_safetensors fuzz_bpe_vocab_merges
           fuzz_bpe_tokenizer_json fuzz_bpe_roundtrip)
fi
CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DPTDP_FUZZ=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j2 --target "${fuzzers[@]}" | grep -v "^\[" || true
export TMPDIR=$build/tmp  # the fuzzers' scratch files
mkdir -p "$TMPDIR"
status=0
for f in "${fuzzers[@]}"; do
  bin=$build/tests/fuzz/$f
  log=$build/$f.log
  work=$build/corpus/$f  # what the runs found, kept between runs
  mkdir -p "$work"
  inputs=(tests/fuzz/corpus/$f/*)
  [ -d tests/fuzz/regressions/$f ] && inputs+=(tests/fuzz/regressions/$f/*)
  if ! "$bin" "${inputs[@]}" >"$log" 2>&1; then
    echo "run_fuzz: $f fails on a committed input:"; tail -n 30 "$log"; status=1; continue
  fi
  if "$bin" "$work" "tests/fuzz/corpus/$f" -max_total_time="$secs" -timeout=10 \
      -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$build/crash-$f-" >"$log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    echo "run_fuzz: $f: ${runs:-?} inputs in ${secs} s, no crash"
  else
    echo "run_fuzz: $f FAILED:"; grep -E "ERROR|BUG|runtime error|#[0-9]+ 0x" "$log" | head -n 25
    ls "$build"/crash-"$f"-* 2>/dev/null || true
    status=1
  fi
done
exit $status
