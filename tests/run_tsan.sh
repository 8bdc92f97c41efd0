#!/bin/sh
# Builds test_comm_threads with ThreadSanitizer and runs it; exits non-zero on
# a failed test or on any TSan report (halt_on_error stops at the first one).
#   tests/run_tsan.sh [BUILD_DIR] [gtest args...]     (BUILD_DIR defaults to build-tsan)
# CXX picks the compiler (default: clang++ if present, else g++).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build-tsan}
[ $# -gt 0 ] && shift
if [ -z "${CXX:-}" ]; then
  if command -v clang++ >/dev/null 2>&1; then CXX=clang++; else CXX=g++; fi
fi
mkdir -p "$build"
exe="$build/test_comm_threads"
echo "run_tsan: building $exe with $CXX"
"$CXX" -std=c++17 -fsanitize=thread -O1 -g -pthread -I"$root" \
  "$root/tests/comm/test_comm_threads.cpp" \
  "$root/engine/comm/thread_comm.cpp" "$root/engine/comm/communicator.cpp" "$root/engine/trace/timeline.cpp" "$root/engine/comm/grid.cpp" "$root/engine/core/status.cpp" "$root/engine/core/utf8.cpp" "$root/engine/core/output_file.cpp" "$root/engine/core/temp_files.cpp" "$root/engine/core/process_lock.cpp" \
  "$root/engine/comm/staged_comm.cpp" "$root/engine/device/device.cpp" "$root/engine/device/cpu_device.cpp" "$root/engine/core/allocator.cpp" \
  -o "$exe" -lgtest -lgtest_main
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ${TSAN_OPTIONS:-}" "$exe" "$@"
