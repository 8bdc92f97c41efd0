# ---- C ABI (label capi) and Lua launcher/module (label lua) tests ----------
# Included from tests/CMakeLists.txt (CMAKE_CURRENT_SOURCE_DIR = <repo>/tests).
# Every test writes only under ${CMAKE_CURRENT_BINARY_DIR}/tmp/<test>; the Lua
# and train_gpt.lua tests run with that folder as working directory. Python is
# `python3` on PATH (standard library only).
set(PTDP_TEST_CORPUS ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/capi_corpus.txt)
set(PTDP_TEST_TMP ${CMAKE_CURRENT_BINARY_DIR}/tmp)
set(PTDP_LUA_TEST ${CMAKE_CURRENT_SOURCE_DIR}/lua)
set(PTDP_RUN_LUA_TEST sh ${CMAKE_CURRENT_SOURCE_DIR}/lua/run_lua_test.sh)
file(MAKE_DIRECTORY ${PTDP_TEST_TMP}/capi_c ${PTDP_TEST_TMP}/capi_ctypes ${PTDP_TEST_TMP}/lua)

# 1. the C ABI from plain C99
add_executable(test_capi capi/test_capi.c)
set_target_properties(test_capi PROPERTIES C_STANDARD 99 C_STANDARD_REQUIRED ON C_EXTENSIONS OFF)
target_compile_options(test_capi PRIVATE -Wall -Wextra -Werror -pedantic)
target_include_directories(test_capi PRIVATE ${CMAKE_SOURCE_DIR})
# The version the build has (CMake's, read from capi/ptdp.h): the library must say it.
target_compile_definitions(test_capi PRIVATE PTDP_VERSION_TEXT="${PROJECT_VERSION}")
target_link_libraries(test_capi PRIVATE ptdp m)
add_test(NAME capi_c COMMAND test_capi ${PTDP_TEST_CORPUS} ${PTDP_TEST_TMP}/capi_c)

# ... and ptdp_trainer_step_tokens: the caller's ids make the dataset's run
file(MAKE_DIRECTORY ${PTDP_TEST_TMP}/capi_step_tokens ${PTDP_TEST_TMP}/capi_feed_example)
add_executable(test_capi_step_tokens capi/test_step_tokens.c)
set_target_properties(test_capi_step_tokens PROPERTIES C_STANDARD 99 C_STANDARD_REQUIRED ON
                      C_EXTENSIONS OFF)
target_compile_options(test_capi_step_tokens PRIVATE -Wall -Wextra -Werror -pedantic)
target_include_directories(test_capi_step_tokens PRIVATE ${CMAKE_SOURCE_DIR})
target_link_libraries(test_capi_step_tokens PRIVATE ptdp)
add_test(NAME capi_step_tokens
         COMMAND test_capi_step_tokens ${PTDP_TEST_TMP}/capi_step_tokens)

# 2. the C ABI from Python ctypes
add_test(NAME capi_ctypes
         COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/capi/test_ctypes.py $<TARGET_FILE:ptdp>
                 ${PTDP_TEST_CORPUS} ${PTDP_TEST_TMP}/capi_ctypes)

# 3. libptdp.so exports exactly the PTDP_API functions
add_test(NAME capi_exports
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/capi/check_exports.sh $<TARGET_FILE:ptdp>
                 ${CMAKE_SOURCE_DIR}/capi/ptdp.h ${CMAKE_SOURCE_DIR}/capi/ptdp_tools.h)

# The superseded functions stay in the ABI but the compiler says what replaces
# them: a call to one fails under -Werror=deprecated-declarations naming the
# replacement, and compiles once PTDP_ALLOW_DEPRECATED is defined.
add_test(NAME capi_deprecated
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/capi/check_deprecated.sh ${CMAKE_C_COMPILER}
                 ${CMAKE_SOURCE_DIR} ${PTDP_TEST_TMP}/capi_deprecated)
set_tests_properties(capi_deprecated PROPERTIES LABELS capi TIMEOUT 60)

# examples/feed_from_python.py: batches from a Python generator, the same run
# as the dataset's
add_test(NAME capi_feed_example
         COMMAND python3 ${CMAKE_SOURCE_DIR}/examples/feed_from_python.py $<TARGET_FILE:ptdp>
                 ${PTDP_TEST_TMP}/capi_feed_example --check)

set_tests_properties(capi_c capi_ctypes capi_exports capi_step_tokens capi_feed_example PROPERTIES
                     LABELS capi TIMEOUT 120 ENVIRONMENT "OMP_NUM_THREADS=1")
set_property(TEST capi_ctypes APPEND PROPERTY ENVIRONMENT "PTDP_PROJECT_VERSION=${PROJECT_VERSION}")

# 4. the launcher and the Lua module
set(PTDP_LUA_TESTS)
function(ptdp_lua_test name)  # ptdp_lua_test(NAME [run_lua_test.sh checks...] -- COMMAND...)
  add_test(NAME ${name} COMMAND ${PTDP_RUN_LUA_TEST} ${ARGN}
           WORKING_DIRECTORY ${PTDP_TEST_TMP}/lua)
  set(PTDP_LUA_TESTS ${PTDP_LUA_TESTS} ${name} PARENT_SCOPE)
endfunction()
set(PTDP_LAUNCHER $<TARGET_FILE:ptdp_launcher>)
set(PTDP_LUA_ARGS ${PTDP_TEST_CORPUS} ${PTDP_TEST_TMP}/lua)

# (a) a run-time error: non-zero exit, message and traceback at the script's lines
ptdp_lua_test(lua_runtime_error --rc nonzero
  --match "runtime_error\\.lua:10: attempt to index field 'missing'"
  --expect "stack traceback"
  --match "runtime_error\\.lua:10: in function 'inner'"
  --match "runtime_error\\.lua:14: in function 'outer'"
  --match "runtime_error\\.lua:18: in main chunk"
  --expect "before the error" --reject "not reached"
  -- ${PTDP_LAUNCHER} ${PTDP_LUA_TEST}/runtime_error.lua)
# (b) a syntax error: non-zero exit, parser message at the line, nothing runs
ptdp_lua_test(lua_syntax_error --rc nonzero
  --match "syntax_error\\.lua:6: .*near '='" --reject "not reached"
  -- ${PTDP_LAUNCHER} ${PTDP_LUA_TEST}/syntax_error.lua)

# waiting OpenMP threads sleep unless the user chose a policy
ptdp_lua_test(lua_wait_policy_default --rc 0 --expect "OMP_WAIT_POLICY=PASSIVE"
  -- env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT ${PTDP_LAUNCHER} ${PTDP_LUA_TEST}/wait_policy.lua)
ptdp_lua_test(lua_wait_policy_users --rc 0 --expect "OMP_WAIT_POLICY=ACTIVE"
  -- env OMP_WAIT_POLICY=ACTIVE ${PTDP_LAUNCHER} ${PTDP_LUA_TEST}/wait_policy.lua)
ptdp_lua_test(lua_wait_policy_spincount --rc 0 --expect "OMP_WAIT_POLICY=nil"
  -- env -u OMP_WAIT_POLICY GOMP_SPINCOUNT=1000 ${PTDP_LAUNCHER} ${PTDP_LUA_TEST}/wait_policy.lua)
# (c) bad configs through ptdp.trainer{...}: clear messages, positioned at the
# calling line of bad_config.lua ("ptdp: .../bad_config.lua:LINE: ...")
# spec: "CASE|expected text|more expected text..." (no square brackets here:
# they would stop CMake splitting the list). No ';' in any expected text below:
# CMake would split the argument there.
foreach(spec
    "heads|invalid configuration: num_attention_heads (3) must divide hidden_size (32)"
    "seq_length|invalid configuration: seq_length (32) is longer than max_position_embeddings (16)"
    "batch|invalid configuration: global_batch_size (5) must be divisible by micro_batch_size x data_parallel_size (2 x 1 = 2)"
    "missing|I/O error: cannot open dataset|bad_config_does_not_exist.ptdp"
    "truncated|corrupt data: dataset|: truncated"
    "vocab|invalid configuration: dataset|has vocabulary size 1000 but the 'byte' tokenizer (and so the model) has 257"
    "token|corrupt data: dataset|is outside the vocabulary")
  string(REPLACE "|" ";" spec "${spec}")
  list(POP_FRONT spec case)
  set(expects)
  foreach(text IN LISTS spec)
    list(APPEND expects --expect "${text}")
  endforeach()
  ptdp_lua_test(lua_bad_config_${case} --rc nonzero ${expects}
    --match "^ptdp: [^ ]*bad_config\\.lua:[0-9]+: "
    -- ${PTDP_LAUNCHER} ${PTDP_LUA_TEST}/bad_config.lua ${case} ${PTDP_LUA_ARGS})
endforeach()
# options rejected while the config is built: the message (position: see below)
ptdp_lua_test(lua_bad_config_unknown --rc nonzero
  --expect "unknown option 'num_layer'" --expect "known options: num_layers, hidden_size"
  -- ${PTDP_LAUNCHER} ${PTDP_LUA_TEST}/bad_config.lua unknown ${PTDP_LUA_ARGS})
ptdp_lua_test(lua_bad_config_bad_value --rc nonzero
  --expect "bad value: num_layers must be an integer in [1, 4096], got 'abc'"
  -- ${PTDP_LAUNCHER} ${PTDP_LUA_TEST}/bad_config.lua bad_value ${PTDP_LUA_ARGS})
ptdp_lua_test(lua_bad_config_bad_choice --rc nonzero
  --expect "lr_decay_style must be one of {constant,linear,cosine}, got 'exponential'"
  -- ${PTDP_LAUNCHER} ${PTDP_LUA_TEST}/bad_config.lua bad_choice ${PTDP_LUA_ARGS})
# lua/ptdp.lua promises errors "positioned at the calling script line"; an
# option rejected by ptdp_config_set must point at bad_config.lua too.
ptdp_lua_test(lua_error_position_config_set --rc nonzero
  --match "^ptdp: [^ ]*bad_config\\.lua:[0-9]+: bad value: num_layers must be an integer"
  -- ${PTDP_LAUNCHER} ${PTDP_LUA_TEST}/bad_config.lua position ${PTDP_LUA_ARGS})
# control: the same script with a good config succeeds
ptdp_lua_test(lua_bad_config_ok --rc 0 --expect "trainer created"
  -- ${PTDP_LAUNCHER} ${PTDP_LUA_TEST}/bad_config.lua ok ${PTDP_LUA_ARGS})

# (d) scripts/train_gpt.lua flag errors
set(PTDP_TRAIN_GPT ${CMAKE_SOURCE_DIR}/scripts/train_gpt.lua)
set(PTDP_TRAIN_GPT_DATA --corpus ${PTDP_TEST_CORPUS} --corpus-format lines)
# tokenize: an empty json key and --append-eod with --output are refused (both ignored before)
ptdp_lua_test(lua_tokenize_cli_empty_json_key --rc nonzero --expect "--json-keys holds an empty key"
  -- ${PTDP_LAUNCHER} tokenize --output-prefix ${PTDP_TEST_TMP}/lua/empty_key --json-keys "text,"
     ${CMAKE_SOURCE_DIR}/tests/fixtures/capi_corpus.jsonl)
ptdp_lua_test(lua_tokenize_cli_append_eod_output --rc nonzero --expect "--append-eod is for --output-prefix"
  -- ${PTDP_LAUNCHER} tokenize --output ${PTDP_TEST_TMP}/lua/eod.ptdp --append-eod --format lines
     ${PTDP_TEST_CORPUS})
# Python's spelling of a flag is pointed to the flag
ptdp_lua_test(lua_train_gpt_underscored_flag --rc nonzero
  --expect "flags are written with '-', not '_': did you mean --num-layers?" --reject "traceback"
  -- ${PTDP_LAUNCHER} ${PTDP_TRAIN_GPT} --num_layers 2)
ptdp_lua_test(lua_train_gpt_unknown_flag --rc nonzero
  --expect "unknown flag '--num-layer'" --expect "did you mean --num-layers"
  --expect "(--help lists all)" --reject "--log-interval"
  -- ${PTDP_LAUNCHER} ${PTDP_TRAIN_GPT} --num-layer 1
     --data-path ${PTDP_TEST_TMP}/lua/train_gpt_unknown_flag.ptdp ${PTDP_TRAIN_GPT_DATA})
ptdp_lua_test(lua_train_gpt_bad_value --rc nonzero
  --expect "num_layers must be an integer"
  -- ${PTDP_LAUNCHER} ${PTDP_TRAIN_GPT} --num-layers abc
     --data-path ${PTDP_TEST_TMP}/lua/train_gpt_bad_value.ptdp ${PTDP_TRAIN_GPT_DATA})
# The final sample's length is max_new_tokens (at most PTDP_MAX_NEW_TOKENS):
# checked before training, not after it.
ptdp_lua_test(lua_train_gpt_sample_tokens_range --rc nonzero
  --expect "flag '--sample-tokens' must be <= 1048576, got 2147483648"
  -- ${PTDP_LAUNCHER} ${PTDP_TRAIN_GPT} --sample-tokens 2147483648)
# The final sample's options without a sample are refused (exit 0 had ignored them).
ptdp_lua_test(lua_train_gpt_prompt_without_sample --rc nonzero
  --expect "--prompt acts on the final sample, and --sample-tokens is 0" --reject "traceback"
  -- ${PTDP_LAUNCHER} ${PTDP_TRAIN_GPT} --sample-tokens 0 --prompt xyz)
# Flags that act only under another option's value are refused without it
# (ptdp.flags.unused_option's one table; they had been ignored, exit 0).
ptdp_lua_test(lua_train_gpt_rotary_base_without_rope --rc nonzero
  --expect "--rotary-base acts only on rotary position embeddings" --reject "traceback"
  -- ${PTDP_LAUNCHER} ${PTDP_TRAIN_GPT} --rotary-base 7)
ptdp_lua_test(lua_train_gpt_min_lr_with_constant_lr --rc nonzero
  --expect "--min-lr acts only where the learning rate decays" --reject "traceback"
  -- ${PTDP_LAUNCHER} ${PTDP_TRAIN_GPT} --lr-decay-style constant --min-lr 0.0001)
ptdp_lua_test(lua_train_gpt_override_with_finetune --rc nonzero
  --expect "--override-opt-param-scheduler acts only on a resumed run's schedule, and --finetune"
  --reject "traceback"
  -- ${PTDP_LAUNCHER} ${PTDP_TRAIN_GPT} --load ${PTDP_TEST_TMP}/lua/no_such_ckpt --finetune
     --override-opt-param-scheduler)
ptdp_lua_test(lua_train_gpt_dropout_without_steps --rc nonzero
  --expect "--hidden-dropout acts only on training steps, and --train-iters is 0" --reject "traceback"
  -- ${PTDP_LAUNCHER} ${PTDP_TRAIN_GPT} --train-iters 0 --hidden-dropout 0.2)
ptdp_lua_test(lua_train_gpt_warmup_outlasting_a_constant_rate --rc nonzero
  --expect "train_iters (3) must exceed lr_warmup_iters (100) with a constant learning rate"
  --reject "traceback"
  -- ${PTDP_LAUNCHER} ${PTDP_TRAIN_GPT} --train-iters 3 --lr-decay-style constant --lr-warmup-iters 100)
# --corpus with a blend --data-path (never made from it) is refused, not ignored.
ptdp_lua_test(lua_train_gpt_corpus_with_blend --rc nonzero
  --expect "is a blend, and a blend is never made" --reject "traceback"
  -- ${PTDP_LAUNCHER} ${PTDP_TRAIN_GPT} --data-path "1 ${PTDP_TEST_CORPUS}" --corpus ${PTDP_TEST_CORPUS})
# A script's number flags are decimal, as the engine's (tonumber took 0x10).
ptdp_lua_test(lua_train_gpt_hex_number --rc nonzero
  --expect "flag '--temperature' must be a number in decimal digits, got '0x10'"
  -- ${PTDP_LAUNCHER} ${PTDP_TRAIN_GPT} --temperature 0x10)
ptdp_lua_test(lua_train_gpt_help --rc 0 --expect "--num-layers" --expect "--sample-tokens"
  --expect "--no-scatter-gather-tensors-in-pipeline"
  -- ${PTDP_LAUNCHER} ${PTDP_TRAIN_GPT} --help)
# a --data-path never destroys or swaps the user's data nor runs shell code
add_test(NAME lua_train_gpt_data_path_safety
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/lua/data_path_safety.sh ${PTDP_LAUNCHER} ${PTDP_TRAIN_GPT}
          ${PTDP_TEST_CORPUS} ${PTDP_TEST_TMP}/lua/data_path_safety)
set(PTDP_LUA_TESTS ${PTDP_LUA_TESTS} lua_train_gpt_data_path_safety)
# a failed save fails the run; an unusable --save or a file as --load stops it
# before the first step
add_test(NAME lua_train_gpt_save_failure
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/lua/save_failure.sh ${PTDP_LAUNCHER} ${PTDP_TRAIN_GPT}
          ${PTDP_TEST_CORPUS} ${PTDP_TEST_TMP}/lua/save_failure)
set(PTDP_LUA_TESTS ${PTDP_LUA_TESTS} lua_train_gpt_save_failure)
# scripts/gpu_ab.sh prepare writes only inside gpu_ab_base/
add_test(NAME script_gpu_ab_prepare
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/scripts/gpu_ab_prepare.sh ${CMAKE_SOURCE_DIR}/scripts/gpu_ab.sh
          ${PTDP_TEST_TMP}/scripts/gpu_ab_prepare)
set_tests_properties(script_gpu_ab_prepare PROPERTIES LABELS lua)
# preemption and time limits: --exit-interval, --exit-duration-in-mins, SIGTERM
# under --exit-signal-handler (saved, resumed), an unwritable --log-json, a run
# whose every step was skipped
add_test(NAME lua_train_gpt_preemption
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/lua/preemption.sh ${PTDP_LAUNCHER} ${PTDP_TRAIN_GPT}
          ${PTDP_TEST_CORPUS} ${PTDP_TEST_TMP}/lua/preemption)
set(PTDP_LUA_TESTS ${PTDP_LUA_TESTS} lua_train_gpt_preemption)
ptdp_lua_test(lua_train_gpt_save_under_a_file --rc nonzero
  --expect "/capi_corpus.txt' is not a directory" --reject "iteration "
  -- ${PTDP_LAUNCHER} ${PTDP_TRAIN_GPT} --save ${PTDP_TEST_CORPUS}/sub
     --data-path ${PTDP_TEST_TMP}/lua/train_gpt_save_under_a_file.ptdp ${PTDP_TRAIN_GPT_DATA})
ptdp_lua_test(lua_train_gpt_load_a_file --rc nonzero
  --expect "is a file" --expect "give the checkpoint's directory" --reject "iteration "
  -- ${PTDP_LAUNCHER} ${PTDP_TRAIN_GPT} --load ${PTDP_TEST_CORPUS}
     --data-path ${PTDP_TEST_TMP}/lua/train_gpt_load_a_file.ptdp ${PTDP_TRAIN_GPT_DATA})
# script options out of range stop the run before the first step
ptdp_lua_test(lua_train_gpt_bad_script_option --rc nonzero
  --expect "flag '--temperature' must be >= 0, got -1" --reject "iteration "
  -- ${PTDP_LAUNCHER} ${PTDP_TRAIN_GPT} --temperature -1
     --data-path ${PTDP_TEST_TMP}/lua/train_gpt_bad_script_option.ptdp ${PTDP_TRAIN_GPT_DATA})
ptdp_lua_test(lua_train_gpt_bad_log_interval --rc nonzero
  --expect "flag '--log-interval' must be >= 1, got 0" --reject "iteration "
  -- ${PTDP_LAUNCHER} ${PTDP_TRAIN_GPT} --log-interval 0
     --data-path ${PTDP_TEST_TMP}/lua/train_gpt_bad_script_option.ptdp ${PTDP_TRAIN_GPT_DATA})
# numbers are finite, counts whole, in every shipped script: one line, no traceback
ptdp_lua_test(lua_train_gpt_nan_temperature --rc nonzero
  --expect "flag '--temperature' must be a number in decimal digits, got 'nan'" --reject "traceback"
  --reject "iteration "
  -- ${PTDP_LAUNCHER} ${PTDP_TRAIN_GPT} --temperature nan
     --data-path ${PTDP_TEST_TMP}/lua/train_gpt_bad_script_option.ptdp ${PTDP_TRAIN_GPT_DATA})
ptdp_lua_test(lua_train_gpt_fractional_interval --rc nonzero
  --expect "flag '--eval-interval' must be a whole number, got '2.5'" --reject "traceback"
  --reject "iteration "
  -- ${PTDP_LAUNCHER} ${PTDP_TRAIN_GPT} --eval-interval 2.5
     --data-path ${PTDP_TEST_TMP}/lua/train_gpt_bad_script_option.ptdp ${PTDP_TRAIN_GPT_DATA})
# a flag with a list of values is checked against it at once, not when first used
ptdp_lua_test(lua_train_gpt_bad_corpus_format --rc nonzero
  --expect "flag '--corpus-format' must be one of fortune, lines, file, got 'xml'" --reject "iteration "
  -- ${PTDP_LAUNCHER} ${PTDP_TRAIN_GPT} --corpus-format xml
     --data-path ${PTDP_TEST_TMP}/lua/train_gpt_bad_script_option.ptdp ${PTDP_TRAIN_GPT_DATA})
# a JSON key named twice would make one dataset twice
ptdp_lua_test(lua_tokenize_cli_repeated_key --rc nonzero --expect "names 'text' twice"
  -- ${PTDP_LAUNCHER} tokenize --output-prefix ${PTDP_TEST_TMP}/lua/repeated_key --format jsonl
     --json-keys text,text ${PTDP_TEST_TMP}/lua/no_such_input.jsonl)
# an integer flag is written in digits, as the engine's options and Megatron's take it
ptdp_lua_test(lua_train_gpt_exponent_integer --rc nonzero
  --expect "flag '--sample-tokens' must be a whole number, got '1e3'" --reject "traceback"
  --reject "iteration "
  -- ${PTDP_LAUNCHER} ${PTDP_TRAIN_GPT} --sample-tokens 1e3
     --data-path ${PTDP_TEST_TMP}/lua/train_gpt_bad_script_option.ptdp ${PTDP_TRAIN_GPT_DATA})
ptdp_lua_test(lua_train_gpt_train_iters_not_a_number --rc nonzero
  --expect "train_iters must be an integer" --reject "traceback" --reject "iteration "
  -- ${PTDP_LAUNCHER} ${PTDP_TRAIN_GPT} --train-iters abc
     --data-path ${PTDP_TEST_TMP}/lua/train_gpt_bad_script_option.ptdp ${PTDP_TRAIN_GPT_DATA})
ptdp_lua_test(lua_bench_checkpoint_zero_repeats --rc nonzero
  --expect "flag '--repeats' must be >= 1, got 0" --reject "traceback"
  -- ${PTDP_LAUNCHER} ${CMAKE_SOURCE_DIR}/scripts/bench_checkpoint.lua --repeats 0)
# An error raised inside the module's helpers (ptdp/bench.lua checking a
# variant's configuration) names the script's line, not the helper's.
ptdp_lua_test(lua_bench_error_names_the_script --rc nonzero
  --expect "bench_parallel.lua:" --expect "must divide num_attention_heads (3)"
  --reject "ptdp/bench.lua" --reject "traceback"
  -- ${PTDP_LAUNCHER} ${CMAKE_SOURCE_DIR}/scripts/bench_parallel.lua --num-attention-heads 3)
# outputs and ranges a benchmark takes are checked before it runs (they were
# refused after all five schedules had run)
ptdp_lua_test(lua_bench_pipeline_bad_width --rc nonzero
  --expect "flag '--width' must be >= 140, got 1" --reject "traceback" --reject "schedule"
  -- ${PTDP_LAUNCHER} ${CMAKE_SOURCE_DIR}/scripts/bench_pipeline.lua --width 1)
# Two outputs of one script, or a dataset the run makes and another output:
# refused before any work (they were found after five schedules, or after the
# dataset was written and left behind).
ptdp_lua_test(lua_bench_pipeline_png_is_the_trace --rc nonzero
  --expect "are one file: give each its own" --reject "gpipe"
  -- ${PTDP_LAUNCHER} ${CMAKE_SOURCE_DIR}/scripts/bench_pipeline.lua
     --png ${PTDP_TEST_TMP}/lua/same.json --trace ${PTDP_TEST_TMP}/lua//same.json)
ptdp_lua_test(lua_train_gpt_made_data_is_the_log --rc nonzero
  --expect "(made from --corpus) is also the --log-json"
  -- ${PTDP_LAUNCHER} ${PTDP_TRAIN_GPT} --data-path ${PTDP_TEST_TMP}/lua/made_and_logged.ptdp
     --corpus ${PTDP_TEST_CORPUS} --log-json ${PTDP_TEST_TMP}/lua/./made_and_logged.ptdp)
ptdp_lua_test(lua_train_gpt_made_data_inside_save --rc nonzero
  --expect "would be made inside --save"
  -- ${PTDP_LAUNCHER} ${PTDP_TRAIN_GPT} --data-path ${PTDP_TEST_TMP}/lua/made_in_save/latest
     --corpus ${PTDP_TEST_CORPUS} --save ${PTDP_TEST_TMP}/lua/made_in_save)
# A command's option given again: the last one is used, with a note (as
# train_gpt.lua's flags; CLI11 said "At Most 1 required but received 2").
ptdp_lua_test(cli_tokenize_option_given_twice --rc 0
  --expect "ptdp tokenize: note: --workers is given 2 times: the last one ('1') is used"
  -- ${PTDP_LAUNCHER} tokenize --output ${PTDP_TEST_TMP}/lua/twice.ptdp --format lines --workers 2
     --workers 1 ${PTDP_TEST_CORPUS})
ptdp_lua_test(cli_plan_option_given_twice --rc 0
  --expect "ptdp plan: note: --num-layers is given 2 times: the last one ('12') is used"
  --expect "(l=12, h=1024"
  -- ${PTDP_LAUNCHER} plan --num-layers 24 --hidden-size 1024 --num-attention-heads 16
     --seq-length 1024 --global-batch-size 64 --num-gpus 8 --num-layers 12)
# A file past the size limit (ulimit -f) is a failed write, reported, its
# temporary removed (SIGXFSZ killed the process without a word, leaving it).
ptdp_lua_test(cli_tokenize_past_the_file_size_limit --rc 0
  --expect "File too large" --expect "exit 1" --reject "LEFT"
  -- sh ${CMAKE_CURRENT_SOURCE_DIR}/lua/file_size_limit.sh ${PTDP_LAUNCHER} ${PTDP_TEST_CORPUS})
# More OpenMP threads than a process runs: refused (it crashed in OpenMP).
ptdp_lua_test(lua_train_gpt_omp_threads_past_the_limit --rc nonzero
  --expect "OMP_NUM_THREADS asks for 100000 threads" --expect "a process runs at most 4096" --reject "iteration "
  -- env OMP_NUM_THREADS=100000 ${PTDP_LAUNCHER} ${PTDP_TRAIN_GPT} --data-path ${PTDP_TEST_TMP}/lua/omp.ptdp
     --corpus ${PTDP_TEST_CORPUS} --corpus-format lines --sample-tokens 0)
# A command whose answer cannot be written (stdout on a full device) fails.
ptdp_lua_test(cli_version_to_a_full_device --rc 0
  --expect "ptdp: cannot write to standard output" --expect "exit 1"
  -- sh -c "\"$0\" --version >/dev/full\necho exit $?" ${PTDP_LAUNCHER})
# A PTDP_LUA_PATH without the module is named (a traceback never named it).
ptdp_lua_test(lua_module_path_without_the_module --rc nonzero
  --expect "cannot read the Lua module '${PTDP_TEST_TMP}/no_such_dir/ptdp.lua'"
  --expect "from PTDP_LUA_PATH" --reject "traceback"
  -- env PTDP_LUA_PATH=${PTDP_TEST_TMP}/no_such_dir ${PTDP_LAUNCHER} ${PTDP_TRAIN_GPT} --help)
# ptdp's module there but not openable (too many open files): one line with
# the reason (require said the file was missing, with a traceback).
ptdp_lua_test(lua_module_unopenable --rc 0
  --expect "ok   a module that cannot be opened is named with the reason"
  -- sh ${CMAKE_CURRENT_SOURCE_DIR}/lua/module_unopenable.sh ${PTDP_LAUNCHER} ${PTDP_TRAIN_GPT})
ptdp_lua_test(cli_tokenize_json_keys_without_prefix --rc nonzero
  --expect "--json-keys picks the keys of a jsonl corpus for --output-prefix"
  -- ${PTDP_LAUNCHER} tokenize --output ${PTDP_TEST_TMP}/lua/jk.ptdp --format lines --json-keys text
     ${PTDP_TEST_CORPUS})
# --timeline would be replaced by each schedule's run and the interleaved --trace: refused.
ptdp_lua_test(lua_bench_pipeline_timeline_is_its_own --rc nonzero
  --expect "--timeline is this benchmark's to set" --reject "gpipe"
  -- ${PTDP_LAUNCHER} ${CMAKE_SOURCE_DIR}/scripts/bench_pipeline.lua --timeline ${PTDP_TEST_TMP}/lua/tl.json)
# A benchmark times its own steps: --train-iters and --eval-iters were ignored.
ptdp_lua_test(lua_bench_cpu_train_iters_refused --rc nonzero
  --expect "flag '--train-iters' is not a benchmark's: it times the steps its own flags set"
  --reject "traceback" --reject "step:"
  -- ${PTDP_LAUNCHER} ${CMAKE_SOURCE_DIR}/scripts/bench_cpu.lua --train-iters 1)
ptdp_lua_test(lua_bench_pipeline_png_a_directory --rc nonzero
  --expect "--png '/tmp' exists and is a directory" --reject "traceback" --reject "p=4"
  -- ${PTDP_LAUNCHER} ${CMAKE_SOURCE_DIR}/scripts/bench_pipeline.lua --png /tmp)
# a path where a blend's weight goes is named as such (it was "dataset '1' does not exist")
ptdp_lua_test(lua_train_gpt_blend_misordered --rc nonzero
  --expect "'${PTDP_TEST_TMP}/lua/nowhere.ptdp' (item 3) is not a weight"
  --reject "traceback"
  -- ${PTDP_LAUNCHER} ${PTDP_TRAIN_GPT} --data-path "1 ${PTDP_TEST_TMP}/lua/x ${PTDP_TEST_TMP}/lua/nowhere.ptdp 1")
# a blend weight in hex is named, as the engine names it (Lua read it as a
# weight and the engine as the first word of one path)
ptdp_lua_test(lua_train_gpt_blend_hex_weight --rc nonzero
  --expect "the weight '0x10' (item 1) is not a decimal number" --reject "traceback"
  -- ${PTDP_LAUNCHER} ${PTDP_TRAIN_GPT} --data-path "0x10 ${PTDP_TEST_TMP}/lua/x 1 ${PTDP_TEST_TMP}/lua/x")
# a verify of a damaged manifest says what is wrong (it printed nothing)
ptdp_lua_test(lua_ckpt_verify_bad_manifest --rc nonzero --expect "manifest"
  -- sh -c "rm -rf bad_manifest && mkdir bad_manifest && printf '{' >bad_manifest/manifest.json && exec $0 ckpt verify bad_manifest"
     ${PTDP_LAUNCHER})
# an export never replaces the model its checkpoint was imported from (a
# fine-tuning exported over its base), in a later process too, even where
# ptdp wrote that model (a model from elsewhere is no export's to replace)
ptdp_lua_test(lua_ckpt_export_keeps_import_source --rc 0
  --expect "the model this checkpoint was imported from" --expect "source kept"
  --expect "has the size and time of the model this checkpoint was imported from" --expect "moved source kept"
  -- sh -c "rm -rf export_src && mkdir export_src && cd export_src && $0 ckpt import-safetensors \"$1/model.safetensors\" \"$1/config.json\" hf >/dev/null && $0 ckpt export-safetensors hf base.safetensors >/dev/null && cp base.safetensors before && $0 ckpt import-safetensors base.safetensors imp >/dev/null && ! $0 ckpt export-safetensors imp base.safetensors && cmp base.safetensors before && echo source kept && mv base.safetensors moved.safetensors && ! $0 ckpt export-safetensors imp moved.safetensors && cmp moved.safetensors before && echo moved source kept"
     ${PTDP_LAUNCHER} ${CMAKE_SOURCE_DIR}/tests/checkpoint/hf)
# (e) a tiny successful run (tokenizes the corpus afresh)
ptdp_lua_test(lua_train_gpt_tiny --rc 0
  --clean ${PTDP_TEST_TMP}/lua/train_gpt_tiny.ptdp
  --expect "tokenized ${PTDP_TEST_CORPUS}: 200 documents"
  --match "^ iteration +1/ +5 \\| consumed samples: +4 \\|"
  --match "^ iteration +5/ +5 \\| consumed samples: +20 \\|"
  --expect " validation loss at iteration 5 | lm loss: "
  --expect "final validation loss" --expect "---- sample (prompt \"The \") ----"
  -- ${PTDP_LAUNCHER} ${PTDP_TRAIN_GPT} --num-layers 1 --hidden-size 32
     --num-attention-heads 2 --seq-length 16 --micro-batch-size 2 --global-batch-size 4
     --train-iters 5 --lr-warmup-iters 1 --log-interval 1 --eval-iters 1 --eval-interval 0
     --sample-tokens 10 --num-threads 1
     --data-path ${PTDP_TEST_TMP}/lua/train_gpt_tiny.ptdp ${PTDP_TRAIN_GPT_DATA})
# a run that diverges (fp16 at loss scale 1, lr 10: one update, then NaN)
# fails, however many of its steps were taken; its perplexity is capped
ptdp_lua_test(lua_train_gpt_diverged --rc nonzero
  --clean ${PTDP_TEST_TMP}/lua/train_gpt_diverged.ptdp
  --expect "the final validation loss is nan: the model diverged" --reject "traceback"
  --reject "PPL: inf"
  -- ${PTDP_LAUNCHER} ${PTDP_TRAIN_GPT} --num-layers 1 --hidden-size 32
     --num-attention-heads 2 --seq-length 16 --micro-batch-size 1 --global-batch-size 2
     --train-iters 20 --lr 10 --min-lr 10 --clip-grad 0 --fp16 --initial-loss-scale 1
     --eval-iters 1 --sample-tokens 0 --num-threads 1
     --data-path ${PTDP_TEST_TMP}/lua/train_gpt_diverged.ptdp ${PTDP_TRAIN_GPT_DATA})
# a pipelined run (t = 2, p = 2, v = 2, recomputation, Megatron's switch):
# one line per rank on where it spent the last step
ptdp_lua_test(lua_train_gpt_pipeline --rc 0
  --match "^ iteration +2/ +2 \\| consumed samples: +8 \\|"
  --match "^ rank 0 \\(tp 0, pp 0, dp 0\\) \\| idle: [0-9.]+% of the last step \\| peak activations: [0-9.]+ MB \\| MB sent: tp [0-9.]+, pp [0-9.]+, dp 0\\.00, embedding [0-9.]+$"
  --match "^ rank 3 \\(tp 1, pp 1, dp 0\\) \\| idle: "
  --expect "final validation loss"
  -- ${PTDP_LAUNCHER} ${PTDP_TRAIN_GPT} --num-layers 4 --hidden-size 32
     --num-attention-heads 2 --seq-length 16 --micro-batch-size 1 --global-batch-size 4
     --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2
     --num-layers-per-virtual-pipeline-stage 1 --recompute-granularity full
     --no-scatter-gather-tensors-in-pipeline
     --train-iters 2 --log-interval 1 --eval-iters 1 --eval-interval 0 --sample-tokens 0
     --num-threads 1
     --data-path ${PTDP_TEST_TMP}/lua/train_gpt_pipeline.ptdp ${PTDP_TRAIN_GPT_DATA})
# (f) the module API used directly, every result asserted inside the script
ptdp_lua_test(lua_module_api --rc 0 --expect "module_api: PASS"
  -- ${PTDP_LAUNCHER} ${PTDP_LUA_TEST}/module_api.lua ${PTDP_LUA_ARGS})
ptdp_lua_test(lua_step_tokens_api --rc 0 --expect "step_tokens_api: PASS"
  -- ${PTDP_LAUNCHER} ${PTDP_LUA_TEST}/step_tokens_api.lua ${PTDP_LUA_ARGS})
ptdp_lua_test(lua_pipeline_api --rc 0 --expect "pipeline_api: PASS"
  -- ${PTDP_LAUNCHER} ${PTDP_LUA_TEST}/pipeline_api.lua ${PTDP_LUA_ARGS})
ptdp_lua_test(lua_checkpoint_api --rc 0 --expect "checkpoint_api: PASS"
  -- ${PTDP_LAUNCHER} ${PTDP_LUA_TEST}/checkpoint_api.lua ${PTDP_LUA_ARGS} ${PTDP_LAUNCHER})
# the launcher's own commands
ptdp_lua_test(lua_launcher_version --rc 0 --expect "ptdp ${PROJECT_VERSION}" -- ${PTDP_LAUNCHER} --version)
ptdp_lua_test(lua_launcher_version_extra --rc nonzero --expect "--version takes no arguments, got 'extra'"
  -- ${PTDP_LAUNCHER} --version extra)
# the module binds the header of its own library's version, or says which differ
ptdp_lua_test(lua_header_version --rc 0 --expect "ptdp ${PROJECT_VERSION}, header ${PROJECT_VERSION}"
  -- ${PTDP_LAUNCHER} ${PTDP_LUA_TEST}/require_ptdp.lua)
ptdp_lua_test(lua_header_version_mismatch --rc nonzero
  --expect "the library is version ${PROJECT_VERSION} but the header it is bound with"
  -- sh -c "mkdir -p other && sed 's/^#define PTDP_VERSION_MAJOR .*/#define PTDP_VERSION_MAJOR 99/' \"$1\" >other/ptdp.h && cp \"$4\" other/ && PTDP_HEADER=other/ptdp.h exec \"$2\" \"$3\""
     sh ${CMAKE_SOURCE_DIR}/capi/ptdp.h ${PTDP_LAUNCHER} ${PTDP_LUA_TEST}/require_ptdp.lua
     ${CMAKE_SOURCE_DIR}/capi/ptdp_tools.h)
# PTDP_HEADER names the engine's header; the tools' must sit beside it (the two go together)
# a header that is a FIFO or a directory is an error naming it, never a wait
ptdp_lua_test(lua_header_fifo --rc nonzero --expect "has no /* ffi-begin */ ... /* ffi-end */"
  -- sh -c "rm -f fifo.h && mkfifo fifo.h && PTDP_HEADER=fifo.h exec \"$1\" \"$2\""
     sh ${PTDP_LAUNCHER} ${PTDP_LUA_TEST}/require_ptdp.lua)
ptdp_lua_test(lua_header_without_tools --rc nonzero --expect "cannot open the tools' header"
  -- sh -c "mkdir -p alone && cp \"$1\" alone/ptdp.h && PTDP_HEADER=alone/ptdp.h exec \"$2\" \"$3\""
     sh ${CMAKE_SOURCE_DIR}/capi/ptdp.h ${PTDP_LAUNCHER} ${PTDP_LUA_TEST}/require_ptdp.lua)
ptdp_lua_test(lua_launcher_unknown_command --rc 2 --expect "unknown command 'frobnicate'"
  --expect "usage:" -- ${PTDP_LAUNCHER} frobnicate)
ptdp_lua_test(lua_launcher_missing_script --rc nonzero
  --expect "script '${PTDP_TEST_TMP}/lua/no_such_script.lua': No such file or directory"
  -- ${PTDP_LAUNCHER} ${PTDP_TEST_TMP}/lua/no_such_script.lua)
ptdp_lua_test(lua_tokenize_cli --rc 0 --expect "200 documents, 7670 tokens"
  -- ${PTDP_LAUNCHER} tokenize --output ${PTDP_TEST_TMP}/lua/tokenize_cli.ptdp --format lines
     ${PTDP_TEST_CORPUS})
# An option given an empty value: refused by name, not read as 0 (all cores);
# through sh, as CMake drops an empty argument.
ptdp_lua_test(lua_tokenize_cli_empty_value --rc nonzero
  --expect "ptdp tokenize: --workers is given an empty value" --reject "documents"
  -- sh -c "'${PTDP_LAUNCHER}' tokenize --output '${PTDP_TEST_TMP}/lua/tokenize_cli_empty.ptdp' --workers '' --format lines '${PTDP_TEST_CORPUS}'")
ptdp_lua_test(lua_tokenize_cli_missing --rc nonzero --expect "does not exist"
  -- ${PTDP_LAUNCHER} tokenize --output ${PTDP_TEST_TMP}/lua/tokenize_cli_missing.ptdp
     --format lines ${PTDP_TEST_TMP}/lua/no_such_corpus.txt)

# `ptdp timeline-png` goes through ptdp_render_timeline: a one-event trace
# drawn, then the C ABI's errors as the command reports them.
file(WRITE ${PTDP_TEST_TMP}/lua/timeline_cli.json
  "{\"traceEvents\": [{\"name\": \"F0\", \"cat\": \"forward\", \"ph\": \"X\", \"ts\": 0, \"dur\": 10, \"pid\": 0, \"tid\": 0, \"args\": {\"microbatch\": 0}}]}\n")
ptdp_lua_test(lua_timeline_png_cli --rc 0 --clean ${PTDP_TEST_TMP}/lua/timeline_cli.png
  --expect "wrote ${PTDP_TEST_TMP}/lua/timeline_cli.png"
  -- ${PTDP_LAUNCHER} timeline-png ${PTDP_TEST_TMP}/lua/timeline_cli.json
     ${PTDP_TEST_TMP}/lua/timeline_cli.png --width 400)
# A width out of range, 0 too (the C ABI reads 0 as 1600: given on the
# command line it drew 1600 pixels in silence).
ptdp_lua_test(lua_timeline_png_cli_width --rc nonzero --expect "--width: Value 10 not in range 140 to 8192"
  -- ${PTDP_LAUNCHER} timeline-png ${PTDP_TEST_TMP}/lua/timeline_cli.json
     ${PTDP_TEST_TMP}/lua/timeline_cli_narrow.png --width 10)
ptdp_lua_test(lua_timeline_png_cli_width_zero --rc nonzero --expect "--width: Value 0 not in range 140 to 8192"
  -- ${PTDP_LAUNCHER} timeline-png ${PTDP_TEST_TMP}/lua/timeline_cli.json
     ${PTDP_TEST_TMP}/lua/timeline_cli_zero.png --width 0)
# An empty value is said as such (CLI11's range check said "Value  not in range").
ptdp_lua_test(lua_timeline_png_cli_width_empty --rc nonzero --expect "--width is given an empty value"
  -- ${PTDP_LAUNCHER} timeline-png ${PTDP_TEST_TMP}/lua/timeline_cli.json
     ${PTDP_TEST_TMP}/lua/timeline_cli_empty.png --width=)
ptdp_lua_test(lua_timeline_png_cli_missing --rc 1 --expect "ptdp: I/O error: "
  --expect "no_such_trace.json"
  -- ${PTDP_LAUNCHER} timeline-png ${PTDP_TEST_TMP}/lua/no_such_trace.json
     ${PTDP_TEST_TMP}/lua/timeline_cli_missing.png)

ptdp_lua_test(lua_ckpt_cli_usage --rc nonzero --expect "inspect" --expect "export-safetensors"
  -- ${PTDP_LAUNCHER} ckpt)
ptdp_lua_test(lua_ckpt_cli_missing --rc nonzero --expect "no checkpoint to open"
  -- ${PTDP_LAUNCHER} ckpt verify ${PTDP_TEST_TMP}/lua/no_such_checkpoint)
ptdp_lua_test(lua_ckpt_cli_help --rc 0 --expect "--dtype" --expect "f32 | bf16 | f16"
  -- ${PTDP_LAUNCHER} ckpt export-safetensors --help)
ptdp_lua_test(lua_ckpt_cli_unknown_subcommand --rc 2
  --expect "ptdp ckpt: unknown subcommand 'frobnicate'"
  --expect "the subcommands are: inspect, verify, export-safetensors"
  -- ${PTDP_LAUNCHER} ckpt frobnicate)

# --save among another run's checkpoints is refused before the first step; an
# edited manifest field is caught by ckpt verify / inspect and --load
add_test(NAME lua_train_gpt_checkpoint_guard
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/lua/checkpoint_guard.sh ${PTDP_LAUNCHER} ${PTDP_TRAIN_GPT}
          ${PTDP_TEST_CORPUS} ${PTDP_TEST_TMP}/lua/checkpoint_guard)
# what a run says it did: its checkpoints, its vocabulary, what it read
add_test(NAME lua_train_gpt_run_account
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/lua/run_account.sh ${PTDP_LAUNCHER} ${PTDP_TRAIN_GPT}
          ${PTDP_TEST_CORPUS} ${PTDP_TEST_TMP}/lua/run_account)
# the log: arguments first, lm loss the log interval's mean, flushed per line
add_test(NAME lua_train_gpt_log
  COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/lua/check_train_log.py ${PTDP_LAUNCHER}
          ${PTDP_TRAIN_GPT} ${PTDP_TEST_CORPUS} ${PTDP_TEST_TMP}/lua/train_log)
# A signal removes bench_checkpoint.lua's own directory, checkpoints and all.
add_test(NAME lua_bench_checkpoint_signal
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/lua/bench_checkpoint_signal.sh ${PTDP_LAUNCHER}
          ${CMAKE_SOURCE_DIR}/scripts/bench_checkpoint.lua ${PTDP_TEST_TMP}/lua/bench_checkpoint_signal)
set(PTDP_LUA_TESTS ${PTDP_LUA_TESTS} lua_train_gpt_checkpoint_guard lua_train_gpt_run_account lua_train_gpt_log
    lua_bench_checkpoint_signal)

set_tests_properties(${PTDP_LUA_TESTS} PROPERTIES
                     LABELS lua TIMEOUT 120 ENVIRONMENT "OMP_NUM_THREADS=1")
