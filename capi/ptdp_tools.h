/* ptdp tools — the C ABI of the tools around the engine (ARCHITECTURE §6):
 * tokenizers into datasets, drawings of traces and metrics, machine
 * benchmarks and the planner. The same library as capi/ptdp.h, under the
 * same conventions (status codes, ptdp_last_error, caller-owned buffers);
 * the declarations between the ffi markers contain no preprocessor lines. */
#ifndef PTDP_TOOLS_H
#define PTDP_TOOLS_H

#include "ptdp.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ffi-begin */
/* Tokenizes text files (or every file of a directory) into a ptdp token
 * dataset (one file; documents shuffled, each ending with the end-of-document
 * token). format: fortune | lines | file; tokenizer: byte (a tokenizer that
 * needs files goes through ptdp_tokenize_options). Counts may be NULL. Text
 * is UTF-8 in every format: an ill-formed byte is PTDP_ERR_INVALID_ARGUMENT
 * naming its file and line; a document keeps the input's bytes (no newline
 * is added after an unterminated last line). */
PTDP_DEPRECATED("use ptdp_tokenize_options")
PTDP_API ptdp_status ptdp_tokenize(const char *const *inputs, int32_t num_inputs,
                                   const char *format, const char *tokenizer,
                                   const char *output_path, int64_t *num_docs,
                                   int64_t *num_tokens);

/* ptdp_tokenize with num_options "key=value" strings: output=FILE (required);
 * format=fortune (default) | lines | file; tokenizer_type=byte (default) |
 * GPT2BPETokenizer, which takes vocab_file=vocab.json + merge_file=merges.txt
 * or tokenizer_file=tokenizer.json (Hugging Face's, of a GPT-2 byte-level
 * BPE); workers=N threads encoding (default 1, 0: one per core, at most
 * 1024; the file is the same for any N); new_only=1: a file made at output
 * meanwhile (by another command) is not replaced, PTDP_ERR_IO and nothing of
 * this call's left (default 0: a dataset there is replaced). A file given to the byte tokenizer,
 * or GPT2BPETokenizer without its files, is PTDP_ERR_INVALID_CONFIG; an unreadable file PTDP_ERR_IO; a
 * malformed one PTDP_ERR_CORRUPT_DATA. Counts may be NULL. */
PTDP_API ptdp_status ptdp_tokenize_options(const char *const *inputs, int32_t num_inputs,
                                           const char *const *options, int32_t num_options,
                                           int64_t *num_docs, int64_t *num_tokens);

/* Tokenizes text into Megatron-LM's indexed dataset (PREFIX.bin + PREFIX.idx,
 * byte for byte as Megatron's tools/preprocess_data.py writes it). options:
 * num_options "key=value" strings: output_prefix=P (required);
 * format=jsonl (default) | fortune | lines | file; json_keys=text[,KEY...]
 * (jsonl only; default text); tokenizer_type=byte (default) | GPT2BPETokenizer
 * with vocab_file + merge_file or tokenizer_file (as ptdp_tokenize_options);
 * append_eod=0|1
 * (default 0, as Megatron's --append-eod); workers=N (as ptdp_tokenize_options). Writes P_KEY_document.bin and
 * P_KEY_document.idx for each key (Megatron's names; KEY is text for the
 * formats other than jsonl): P_KEY_document is what data_path takes.
 * num_docs, num_tokens: NULL, or arrays with one entry per key, in order. */
PTDP_API ptdp_status ptdp_tokenize_indexed(const char *const *inputs, int32_t num_inputs,
                                           const char *const *options, int32_t num_options,
                                           int64_t *num_docs, int64_t *num_tokens);

/* Draws a Chrome trace written by the `timeline` option as a PNG, one lane per
 * rank, time left to right: forward spans light and backward spans dark in a
 * colour per micro-batch, communication as a grey band. width in pixels
 * (0 = 1600; otherwise 140 to 8192). */
PTDP_API ptdp_status ptdp_render_timeline(const char *trace_json, const char *png, int32_t width);

/* Draws a metrics file written by train_gpt.lua's --log-json (JSON lines) as a
 * PNG: the training and validation loss against iteration above, the learning
 * rate against iteration below, with numbered axes and a legend. A missing
 * file is PTDP_ERR_IO; lines that are not JSON, or no iteration logged,
 * PTDP_ERR_CORRUPT_DATA; a png that is a directory, a device or the log
 * itself PTDP_ERR_INVALID_ARGUMENT. The PNG is written atomically. */
PTDP_API ptdp_status ptdp_plot_log(const char *log_json, const char *png);

/* The machine's ceiling: GFLOP/s of an n x n x n fp32 GEMM (OpenBLAS, all threads). */
PTDP_API ptdp_status ptdp_benchmark_sgemm(int32_t n, int32_t repeats, double *gflops);
/* The disk's raw sequential bandwidth under dir, in GB/s (1e9 bytes/s): a file
 * of `bytes` written with fsync, dropped from the page cache, read back, removed. */
PTDP_API ptdp_status ptdp_benchmark_disk(const char *dir, int64_t bytes, double *write_gbps,
                                         double *read_gbps);
/* A file a script will read (a dataset), held as an input of this process
 * until it ends: every writer refuses it from now on (an output is never an
 * input). Checked without opening it, so a FIFO never blocks: a missing or
 * unreadable file is PTDP_ERR_IO (the system's reason), a directory, FIFO or
 * device PTDP_ERR_INVALID_ARGUMENT; each message names `what` and the path. */
PTDP_API ptdp_status ptdp_hold_input(const char *path, const char *what);
/* A script's own small output file (a record, a copied tokenizer file): the n
 * bytes at `path`, written as every writer writes (a temporary file beside it,
 * fsynced, renamed over it). A directory, device, FIFO, dangling link, an input
 * of this process, another writer's output or a file in a format ptdp's
 * writers make (a dataset, a safetensors model, a log, a trace, a PNG) is refused
 * (PTDP_ERR_INVALID_ARGUMENT), a missing directory PTDP_ERR_IO; each message
 * names `what` and the path. */
PTDP_API ptdp_status ptdp_write_file(const char *path, const char *bytes, size_t n,
                                     const char *what);
/* Checks an output a script will make, before anything is made: with
 * directory = 0 a file (every writer's rules: not a directory, device, FIFO or
 * dangling link, not an input of this run or another output's, not among a
 * checkpoint's files, its directory there); with directory = 1 a directory an
 * output tree goes into, such as a --save root (not inside or named as a
 * checkpoint directory, no link to nothing or file on the way; what is not
 * there yet is fine). Nothing is written. PTDP_ERR_INVALID_ARGUMENT or
 * PTDP_ERR_IO naming `what` and the path. */
PTDP_API ptdp_status ptdp_check_output(const char *path, const char *what, int32_t directory);
/* ptdp_check_output for a file, and that an existing file there is of `kind`
 * (the writer's format, or empty): "ptdp_dataset", "megatron_index",
 * "megatron_data", "safetensors", "json", "metrics_log", "trace", "machine",
 * "png", "op_profile" or "any". A writer replaces nothing else. */
PTDP_API ptdp_status ptdp_check_output_kind(const char *path, const char *what, const char *kind);
/* `text` (len bytes; it may hold NULs) as one printable line of valid UTF-8,
 * as the engine makes every message it writes: ill-formed bytes and control
 * characters (newline and tab too) written as \xNN. For a script's own
 * messages that quote a user's names. */
PTDP_API ptdp_status ptdp_one_line_text(const char *text, size_t len, char *buf, size_t cap,
                                        size_t *out_len);
/* *same = 1 when the output paths a and b name one file (the same file when
 * both exist, through links and hard links; else the same normalized path),
 * else 0: a script's two outputs must not. */
PTDP_API ptdp_status ptdp_same_output(const char *a, const char *b, int32_t *same);
/* The identity of what is at `path` itself (a link is not followed): its
 * device, inode, size and modification time as text ("DEV:INO:SIZE:NS"), so a
 * script that made a file removes it only while it is still the one it made
 * (another command may have put a file of its own there since). A path with
 * nothing at it is PTDP_ERR_IO; the text as for ptdp_version's callers. */
PTDP_API ptdp_status ptdp_file_identity(const char *path, char *buf, size_t cap, size_t *out_len);
/* A script's small input file (at most 1 GiB) into buf, as ptdp_version's
 * callers read text: out_len gets its size, PTDP_ERR_BUFFER_TOO_SMALL when cap
 * is not more than that. A regular file only (a FIFO or device would block):
 * missing, unreadable or of another kind PTDP_ERR_IO, the message naming
 * `what`, the path and the reason ("No such file or directory", "a FIFO"). */
PTDP_API ptdp_status ptdp_read_file(const char *path, const char *what, char *buf, size_t cap,
                                    size_t *out_len);
/* A directory a script has just made (ptdp.mkdirs) is held, with hold = 1,
 * on the list the signal cleanup below goes through, by its identity (device
 * and inode) now: an interrupted run removes it while it is still empty and
 * still that directory. Nothing there, no directory (a link is not followed),
 * or one born before this process loaded the library (a user's: none the
 * program made) is PTDP_ERR_IO. hold = 0 takes it off (the directory stays);
 * any other value is PTDP_ERR_INVALID_ARGUMENT. */
PTDP_API ptdp_status ptdp_hold_made_directory(const char *path, int32_t hold);
/* A new directory parent/prefixXXXXXX of the caller's own (mkdtemp; prefix
 * holds no '/'), its path into buf (no size query: each call makes one; cap
 * of at least strlen(parent) + strlen(prefix) + 8, else
 * PTDP_ERR_BUFFER_TOO_SMALL and nothing is made), held whole on
 * the signal cleanup's list: an interrupted run removes it with all it holds,
 * following no link, while it is still the directory made. The parent follows
 * the writers' rules for a directory (ptdp_check_output). A script's work
 * directory. */
PTDP_API ptdp_status ptdp_make_temp_dir(const char *parent, const char *prefix, char *buf,
                                        size_t cap, size_t *out_len);
/* Removes a directory ptdp_make_temp_dir made in this process, with all it
 * holds, following no link; any other path is PTDP_ERR_INVALID_ARGUMENT and
 * nothing is removed. Something left (too deep, not removable) is PTDP_ERR_IO. */
PTDP_API ptdp_status ptdp_remove_temp_dir(const char *path);
/* For a program's main (the ptdp launcher calls it), not for a library inside
 * another program: from now on a signal whose default ends the process (SIGINT,
 * SIGTERM, SIGHUP, SIGPIPE, SIGQUIT, SIGALRM, SIGUSR1/2, SIGPROF, SIGVTALRM,
 * SIGXCPU) first removes the
 * temporary files ptdp's writers have made and not yet renamed into place
 * ("OUTPUT.tmp.XXXXXX" beside each output), then end the process as the signal
 * would have. Only signals at their default action: one the process ignores
 * (nohup) stays ignored, a handler already installed stays. SIGXFSZ is
 * ignored (and so in programs the process starts, as exec keeps it): a write
 * past the file size limit fails (EFBIG) and is reported. */
PTDP_API ptdp_status ptdp_remove_temp_files_on_signal(void);
/* The planner (`ptdp plan`; engine/plan): the paper's performance and memory
 * model of PTD-P training. options: num_options strings "key=value", keys
 * Megatron's argument names (num_layers, hidden_size, num_attention_heads,
 * seq_length, global_batch_size, micro_batch_size, tensor_model_parallel_size,
 * ...) plus machine (a preset or a JSON file), num_gpus, train_tokens,
 * calibrate, explain, top, format (text | records); "help" alone gives the
 * list. It enumerates the layouts, drops those that cannot work or do not fit
 * (saying why) and ranks the rest by predicted iteration time. The report's
 * last line is machine-readable: "tflops_per_gpu=X iteration_s=Y memory_gib=Z
 * tensor=T pipeline=P data=D micro_batch=B virtual=V" for the layout shown
 * first. An unknown key is PTDP_ERR_UNKNOWN_OPTION, a bad value
 * PTDP_ERR_BAD_VALUE, a layout that cannot work or nothing that fits
 * PTDP_ERR_INVALID_CONFIG; each message names what is wrong and what is allowed. */
PTDP_API ptdp_status ptdp_plan(const char *const *options, int32_t num_options, char *buf,
                               size_t cap, size_t *out_len);
/* ffi-end */

#ifdef __cplusplus
}
#endif
#endif /* PTDP_TOOLS_H */
