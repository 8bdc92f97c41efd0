#!/usr/bin/env bash
# The whole test suite: install, build (Release, and ASan+UBSan for the unit
# tests), then every ctest label. .ci/run calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPTDP_SANITIZE=ON >/dev/null
cmake --build build-asan -j2 --target test_kernels test_dtype test_gpt test_data test_trainer test_grid \
  test_comm_threads test_parallel test_schedule test_pipeline test_timeline \
  test_checkpoint_hdf5 test_checkpoint_commit test_checkpoint_trainer test_checkpoint_export \
  test_mixed_precision test_output_file test_plan test_indexed_dataset test_step_tokens \
  test_device test_canvas test_bpe_tokenizer test_checkpoint_import test_fuzz_regressions \
  test_parallel_tokenize test_preemption test_async_save test_zero_bubble test_distributed_optimizer \
  test_sequence_parallel
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export LSAN_OPTIONS=suppressions=$PWD/tests/lsan.supp
echo "== unit, multirank, pipeline, checkpoint and precision tests under AddressSanitizer + UndefinedBehaviorSanitizer"
# (not the crash test: it kills the launcher, which the Release run covers)
ctest --test-dir build-asan -L "unit|multirank|pipeline|checkpoint|precision" -LE "mpi|lua" \
  -E "CheckpointCrash|test_checkpoint_crash" --output-on-failure -j2
echo "== threads communicator under ThreadSanitizer"
bash tests/run_tsan.sh build-tsan
echo "== the trainer's rank threads and gradient-reduction threads under ThreadSanitizer"
# One OpenMP thread per rank: libgomp is not instrumented, so its own
# synchronisation would look like races.
cmake -S . -B build-tsan-full -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPTDP_TSAN=ON >/dev/null
cmake --build build-tsan-full -j2 --target test_parallel
OMP_NUM_THREADS=1 TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" build-tsan-full/tests/test_parallel
echo "== parsers of untrusted files under libFuzzer + ASan + UBSan (tests/fuzz, 12 s each)"
bash tests/fuzz/run_fuzz.sh 12
echo "== all tests (Release)"
ctest --test-dir build --output-on-failure -j2
