# ---- Datasets: Megatron's indexed format, blends, tokenize, --log-json ------
# Included from tests/CMakeLists.txt (CMAKE_CURRENT_SOURCE_DIR = <repo>/tests).
# C++ tests are labelled unit; the launcher, script and Python checks lua.

add_executable(test_indexed_dataset data/test_indexed_dataset.cpp)
target_link_libraries(test_indexed_dataset PRIVATE ptdp_static GTest::gtest_main)
target_compile_definitions(test_indexed_dataset PRIVATE
  PTDP_TEST_DATA_DIR="${CMAKE_CURRENT_SOURCE_DIR}/fixtures")
gtest_discover_tests(test_indexed_dataset PROPERTIES LABELS unit ENVIRONMENT "OMP_NUM_THREADS=1"
                     DISCOVERY_TIMEOUT 60)

# What ptdp reads from a dataset, for the Python cross-check.
add_executable(dump_tokens data/dump_tokens.cpp)
target_link_libraries(dump_tokens PRIVATE ptdp_static)

set(PTDP_DATA_TMP ${CMAKE_CURRENT_BINARY_DIR}/tmp/data)
set(PTDP_DATA_TESTS)
file(MAKE_DIRECTORY ${PTDP_DATA_TMP})
function(ptdp_data_test name)  # ptdp_data_test(NAME [run_lua_test.sh checks...] -- COMMAND...)
  add_test(NAME ${name} COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/lua/run_lua_test.sh ${ARGN}
           WORKING_DIRECTORY ${PTDP_DATA_TMP})
  set(PTDP_DATA_TESTS ${PTDP_DATA_TESTS} ${name} PARENT_SCOPE)
endfunction()
set(PTDP_DATA_LAUNCHER $<TARGET_FILE:ptdp_launcher>)
set(PTDP_DATA_TRAIN ${CMAKE_SOURCE_DIR}/scripts/train_gpt.lua)
# capi_corpus.txt as JSON lines, {"id": N, "text": LINE + "\n"} (made with
# Python's json.dumps; the same 200 documents as `--format lines`).
set(PTDP_DATA_JSONL ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/capi_corpus.jsonl)
set(PTDP_DATA_TINY --num-layers 1 --hidden-size 32 --num-attention-heads 2 --seq-length 16
    --micro-batch-size 2 --global-batch-size 4 --train-iters 3 --lr-warmup-iters 1
    --log-interval 1 --eval-iters 1 --eval-interval 0 --sample-tokens 0 --num-threads 1)

# Megatron's indexed dataset from JSON lines, then training on it and on a blend.
ptdp_data_test(data_tokenize_jsonl --rc 0
  --clean ${PTDP_DATA_TMP}/fort_text_document.bin --clean ${PTDP_DATA_TMP}/fort_text_document.idx
  --match "^wrote .*/fort_text_document.bin \\+ .*/fort_text_document.idx: 200 documents, 7670 tokens"
  -- ${PTDP_DATA_LAUNCHER} tokenize --format jsonl --json-keys text --append-eod
     --output-prefix ${PTDP_DATA_TMP}/fort ${PTDP_DATA_JSONL})
ptdp_data_test(data_tokenize_lines_indexed --rc 0
  --match "^wrote .*/lines_text_document.bin .*: 200 documents, 7470 tokens"
  -- ${PTDP_DATA_LAUNCHER} tokenize --format lines --output-prefix ${PTDP_DATA_TMP}/lines
     ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/capi_corpus.txt)
ptdp_data_test(data_train_indexed --rc 0
  --match "^ iteration +3/ +3 \\| consumed samples: +12 \\|" --expect "final validation loss"
  -- ${PTDP_DATA_LAUNCHER} ${PTDP_DATA_TRAIN} --data-path ${PTDP_DATA_TMP}/fort_text_document
     ${PTDP_DATA_TINY})
ptdp_data_test(data_train_blend --rc 0
  --match "^ iteration +3/ +3 \\| consumed samples: +12 \\|" --expect "final validation loss"
  -- ${PTDP_DATA_LAUNCHER} ${PTDP_DATA_TRAIN}
     --data-path 0.3 ${PTDP_DATA_TMP}/fort_text_document 0.7 ${PTDP_DATA_TMP}/lines_text_document
     ${PTDP_DATA_TINY} --tensor-model-parallel-size 2 --data-parallel-size 2)
set_tests_properties(data_train_indexed PROPERTIES DEPENDS data_tokenize_jsonl)
set_tests_properties(data_train_blend PROPERTIES
  DEPENDS "data_tokenize_jsonl;data_tokenize_lines_indexed")
# Bad blends and prefixes: the message alone, naming what is wrong. (No ';'
# in an expected text: CMake would split the argument there.)
ptdp_data_test(data_blend_zero_weights --rc nonzero
  --expect "the weights sum to 0" --expect "they must sum to a positive number"
  --reject "iteration "
  -- ${PTDP_DATA_LAUNCHER} ${PTDP_DATA_TRAIN}
     --data-path 0 ${PTDP_DATA_TMP}/fort_text_document 0 ${PTDP_DATA_TMP}/lines_text_document
     ${PTDP_DATA_TINY})
set_tests_properties(data_blend_zero_weights PROPERTIES
  DEPENDS "data_tokenize_jsonl;data_tokenize_lines_indexed")
ptdp_data_test(data_blend_missing_part --rc nonzero
  --expect "dataset 'no_such_prefix' does not exist" --reject "iteration "
  -- ${PTDP_DATA_LAUNCHER} ${PTDP_DATA_TRAIN}
     --data-path 0.5 ${PTDP_DATA_TMP}/fort_text_document 0.5 no_such_prefix ${PTDP_DATA_TINY})
ptdp_data_test(data_tokenize_jsonl_needs_prefix --rc nonzero --expect "give --output-prefix"
  -- ${PTDP_DATA_LAUNCHER} tokenize --format jsonl --output ${PTDP_DATA_TMP}/x.ptdp ${PTDP_DATA_JSONL})
ptdp_data_test(data_tokenize_missing_key --rc nonzero
  --expect "capi_corpus.jsonl:1: no key 'body'"
  -- ${PTDP_DATA_LAUNCHER} tokenize --json-keys body --output-prefix ${PTDP_DATA_TMP}/nokey
     ${PTDP_DATA_JSONL})

# GPT-2 BPE (the test fixtures' 3000-token vocabulary): tokenize into
# Megatron's indexed dataset, train on it (the padded vocabulary, a sample
# decoded by BPE), the ptdp format from a tokenizer.json, and the files that
# belong with each tokenizer type.
set(PTDP_DATA_BPE --tokenizer-type GPT2BPETokenizer
    --vocab-file ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/bpe/vocab.json
    --merge-file ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/bpe/merges.txt)
ptdp_data_test(data_tokenize_bpe --rc 0
  --clean ${PTDP_DATA_TMP}/bpe_text_document.bin --clean ${PTDP_DATA_TMP}/bpe_text_document.idx
  --match "^wrote .*/bpe_text_document.bin .*: 200 documents, 2856 tokens"
  -- ${PTDP_DATA_LAUNCHER} tokenize --format lines --append-eod ${PTDP_DATA_BPE}
     --output-prefix ${PTDP_DATA_TMP}/bpe ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/capi_corpus.txt)
ptdp_data_test(data_train_bpe --rc 0
  --expect "padded vocab: 3072" --match "^ iteration +2/ +2 \\| consumed samples: +8 \\|"
  --expect "final validation loss" --expect "---- sample"
  -- ${PTDP_DATA_LAUNCHER} ${PTDP_DATA_TRAIN} --data-path ${PTDP_DATA_TMP}/bpe_text_document
     ${PTDP_DATA_BPE} ${PTDP_DATA_TINY} --train-iters 2 --sample-tokens 16)
set_tests_properties(data_train_bpe PROPERTIES DEPENDS data_tokenize_bpe)
ptdp_data_test(data_tokenize_bpe_json --rc 0 --clean ${PTDP_DATA_TMP}/bpe_json.ptdp
  --match "^wrote .*/bpe_json.ptdp: 200 documents, 2856 tokens"
  -- ${PTDP_DATA_LAUNCHER} tokenize --format lines --tokenizer-type GPT2BPETokenizer
     --tokenizer-file ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/bpe/tokenizer.json
     --output ${PTDP_DATA_TMP}/bpe_json.ptdp ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/capi_corpus.txt)
ptdp_data_test(data_tokenize_bpe_no_files --rc nonzero
  --expect "GPT2BPETokenizer needs vocab_file + merge_file (vocab.json, merges.txt) or tokenizer_file"
  -- ${PTDP_DATA_LAUNCHER} tokenize --format lines --tokenizer-type GPT2BPETokenizer
     --output-prefix ${PTDP_DATA_TMP}/bpe_none ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/capi_corpus.txt)
# --workers N: the same bytes for 1, 2 and 3 workers; a bad count names the range.
ptdp_data_test(data_tokenize_workers --rc 0
  --expect "workers 1, 2, 3: identical files (byte)" --expect "workers 1, 2, 3: identical files (bpe)"
  -- sh ${CMAKE_CURRENT_SOURCE_DIR}/data/check_workers.sh ${PTDP_DATA_LAUNCHER}
     ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/bpe ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/bpe/text.txt
     ${PTDP_DATA_JSONL} ${PTDP_DATA_TMP}/workers)
ptdp_data_test(data_tokenize_workers_range --rc nonzero
  --expect "workers must be in [0, 1024] (0: one per core), got -1"
  -- ${PTDP_DATA_LAUNCHER} tokenize --workers -1 --format lines
     --output ${PTDP_DATA_TMP}/w.ptdp ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/capi_corpus.txt)
ptdp_data_test(data_tokenize_workers_too_many --rc nonzero
  --expect "workers must be in [0, 1024] (0: one per core), got 5000"
  -- ${PTDP_DATA_LAUNCHER} tokenize --workers 5000 --format lines
     --output-prefix ${PTDP_DATA_TMP}/w ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/capi_corpus.txt)
ptdp_data_test(data_train_byte_with_vocab --rc nonzero
  --expect "the byte tokenizer takes no files, but vocab_file is set" --reject "iteration "
  -- ${PTDP_DATA_LAUNCHER} ${PTDP_DATA_TRAIN} --data-path ${PTDP_DATA_TMP}/bpe_text_document
     --vocab-file ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/bpe/vocab.json ${PTDP_DATA_TINY})
set_tests_properties(data_train_byte_with_vocab PROPERTIES DEPENDS data_tokenize_bpe)

# The Lua module's data calls (tokenize to Megatron's format, a blend as a
# list, log_json, append_line), asserted inside the script.
ptdp_data_test(data_module_api --rc 0 --expect "module_data: PASS"
  -- ${PTDP_DATA_LAUNCHER} ${CMAKE_CURRENT_SOURCE_DIR}/data/module_data.lua ${PTDP_DATA_JSONL}
     ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/capi_corpus.txt ${PTDP_DATA_TMP})

# The Python cross-checks: Megatron's layout written and read with struct
# alone, and the metrics file.
add_test(NAME data_indexed_python_crosscheck
  COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/data/check_indexed.py ${PTDP_DATA_LAUNCHER}
          $<TARGET_FILE:dump_tokens> ${PTDP_DATA_TRAIN} ${PTDP_DATA_TMP}/crosscheck)
add_test(NAME data_log_json
  COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/data/check_log_json.py ${PTDP_DATA_LAUNCHER}
          ${PTDP_DATA_TRAIN} ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/capi_corpus.txt ${PTDP_DATA_TMP}/log_json)
# `ptdp plot` of a real run's --log-json (the PNG read back with Python's zlib),
# its errors, and the planner's labelled plot.
add_test(NAME data_plot
  COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/data/check_plot.py ${PTDP_DATA_LAUNCHER}
          ${PTDP_DATA_TRAIN} ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/capi_corpus.txt ${PTDP_DATA_TMP}/plot
          ${PTDP_DATA_TINY})
# An interrupted tokenize (SIGTERM while writing) leaves no X.tmp.* behind and
# the earlier outputs as they were.
ptdp_data_test(data_tokenize_interrupted --rc 0
  --expect "SIGTERM while writing: no temporary file left, the earlier outputs kept"
  -- sh ${CMAKE_CURRENT_SOURCE_DIR}/data/check_interrupt.sh ${PTDP_DATA_LAUNCHER}
     ${PTDP_DATA_TMP}/interrupted)
set(PTDP_DATA_TESTS ${PTDP_DATA_TESTS} data_indexed_python_crosscheck data_log_json data_plot)

set_tests_properties(${PTDP_DATA_TESTS} PROPERTIES
                     LABELS lua TIMEOUT 180 ENVIRONMENT "OMP_NUM_THREADS=1")

# The LLaMA family's tokenizers against Hugging Face's ids (tests/fixtures/llama_tok)
add_executable(test_llama_tokenizers data/test_llama_tokenizers.cpp)
target_link_libraries(test_llama_tokenizers PRIVATE ptdp_static GTest::gtest_main)
target_compile_definitions(test_llama_tokenizers PRIVATE
  PTDP_TEST_DATA_DIR="${CMAKE_CURRENT_SOURCE_DIR}/fixtures")
gtest_discover_tests(test_llama_tokenizers PROPERTIES LABELS unit ENVIRONMENT "OMP_NUM_THREADS=1")
# GPT-2 byte-level BPE against Hugging Face's tokenizers (fixtures in fixtures/bpe,
# made by fixtures/bpe/make_bpe_fixtures.py), and its speed on the fortunes.
add_executable(test_bpe_tokenizer data/test_bpe_tokenizer.cpp)
target_link_libraries(test_bpe_tokenizer PRIVATE ptdp_static GTest::gtest_main)
target_compile_definitions(test_bpe_tokenizer PRIVATE
  PTDP_TEST_DATA_DIR="${CMAKE_CURRENT_SOURCE_DIR}/fixtures")
gtest_discover_tests(test_bpe_tokenizer PROPERTIES LABELS unit ENVIRONMENT "OMP_NUM_THREADS=1"
                     DISCOVERY_TIMEOUT 60)
add_executable(bench_bpe_tokenizer data/bench_bpe_tokenizer.cpp)
target_link_libraries(bench_bpe_tokenizer PRIVATE ptdp_static)
target_compile_definitions(bench_bpe_tokenizer PRIVATE
  PTDP_TEST_DATA_DIR="${CMAKE_CURRENT_SOURCE_DIR}/fixtures")

# `ptdp tokenize --workers N`: BPE on several threads, ordered chunks, and
# byte-identical files for any N.
add_executable(test_parallel_tokenize data/test_parallel_tokenize.cpp)
target_link_libraries(test_parallel_tokenize PRIVATE ptdp_static GTest::gtest_main)
target_compile_definitions(test_parallel_tokenize PRIVATE
  PTDP_TEST_DATA_DIR="${CMAKE_CURRENT_SOURCE_DIR}/fixtures")
gtest_discover_tests(test_parallel_tokenize PROPERTIES LABELS unit ENVIRONMENT "OMP_NUM_THREADS=1"
                     DISCOVERY_TIMEOUT 60)
