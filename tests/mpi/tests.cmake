# ---- the `mpi` communicator backend (label mpi) ----------------------------
# Included from tests/CMakeLists.txt (CMAKE_CURRENT_SOURCE_DIR = <repo>/tests);
# find_package(MPI REQUIRED COMPONENTS C) is done at the top level.
# Every test is one mpirun invocation. --oversubscribe: more ranks than cores;
# --allow-run-as-root: CI containers run as root (harmless otherwise).
# The failure tests do not look for OpenMPI's own "MPI_ABORT was invoked" banner:
# OpenMPI 4.1 sometimes loses it ("ORTE_ERROR_LOG: Data unpack ... show_help.c")
# when the aborting process dies first; ptdp's message is written before the abort.
find_package(Threads REQUIRED)

# ptdp_mpi = the engine plus engine/comm/mpi_comm.cpp. Until mpi_comm.cpp joins
# the engine's own sources it is compiled here; once it does, ptdp_mpi is just an
# alias for ptdp_static + MPI (no second copy of the same symbols).
get_target_property(ptdp_engine_sources ptdp_engine SOURCES)
if(NOT TARGET ptdp_mpi)
  if("engine/comm/mpi_comm.cpp" IN_LIST ptdp_engine_sources)
    add_library(ptdp_mpi INTERFACE)
    target_link_libraries(ptdp_mpi INTERFACE ptdp_static MPI::MPI_C Threads::Threads)
  else()
    add_library(ptdp_mpi STATIC ${CMAKE_SOURCE_DIR}/engine/comm/mpi_comm.cpp)
    target_link_libraries(ptdp_mpi PUBLIC ptdp_static MPI::MPI_C Threads::Threads)
  endif()
endif()

add_executable(test_comm_mpi mpi/test_comm_mpi.cpp)
target_link_libraries(test_comm_mpi PRIVATE ptdp_mpi GTest::gtest Threads::Threads)
add_executable(test_mpi_failure mpi/test_mpi_failure.cpp)
target_link_libraries(test_mpi_failure PRIVATE ptdp_mpi Threads::Threads)

set(PTDP_MPI_TESTS)
set(PTDP_EXPECT_FAILURE bash ${CMAKE_CURRENT_SOURCE_DIR}/mpi/expect_failure.sh)

# test_mpi_failure MODE on np processes must fail within 20 s, printing every EXPECT text.
function(ptdp_mpi_comm_failure mode np)
  cmake_parse_arguments(F "" "" "EXPECT" ${ARGN})
  set(expects)
  foreach(text IN LISTS F_EXPECT)
    list(APPEND expects --expect "${text}")
  endforeach()
  add_test(NAME mpi_fail_${mode}_np${np}
           COMMAND ${PTDP_EXPECT_FAILURE} --max-seconds 20 ${expects}
                   -- ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} --allow-run-as-root
                   --oversubscribe ${MPIEXEC_PREFLAGS} $<TARGET_FILE:test_mpi_failure>
                   ${MPIEXEC_POSTFLAGS} ${mode})
  set_tests_properties(mpi_fail_${mode}_np${np} PROPERTIES PROCESSORS ${np})
  set(PTDP_MPI_TESTS ${PTDP_MPI_TESTS} mpi_fail_${mode}_np${np} PARENT_SCOPE)
endfunction()

foreach(np 2 4)
  # The conformance suite (tests/comm) on the mpi backend (np ranks) and the mpi-threads
  # backend (2 thread ranks per process), then mpi-only group creation errors.
  add_test(NAME mpi_comm_np${np}
           COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} --allow-run-as-root
                   --oversubscribe ${MPIEXEC_PREFLAGS} $<TARGET_FILE:test_comm_mpi>
                   ${MPIEXEC_POSTFLAGS})
  set_tests_properties(mpi_comm_np${np} PROPERTIES PROCESSORS ${np})
  list(APPEND PTDP_MPI_TESTS mpi_comm_np${np})

  # (a) a rank skips a collective: rank 0 times out after 3 s and says what rank 1 does
  ptdp_mpi_comm_failure(skip ${np} EXPECT
    "communicator timeout after 3 s in group 'tp'"
    "during all_reduce on rank 0 (all_reduce #2 of group 'tp')"
    "ranks still missing: 1 (waiting in barrier #2 of group 'world'"
    "has completed 1 collectives in 'tp'")
  # ... or sleeps instead, so it cannot answer
  ptdp_mpi_comm_failure(skip_sleep ${np} EXPECT
    "communicator timeout after 3 s in group 'tp'"
    "ranks still missing: 1 (no answer: it is busy outside ptdp communication, hung or dead)")
  # a message that is never sent
  ptdp_mpi_comm_failure(nosend ${np} EXPECT
    "communicator timeout after 3 s in group 'pp' (world ranks 0 1) during recv on rank 0"
    "rank 1 has not sent (rank 1: waiting in barrier #2 of group 'world'")
  # a large message that is never received: the sender's communicator destructor times out
  ptdp_mpi_comm_failure(unreceived ${np} EXPECT
    "communicator timeout after 3 s in group 'pp' (world ranks 0 1) during send on rank 0"
    "1 buffered messages to world rank(s) 1 were never received"
    "rank 1: waiting in barrier #2 of group 'world'")
  # (b) a rank dies in the middle of a collective: mpirun ends the job
  ptdp_mpi_comm_failure(kill ${np} EXPECT
    "rank 1: raising SIGKILL"
    "process rank 1 with PID"
    "signal 9")
  # a rank leaves with an exception (no MPI_Finalize): mpirun ends the job
  ptdp_mpi_comm_failure(throw ${np} EXPECT
    "error: rank 1 fails on purpose")
endforeach()

set_tests_properties(${PTDP_MPI_TESTS} PROPERTIES
                     LABELS mpi TIMEOUT 90 ENVIRONMENT "OMP_NUM_THREADS=1")

# Training under mpirun equals the serial run (train_equivalence.sh): np
# processes run losses.lua with ARGS; the test carries LABELS.
function(ptdp_mpi_training_equivalence name np)
  cmake_parse_arguments(F "" "" "LABELS;ARGS" ${ARGN})
  add_test(NAME ${name}
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/mpi/train_equivalence.sh
                   $<TARGET_FILE:ptdp_launcher> ${MPIEXEC_EXECUTABLE} ${np}
                   ${PTDP_TEST_TMP}/${name} ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/tiny_corpus.txt
                   ${F_ARGS})
  set_tests_properties(${name} PROPERTIES LABELS "${F_LABELS}" TIMEOUT 240
                       PROCESSORS ${np} ENVIRONMENT "OMP_NUM_THREADS=1")
endfunction()

# Tensor and data parallel: one rank per process (mpi collectives), and two
# ranks per process (np 2 with 4 ranks: mpi messages between thread ranks).
foreach(layout "2;2;1" "4;2;2" "4;1;4" "2;2;2" "2;4;1")
  list(GET layout 0 np)
  list(GET layout 1 t)
  list(GET layout 2 d)
  ptdp_mpi_training_equivalence(mpi_train_np${np}_t${t}d${d} ${np} LABELS mpi
    ARGS --tensor-model-parallel-size ${t} --data-parallel-size ${d})
endforeach()

# PTD-P: 8 processes, (t, p, d) = (2, 2, 2) with v = 2 interleaved, scatter/gather
# on, full recomputation; and 2 processes hosting 4 pipeline ranks each.
foreach(layout "8;2;2;2" "2;2;4;1")
  list(GET layout 0 np)
  list(GET layout 1 t)
  list(GET layout 2 p)
  list(GET layout 3 d)
  ptdp_mpi_training_equivalence(mpi_train_np${np}_t${t}p${p}d${d} ${np} LABELS mpi pipeline
    ARGS --tensor-model-parallel-size ${t} --pipeline-model-parallel-size ${p}
         --data-parallel-size ${d} --num-layers-per-virtual-pipeline-stage 1
         --recompute-granularity full)
endforeach()

# --overlap-grad-reduce under mpirun: each rank's communication thread reduces
# gradient buckets over MPI while its backward goes on (MPI_THREAD_MULTIPLE,
# or one MPI call at a time): one rank per process, and 2 processes hosting
# (p, d) = (2, 2) as thread ranks.
ptdp_mpi_training_equivalence(mpi_train_np4_d4_overlap 4 LABELS mpi
  ARGS --data-parallel-size 4 --overlap-grad-reduce 1 --ddp-bucket-size 5000)
ptdp_mpi_training_equivalence(mpi_train_np2_p2d2_overlap 2 LABELS mpi pipeline
  ARGS --pipeline-model-parallel-size 2 --data-parallel-size 2 --overlap-grad-reduce 1
       --ddp-bucket-size 5000)

# train_gpt.lua's per-rank report lines come from world rank 0's process alone,
# in world-rank order after the last iteration line (rank_report_lines.sh): one
# rank per process, and 2 processes hosting 4 thread ranks each.
foreach(layout "4;2;2;1" "2;2;2;2")
  list(GET layout 0 np)
  list(GET layout 1 t)
  list(GET layout 2 p)
  list(GET layout 3 d)
  set(name mpi_rank_report_lines_np${np}_t${t}p${p}d${d})
  add_test(NAME ${name}
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/mpi/rank_report_lines.sh
                   $<TARGET_FILE:ptdp_launcher> ${MPIEXEC_EXECUTABLE} ${np} ${PTDP_TEST_TMP}/${name}
                   ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/tiny_corpus.txt
                   ${CMAKE_SOURCE_DIR}/scripts/train_gpt.lua
                   --tensor-model-parallel-size ${t} --pipeline-model-parallel-size ${p}
                   --data-parallel-size ${d})
  set_tests_properties(${name} PROPERTIES LABELS mpi TIMEOUT 120 PROCESSORS ${np}
                       ENVIRONMENT "OMP_NUM_THREADS=1")
  # ... and trainer:rank_reports itself (rank_reports.lua): the gathered values
  # equal rank_report's on world rank 0, and nothing elsewhere.
  set(name mpi_rank_reports_np${np}_t${t}p${p}d${d})
  set(dir ${PTDP_TEST_TMP}/${name})
  file(MAKE_DIRECTORY ${dir})
  add_test(NAME ${name}
           COMMAND bash -c "\"$1\" tokenize --format lines --output d.ptdp \"$2\" >/dev/null && timeout 120 ${MPIEXEC_EXECUTABLE} -np ${np} --allow-run-as-root --oversubscribe \"$1\" \"$3\" d.ptdp ${t} ${p} ${d} | tee out.txt && grep -q 'mpi rank_reports: PASS' out.txt"
                   ${name} $<TARGET_FILE:ptdp_launcher> ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/tiny_corpus.txt
                   ${CMAKE_CURRENT_SOURCE_DIR}/mpi/rank_reports.lua)
  set_tests_properties(${name} PROPERTIES LABELS mpi TIMEOUT 120 PROCESSORS ${np}
                       WORKING_DIRECTORY ${dir} ENVIRONMENT "OMP_NUM_THREADS=1")
endforeach()

# Batches from the embedder under mpirun (every process passes the whole
# batch): the same run as the dataset's, one and two ranks per process.
foreach(np 8 4)
  set(dir ${PTDP_TEST_TMP}/mpi_step_tokens_np${np})
  file(MAKE_DIRECTORY ${dir})
  add_test(NAME mpi_step_tokens_np${np}
           COMMAND bash -c "yes abcdefghijklmn | head -n 200 >periodic.txt && \"$1\" tokenize --format lines --output periodic.ptdp periodic.txt >/dev/null && ${MPIEXEC_EXECUTABLE} -np ${np} --allow-run-as-root --oversubscribe \"$1\" \"$2\" periodic.ptdp | tee out.txt && grep -q 'mpi step_tokens: PASS' out.txt"
                   mpi_step_tokens $<TARGET_FILE:ptdp_launcher> ${CMAKE_CURRENT_SOURCE_DIR}/mpi/step_tokens.lua)
  set_tests_properties(mpi_step_tokens_np${np} PROPERTIES LABELS mpi TIMEOUT 60 PROCESSORS ${np}
                       WORKING_DIRECTORY ${dir} ENVIRONMENT "OMP_NUM_THREADS=1")
endforeach()

# A training run under mpirun that must fail: the corpus is tokenized in the
# test's own folder, then `np` processes run losses.lua with ARGS; every
# EXPECT text must appear and the job must end non-zero within 30 s.
function(ptdp_mpi_training_failure name np)
  cmake_parse_arguments(F "" "" "EXPECT;ARGS" ${ARGN})
  set(dir ${PTDP_TEST_TMP}/${name})
  file(MAKE_DIRECTORY ${dir})
  set(expects)
  foreach(text IN LISTS F_EXPECT)
    list(APPEND expects --expect "${text}")
  endforeach()
  list(JOIN F_ARGS " " args)
  add_test(NAME ${name}
           COMMAND ${PTDP_EXPECT_FAILURE} --max-seconds 30 ${expects}
                   -- bash -c "\"$1\" tokenize --output data.ptdp \"$2\" >/dev/null && ${MPIEXEC_EXECUTABLE} -np ${np} --allow-run-as-root --oversubscribe \"$1\" \"$3\" --data-path data.ptdp ${args}"
                   ${name} $<TARGET_FILE:ptdp_launcher> ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/tiny_corpus.txt
                   ${CMAKE_CURRENT_SOURCE_DIR}/mpi/losses.lua)
  set_tests_properties(${name} PROPERTIES LABELS mpi TIMEOUT 60 PROCESSORS ${np}
                       WORKING_DIRECTORY ${dir} ENVIRONMENT "OMP_NUM_THREADS=1")
endfunction()

# A layout whose t*p*d does not match the processes: every process says so.
ptdp_mpi_training_failure(mpi_world_size_mismatch 3
  EXPECT "the layout needs t*p*d = 2*1*2 = 4 ranks but mpirun started 3 processes"
  ARGS --tensor-model-parallel-size 2 --data-parallel-size 2)
# Processes given other options (here the hidden size): every process names
# the option before the first collective (MPI aborted with MPI_ERR_TRUNCATE).
set(dir ${PTDP_TEST_TMP}/mpi_options_differ)
file(MAKE_DIRECTORY ${dir})
add_test(NAME mpi_options_differ
  COMMAND ${PTDP_EXPECT_FAILURE} --max-seconds 30
          --expect "option 'hidden_size' differs between the processes of this run"
          --expect "on world rank 1 it is '96'"
          -- bash -c "\"$1\" tokenize --output data.ptdp \"$2\" >/dev/null && ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe -np 1 \"$1\" \"$3\" --data-path data.ptdp --data-parallel-size 2 : -np 1 \"$1\" \"$3\" --data-path data.ptdp --data-parallel-size 2 --hidden-size 96"
          mpi_options_differ $<TARGET_FILE:ptdp_launcher> ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/tiny_corpus.txt
          ${CMAKE_CURRENT_SOURCE_DIR}/mpi/losses.lua)
set_tests_properties(mpi_options_differ PROPERTIES LABELS mpi TIMEOUT 60 PROCESSORS 2
                     WORKING_DIRECTORY ${dir} ENVIRONMENT "OMP_NUM_THREADS=1")
# A two-process train_gpt.lua run that must fail quickly saying `says`:
# `script` runs in bash in a directory of its own, with $1 the launcher, $2 a
# corpus, $3 train_gpt.lua, $4 a tiny model's flags and $MPI mpirun.
function(ptdp_mpi_refusal name says script)
  set(dir ${PTDP_TEST_TMP}/${name})
  file(MAKE_DIRECTORY ${dir})
  add_test(NAME ${name}
    COMMAND ${PTDP_EXPECT_FAILURE} --max-seconds 40 --expect "${says}"
            -- bash -c "MPI='${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe' && ${script}"
            ${name} $<TARGET_FILE:ptdp_launcher> ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/tiny_corpus.txt
            ${CMAKE_SOURCE_DIR}/scripts/train_gpt.lua
            "--num-layers 2 --hidden-size 32 --num-attention-heads 2 --seq-length 16 --micro-batch-size 2 --global-batch-size 4 --train-iters 4 --lr-decay-iters 4 --sample-tokens 0")
  set_tests_properties(${name} PROPERTIES LABELS mpi TIMEOUT 60 PROCESSORS 2
                       WORKING_DIRECTORY ${dir} ENVIRONMENT "OMP_NUM_THREADS=1")
endfunction()
# So do a script's own options that shape collectives (another --eval-interval
# crashed inside MPI) and the exit options (another --exit-interval hung).
# And the log the first process writes (a --log-json given to another was
# ignored in silence); and a layout of other processes fails on that option,
# not in MPI's abort after one process refused its layout alone.
# Each case "key|flags|what it says" is the test mpi_<key><suffix>, its script
# `command` with @FLAGS@ standing for the case's flags.
function(ptdp_mpi_refusal_cases suffix command)
  foreach(case IN LISTS ARGN)
    string(REPLACE "|" ";" parts "${case}")
    list(GET parts 0 key)
    list(GET parts 1 flags)
    list(GET parts 2 says)
    string(REPLACE "@FLAGS@" "${flags}" script "${command}")
    ptdp_mpi_refusal(mpi_${key}${suffix} "${says}" "${script}")
  endforeach()
endfunction()
ptdp_mpi_refusal_cases(_differs
  "\"$1\" tokenize --output data.ptdp \"$2\" >/dev/null && $MPI -np 1 \"$1\" \"$3\" $4 --data-path data.ptdp --data-parallel-size 2 : -np 1 \"$1\" \"$3\" $4 --data-path data.ptdp --data-parallel-size 2 @FLAGS@"
  "eval_interval|--eval-interval 1|script option 'eval_interval' differs between the processes of this run"
  "exit_interval|--exit-interval 2|option 'exit_interval' differs between the processes of this run"
  "log_json|--log-json l.jsonl|script option 'log_json' differs between the processes of this run"
  "layout|--data-parallel-size 1|option 'data_parallel_size' differs between the processes of this run"
  "scatter_gather|--scatter-gather-tensors-in-pipeline 0|option 'scatter_gather_tensors_in_pipeline' differs between the processes of this run")
# Another --corpus for one --data-path made on first use: the processes raced
# to make it, and the one that lost trained on the other's corpus, exit 0.
# Refused by all, and the dataset made goes again.
ptdp_mpi_refusal(mpi_corpus_differs "script option 'corpus' differs between the processes of this run"
  "rm -f d.ptdp && cp \"$2\" c.txt && tac c.txt > c2.txt && $MPI -np 1 \"$1\" \"$3\" $4 --data-parallel-size 2 --data-path d.ptdp --corpus c.txt --corpus-format lines : -np 1 \"$1\" \"$3\" $4 --data-parallel-size 2 --data-path d.ptdp --corpus c2.txt --corpus-format lines; rc=$?; [ -e d.ptdp ] && exit 0; exit $rc")
# A damaged block that one tensor-parallel rank's shard reads (fc1's weight,
# its first rows: rank 0's): that process
# fails alone, after start-up. It leaves without MPI's shutdown barrier, so
# mpirun ends the job (the barrier met the other's next collective, which read
# it as "0 script options", or MPI aborted with MPI_ERR_TRUNCATE).
ptdp_mpi_refusal(mpi_load_fails_in_one_process "corrupt data"
  "rm -rf ck && \"$1\" tokenize --output data.ptdp \"$2\" >/dev/null && $MPI -np 2 \"$1\" \"$3\" $4 --data-path data.ptdp --tensor-model-parallel-size 2 --save ck >/dev/null 2>&1 && off=$(h5dump -p -H -d /model/h.0.mlp.c_fc.weight ck/iter_0000004/model.h5 | sed -n 's/.*OFFSET //p') && printf '\\377' | dd of=ck/iter_0000004/model.h5 bs=1 seek=$((off + 100)) conv=notrunc 2>/dev/null && $MPI -np 2 \"$1\" \"$3\" $4 --data-path data.ptdp --tensor-model-parallel-size 2 --load ck > out.txt 2>&1; rc=$?; cat out.txt; grep -q 'script options\\|MPI_ERR' out.txt && exit 0; exit $rc")
# Loss scaling and the tokenizer's files (each process may name them by its
# own path) are compared too: another --loss-scale trained a third model,
# exit 0; another merges.txt failed in the sample's collectives.
ptdp_mpi_refusal(mpi_loss_scale_differs "option 'loss_scale' differs between the processes of this run"
  "\"$1\" tokenize --output data.ptdp \"$2\" >/dev/null && $MPI -np 1 \"$1\" \"$3\" $4 --data-path data.ptdp --data-parallel-size 2 --fp16 1 --loss-scale 1024 : -np 1 \"$1\" \"$3\" $4 --data-path data.ptdp --data-parallel-size 2 --fp16 1 --loss-scale 4096")
ptdp_mpi_refusal(mpi_merges_differ "option 'tokenizer files by what they hold (a hash each of vocab_file, merge_file, tokenizer_file"
  "B=${CMAKE_CURRENT_SOURCE_DIR}/fixtures/bpe && rm -rf A B2 && mkdir A B2 && cp $B/vocab.json $B/merges.txt A/ && cp $B/vocab.json B2/ && head -5 $B/merges.txt > B2/merges.txt && \"$1\" tokenize --tokenizer-type GPT2BPETokenizer --vocab-file A/vocab.json --merge-file A/merges.txt --format lines -o bpe.ptdp $B/text.txt >/dev/null && $MPI -np 1 -wdir $PWD/A \"$1\" \"$3\" $4 --tokenizer-type GPT2BPETokenizer --data-path ../bpe.ptdp --vocab-file vocab.json --merge-file merges.txt --data-parallel-size 2 : -np 1 -wdir $PWD/B2 \"$1\" \"$3\" $4 --tokenizer-type GPT2BPETokenizer --data-path ../bpe.ptdp --vocab-file vocab.json --merge-file merges.txt --data-parallel-size 2")
# One process's own --timeline file (PATH.rank1) refused: every process stops
# at once, the others naming it (they went on into the next collective, and
# said their script options differed from those of a process gone).
ptdp_mpi_refusal(mpi_own_timeline_refused "the process of mpirun rank 1 refused its --timeline or --profile-ops file"
  "rm -rf T.rank1 && mkdir T.rank1 && \"$1\" tokenize --output data.ptdp \"$2\" >/dev/null && $MPI -np 2 \"$1\" \"$3\" $4 --data-path data.ptdp --data-parallel-size 2 --timeline T")
# A relative --save or --load from other working directories is one
# directory per process: the first save's collective open hung, and a --load
# only one process found trained the shards from two states, then hung. Told
# by the directories they name; where one name is a directory of each node's
# own, by --save's probes and --load's agreement on what it found.
ptdp_mpi_refusal_cases(_elsewhere
  "rm -rf a b && mkdir a b && \"$1\" tokenize --output a/data.ptdp \"$2\" >/dev/null && cp a/data.ptdp b/ && (cd a && \"$1\" \"$3\" $4 --data-path data.ptdp --data-parallel-size 2 --save ck >/dev/null) && $MPI -np 1 -wdir $PWD/a \"$1\" \"$3\" $4 --data-path data.ptdp --data-parallel-size 2 @FLAGS@ : -np 1 -wdir $PWD/b \"$1\" \"$3\" $4 --data-path data.ptdp --data-parallel-size 2 @FLAGS@"
  "save|--save ck2 --save-interval 2|option 'save' differs between the processes of this run"
  "load|--load ck --train-iters 6|option 'load' differs between the processes of this run")
# A --log-json naming another process's --timeline (PATH.rankN): refused by
# every process at once (the first alone refused it after the start, and the
# other waited in its first collective until the communicator timeout).
ptdp_mpi_refusal(mpi_log_json_on_a_timeline "--log-json 'T.rank1' is also this run's --timeline 'T.rank1'"
  "\"$1\" tokenize --output data.ptdp \"$2\" >/dev/null && $MPI -np 2 \"$1\" \"$3\" $4 --data-path data.ptdp --data-parallel-size 2 --timeline T --log-json T.rank1")
# A two-process train_gpt.lua run that must succeed: `script` runs in bash in
# a directory of its own, with $1 the launcher, $2 a corpus, $3 train_gpt.lua,
# $4 a tiny model's flags (no --train-iters) and $MPI mpirun.
function(ptdp_mpi_run name timeout script)
  set(dir ${PTDP_TEST_TMP}/${name})
  file(MAKE_DIRECTORY ${dir})
  add_test(NAME ${name}
    COMMAND bash -c "MPI='timeout 60 ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe' && ${script}"
            ${name} $<TARGET_FILE:ptdp_launcher> ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/tiny_corpus.txt
            ${CMAKE_SOURCE_DIR}/scripts/train_gpt.lua
            "--num-layers 2 --hidden-size 32 --num-attention-heads 2 --seq-length 16 --micro-batch-size 2 --global-batch-size 4 --lr-decay-iters 2 --sample-tokens 0")
  set_tests_properties(${name} PROPERTIES LABELS mpi TIMEOUT ${timeout} PROCESSORS 2
                       WORKING_DIRECTORY ${dir} ENVIRONMENT "OMP_NUM_THREADS=1")
endfunction()
# One --save and --load directory spelled another way in each process (from
# another working directory, with a trailing '/'): refused as "differs", then
# (once compared by what they name) hung at the save's collective open, which
# MPI-IO coordinates by the file's name. Every process names it alike now.
ptdp_mpi_run(mpi_save_spelled_two_ways 150
  "rm -rf w ck && mkdir w && \"$1\" tokenize --output data.ptdp \"$2\" >/dev/null && cp data.ptdp w/ && for iters in 2 4; do $MPI -np 1 -wdir $PWD/w \"$1\" \"$3\" $4 --train-iters $iters --data-path data.ptdp --data-parallel-size 2 --load ../ck --save ../ck : -np 1 -wdir $PWD \"$1\" \"$3\" $4 --train-iters $iters --data-path data.ptdp --data-parallel-size 2 --load ck/ --save ck/ > out_$iters.txt 2>&1 || { cat out_$iters.txt; exit 1; }; grep -q \"saved checkpoint $PWD/ck/iter_000000$iters\" out_$iters.txt || { cat out_$iters.txt; exit 1; }; done")
# One --log-json spelled two ways (m.json, ./m.json) is one log: the run goes
# on (it was refused as "differs"), and the first process writes it.
ptdp_mpi_run(mpi_log_json_spelled_two_ways 90
  "rm -f m.json && \"$1\" tokenize --output data.ptdp \"$2\" >/dev/null && $MPI -np 1 \"$1\" \"$3\" $4 --train-iters 2 --data-path data.ptdp --data-parallel-size 2 --log-json m.json : -np 1 \"$1\" \"$3\" $4 --train-iters 2 --data-path data.ptdp --data-parallel-size 2 --log-json ./m.json && test -s m.json")
# A rank killed between steps while the others go on into the next step's
# collectives: every process ends and mpirun names the dead rank.
ptdp_mpi_training_failure(mpi_train_rank_killed 2
  EXPECT "process rank 1" "signal 9"
  ARGS --tensor-model-parallel-size 2 --die-rank 1 --die-step 3)
# SIGTERM to one process of two under --exit-signal-handler: both finish the
# step, save it and end after it (each says why), and the job exits 0.
set(dir ${PTDP_TEST_TMP}/mpi_exit_signal)
file(MAKE_DIRECTORY ${dir})
add_test(NAME mpi_exit_signal
  COMMAND bash -c "rm -rf ck && \"$1\" tokenize --output data.ptdp \"$2\" >/dev/null && timeout 60 ${MPIEXEC_EXECUTABLE} -np 2 --allow-run-as-root --oversubscribe \"$1\" \"$3\" --data-path data.ptdp --tensor-model-parallel-size 2 --exit-signal-handler 1 --save ck --term-rank 1 --die-step 3 | tee out.txt && grep -q \"rank 0: exiting: SIGTERM received at iteration 3; saved $PWD/ck/iter_0000003\" out.txt && grep -q 'rank 1: exiting: SIGTERM received at iteration 3' out.txt && test -d ck/iter_0000003"
          mpi_exit_signal $<TARGET_FILE:ptdp_launcher> ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/tiny_corpus.txt
          ${CMAKE_CURRENT_SOURCE_DIR}/mpi/losses.lua)
set_tests_properties(mpi_exit_signal PROPERTIES LABELS mpi TIMEOUT 90 PROCESSORS 2
                     WORKING_DIRECTORY ${dir} ENVIRONMENT "OMP_NUM_THREADS=1")
# --async-save under mpirun with several processes: refused before the first
# step (its collectives would run beside training's), every process saying why.
ptdp_mpi_training_failure(mpi_async_save_refused 2
  EXPECT "async_save writes checkpoints on a background thread"
  ARGS --tensor-model-parallel-size 2 --async-save 1 --save ck)
# A script error on one process stops the job at once (not after the 300 s
# communication timeout): the launcher aborts the MPI job.
ptdp_mpi_training_failure(mpi_script_error 2
  EXPECT "script error on rank 1" "ptdp: rank 1: the script failed"
  ARGS --tensor-model-parallel-size 2 --error-rank 1 --die-step 3)

# Checkpoints written with parallel HDF5 under mpirun and loaded into other
# layouts (mpirun and thread ranks): the continued runs equal the serial run.
add_test(NAME mpi_checkpoint_reshard
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/mpi/checkpoint_reshard.sh
                 $<TARGET_FILE:ptdp_launcher> ${MPIEXEC_EXECUTABLE}
                 ${PTDP_TEST_TMP}/mpi_checkpoint_reshard ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/tiny_corpus.txt)
set_tests_properties(mpi_checkpoint_reshard PROPERTIES LABELS "mpi;checkpoint" TIMEOUT 300
                     PROCESSORS 8 ENVIRONMENT "OMP_NUM_THREADS=1")
