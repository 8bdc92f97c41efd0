/* ptdp — the stable C ABI (ARCHITECTURE §6).
 *
 * Conventions: every function returns ptdp_status (0 = PTDP_OK) except the
 * string getters and destructors; on error, ptdp_last_error() (thread-local)
 * says what was wrong and what is allowed, in valid UTF-8 (a user's bytes it
 * quotes that are not UTF-8 appear as \xNN). Handles are opaque; *_destroy
 * accepts NULL. A handle of the wrong kind, a destroyed one, or an address that
 * was never one gives PTDP_ERR_INVALID_ARGUMENT naming what it is; a destructor
 * given one (a double destroy) frees nothing and says why in ptdp_last_error
 * (an address reused by a newer handle of the same kind is that handle).
 * Threads: one handle is used by one thread at a time (the trainer runs its
 * own threads inside its calls); different handles, ptdp_last_error (per
 * thread) and the functions without a handle may be called from any threads
 * at once; destroying a handle while another thread uses it is undefined.
 * Strings returned by the library are owned by it. Output text
 * goes to caller-owned buffers: pass the capacity, get the needed size (without
 * the NUL) in *out_len; PTDP_ERR_BUFFER_TOO_SMALL means call again with more.
 * No C++ exception or abort crosses this boundary. The declarations between
 * the ffi markers contain no preprocessor lines, so LuaJIT's ffi.cdef and
 * Python's ctypes bind them as they are (a binding drops the PTDP_API and
 * PTDP_DEPRECATED(...) markers). This header is the engine: configuration,
 * trainer, checkpoints; capi/ptdp_tools.h adds the tools (tokenizers, drawings,
 * benchmarks, the planner) from the same library. */
#ifndef PTDP_H
#define PTDP_H

#include <stddef.h>
#include <stdint.h>

#define PTDP_VERSION_MAJOR 0
#define PTDP_VERSION_MINOR 1
#define PTDP_VERSION_PATCH 0

#if defined(PTDP_BUILDING_LIBRARY)
#define PTDP_API __attribute__((visibility("default")))
#else
#define PTDP_API
#endif

/* A function another one supersedes: it keeps working, the compiler warns
 * (define PTDP_ALLOW_DEPRECATED before including to silence it). */
#if defined(PTDP_ALLOW_DEPRECATED) || defined(PTDP_BUILDING_LIBRARY)
#define PTDP_DEPRECATED(why)
#else
#define PTDP_DEPRECATED(why) __attribute__((deprecated(why)))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ffi-begin */
typedef int32_t ptdp_status;
enum {
  PTDP_OK = 0,
  PTDP_ERR_INVALID_ARGUMENT = 1,
  PTDP_ERR_UNKNOWN_OPTION = 2,
  PTDP_ERR_BAD_VALUE = 3,
  PTDP_ERR_INVALID_CONFIG = 4,
  PTDP_ERR_WRONG_STATE = 5,
  PTDP_ERR_IO = 6,
  PTDP_ERR_CORRUPT_DATA = 7,
  PTDP_ERR_BUFFER_TOO_SMALL = 8,
  PTDP_ERR_OUT_OF_MEMORY = 9,
  PTDP_ERR_INTERNAL = 10,
  PTDP_ERR_COMM = 11
};

typedef struct ptdp_config ptdp_config;
typedef struct ptdp_trainer ptdp_trainer;

/* Version string "MAJOR.MINOR.PATCH" and the packed number MAJOR*10000+MINOR*100+PATCH. */
PTDP_API const char *ptdp_version(void);
PTDP_API int32_t ptdp_version_number(void);
PTDP_API const char *ptdp_status_string(ptdp_status status);
/* Message of the last failed call on this thread ("" if none). */
PTDP_API const char *ptdp_last_error(void);

/* Configuration: option keys are Megatron's argument names (num_layers,
 * hidden_size, micro_batch_size, lr, data_path, ...). Values are validated when set. */
PTDP_API ptdp_status ptdp_config_create(ptdp_config **out);
PTDP_API void ptdp_config_destroy(ptdp_config *config);
PTDP_API ptdp_status ptdp_config_set(ptdp_config *config, const char *key, const char *value);
PTDP_API ptdp_status ptdp_config_set_int(ptdp_config *config, const char *key, int64_t value);
PTDP_API ptdp_status ptdp_config_set_double(ptdp_config *config, const char *key, double value);
/* Sets the model's options (num_layers, hidden_size, ..., the LLaMA family's)
 * to those of the checkpoint at dir (a save directory's newest or one iter_N),
 * as its manifest records them; the other options stay. A missing checkpoint,
 * or one whose manifest or data file the load refuses on opening them, is
 * that error (the blocks' checksums are checked by the load itself). */
PTDP_API ptdp_status ptdp_config_set_model_from_checkpoint(ptdp_config *config, const char *dir);
PTDP_API ptdp_status ptdp_config_get(const ptdp_config *config, const char *key, char *buf,
                                     size_t cap, size_t *out_len);
/* The schema: number of options, and each one's key, default and description. */
PTDP_API int32_t ptdp_option_count(void);
PTDP_API ptdp_status ptdp_option_info(int32_t index, const char **key, const char **default_value,
                                      const char **help);
/* Its kind: *type is "int", "float", "string" or "choice"; an int or float's
 * inclusive range in *min, *max (an int of [0, 1] is a switch: Megatron's
 * command lines give it bare); a choice's allowed values, comma-separated, in
 * *choices ("" otherwise). Any output may be NULL. */
PTDP_API ptdp_status ptdp_option_type(int32_t index, const char **type, double *min, double *max,
                                      const char **choices);

/* Checks the options together as ptdp_trainer_create does, where no file or
 * device is needed (shapes, layout, batch sizes, schedule, split, the device's
 * name), and makes nothing: a script calls it before it makes a dataset or a
 * directory, so that a refused run leaves nothing. The errors are the ones
 * ptdp_trainer_create would give. */
PTDP_API ptdp_status ptdp_config_check(const ptdp_config *config);
/* Where the config's model differs from the one of the checkpoint at dir (a
 * save directory's newest, or one iter_N), in the load's words ("num_layers:
 * checkpoint 2, this run 4; ..."), or "" when the load would take its model:
 * for a script to refuse before its long preparations. A missing checkpoint,
 * or one whose manifest or data file the load refuses on opening them
 * (missing, cut short, of another kind), is that error; the blocks'
 * checksums are the load's own check (and ptdp_checkpoint_verify's): the
 * data is not read here. */
PTDP_API ptdp_status ptdp_config_model_differences(const ptdp_config *config, const char *dir,
                                                   char *buf, size_t cap, size_t *out_len);
/* A trainer reads the dataset, builds and initialises the model. The config
 * is copied: it may be destroyed or changed afterwards. */
PTDP_API ptdp_status ptdp_trainer_create(const ptdp_config *config, ptdp_trainer **out);
PTDP_API void ptdp_trainer_destroy(ptdp_trainer *trainer);
/* One optimizer step over the global batch; *loss (may be NULL) gets its mean lm loss.
 * train_iters sets the LR schedule, not a limit: steps after it run at min_lr,
 * and the data continues into further reshuffled epochs. */
PTDP_API ptdp_status ptdp_trainer_step(ptdp_trainer *trainer, double *loss);
/* The same step on token ids the caller passes in (batches from the
 * embedder's own loader): `ids` holds count = global_batch_size x (seq_length
 * + 1) ids, the global batch's sequences one after another; sequence i is
 * global sample consumed_samples + i, so its targets are its ids shifted by
 * one, and dropout, the data-parallel split, consumed_samples and the
 * iteration advance exactly as ptdp_trainer_step's on a dataset that yielded
 * these sequences (the same losses and parameters). NULL ids, another count
 * or an id outside [0, vocab_size) is PTDP_ERR_INVALID_ARGUMENT (the message
 * names the index and value) and changes nothing. Under mpirun every process
 * passes the same whole batch. *loss (may be NULL) gets the mean lm loss. A
 * trainer made without data_path trains on these batches only: it has no
 * validation split (ptdp_trainer_evaluate, unigram_entropy:
 * PTDP_ERR_WRONG_STATE; train_samples and valid_samples are 0), and
 * ptdp_trainer_step is PTDP_ERR_WRONG_STATE. */
PTDP_API ptdp_status ptdp_trainer_step_tokens(ptdp_trainer *trainer, const int32_t *ids,
                                              size_t count, double *loss);
/* Mean validation loss over `iters` global batches (iters <= 0: the config's eval_iters).
 * With exit_signal_handler, once a signal has been received (during it, or
 * before and not yet acted on by the caller ending the run) it stops at its
 * next batch: *loss is NaN and exit_reason says so, the state saved first as
 * after a step. The request stays: every later step and evaluation ends so. */
PTDP_API ptdp_status ptdp_trainer_evaluate(ptdp_trainer *trainer, int64_t iters, double *loss);
/* A named number: metrics of the last step (iteration, consumed_samples, lm_loss,
 * lr, grad_norm, loss_scale, skipped_iters, nan_iters, elapsed_ms, tokens_per_s,
 * tflops_per_rank) or facts of the run (num_parameters, padded_vocab_size,
 * unigram_entropy, train_samples, valid_samples, train_iters, peak_memory_bytes
 * (the process's host allocations, from its start), device_peak_memory_bytes (the
 * last step's peak device memory, summed over this process's ranks; on the CPU
 * device, the part of the host's held as device tensors),
 * failed_saves (saves of this run that failed; each is also in last_save_error when it happens),
 * steps_taken and steps_skipped (steps this trainer took, and those of them that skipped
 * the update after an overflow or a NaN),
 * world_size, local_ranks, rank (this process's first rank) and its coordinates
 * tp_rank, dp_rank, pp_rank,
 * tensor_model_parallel_size, pipeline_model_parallel_size, data_parallel_size,
 * virtual_pipeline_stages (v, model chunks per pipeline rank),
 * comm_seconds (the first local rank's time inside communication of its tp, pp,
 * dp and embedding groups since the trainer was created, waiting included),
 * replayed_bubble (the last step's pipeline bubble: the executed schedules of
 * the pipeline ranks of tp 0, dp 0 replayed with each operation's measured
 * time as if every rank had its own device, makespan / busiest stage - 1; needs
 * every rank in this process, so not under mpirun with several processes),
 * forward_op_seconds, backward_op_seconds, weight_op_seconds (the mean time of
 * one forward, backward and, under zbh1 or zbv, weight-gradient op of a model
 * chunk in that replay; the backward then computes input gradients only, and
 * 0 for weight ops under other schedules)).
 * Metrics, replayed_bubble and the op seconds before the first step:
 * PTDP_ERR_WRONG_STATE. */
PTDP_API ptdp_status ptdp_trainer_get(const ptdp_trainer *trainer, const char *name,
                                      double *value);
/* The names ptdp_trainer_get knows, index 0 .. ptdp_trainer_value_count() - 1,
 * from the one table that answers it; *step_result (may be NULL) is 1 for the
 * values a step reports (iteration, consumed_samples and the last step's
 * metrics), 0 for facts of the run. The name is static. */
PTDP_API int32_t ptdp_trainer_value_count(void);
PTDP_API ptdp_status ptdp_trainer_value_info(int32_t index, const char **name, int32_t *step_result);
/* A named number of one rank hosted by this process: local_rank is in
 * [0, local_ranks) (without mpirun this process hosts every rank and
 * local_rank is the world rank). Its place: world_rank, tp_rank, pp_rank,
 * dp_rank. Its last step (PTDP_ERR_WRONG_STATE before the first): step_seconds,
 * compute_seconds (forward, backward, optimizer), idle_fraction
 * (1 - compute/step), peak_activation_bytes (stashed for backward),
 * device_peak_bytes and device_in_use_bytes (the rank's device memory: its
 * most in use at once during the step, and in use after it), and for
 * each group g of tp, pp, dp, embedding: bytes_g (payload bytes the rank
 * contributed), seconds_g (time inside the group's operations, waiting
 * included), calls_g (operations); 0 for embedding on ranks outside an
 * embedding group (it joins the first and last pipeline stages when p > 1). */
PTDP_API ptdp_status ptdp_trainer_rank_get(const ptdp_trainer *trainer, int32_t local_rank,
                                           const char *name, double *value);
/* Collective: under mpirun every process calls it, after the same step. Brings
 * the last step's values of every rank (those of ptdp_trainer_rank_get) to the
 * process of world rank 0, so that one process can report all ranks in order
 * (without mpirun they are all local and nothing is sent).
 * PTDP_ERR_WRONG_STATE before the first step. */
PTDP_API ptdp_status ptdp_trainer_gather_reports(ptdp_trainer *trainer);
/* A named number of world rank world_rank in [0, world_size), as of the last
 * ptdp_trainer_gather_reports; names as ptdp_trainer_rank_get. Only on the
 * process of world rank 0 and only until the next step: elsewhere, before a
 * gather or after a later step, PTDP_ERR_WRONG_STATE. */
PTDP_API ptdp_status ptdp_trainer_world_rank_get(const ptdp_trainer *trainer, int32_t world_rank,
                                                 const char *name, double *value);
/* A named text of the run: loaded_checkpoint (which checkpoint the last load
 * took, why, and the layouts it was saved with and loaded into), last_checkpoint
 * (directory of the last checkpoint saved), saved_checkpoints (every
 * checkpoint this trainer committed, in order, each followed by a newline:
 * one step may commit two, an --async-save's and an exit's), last_save_error (why the last save
 * made by a step at save_interval failed; training goes on), each "" if none;
 * device (the first local rank's, e.g. "cpu" or "cuda:0 (NVIDIA H100 80GB HBM3)":
 * what the device option, by default auto, chose); exit_reason (why the run
 * should end after the last step or evaluation: a signal with
 * exit_signal_handler, exit_interval or exit_duration_in_mins, and what was
 * saved; "" = go on). */
PTDP_API ptdp_status ptdp_trainer_get_text(const ptdp_trainer *trainer, const char *name,
                                           char *buf, size_t cap, size_t *out_len);
/* Saves the whole training state (parameters, Adam moments, iteration,
 * consumed samples, skipped iterations) as <dir>/iter_N in one HDF5 file with
 * a checksummed manifest, committed atomically (ARCHITECTURE §5); older ones
 * beyond keep_last_checkpoints are removed. Under mpirun every process calls
 * it. A failure (PTDP_ERR_IO) leaves the previous checkpoint the newest. */
PTDP_API ptdp_status ptdp_trainer_save(ptdp_trainer *trainer, const char *dir);
/* With async_save = 1 the saves of ptdp_trainer_step copy the state to host
 * memory and a background thread writes them while training goes on (same
 * commit protocol; the next save, a load and ptdp_trainer_destroy wait for
 * the one in flight). This waits for it now, so that its outcome is in
 * last_checkpoint, last_save_error and failed_saves; *seconds (may be NULL)
 * gets the time waited. Call it before ending a run. */
PTDP_API ptdp_status ptdp_trainer_wait_for_saves(ptdp_trainer *trainer, double *seconds);
/* Under mpirun, that every process passes the same count (name, value) pairs:
 * a caller's own options that shape what all ranks run together (a script's
 * evaluation interval, its final sample's prompt). Collective: every process
 * calls it with its pairs, in the same order; a difference is
 * PTDP_ERR_INVALID_CONFIG on every process, naming the first name that
 * differs and this process's value (a run otherwise hung or ended in MPI's
 * own abort at its first mismatched collective). One process: PTDP_OK. */
PTDP_API ptdp_status ptdp_trainer_agree(ptdp_trainer *trainer, const char *const *names,
                                        const char *const *values, size_t count);
/* Loads a checkpoint saved under any (t, p, d, v): dir is a save directory
 * (its newest complete checkpoint is taken) or one iter_N directory. The model
 * shape, seed, split and LR schedule must be the checkpoint's
 * (PTDP_ERR_INVALID_CONFIG names the fields that differ; nothing is changed).
 * Checksums are verified unless verify_checkpoint = 0 (PTDP_ERR_CORRUPT_DATA
 * names the file, dataset and block; the trainer is then unusable). */
PTDP_API ptdp_status ptdp_trainer_load(ptdp_trainer *trainer, const char *dir);

/* The log line of the last step (ARCHITECTURE §8). Its lm loss is, as
 * Megatron's, the mean over the log interval: the steps since the previous
 * log line or log record (skipped fp16 steps left out); a log line and a log
 * record read at the same iteration show the same mean. ptdp_trainer_get
 * "lm_loss" stays the last step's. */
PTDP_API ptdp_status ptdp_trainer_log_line(const ptdp_trainer *trainer, char *buf, size_t cap,
                                           size_t *out_len);
/* The last step as one JSON object on one line, with the log line's fields
 * (lm_loss the log interval's mean, as in the log line):
 * {"kind": "train", "iteration": ..., "lm_loss": ..., "lr": ..., ...}; a
 * value that is not finite is null. */
PTDP_API ptdp_status ptdp_trainer_log_json(const ptdp_trainer *trainer, char *buf, size_t cap,
                                           size_t *out_len);
/* Appends `line` and a newline to the file at `path` in one write, creating
 * it (a metrics log: JSON lines whose first record is the run's, {"kind":
 * "run", ...}); fresh = 1 replaces the file with that one line, atomically
 * (fresh is 0 or 1: another value is PTDP_ERR_INVALID_ARGUMENT).
 * A directory, device, FIFO, dangling link or a file that is no metrics log is
 * refused, as by every writer; a line that is not one JSON object, or a first
 * record that is not the run's, is PTDP_ERR_INVALID_ARGUMENT. Bytes that are
 * not UTF-8 (a path's) are written as U+FFFD: the file stays JSON. */
PTDP_API ptdp_status ptdp_append_line(const char *path, const char *line, int32_t fresh);

/* The model's logits for one token sequence (ids[0..count), at most
 * max_position_embeddings, each in [0, vocab_size)), no dropout, in any layout
 * (every rank computes its part; the result is the whole vocabulary's):
 * float32 [count, vocab_size] row-major, or with last_only = 1 the last
 * position's [vocab_size] only. *out_len (may be NULL) gets the number of
 * floats; a NULL out with cap 0 asks for it, a smaller cap is
 * PTDP_ERR_BUFFER_TOO_SMALL (out_len set). Bad ids are
 * PTDP_ERR_INVALID_ARGUMENT naming the index and value. Under mpirun every
 * process passes the same sequence. */
PTDP_API ptdp_status ptdp_trainer_logits(ptdp_trainer *trainer, const int32_t *ids, size_t count,
                                         int32_t last_only, float *out, size_t cap,
                                         size_t *out_len);
/* The most tokens one generate call makes. */
enum { PTDP_MAX_NEW_TOKENS = 1048576 };
/* Continues `prompt` by up to max_new_tokens tokens (stops at end of document);
 * max_new_tokens in [0, PTDP_MAX_NEW_TOKENS].
 * temperature 0 = greedy; otherwise sampling keyed by `seed`, so a retry with a
 * larger buffer returns the same text. The text is valid UTF-8: an ill-formed
 * part (a character the model cut short) becomes U+FFFD. */
PTDP_DEPRECATED("use ptdp_trainer_generate_top with top_k 0, top_p 1")
PTDP_API ptdp_status ptdp_trainer_generate(ptdp_trainer *trainer, const char *prompt,
                                           int32_t max_new_tokens, double temperature,
                                           uint64_t seed, char *buf, size_t cap,
                                           size_t *out_len);
/* The same, sampling among the top_k most likely tokens (0: every token) whose
 * probabilities add up to top_p of the whole (the nucleus, in (0, 1]; 1: every
 * token); ptdp_trainer_generate is top_k 0, top_p 1. */
PTDP_API ptdp_status ptdp_trainer_generate_top(ptdp_trainer *trainer, const char *prompt,
                                               int32_t max_new_tokens, double temperature,
                                               int32_t top_k, double top_p, uint64_t seed,
                                               char *buf, size_t cap, size_t *out_len);

/* Checkpoint tools (`ptdp ckpt`); dir is a save directory (newest complete
 * checkpoint) or one iter_N directory. inspect: iteration, config, saved
 * layout, every dataset with shape, dtype and size. verify: every block against
 * its manifest checksum; the report lists each fault and the status is
 * PTDP_ERR_CORRUPT_DATA when there is one (the report is still written, and
 * holds the faults; ptdp_last_error says only that there are some).
 * export_safetensors: the parameters in Hugging Face's names and layouts, as
 * float32: out_path a directory (made if absent) gets model.safetensors,
 * config.json and generation_config.json, as save_pretrained writes them, for
 * GPT-2 (GPT2LMHeadModel) and the LLaMA family (LlamaForCausalLM, or
 * Qwen2ForCausalLM with QKV biases); a path ending in .safetensors gets the
 * GPT-2 weights file alone (its config in the metadata). */
PTDP_API ptdp_status ptdp_checkpoint_inspect(const char *dir, char *buf, size_t cap,
                                             size_t *out_len);
PTDP_API ptdp_status ptdp_checkpoint_verify(const char *dir, char *buf, size_t cap,
                                            size_t *out_len);
PTDP_DEPRECATED("use ptdp_checkpoint_export_safetensors_dtype with dtype NULL")
PTDP_API ptdp_status ptdp_checkpoint_export_safetensors(const char *dir, const char *out_path);
/* The same export with its tensors in `dtype`: "f32" (NULL means it too),
 * "bf16" or "f16", rounded to nearest even. Another name is PTDP_ERR_BAD_VALUE
 * listing the allowed ones. An f16 export of a parameter beyond f16's range
 * (magnitude over 65504, which would become inf) is PTDP_ERR_BAD_VALUE naming
 * the tensor and the value, and writes nothing. */
PTDP_API ptdp_status ptdp_checkpoint_export_safetensors_dtype(const char *dir,
                                                              const char *out_path,
                                                              const char *dtype);
/* The reverse: a Hugging Face model made into a ptdp checkpoint at iteration
 * 0, dir/iter_0000000, committed atomically, that loads into any layout.
 * safetensors_path: a model directory (config.json and model.safetensors or
 * model.safetensors.index.json with its shards), an index, or one
 * .safetensors file; F32, F16 or BF16. GPT-2 (GPT2Model or GPT2LMHeadModel
 * names) or the LLaMA family (model_type llama, mistral, qwen2). config_path:
 * its config.json; NULL or "" takes config.json beside the weights, or for a
 * GPT-2 file ptdp exported, its gpt2_config metadata. A missing or unsupported
 * config field (a scaled rope, sliding windows, ...), a tensor missing or of
 * the wrong shape is PTDP_ERR_INVALID_CONFIG naming it; so is a dir holding
 * another run's checkpoints; a missing shard is PTDP_ERR_IO. */
PTDP_API ptdp_status ptdp_checkpoint_import_safetensors(const char *safetensors_path,
                                                        const char *config_path, const char *dir);

/* Under mpirun: prints `reason` and stops every process of the job at once, so
 * that the others do not wait for this one until their communication timeout
 * (the launcher calls it when a script fails). Without MPI it does nothing. */
PTDP_API ptdp_status ptdp_abort_job(const char *reason);

/* ffi-end */

#ifdef __cplusplus
}
#endif
#endif /* PTDP_H */
