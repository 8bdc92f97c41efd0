# ---- the planner (engine/plan, `ptdp plan`): label unit (C++) and lua (CLI) --
# Included from tests/CMakeLists.txt (CMAKE_CURRENT_SOURCE_DIR = <repo>/tests).
add_executable(test_plan plan/test_plan.cpp)
target_link_libraries(test_plan PRIVATE ptdp_plan_standalone GTest::gtest_main)
target_compile_definitions(test_plan PRIVATE
  PTDP_PAPER_TABLE1="${CMAKE_CURRENT_LIST_DIR}/paper_table1.csv"
  PTDP_PLAN_TMP="${CMAKE_CURRENT_BINARY_DIR}/tmp/plan")
file(MAKE_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/tmp/plan)
gtest_discover_tests(test_plan PROPERTIES LABELS unit ENVIRONMENT "OMP_NUM_THREADS=1"
                     DISCOVERY_TIMEOUT 60)

# `ptdp plan` (the launcher through ptdp_plan) and ptdp.plan{...} (Lua).
set(PTDP_PLAN_LUA_TESTS)
function(ptdp_plan_cli_test name)
  add_test(NAME ${name} COMMAND ${PTDP_RUN_LUA_TEST} ${ARGN} WORKING_DIRECTORY ${PTDP_TEST_TMP}/lua)
  set(PTDP_PLAN_LUA_TESTS ${PTDP_PLAN_LUA_TESTS} ${name} PARENT_SCOPE)
endfunction()
set(PTDP_PLAN_1T --num-layers 128 --hidden-size 25600 --num-attention-heads 160
    --global-batch-size 3072 --num-gpus 3072 --machine selene --fp16)
# The paper's 1T layout in full: one row, the last line machine-readable.
ptdp_plan_cli_test(lua_plan_cli_layout --rc 0
  --expect "GPT of 1.01T parameters" --expect "1 layouts considered: 1 fit"
  --match "^ +1 +8 +64 +6 +1 +2  interleaved  full "
  --match "^tflops_per_gpu=[0-9.]+ iteration_s=[0-9.e+]+ memory_gib=[0-9.]+ tensor=8 pipeline=64 data=6 micro_batch=1 virtual=2$"
  -- ${PTDP_LAUNCHER} plan ${PTDP_PLAN_1T} --tensor-model-parallel-size 8
     --pipeline-model-parallel-size 64 --micro-batch-size 1 --num-layers-per-virtual-pipeline-stage 1
     --recompute-granularity full)
# Free choice: a table, the winner's trade-offs, what was dropped and why.
ptdp_plan_cli_test(lua_plan_cli_search --rc 0
  --match "^ rank  t   p    d    b   v  schedule" --expect "best t=" --expect "runner-up"
  --expect "layouts dropped for memory" --expect "does not divide the attention heads (160)"
  --match "^tflops_per_gpu=[0-9.]+ iteration_s=[0-9.e+]+ memory_gib=[0-9.]+ tensor=[0-9]+ pipeline=[0-9]+ data=[0-9]+ micro_batch=[0-9]+ virtual=[0-9]+$"
  -- ${PTDP_LAUNCHER} plan ${PTDP_PLAN_1T} --top 3)
ptdp_plan_cli_test(lua_plan_cli_explain --rc 0
  --expect "explain t=8,p=64,d=6,b=1,v=1,1f1b,full" --expect "pipeline bubble"
  --expect "the explained layout is" --match "qkv +2048 x +9600 x +25600"
  --match "tensor=8 pipeline=64 data=6 micro_batch=1 virtual=1$"
  -- ${PTDP_LAUNCHER} plan ${PTDP_PLAN_1T} --explain t=8,p=64,b=1,v=1,full)
# A bare option that needs a value is refused (it wrote a file named "1").
ptdp_plan_cli_test(lua_plan_cli_bare_output --rc nonzero
  --expect "save_machine needs a file path (got an empty value)" --reject "tflops_per_gpu="
  -- ${PTDP_LAUNCHER} plan ${PTDP_PLAN_1T} --save-machine)
ptdp_plan_cli_test(lua_plan_cli_help --rc 0 --expect "--num-layers" --expect "--machine"
  --expect "--calibrate" -- ${PTDP_LAUNCHER} plan --help)
ptdp_plan_cli_test(lua_plan_cli_bad_t --rc 1
  --expect "ptdp plan: invalid configuration: no layout can work: 1 x, e.g. "
  --expect "t=3 does not divide the attention heads (160)" --reject "x0A"
  -- ${PTDP_LAUNCHER} plan ${PTDP_PLAN_1T} --tensor-model-parallel-size 3 --pipeline-model-parallel-size 1
     --micro-batch-size 1)
ptdp_plan_cli_test(lua_plan_cli_bad_layers --rc 1
  --expect "p x v = 64 x 3 = 192 does not divide the layers (128)"
  -- ${PTDP_LAUNCHER} plan ${PTDP_PLAN_1T} --tensor-model-parallel-size 8 --pipeline-model-parallel-size 64
     --micro-batch-size 1 --virtual-pipeline-model-parallel-size 3)
ptdp_plan_cli_test(lua_plan_cli_bad_batch --rc 1
  --expect "the global batch (3072) is not divisible by b x d = 5 x 6 = 30"
  -- ${PTDP_LAUNCHER} plan ${PTDP_PLAN_1T} --tensor-model-parallel-size 8 --pipeline-model-parallel-size 64
     --micro-batch-size 5)
ptdp_plan_cli_test(lua_plan_cli_unknown_machine --rc 1
  --expect "unknown machine 'dgx-a100'" --expect "known presets: dgx-h100, selene"
  -- ${PTDP_LAUNCHER} plan --num-layers 2 --hidden-size 64 --num-attention-heads 2
     --global-batch-size 8 --num-gpus 8 --machine dgx-a100)
ptdp_plan_cli_test(lua_plan_cli_unknown_flag --rc 1 --expect "unknown plan option 'num-layer'"
  --expect "known: num_layers" -- ${PTDP_LAUNCHER} plan --num-layer 2)
ptdp_plan_cli_test(lua_plan_cli_calibrate --rc 0 --expect "calibrated this CPU"
  --expect "GPUs of this-cpu" --match "^tflops_per_gpu=.* tensor=[0-9]+ pipeline=[0-9]+ data=[0-9]+"
  -- ${PTDP_LAUNCHER} plan --calibrate --num-layers 4 --hidden-size 64 --num-attention-heads 4
     --seq-length 32 --vocab-size 257 --global-batch-size 8 --num-gpus 4 --fp32)
# scripts/bench_plan_calibration.lua end to end on a tiny GPT, one step per
# layout: its table and last line. Timings are not checked (CI runs loaded).
ptdp_plan_cli_test(lua_plan_bench_calibration --rc 0 --expect "calibrated this CPU"
  --match "^interleaved +1 +2 +1 +1 +2 +8 +[0-9.]+ +[0-9.]+ +[0-9.]+ "
  --match "^layouts=13 mean_abs_rel_err=[0-9.]+ max_abs_rel_err=[0-9.]+$"
  -- ${PTDP_LAUNCHER} ${CMAKE_SOURCE_DIR}/scripts/bench_plan_calibration.lua
     --iters 1 --warmup 0 --rounds 1 --num-layers 4 --hidden-size 64 --num-attention-heads 4
     --seq-length 32 --data-path ${PTDP_TEST_TMP}/lua/plan_calibration.ptdp
     --corpus ${PTDP_TEST_CORPUS} --corpus-format lines)
# Flags it would overwrite per layout, or ignore, are refused before any work.
ptdp_plan_cli_test(lua_plan_bench_calibration_own_flag --rc nonzero
  --expect "flag '--micro-batch-size' is this benchmark's to set"
  -- ${PTDP_LAUNCHER} ${CMAKE_SOURCE_DIR}/scripts/bench_plan_calibration.lua --micro-batch-size 3)
# Every layout it measures is checked before any work (a model one of them
# cannot take was refused after the calibration, naming p and v it cannot set).
ptdp_plan_cli_test(lua_plan_bench_calibration_layouts_checked_first --rc nonzero
  --expect "cannot run in the interleaved layout" --expect "--num-layers (6) must be a multiple of p x v = 4"
  --reject "calibrated this CPU"
  -- ${PTDP_LAUNCHER} ${CMAKE_SOURCE_DIR}/scripts/bench_plan_calibration.lua --num-layers 6)
ptdp_plan_cli_test(lua_plan_bench_calibration_machine_twice --rc nonzero
  --expect "give --machine (use a calibration) or --save-machine"
  -- ${PTDP_LAUNCHER} ${CMAKE_SOURCE_DIR}/scripts/bench_plan_calibration.lua --machine a --save-machine b)
ptdp_plan_cli_test(lua_plan_api --rc 0 --expect "plan_api: PASS"
  -- ${PTDP_LAUNCHER} ${CMAKE_CURRENT_SOURCE_DIR}/plan/plan_api.lua)
set_tests_properties(${PTDP_PLAN_LUA_TESTS} PROPERTIES LABELS lua TIMEOUT 120 ENVIRONMENT "OMP_NUM_THREADS=1")

# The planner against the engine itself: predicted and reported peak activation
# memory (the planner's objects over the engine's archive).
add_executable(test_plan_engine plan/test_plan_engine.cpp $<TARGET_OBJECTS:ptdp_plan>)
target_link_libraries(test_plan_engine PRIVATE ptdp_static ptdp_cpu_kernels
  nlohmann_json::nlohmann_json ZLIB::ZLIB GTest::gtest_main)
target_compile_definitions(test_plan_engine PRIVATE PTDP_TEST_DATA_DIR="${CMAKE_CURRENT_SOURCE_DIR}/fixtures")
gtest_discover_tests(test_plan_engine PROPERTIES LABELS unit ENVIRONMENT "OMP_NUM_THREADS=1"
                     DISCOVERY_TIMEOUT 60)
