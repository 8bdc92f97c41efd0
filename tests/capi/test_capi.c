/* test_capi — the C ABI of libptdp.so exercised from plain C99.
 *
 *   test_capi CORPUS.txt TMPDIR
 *
 * Tokenizes CORPUS (one document per line) into TMPDIR, trains a tiny GPT a few
 * steps, reads metrics, log line, evaluation and generated text through the
 * size-query protocol, and checks that every misuse (NULL handles and
 * pointers, unknown options, bad values, inconsistent configs, missing or
 * corrupt datasets, wrong call order) gives the documented status code and a
 * message. Prints each check; exits 1 at the first failure. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The deprecated functions are still part of the ABI and tested. */
#define PTDP_ALLOW_DEPRECATED
#include "capi/ptdp_tools.h"

static int g_checks = 0;
static const char *g_tmpdir = ".";

static void fail_now(const char *file, int line, const char *what, const char *detail) {
  fprintf(stderr, "FAIL %s:%d: %s\n", file, line, what);
  if (detail && *detail) fprintf(stderr, "     %s\n", detail);
  fprintf(stderr, "     ptdp_last_error(): \"%s\"\n", ptdp_last_error());
  fflush(stdout);
  exit(1);
}

#define CHECK(cond, what)                                         \
  do {                                                            \
    g_checks++;                                                   \
    if (!(cond)) fail_now(__FILE__, __LINE__, what, #cond);       \
    printf("ok   %s\n", what);                                    \
  } while (0)

/* The call returned `want`; when `want` is an error, ptdp_last_error() is
 * non-empty and (if `needle` is not NULL) contains `needle`; on success it is "". */
static void expect_status(const char *file, int line, ptdp_status got, ptdp_status want,
                          const char *needle, const char *what) {
  char detail[1024];
  const char *msg = ptdp_last_error();
  g_checks++;
  if (msg == NULL) fail_now(file, line, what, "ptdp_last_error() returned NULL");
  if (got != want) {
    snprintf(detail, sizeof detail, "status %d (%s), expected %d (%s)", (int)got,
             ptdp_status_string(got), (int)want, ptdp_status_string(want));
    fail_now(file, line, what, detail);
  }
  if (want != PTDP_OK && msg[0] == '\0')
    fail_now(file, line, what, "error status but ptdp_last_error() is empty");
  if (want == PTDP_OK && msg[0] != '\0')
    fail_now(file, line, what, "success but ptdp_last_error() is not empty");
  if (needle && strstr(msg, needle) == NULL) {
    snprintf(detail, sizeof detail, "message does not contain \"%s\"", needle);
    fail_now(file, line, what, detail);
  }
  if (want == PTDP_OK)
    printf("ok   %s\n", what);
  else
    printf("ok   %s -> %s: %.160s%s\n", what, ptdp_status_string(got), msg,
           strlen(msg) > 160 ? "..." : "");
}

#define EXPECT(call, want, needle, what) expect_status(__FILE__, __LINE__, (call), (want), (needle), (what))
#define EXPECT_OK(call, what) EXPECT(call, PTDP_OK, NULL, what)

static void tmp_path(char *out, size_t cap, const char *name) {
  int n = snprintf(out, cap, "%s/%s", g_tmpdir, name);
  if (n < 0 || (size_t)n >= cap) {
    fprintf(stderr, "FAIL: temp path too long\n");
    exit(1);
  }
}

/* Writes the first `keep` bytes of `src` to `dst` (keep < 0: all but -keep bytes). */
static long copy_prefix(const char *src, const char *dst, long keep) {
  FILE *in = fopen(src, "rb"), *out;
  char *buf;
  long size;
  if (!in) return -1;
  fseek(in, 0, SEEK_END);
  size = ftell(in);
  fseek(in, 0, SEEK_SET);
  buf = (char *)malloc((size_t)size + 1);
  if (!buf || fread(buf, 1, (size_t)size, in) != (size_t)size) {
    fclose(in);
    free(buf);
    return -1;
  }
  fclose(in);
  if (keep < 0) keep = size + keep;
  if (keep < 0 || keep > size) keep = size;
  out = fopen(dst, "wb");
  if (!out || fwrite(buf, 1, (size_t)keep, out) != (size_t)keep) {
    if (out) fclose(out);
    free(buf);
    return -1;
  }
  fclose(out);
  free(buf);
  return size;
}

static void put_u32(unsigned char *p, unsigned long v) {
  int i;
  for (i = 0; i < 4; i++) p[i] = (unsigned char)((v >> (8 * i)) & 0xff);
}
static void put_u64(unsigned char *p, unsigned long v) {
  int i;
  for (i = 0; i < 8; i++) p[i] = (unsigned char)(i < 4 ? (v >> (8 * i)) & 0xff : 0);
}

/* A well-formed dataset file (engine/data/dataset.h layout) of one document of
 * `n` 2-byte tokens 0, 1, 2, ... declaring vocabulary `vocab`. */
static int write_raw_dataset(const char *path, unsigned long vocab, unsigned long n,
                             unsigned long first_token) {
  unsigned char header[64], idx[16], tok[2];
  unsigned long i;
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  memset(header, 0, sizeof header);
  memcpy(header, "PTDPTOK", 8); /* includes the NUL */
  put_u32(header + 8, 1);       /* version */
  put_u32(header + 12, 2);      /* token bytes */
  put_u32(header + 16, vocab);
  put_u64(header + 24, 1); /* documents */
  put_u64(header + 32, n); /* tokens */
  put_u64(idx, 0);
  put_u64(idx + 8, n);
  fwrite(header, 1, sizeof header, f);
  fwrite(idx, 1, sizeof idx, f);
  for (i = 0; i < n; i++) {
    unsigned long t = (first_token + i) % vocab;
    tok[0] = (unsigned char)(t & 0xff);
    tok[1] = (unsigned char)((t >> 8) & 0xff);
    fwrite(tok, 1, 2, f);
  }
  return fclose(f) == 0 ? 0 : -1;
}

/* The tiny model every trainer of this test uses. */
static ptdp_config *tiny_config(const char *data_path) {
  ptdp_config *c = NULL;
  EXPECT_OK(ptdp_config_create(&c), "config_create");
  CHECK(c != NULL, "config_create gives a handle");
  EXPECT_OK(ptdp_config_set_int(c, "num_layers", 2), "set num_layers 2");
  EXPECT_OK(ptdp_config_set(c, "hidden_size", "32"), "set hidden_size \"32\"");
  EXPECT_OK(ptdp_config_set_int(c, "num_attention_heads", 2), "set num_attention_heads 2");
  EXPECT_OK(ptdp_config_set_int(c, "seq_length", 32), "set seq_length 32");
  EXPECT_OK(ptdp_config_set_int(c, "micro_batch_size", 2), "set micro_batch_size 2");
  EXPECT_OK(ptdp_config_set_int(c, "global_batch_size", 4), "set global_batch_size 4");
  EXPECT_OK(ptdp_config_set_int(c, "train_iters", 12), "set train_iters 12");
  EXPECT_OK(ptdp_config_set_double(c, "lr", 1e-2), "set lr 1e-2");
  EXPECT_OK(ptdp_config_set_double(c, "min_lr", 1e-3), "set min_lr 1e-3");
  EXPECT_OK(ptdp_config_set_int(c, "lr_warmup_iters", 1), "set lr_warmup_iters 1");
  EXPECT_OK(ptdp_config_set_double(c, "hidden_dropout", 0.0), "set hidden_dropout 0");
  EXPECT_OK(ptdp_config_set_double(c, "attention_dropout", 0.0), "set attention_dropout 0");
  EXPECT_OK(ptdp_config_set_int(c, "eval_iters", 2), "set eval_iters 2");
  /* A number is no path: the number setters refuse the options that hold text. */
  EXPECT(ptdp_config_set_int(c, "data_path", 5), PTDP_ERR_INVALID_ARGUMENT, "holds text",
         "set_int of data_path");
  EXPECT(ptdp_config_set_double(c, "save", 1.0), PTDP_ERR_INVALID_ARGUMENT, "holds text",
         "set_double of save");
  EXPECT_OK(ptdp_config_set_int(c, "num_threads", 1), "set num_threads 1");
  if (data_path) EXPECT_OK(ptdp_config_set(c, "data_path", data_path), "set data_path");
  return c;
}

/* trainer_create must fail with `want` and a message containing `needle`, and leave *out NULL. */
static void expect_create_fails(ptdp_config *c, ptdp_status want, const char *needle,
                                const char *what) {
  ptdp_trainer *t = (ptdp_trainer *)&g_checks; /* poison: must be reset to NULL */
  EXPECT(ptdp_trainer_create(c, &t), want, needle, what);
  CHECK(t == NULL, "failed trainer_create leaves *out NULL");
}

static void test_status_strings(void) {
  int s;
  const char *seen[PTDP_ERR_COMM + 1];
  printf("-- status strings and version\n");
  for (s = PTDP_OK; s <= PTDP_ERR_COMM; s++) {
    int k;
    const char *str = ptdp_status_string(s);
    CHECK(str != NULL && str[0] != '\0', "ptdp_status_string is non-empty for every code");
    CHECK(strcmp(str, "unknown status code") != 0, "every defined code has its own name");
    for (k = 0; k < s; k++) CHECK(strcmp(seen[k], str) != 0, "status strings are distinct");
    seen[s] = str;
  }
  CHECK(strcmp(ptdp_status_string(PTDP_OK), "ok") == 0, "status 0 is \"ok\"");
  CHECK(strcmp(ptdp_status_string(-1), "unknown status code") == 0, "status -1 is unknown");
  CHECK(strcmp(ptdp_status_string(PTDP_ERR_COMM + 1), "unknown status code") == 0,
        "status INTERNAL+1 is unknown");
  CHECK(strcmp(ptdp_status_string(2147483647), "unknown status code") == 0,
        "status INT32_MAX is unknown");
  CHECK(ptdp_version() != NULL && strcmp(ptdp_version(), PTDP_VERSION_TEXT) == 0,
        "version is the build's (CMake's, from the header)");
  CHECK(ptdp_version_number() ==
            PTDP_VERSION_MAJOR * 10000 + PTDP_VERSION_MINOR * 100 + PTDP_VERSION_PATCH,
        "version number matches the header");
  {
    char v[64];
    snprintf(v, sizeof v, "%d.%d.%d", PTDP_VERSION_MAJOR, PTDP_VERSION_MINOR, PTDP_VERSION_PATCH);
    CHECK(strcmp(ptdp_version(), v) == 0, "version text matches the header's macros");
  }
  CHECK(ptdp_last_error() != NULL, "ptdp_last_error is never NULL");
}

static void test_null_arguments(const char *corpus, const char *data_path) {
  ptdp_config *c = NULL;
  size_t len = 12345;
  char buf[64];
  double v = 0;
  const char *k = NULL, *d = NULL, *h = NULL;
  const char *inputs[1], *null_inputs[1] = {NULL};
  const ptdp_status BAD = PTDP_ERR_INVALID_ARGUMENT;
  inputs[0] = corpus;
  printf("-- NULL handles and pointers\n");
  EXPECT(ptdp_config_create(NULL), BAD, "out", "config_create(NULL)");
  ptdp_config_destroy(NULL);
  ptdp_trainer_destroy(NULL);
  CHECK(1, "config_destroy(NULL) and trainer_destroy(NULL) return");
  EXPECT(ptdp_config_set(NULL, "num_layers", "2"), BAD, "config", "config_set(NULL config)");
  EXPECT(ptdp_config_set_int(NULL, "num_layers", 2), BAD, "config", "config_set_int(NULL config)");
  EXPECT(ptdp_config_set_double(NULL, "lr", 0.1), BAD, "config", "config_set_double(NULL config)");
  EXPECT(ptdp_config_get(NULL, "num_layers", buf, sizeof buf, &len), BAD, "config",
         "config_get(NULL config)");
  EXPECT(ptdp_trainer_create(NULL, NULL), BAD, NULL, "trainer_create(NULL, NULL)");
  /* A switch is 0 or 1: 2 and -1 were read as 1. */
  EXPECT(ptdp_check_output("x.txt", "note", 2), BAD, "directory is 0 or 1, got 2", "check_output(directory 2)");
  EXPECT(ptdp_hold_made_directory("x.d", -1), BAD, "hold is 0 or 1, got -1", "hold_made_directory(hold -1)");
  /* Held once made, by its identity: nothing there is no directory made. */
  EXPECT(ptdp_hold_made_directory("no_such_dir.d", 1), PTDP_ERR_IO, "hold a directory once made",
         "hold_made_directory(nothing there)");
  /* One that was there before the program (a user's, empty) is none it made:
   * held, a signal's cleanup removed it. */
  EXPECT(ptdp_hold_made_directory("/", 1), PTDP_ERR_IO, "it was there before this process loaded ptdp",
         "hold_made_directory(a directory older than the process)");
  EXPECT(ptdp_append_line("x.jsonl", "{\"kind\": \"run\"}", 2), BAD, "fresh is 0 or 1, got 2",
         "append_line(fresh 2)");
  {
    ptdp_trainer *t = (ptdp_trainer *)&len;
    EXPECT(ptdp_trainer_create(NULL, &t), BAD, "config", "trainer_create(NULL config)");
    CHECK(t == NULL, "trainer_create(NULL config) sets *out to NULL");
  }
  EXPECT(ptdp_trainer_step(NULL, &v), BAD, "trainer", "trainer_step(NULL)");
  EXPECT(ptdp_trainer_step(NULL, NULL), BAD, "trainer", "trainer_step(NULL, NULL)");
  EXPECT(ptdp_trainer_evaluate(NULL, 1, &v), BAD, "trainer", "trainer_evaluate(NULL)");
  EXPECT(ptdp_trainer_get(NULL, "iteration", &v), BAD, "trainer", "trainer_get(NULL)");
  EXPECT(ptdp_trainer_log_line(NULL, buf, sizeof buf, &len), BAD, "trainer",
         "trainer_log_line(NULL)");
  EXPECT(ptdp_trainer_generate(NULL, "The ", 4, 0.0, 0, buf, sizeof buf, &len), BAD, "trainer",
         "trainer_generate(NULL)");
  EXPECT(ptdp_option_info(-1, &k, &d, &h), BAD, "outside", "option_info(-1)");
  EXPECT(ptdp_option_info(ptdp_option_count(), &k, &d, &h), BAD, "outside",
         "option_info(count)");
  EXPECT(ptdp_tokenize(NULL, 1, "lines", "byte", data_path, NULL, NULL), BAD, "inputs",
         "tokenize(NULL inputs)");
  EXPECT(ptdp_tokenize(null_inputs, 1, "lines", "byte", data_path, NULL, NULL), BAD, "inputs",
         "tokenize(inputs[0] NULL)");
  EXPECT(ptdp_tokenize(inputs, 0, "lines", "byte", data_path, NULL, NULL), BAD, "num_inputs",
         "tokenize(0 inputs)");
  EXPECT(ptdp_tokenize(inputs, -3, "lines", "byte", data_path, NULL, NULL), BAD, "num_inputs",
         "tokenize(-3 inputs)");
  EXPECT(ptdp_tokenize(inputs, 1, NULL, "byte", data_path, NULL, NULL), BAD, "format",
         "tokenize(NULL format)");
  EXPECT(ptdp_tokenize(inputs, 1, "lines", NULL, data_path, NULL, NULL), BAD, "tokenizer",
         "tokenize(NULL tokenizer)");
  EXPECT(ptdp_tokenize(inputs, 1, "lines", "byte", NULL, NULL, NULL), BAD, "output_path",
         "tokenize(NULL output)");
  EXPECT(ptdp_benchmark_sgemm(16, 1, NULL), BAD, "gflops", "benchmark_sgemm(NULL gflops)");
  EXPECT(ptdp_benchmark_sgemm(0, 1, &v), BAD, "n=", "benchmark_sgemm(n=0)");
  EXPECT(ptdp_benchmark_sgemm(16, 0, &v), BAD, "repeats", "benchmark_sgemm(repeats=0)");
  EXPECT_OK(ptdp_benchmark_sgemm(16, 1, &v), "benchmark_sgemm(16, 1)");
  CHECK(v > 0 && isfinite(v), "benchmark_sgemm gives a positive GFLOP/s");

  EXPECT_OK(ptdp_config_create(&c), "config_create");
  EXPECT(ptdp_config_set(c, NULL, "2"), BAD, "key", "config_set(NULL key)");
  EXPECT(ptdp_config_set(c, "num_layers", NULL), BAD, "value", "config_set(NULL value)");
  EXPECT(ptdp_config_set_int(c, NULL, 2), BAD, "key", "config_set_int(NULL key)");
  EXPECT(ptdp_config_set_double(c, NULL, 2.0), BAD, "key", "config_set_double(NULL key)");
  EXPECT(ptdp_config_get(c, NULL, buf, sizeof buf, &len), BAD, "key", "config_get(NULL key)");
  len = 0;
  EXPECT(ptdp_config_get(c, "num_layers", NULL, 0, &len), PTDP_ERR_BUFFER_TOO_SMALL, "bytes",
         "config_get(NULL buffer) asks for a buffer");
  CHECK(len == 1, "config_get(NULL buffer) reports the length of \"4\"");
  EXPECT(ptdp_config_get(c, "num_layers", NULL, 0, NULL), PTDP_ERR_BUFFER_TOO_SMALL, NULL,
         "config_get(NULL buffer, NULL out_len)");
  EXPECT(ptdp_config_get(c, "num_layers", NULL, 64, &len), BAD, "buffer is NULL but cap is 64",
         "config_get(NULL buffer, cap 64) is a bad argument, not a size query");
  EXPECT_OK(ptdp_config_get(c, "num_layers", buf, sizeof buf, NULL), "config_get(NULL out_len)");
  CHECK(strcmp(buf, "4") == 0, "num_layers defaults to 4");
  EXPECT_OK(ptdp_option_info(0, NULL, NULL, NULL), "option_info(0, NULL, NULL, NULL)");
  ptdp_config_destroy(c);
}

/* A handle of the wrong kind, a destroyed one, a double destroy and an address
 * that was never a handle: PTDP_ERR_INVALID_ARGUMENT naming what is wrong, or
 * (destructors) nothing done and the reason in ptdp_last_error, never a crash. */
static void test_bad_handles(const char *data_path) {
  const ptdp_status BAD = PTDP_ERR_INVALID_ARGUMENT;
  ptdp_config *c = tiny_config(data_path), *gone = NULL;
  ptdp_trainer *t = NULL, *dead = NULL;
  double v = 0;
  char buf[64];
  size_t len = 0;
  long not_a_handle[16] = {0};
  printf("-- wrong, destroyed and double-destroyed handles\n");
  EXPECT_OK(ptdp_trainer_create(c, &t), "trainer_create");
  EXPECT(ptdp_trainer_step((ptdp_trainer *)c, &v), BAD, "is a ptdp_config handle where a ptdp_trainer",
         "trainer_step on a config handle");
  EXPECT(ptdp_config_set((ptdp_config *)t, "num_layers", "2"), BAD,
         "is a ptdp_trainer handle where a ptdp_config", "config_set on a trainer handle");
  EXPECT(ptdp_trainer_create((ptdp_config *)t, &dead), BAD, "is a ptdp_trainer handle",
         "trainer_create from a trainer handle");
  CHECK(dead == NULL, "and *out stays NULL");
  EXPECT(ptdp_trainer_get((ptdp_trainer *)not_a_handle, "iteration", &v), BAD,
         "is not a live ptdp_trainer handle", "trainer_get on an address that is no handle");
  EXPECT_OK(ptdp_config_create(&gone), "config_create");
  ptdp_config_destroy(gone);
  EXPECT(ptdp_config_get(gone, "num_layers", buf, sizeof buf, &len), BAD,
         "is not a live ptdp_config handle", "config_get on a destroyed config");
  ptdp_config_destroy(gone);
  CHECK(strstr(ptdp_last_error(), "ptdp_config_destroy: the handle is not a live ptdp_config") != NULL,
        "a second config_destroy does nothing and says why");
  ptdp_trainer_destroy((ptdp_trainer *)c);
  CHECK(strstr(ptdp_last_error(), "is a ptdp_config handle where a ptdp_trainer") != NULL,
        "trainer_destroy of a config handle does nothing and says why");
  EXPECT_OK(ptdp_config_get(c, "num_layers", buf, sizeof buf, &len), "the config is still live");
  ptdp_trainer_destroy(t);
  EXPECT(ptdp_trainer_step(t, &v), BAD, "is not a live ptdp_trainer handle",
         "trainer_step on a destroyed trainer");
  EXPECT(ptdp_trainer_log_line(t, buf, sizeof buf, &len), BAD, "is not a live ptdp_trainer",
         "trainer_log_line on a destroyed trainer");
  ptdp_trainer_destroy(t);
  CHECK(strstr(ptdp_last_error(), "ptdp_trainer_destroy: the handle is not a live ptdp_trainer") != NULL,
        "a second trainer_destroy does nothing and says why");
  ptdp_config_destroy(c);
}

static void test_options(void) {
  ptdp_config *c = NULL;
  char buf[256];
  size_t len = 0;
  int32_t i, n = ptdp_option_count();
  int saw_num_layers = 0;
  printf("-- options: unknown keys and bad values\n");
  CHECK(n >= 20, "the option schema has the Megatron options");
  EXPECT_OK(ptdp_config_create(&c), "config_create");
  for (i = 0; i < n; i++) {
    const char *k = NULL, *d = NULL, *h = NULL;
    EXPECT_OK(ptdp_option_info(i, &k, &d, &h), "option_info");
    CHECK(k && d && h && k[0] && h[0], "option has a key, a default and help text");
    if (strcmp(k, "num_layers") == 0) saw_num_layers = 1;
    /* every default is a valid value of its option */
    EXPECT_OK(ptdp_config_set(c, k, d), "setting an option to its default");
    EXPECT_OK(ptdp_config_get(c, k, buf, sizeof buf, &len), "config_get of that option");
    CHECK(strcmp(buf, d) == 0 && len == strlen(d), "config_get returns the value set");
  }
  CHECK(saw_num_layers, "num_layers is in the schema");

  EXPECT(ptdp_config_set(c, "no_such_option", "1"), PTDP_ERR_UNKNOWN_OPTION, "no_such_option",
         "unknown key");
  CHECK(strstr(ptdp_last_error(), "num_layers") && strstr(ptdp_last_error(), "hidden_size") &&
            strstr(ptdp_last_error(), "micro_batch_size"),
        "the unknown-key message lists the known keys");
  EXPECT(ptdp_config_set_int(c, "num-layers", 2), PTDP_ERR_UNKNOWN_OPTION, "num_layers",
         "flag spelling is not a key");
  EXPECT(ptdp_config_set_double(c, "learning_rate", 0.1), PTDP_ERR_UNKNOWN_OPTION, "lr",
         "unknown key via set_double");
  EXPECT(ptdp_config_get(c, "no_such_option", buf, sizeof buf, &len), PTDP_ERR_UNKNOWN_OPTION,
         "known options", "config_get of an unknown key");

  EXPECT_OK(ptdp_config_set_int(c, "num_layers", 3), "set num_layers 3");
  EXPECT(ptdp_config_set(c, "num_layers", "abc"), PTDP_ERR_BAD_VALUE,
         "num_layers must be an integer", "num_layers \"abc\"");
  EXPECT(ptdp_config_set(c, "num_layers", "3.5"), PTDP_ERR_BAD_VALUE, "integer",
         "num_layers \"3.5\"");
  EXPECT(ptdp_config_set(c, "num_layers", "12abc"), PTDP_ERR_BAD_VALUE, "integer",
         "num_layers \"12abc\"");
  EXPECT(ptdp_config_set(c, "num_layers", ""), PTDP_ERR_BAD_VALUE, "integer", "num_layers \"\"");
  EXPECT(ptdp_config_set(c, "num_layers", "99999999999999999999999"), PTDP_ERR_BAD_VALUE,
         "integer", "num_layers overflowing int64");
  EXPECT(ptdp_config_set_double(c, "num_layers", 2.5), PTDP_ERR_BAD_VALUE, "integer",
         "set_double 2.5 on an integer option");
  EXPECT(ptdp_config_set_int(c, "num_layers", 0), PTDP_ERR_BAD_VALUE, "[1, 4096]",
         "num_layers 0 (out of range)");
  EXPECT(ptdp_config_set_int(c, "num_layers", 5000), PTDP_ERR_BAD_VALUE, "[1, 4096]",
         "num_layers 5000 (out of range)");
  EXPECT(ptdp_config_set_int(c, "micro_batch_size", -2), PTDP_ERR_BAD_VALUE, "micro_batch_size",
         "micro_batch_size -2");
  /* compared as integers: 1e18 + 64 is a double's 1e18, yet past the bound */
  EXPECT(ptdp_config_set(c, "seed", "1000000000000000064"), PTDP_ERR_BAD_VALUE,
         "got 1000000000000000064", "seed 1e18 + 64 (out of range)");
  EXPECT_OK(ptdp_config_set(c, "seed", "1000000000000000000"), "seed 1e18 (the bound)");
  EXPECT_OK(ptdp_config_set(c, "seed", "1234"), "seed back to 1234");
  EXPECT_OK(ptdp_config_get(c, "num_layers", buf, sizeof buf, &len), "config_get num_layers");
  CHECK(strcmp(buf, "3") == 0, "a rejected value leaves the previous one in place");
  EXPECT_OK(ptdp_config_set_double(c, "num_layers", 2.0), "set_double 2.0 on an integer option");

  EXPECT(ptdp_config_set(c, "lr", "fast"), PTDP_ERR_BAD_VALUE, "lr must be a number", "lr \"fast\"");
  EXPECT(ptdp_config_set_double(c, "lr", -1.0), PTDP_ERR_BAD_VALUE, "lr must be in", "lr -1");
  EXPECT(ptdp_config_set_double(c, "lr", NAN), PTDP_ERR_BAD_VALUE, "lr", "lr NaN");
  EXPECT(ptdp_config_set_double(c, "lr", HUGE_VAL), PTDP_ERR_BAD_VALUE, "lr", "lr inf");
  EXPECT(ptdp_config_set_double(c, "hidden_dropout", 1.5), PTDP_ERR_BAD_VALUE, "hidden_dropout",
         "hidden_dropout 1.5");
  EXPECT(ptdp_config_set(c, "lr_decay_style", "exponential"), PTDP_ERR_BAD_VALUE,
         "constant,linear,cosine", "lr_decay_style \"exponential\" (bad choice)");
  EXPECT(ptdp_config_set(c, "tokenizer_type", "gpt2"), PTDP_ERR_BAD_VALUE, "byte",
         "tokenizer_type \"gpt2\" (bad choice)");
  EXPECT_OK(ptdp_config_set(c, "lr_decay_style", "linear"), "lr_decay_style \"linear\"");
  ptdp_config_destroy(c);
}

static void test_bad_configs(const char *corpus, const char *data_path) {
  ptdp_config *c;
  char path[4096], trunc_path[4096];
  const char *inputs[1];
  long size;
  printf("-- inconsistent configs, missing and corrupt datasets\n");

  c = tiny_config(data_path);
  EXPECT_OK(ptdp_config_set_int(c, "num_attention_heads", 3), "set num_attention_heads 3");
  expect_create_fails(c, PTDP_ERR_INVALID_CONFIG, "must divide hidden_size",
                      "3 heads do not divide hidden 32");
  ptdp_config_destroy(c);

  c = tiny_config(data_path);
  EXPECT_OK(ptdp_config_set_int(c, "max_position_embeddings", 16), "set max_position_embeddings 16");
  expect_create_fails(c, PTDP_ERR_INVALID_CONFIG, "max_position_embeddings",
                      "seq_length 32 > max_position_embeddings 16");
  ptdp_config_destroy(c);

  c = tiny_config(data_path);
  EXPECT_OK(ptdp_config_set_int(c, "global_batch_size", 5), "set global_batch_size 5");
  expect_create_fails(c, PTDP_ERR_INVALID_CONFIG, "divisible by micro_batch_size",
                      "global batch 5 with micro batch 2");
  ptdp_config_destroy(c);

  c = tiny_config(data_path);
  EXPECT_OK(ptdp_config_set_double(c, "min_lr", 0.5), "set min_lr 0.5");
  expect_create_fails(c, PTDP_ERR_INVALID_CONFIG, "min_lr", "min_lr > lr");
  ptdp_config_destroy(c);

  c = tiny_config(NULL);
  {
    /* No data_path: a trainer for batches the caller feeds (step_tokens); a
     * plain step is a wrong state naming what to do. */
    ptdp_trainer *t = NULL;
    EXPECT_OK(ptdp_trainer_create(c, &t), "trainer without data_path");
    EXPECT(ptdp_trainer_step(t, NULL), PTDP_ERR_WRONG_STATE, "step_tokens",
           "step without a dataset");
    ptdp_trainer_destroy(t);
  }
  tmp_path(path, sizeof path, "capi_no_such_dataset.ptdp");
  remove(path);
  EXPECT_OK(ptdp_config_set(c, "data_path", path), "set data_path to a missing file");
  expect_create_fails(c, PTDP_ERR_IO, "cannot open dataset", "missing dataset file");
  ptdp_config_destroy(c);

  tmp_path(trunc_path, sizeof trunc_path, "capi_truncated.ptdp");
  size = copy_prefix(data_path, trunc_path, -7);
  CHECK(size > 100, "made a truncated copy of the dataset");
  c = tiny_config(trunc_path);
  expect_create_fails(c, PTDP_ERR_CORRUPT_DATA, "truncated", "truncated dataset");
  ptdp_config_destroy(c);

  tmp_path(path, sizeof path, "capi_short.ptdp");
  CHECK(copy_prefix(data_path, path, 20) > 0, "made a 20-byte dataset");
  c = tiny_config(path);
  expect_create_fails(c, PTDP_ERR_CORRUPT_DATA, "header", "dataset shorter than its header");
  ptdp_config_destroy(c);

  c = tiny_config(corpus);
  expect_create_fails(c, PTDP_ERR_CORRUPT_DATA, "magic", "a text file as dataset");
  ptdp_config_destroy(c);

  tmp_path(path, sizeof path, "capi_bigvocab.ptdp");
  CHECK(write_raw_dataset(path, 1000, 400, 0) == 0, "wrote a dataset with vocabulary 1000");
  c = tiny_config(path);
  expect_create_fails(c, PTDP_ERR_INVALID_CONFIG, "vocabulary size 1000",
                      "dataset vocabulary larger than the model's");
  ptdp_config_destroy(c);

  tmp_path(path, sizeof path, "capi_badtoken.ptdp");
  CHECK(write_raw_dataset(path, 300, 400, 0) == 0, "wrote a dataset with tokens up to 299");
  {
    /* Declare vocab 257 while tokens reach 299: the file no longer validates. */
    FILE *f = fopen(path, "r+b");
    unsigned char v[4];
    put_u32(v, 257);
    CHECK(f && fseek(f, 16, SEEK_SET) == 0 && fwrite(v, 1, 4, f) == 4, "patched vocab to 257");
    fclose(f);
  }
  c = tiny_config(path);
  expect_create_fails(c, PTDP_ERR_CORRUPT_DATA, "outside the vocabulary",
                      "dataset tokens outside its declared vocabulary");
  ptdp_config_destroy(c);

  /* A dataset of one short line: the 98,2 split leaves nothing to validate on. */
  {
    FILE *f;
    char txt[4096];
    tmp_path(txt, sizeof txt, "capi_one_line.txt");
    f = fopen(txt, "w");
    CHECK(f != NULL, "wrote a one-line corpus");
    fputs("A single short line.\n", f);
    fclose(f);
    inputs[0] = txt;
    tmp_path(path, sizeof path, "capi_one_line.ptdp");
    EXPECT_OK(ptdp_tokenize(inputs, 1, "lines", "byte", path, NULL, NULL), "tokenize one line");
    c = tiny_config(path);
    expect_create_fails(c, PTDP_ERR_INVALID_CONFIG, "seq_length+1", "dataset too small to split");
    ptdp_config_destroy(c);
  }

  /* tokenize errors */
  inputs[0] = corpus;
  tmp_path(path, sizeof path, "capi_unused.ptdp");
  EXPECT(ptdp_tokenize(inputs, 1, "csv", "byte", path, NULL, NULL), PTDP_ERR_BAD_VALUE, "lines",
         "tokenize with an unknown format");
  EXPECT(ptdp_tokenize(inputs, 1, "lines", "gpt2", path, NULL, NULL), PTDP_ERR_BAD_VALUE, "byte",
         "tokenize with an unknown tokenizer");
  tmp_path(trunc_path, sizeof trunc_path, "capi_no_such_corpus.txt");
  remove(trunc_path);
  inputs[0] = trunc_path;
  EXPECT(ptdp_tokenize(inputs, 1, "lines", "byte", path, NULL, NULL), PTDP_ERR_IO,
         "does not exist", "tokenize a missing corpus");
}

static void test_training(const char *data_path) {
  ptdp_config *c = tiny_config(data_path);
  ptdp_trainer *t = NULL;
  double v = -1, loss0 = 0, eval0 = 0, eval1 = 0, eval1b = 0, losses[12];
  char small[8], *buf;
  size_t len = 0, len2 = 0;
  int i;
  const int steps = 12;
  printf("-- training\n");

  EXPECT_OK(ptdp_trainer_create(c, &t), "trainer_create");
  CHECK(t != NULL, "trainer_create gives a handle");
  /* The trainer copied the config: destroying or changing it has no effect. */
  EXPECT_OK(ptdp_config_set_int(c, "micro_batch_size", 1), "change the config after create");
  ptdp_config_destroy(c);

  /* wrong call order: nothing of a step before the first step */
  EXPECT(ptdp_trainer_log_line(t, small, sizeof small, &len), PTDP_ERR_WRONG_STATE,
         "first ptdp_trainer_step", "log_line before the first step");
  EXPECT(ptdp_trainer_get(t, "lm_loss", &v), PTDP_ERR_WRONG_STATE, "lm_loss",
         "get lm_loss before the first step");
  EXPECT(ptdp_trainer_get(t, "grad_norm", &v), PTDP_ERR_WRONG_STATE, NULL,
         "get grad_norm before the first step");
  EXPECT_OK(ptdp_trainer_get(t, "iteration", &v), "get iteration before the first step");
  CHECK(v == 0, "iteration is 0 before the first step");
  EXPECT(ptdp_trainer_get(t, "no_such_metric", &v), PTDP_ERR_INVALID_ARGUMENT, "lm_loss",
         "get an unknown name (message lists the known ones)");
  EXPECT(ptdp_trainer_get(t, NULL, &v), PTDP_ERR_INVALID_ARGUMENT, "name", "get(NULL name)");
  EXPECT(ptdp_trainer_get(t, "iteration", NULL), PTDP_ERR_INVALID_ARGUMENT, "value",
         "get(NULL value)");
  EXPECT(ptdp_trainer_evaluate(t, 1, NULL), PTDP_ERR_INVALID_ARGUMENT, "loss",
         "evaluate(NULL loss)");
  EXPECT(ptdp_trainer_generate(t, NULL, 4, 0.0, 0, small, sizeof small, &len),
         PTDP_ERR_INVALID_ARGUMENT, "prompt", "generate(NULL prompt)");
  EXPECT(ptdp_trainer_generate(t, "x", -1, 0.0, 0, small, sizeof small, &len),
         PTDP_ERR_INVALID_ARGUMENT, "max_new_tokens", "generate(max_new_tokens -1)");
  EXPECT(ptdp_trainer_generate_top(t, "x", PTDP_MAX_NEW_TOKENS + 1, 0.0, 0, 1.0, 0, small,
                                   sizeof small, &len),
         PTDP_ERR_INVALID_ARGUMENT, "max_new_tokens must be in [0, 1048576]",
         "generate(max_new_tokens past PTDP_MAX_NEW_TOKENS)");
  EXPECT(ptdp_trainer_generate(t, "x", 4, -0.5, 0, small, sizeof small, &len),
         PTDP_ERR_INVALID_ARGUMENT, "temperature", "generate(temperature -0.5)");
  EXPECT(ptdp_trainer_generate(t, "x", 4, NAN, 0, small, sizeof small, &len),
         PTDP_ERR_INVALID_ARGUMENT, "temperature", "generate(temperature NaN)");

  /* Logits: the size first, then every position's or the last one's; the last
   * row of the whole equals the last-only call's; bad ids and small buffers
   * are refused. */
  {
    const int32_t ids[3] = {84, 104, 101};
    size_t need = 0;
    EXPECT_OK(ptdp_trainer_logits(t, ids, 3, 0, NULL, 0, &need), "logits size");
    CHECK(need == 3 * 257, "logits of 3 positions over 257 tokens");
    float *all = (float *)malloc(need * sizeof(float)), last[257];
    EXPECT_OK(ptdp_trainer_logits(t, ids, 3, 0, all, need, &need), "logits of every position");
    EXPECT_OK(ptdp_trainer_logits(t, ids, 3, 1, last, 257, &need), "logits of the last position");
    CHECK(need == 257 && memcmp(all + 2 * 257, last, sizeof last) == 0,
          "the last row of the whole is the last-only call's");
    EXPECT(ptdp_trainer_logits(t, ids, 3, 0, last, 257, &need), PTDP_ERR_BUFFER_TOO_SMALL, "771",
           "logits into a buffer too small (the size needed is named)");
    const int32_t bad[2] = {84, 300};
    EXPECT(ptdp_trainer_logits(t, bad, 2, 1, last, 257, &need), PTDP_ERR_INVALID_ARGUMENT, "300",
           "logits of a token outside the vocabulary");
    EXPECT(ptdp_trainer_logits(t, bad, 2, 1, NULL, 0, &need), PTDP_ERR_INVALID_ARGUMENT,
           "at index 1", "the size of a bad sequence's logits (refused as the call would be)");
    EXPECT(ptdp_trainer_logits(t, ids, 0, 1, last, 257, &need), PTDP_ERR_INVALID_ARGUMENT,
           "0 tokens", "logits of no tokens");
    EXPECT(ptdp_trainer_logits(t, NULL, 3, 1, last, 257, &need), PTDP_ERR_INVALID_ARGUMENT, "ids",
           "logits(NULL ids)");
    free(all);
  }

  EXPECT_OK(ptdp_trainer_get(t, "num_parameters", &v), "get num_parameters");
  CHECK(v > 10000 && v < 1e6, "num_parameters of the tiny model");
  EXPECT_OK(ptdp_trainer_get(t, "padded_vocab_size", &v), "get padded_vocab_size");
  CHECK(v == 384, "257 byte tokens padded to 384");
  EXPECT_OK(ptdp_trainer_get(t, "unigram_entropy", &v), "get unigram_entropy");
  CHECK(v > 1.0 && v < log(257.0), "unigram entropy is between 1 and ln 257 nats");
  EXPECT_OK(ptdp_trainer_get(t, "train_samples", &v), "get train_samples");
  CHECK(v >= 4, "several train samples");
  EXPECT_OK(ptdp_trainer_get(t, "valid_samples", &v), "get valid_samples");
  CHECK(v >= 1, "at least one valid sample");
  EXPECT_OK(ptdp_trainer_get(t, "train_iters", &v), "get train_iters");
  CHECK(v == steps, "train_iters as configured");

  EXPECT_OK(ptdp_trainer_evaluate(t, 1, &eval0), "evaluate before training");
  CHECK(isfinite(eval0) && fabs(eval0 - log(257.0)) < 0.5,
        "the untrained model's loss is about ln 257");

  for (i = 0; i < steps; i++) {
    losses[i] = -1;
    EXPECT_OK(ptdp_trainer_step(t, &losses[i]), "trainer_step");
    printf("     step %d loss %.4f\n", i + 1, losses[i]);
    CHECK(isfinite(losses[i]) && losses[i] > 0, "the step loss is finite and positive");
  }
  loss0 = losses[0];
  CHECK(fabs(loss0 - log(257.0)) < 0.5, "the first step's loss is about ln 257");
  CHECK((losses[steps - 1] + losses[steps - 2]) / 2 < (losses[0] + losses[1]) / 2 - 0.5,
        "the loss falls by more than 0.5 nats over the steps");

  EXPECT_OK(ptdp_trainer_step(t, NULL), "trainer_step(t, NULL loss) is allowed");
  EXPECT_OK(ptdp_trainer_get(t, "iteration", &v), "get iteration");
  CHECK(v == steps + 1, "iteration counts the steps");
  EXPECT_OK(ptdp_trainer_get(t, "consumed_samples", &v), "get consumed_samples");
  CHECK(v == 4.0 * (steps + 1), "consumed_samples = steps * global batch");
  EXPECT_OK(ptdp_trainer_get(t, "lm_loss", &v), "get lm_loss");
  CHECK(isfinite(v) && v > 0 && v < loss0, "lm_loss of the last step is below the first");
  EXPECT_OK(ptdp_trainer_get(t, "lr", &v), "get lr");
  CHECK(v > 0 && v <= 1e-2, "lr within (0, lr]");
  EXPECT_OK(ptdp_trainer_get(t, "grad_norm", &v), "get grad_norm");
  CHECK(isfinite(v) && v > 0, "grad_norm positive");
  EXPECT_OK(ptdp_trainer_get(t, "loss_scale", &v), "get loss_scale");
  CHECK(isfinite(v) && v > 0, "loss_scale positive");
  EXPECT_OK(ptdp_trainer_get(t, "skipped_iters", &v), "get skipped_iters");
  CHECK(v == 0, "no skipped iterations");
  EXPECT_OK(ptdp_trainer_get(t, "nan_iters", &v), "get nan_iters");
  CHECK(v == 0, "no nan iterations");
  EXPECT_OK(ptdp_trainer_get(t, "elapsed_ms", &v), "get elapsed_ms");
  CHECK(v > 0, "elapsed_ms positive");
  EXPECT_OK(ptdp_trainer_get(t, "tokens_per_s", &v), "get tokens_per_s");
  CHECK(v > 0, "tokens_per_s positive");
  EXPECT_OK(ptdp_trainer_get(t, "tflops_per_rank", &v), "get tflops_per_rank");
  CHECK(v > 0, "tflops_per_rank positive");
  {  /* every name the table lists answers after a step; the step result's are the 11 */
    const char *name = NULL;
    int32_t step_result = -1, results = 0, n = ptdp_trainer_value_count();
    CHECK(n >= 30, "trainer_value_count lists the trainer's values");
    for (int32_t i = 0; i < n; i++) {
      EXPECT_OK(ptdp_trainer_value_info(i, &name, &step_result), "trainer_value_info");
      results += step_result;
      EXPECT_OK(ptdp_trainer_get(t, name, &v), name);
    }
    CHECK(results == 11, "11 values are a step's result");
    EXPECT_OK(ptdp_trainer_value_info(0, &name, NULL), "trainer_value_info(NULL step_result)");
    CHECK(strcmp(name, "iteration") == 0, "the first value is iteration");
    EXPECT(ptdp_trainer_value_info(n, &name, NULL), PTDP_ERR_INVALID_ARGUMENT, "is not in [0, ",
           "trainer_value_info past the last");
    EXPECT(ptdp_trainer_value_info(-1, &name, NULL), PTDP_ERR_INVALID_ARGUMENT, "index -1",
           "trainer_value_info(-1)");
    EXPECT(ptdp_trainer_value_info(0, NULL, NULL), PTDP_ERR_INVALID_ARGUMENT, "name",
           "trainer_value_info(NULL name)");
  }
  EXPECT_OK(ptdp_trainer_get(t, "peak_memory_bytes", &v), "get peak_memory_bytes");
  CHECK(v > 0, "peak_memory_bytes positive");
  {
    double dev = 0;
    EXPECT_OK(ptdp_trainer_get(t, "device_peak_memory_bytes", &dev), "get device_peak_memory_bytes");
    CHECK(dev > 0 && dev <= v, "device memory (CPU device) is part of the host's allocations");
  }
  EXPECT_OK(ptdp_trainer_get(t, "virtual_pipeline_stages", &v), "get virtual_pipeline_stages");
  CHECK(v == 1, "one model chunk without pipelining");
  EXPECT_OK(ptdp_trainer_get(t, "replayed_bubble", &v), "get replayed_bubble (p = 1)");
  CHECK(fabs(v) < 1e-9, "no bubble with a single stage");
  EXPECT_OK(ptdp_trainer_rank_get(t, 0, "idle_fraction", &v), "rank_get idle_fraction (1 rank)");
  CHECK(v >= 0 && v < 1, "idle_fraction in [0, 1)");
  EXPECT(ptdp_trainer_rank_get(t, 0, "bytes_embedding", &v), PTDP_OK, NULL,
         "rank_get bytes_embedding without an embedding group");
  CHECK(v == 0, "0 bytes for a rank in no embedding group");
  EXPECT(ptdp_trainer_rank_get(t, 1, "idle_fraction", &v), PTDP_ERR_INVALID_ARGUMENT,
         "outside [0, 1)", "rank_get local_rank 1 of a single-rank trainer");

  /* log line through the size-query protocol */
  memset(small, 'X', sizeof small);
  len = 0;
  EXPECT(ptdp_trainer_log_line(t, small, sizeof small, &len), PTDP_ERR_BUFFER_TOO_SMALL,
         "bytes needed", "log_line into 8 bytes");
  CHECK(len > sizeof small, "the needed length is reported");
  CHECK(memcmp(small, "XXXXXXXX", 8) == 0, "a too-small buffer is left untouched");
  EXPECT(ptdp_trainer_log_line(t, NULL, 0, &len2), PTDP_ERR_BUFFER_TOO_SMALL, NULL,
         "log_line size query with a NULL buffer");
  CHECK(len2 == len, "both size queries agree");
  buf = (char *)malloc(len + 1);
  CHECK(buf != NULL, "malloc");
  EXPECT(ptdp_trainer_log_line(t, buf, len, &len2), PTDP_ERR_BUFFER_TOO_SMALL, NULL,
         "log_line without room for the NUL");
  EXPECT_OK(ptdp_trainer_log_line(t, buf, len + 1, &len2), "log_line with len+1 bytes");
  CHECK(len2 == len && strlen(buf) == len, "the text has the announced length");
  printf("     %s\n", buf);
  CHECK(strstr(buf, " iteration ") && strstr(buf, "lm loss:") && strstr(buf, "grad norm:") &&
            strstr(buf, "consumed samples:"),
        "the log line has the Megatron fields");
  CHECK(strstr(buf, "/") && strstr(buf, "13/"), "the log line shows iteration 13");
  free(buf);

  /* evaluation */
  EXPECT_OK(ptdp_trainer_evaluate(t, 0, &eval1), "evaluate (eval_iters from the config)");
  EXPECT_OK(ptdp_trainer_evaluate(t, 2, &eval1b), "evaluate 2 batches");
  CHECK(isfinite(eval1) && eval1 < eval0 - 0.5, "validation loss fell by more than 0.5 nats");
  CHECK(eval1 == eval1b, "evaluate is deterministic (0 = eval_iters = 2)");
  EXPECT_OK(ptdp_trainer_evaluate(t, -5, &eval1b), "evaluate(-5) uses eval_iters");
  CHECK(eval1 == eval1b, "negative iters means eval_iters");
  printf("     validation loss %.4f (untrained %.4f)\n", eval1, eval0);

  /* generation through the size-query protocol */
  {
    char *a, *b;
    size_t need = 0, got = 0;
    EXPECT(ptdp_trainer_generate(t, "The ", 24, 0.0, 0, NULL, 0, &need),
           PTDP_ERR_BUFFER_TOO_SMALL, NULL, "generate size query (greedy)");
    CHECK(need >= 4 && need <= 4 + 24, "greedy text is the prompt plus at most 24 bytes");
    a = (char *)malloc(need + 1);
    CHECK(a != NULL, "malloc");
    EXPECT_OK(ptdp_trainer_generate(t, "The ", 24, 0.0, 0, a, need + 1, &got),
              "generate greedy into the announced size");
    CHECK(got == need && strlen(a) == need, "same length on the retry");
    CHECK(strncmp(a, "The ", 4) == 0, "the text starts with the prompt");
    printf("     greedy: \"%s\"\n", a);
    free(a);

    EXPECT(ptdp_trainer_generate(t, "Anna ", 30, 0.8, 42, NULL, 0, &need),
           PTDP_ERR_BUFFER_TOO_SMALL, NULL, "generate size query (sampled, seed 42)");
    a = (char *)malloc(need + 1);
    b = (char *)malloc(need + 1);
    CHECK(a && b, "malloc");
    EXPECT_OK(ptdp_trainer_generate(t, "Anna ", 30, 0.8, 42, a, need + 1, &got),
              "generate sampled into the announced size (same seed)");
    CHECK(got == need, "the retry with the same seed has the same length");
    EXPECT_OK(ptdp_trainer_generate(t, "Anna ", 30, 0.8, 42, b, need + 1, &got),
              "generate sampled again");
    CHECK(strcmp(a, b) == 0, "sampling with the same seed repeats the text");
    printf("     sampled: \"%s\"\n", a);
    free(a);
    free(b);

    a = (char *)malloc(16);
    CHECK(a != NULL, "malloc");
    EXPECT_OK(ptdp_trainer_generate(t, "Hello", 0, 0.0, 0, a, 16, &got),
              "generate 0 new tokens");
    CHECK(strcmp(a, "Hello") == 0 && got == 5, "0 new tokens returns the prompt");
    EXPECT_OK(ptdp_trainer_generate(t, "", 5, 0.0, 0, a, 16, &got), "generate from an empty prompt");
    CHECK(got <= 5 && strlen(a) == got, "empty prompt gives at most 5 bytes");
    free(a);
  }

  ptdp_trainer_destroy(t);
  CHECK(1, "trainer_destroy");
}

/* The first 8 bytes of the file are the PNG signature. */
static int is_png(const char *path) {
  static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  unsigned char head[8];
  FILE *f = fopen(path, "rb");
  size_t n;
  if (!f) return 0;
  n = fread(head, 1, sizeof head, f);
  fclose(f);
  return n == sizeof head && memcmp(head, sig, sizeof sig) == 0;
}

/* The whole file in a malloc'd buffer (NULL if unreadable); *size gets its length. */
static unsigned char *read_whole(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  unsigned char *buf = NULL;
  long n;
  *size = 0;
  if (!f) return NULL;
  if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
    buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) == (size_t)n) {
      buf[n] = 0;
      *size = (size_t)n;
    } else {
      free(buf);
      buf = NULL;
    }
  }
  fclose(f);
  return buf;
}

/* A safetensors file's data bytes (after the 8-byte length and the JSON
 * header); *header points at the header text inside bytes. */
static size_t safetensors_data_size(const unsigned char *bytes, size_t size, const char **header) {
  unsigned long long n = 0;
  int i;
  for (i = 7; i >= 0; i--) n = n << 8 | bytes[i];
  *header = (const char *)bytes + 8;
  return 8 + n <= size ? size - 8 - (size_t)n : 0;
}

/* Two pipeline stages of two model chunks each (interleaved schedule): the
 * per-rank values of ptdp_trainer_rank_get, the pipeline values of
 * ptdp_trainer_get, and the step's timeline drawn by ptdp_render_timeline. */
static void test_pipeline(const char *data_path) {
  ptdp_config *c = tiny_config(data_path);
  ptdp_trainer *t = NULL;
  char trace[4096], png[4096], missing[4096];
  double v = -1, step = 0, compute = 0, sum_comm = 0;
  int r;
  printf("-- pipeline: per-rank values, replayed bubble, timeline picture\n");
  tmp_path(trace, sizeof trace, "capi_pipeline_trace.json");
  tmp_path(png, sizeof png, "capi_pipeline_timeline.png");
  remove(trace);
  remove(png);
  EXPECT_OK(ptdp_config_set_int(c, "num_layers", 4), "set num_layers 4");
  EXPECT_OK(ptdp_config_set_int(c, "pipeline_model_parallel_size", 2),
            "set pipeline_model_parallel_size 2");
  EXPECT_OK(ptdp_config_set_int(c, "num_layers_per_virtual_pipeline_stage", 1),
            "set num_layers_per_virtual_pipeline_stage 1 (v = 4 / (2 x 1) = 2)");
  EXPECT_OK(ptdp_config_set_int(c, "micro_batch_size", 1), "set micro_batch_size 1 (m = 4)");
  EXPECT_OK(ptdp_config_set(c, "timeline", trace), "set timeline");
  EXPECT_OK(ptdp_trainer_create(c, &t), "trainer_create with p = 2, v = 2");
  ptdp_config_destroy(c);

  EXPECT_OK(ptdp_trainer_get(t, "virtual_pipeline_stages", &v), "get virtual_pipeline_stages");
  CHECK(v == 2, "v = 2 model chunks per pipeline rank");
  EXPECT_OK(ptdp_trainer_get(t, "local_ranks", &v), "get local_ranks");
  CHECK(v == 2, "this process hosts both pipeline ranks");
  EXPECT(ptdp_trainer_get(t, "replayed_bubble", &v), PTDP_ERR_WRONG_STATE,
         "first ptdp_trainer_step", "replayed_bubble before the first step");
  EXPECT(ptdp_trainer_get(t, "weight_op_seconds", &v), PTDP_ERR_WRONG_STATE,
         "first ptdp_trainer_step", "weight_op_seconds before the first step");
  EXPECT_OK(ptdp_trainer_rank_get(t, 1, "pp_rank", &v), "rank_get pp_rank before the first step");
  CHECK(v == 1, "local rank 1 is pipeline stage 1");
  EXPECT_OK(ptdp_trainer_rank_get(t, 1, "world_rank", &v), "rank_get world_rank");
  CHECK(v == 1, "local rank 1 is world rank 1 (one process hosts all)");
  EXPECT(ptdp_trainer_rank_get(t, 0, "idle_fraction", &v), PTDP_ERR_WRONG_STATE,
         "first ptdp_trainer_step", "rank_get idle_fraction before the first step");
  EXPECT(ptdp_trainer_rank_get(t, 0, "bytes_pp", &v), PTDP_ERR_WRONG_STATE, "bytes_pp",
         "rank_get bytes_pp before the first step");
  EXPECT(ptdp_trainer_gather_reports(t), PTDP_ERR_WRONG_STATE, "first training step",
         "gather_reports before the first step");
  EXPECT(ptdp_trainer_world_rank_get(t, 0, "world_rank", &v), PTDP_ERR_WRONG_STATE,
         "first ptdp_trainer_step", "world_rank_get before the first step");

  EXPECT_OK(ptdp_trainer_step(t, NULL), "pipeline step 1");
  EXPECT_OK(ptdp_trainer_step(t, NULL), "pipeline step 2");

  for (r = 0; r < 2; r++) {
    printf("     local rank %d\n", r);
    EXPECT_OK(ptdp_trainer_rank_get(t, r, "tp_rank", &v), "rank_get tp_rank");
    CHECK(v == 0, "tp_rank 0");
    EXPECT_OK(ptdp_trainer_rank_get(t, r, "dp_rank", &v), "rank_get dp_rank");
    CHECK(v == 0, "dp_rank 0");
    EXPECT_OK(ptdp_trainer_rank_get(t, r, "pp_rank", &v), "rank_get pp_rank");
    CHECK(v == r, "pp_rank is the local rank");
    EXPECT_OK(ptdp_trainer_rank_get(t, r, "step_seconds", &step), "rank_get step_seconds");
    EXPECT_OK(ptdp_trainer_rank_get(t, r, "compute_seconds", &compute), "rank_get compute_seconds");
    CHECK(step > 0 && compute > 0 && compute <= step, "0 < compute_seconds <= step_seconds");
    EXPECT_OK(ptdp_trainer_rank_get(t, r, "idle_fraction", &v), "rank_get idle_fraction");
    printf("     step %.4f s, compute %.4f s, idle %.3f\n", step, compute, v);
    CHECK(v >= 0 && v < 1, "idle_fraction in [0, 1)");
    CHECK(fabs(v - (1 - compute / step)) < 1e-12, "idle_fraction = 1 - compute / step");
    EXPECT_OK(ptdp_trainer_rank_get(t, r, "peak_activation_bytes", &v),
              "rank_get peak_activation_bytes");
    CHECK(v > 0, "activations were stashed for backward");
    {
      double peak = 0, in_use = 0;
      EXPECT_OK(ptdp_trainer_rank_get(t, r, "device_peak_bytes", &peak), "rank_get device_peak_bytes");
      EXPECT_OK(ptdp_trainer_rank_get(t, r, "device_in_use_bytes", &in_use),
                "rank_get device_in_use_bytes");
      CHECK(peak >= v && peak >= in_use && in_use > 0,
            "device peak >= the stash's peak and >= memory in use after the step");
    }
    EXPECT_OK(ptdp_trainer_rank_get(t, r, "bytes_pp", &v), "rank_get bytes_pp");
    /* Each stage sends 4 micro-batches x 2 chunks x (1 x 32 x 32 floats) at
     * least once (activations forward or gradients backward). */
    CHECK(v >= 4.0 * 2 * 32 * 32 * 4, "stage sent its boundary tensors over the pp group");
    EXPECT_OK(ptdp_trainer_rank_get(t, r, "calls_pp", &v), "rank_get calls_pp");
    CHECK(v >= 8, "pp group: at least one operation per micro-batch and chunk");
    EXPECT_OK(ptdp_trainer_rank_get(t, r, "seconds_pp", &v), "rank_get seconds_pp");
    CHECK(v >= 0 && v <= step, "seconds_pp within the step");
    EXPECT_OK(ptdp_trainer_rank_get(t, r, "bytes_embedding", &v), "rank_get bytes_embedding");
    CHECK(v > 0, "first and last stages reduce the tied embedding's gradient");
    EXPECT_OK(ptdp_trainer_rank_get(t, r, "calls_embedding", &v), "rank_get calls_embedding");
    CHECK(v == 1, "one embedding all-reduce per step");
    EXPECT_OK(ptdp_trainer_rank_get(t, r, "bytes_dp", &v), "rank_get bytes_dp");
    CHECK(v == 0, "d = 1: nothing over the dp group");
    EXPECT_OK(ptdp_trainer_rank_get(t, r, "calls_tp", &v), "rank_get calls_tp");
    CHECK(v == 0, "t = 1: no tp operations");
  }

  EXPECT(ptdp_trainer_rank_get(t, 2, "idle_fraction", &v), PTDP_ERR_INVALID_ARGUMENT,
         "outside [0, 2)", "rank_get local_rank 2 (two local ranks)");
  EXPECT(ptdp_trainer_rank_get(t, -1, "idle_fraction", &v), PTDP_ERR_INVALID_ARGUMENT,
         "outside [0, 2)", "rank_get local_rank -1");
  EXPECT(ptdp_trainer_rank_get(t, 0, "bubble", &v), PTDP_ERR_INVALID_ARGUMENT,
         "known: world_rank", "rank_get an unknown name (lists the known ones)");
  EXPECT(ptdp_trainer_rank_get(t, 0, "bytes_ep", &v), PTDP_ERR_INVALID_ARGUMENT,
         "bytes_embedding", "rank_get bytes of an unknown group");
  EXPECT(ptdp_trainer_rank_get(NULL, 0, "idle_fraction", &v), PTDP_ERR_INVALID_ARGUMENT,
         "trainer", "rank_get(NULL trainer)");
  EXPECT(ptdp_trainer_rank_get(t, 0, NULL, &v), PTDP_ERR_INVALID_ARGUMENT, "name",
         "rank_get(NULL name)");
  EXPECT(ptdp_trainer_rank_get(t, 0, "idle_fraction", NULL), PTDP_ERR_INVALID_ARGUMENT, "value",
         "rank_get(NULL value)");

  EXPECT_OK(ptdp_trainer_get(t, "replayed_bubble", &v), "get replayed_bubble");
  printf("     replayed bubble %.4f (formula (p-1)/(v m) = 0.125)\n", v);
  CHECK(isfinite(v) && v >= 0 && v < 2, "replayed bubble is finite and non-negative");
  EXPECT_OK(ptdp_trainer_get(t, "forward_op_seconds", &v), "get forward_op_seconds");
  CHECK(v > 0, "a forward op took time");
  EXPECT_OK(ptdp_trainer_get(t, "weight_op_seconds", &v), "get weight_op_seconds");
  CHECK(v == 0, "no weight-gradient ops outside the zero-bubble schedules");
  EXPECT_OK(ptdp_trainer_get(t, "comm_seconds", &sum_comm), "get comm_seconds");
  CHECK(sum_comm > 0, "comm_seconds counts pipeline communication");

  /* The values describe the last step even after an evaluation. */
  EXPECT_OK(ptdp_trainer_rank_get(t, 0, "calls_pp", &v), "rank_get calls_pp");
  {
    double after = -1, loss = 0;
    EXPECT_OK(ptdp_trainer_evaluate(t, 1, &loss), "evaluate between step and rank_get");
    EXPECT_OK(ptdp_trainer_rank_get(t, 0, "calls_pp", &after), "rank_get calls_pp again");
    CHECK(after == v, "rank values stay those of the last step");
  }

  /* Every rank's values gathered on world rank 0 (here all ranks are local and
   * nothing is sent): the same numbers as ptdp_trainer_rank_get. */
  {
    static const char *const names[] = {
        "world_rank", "tp_rank", "pp_rank", "dp_rank", "step_seconds", "compute_seconds",
        "idle_fraction", "peak_activation_bytes", "device_peak_bytes", "device_in_use_bytes",
        "bytes_tp", "bytes_pp", "bytes_dp", "bytes_embedding", "seconds_tp", "seconds_pp",
        "seconds_dp", "seconds_embedding", "calls_tp", "calls_pp", "calls_dp", "calls_embedding"};
    size_t i;
    int same = 1;
    double local = -1, world = -2;
    EXPECT(ptdp_trainer_world_rank_get(t, 0, "world_rank", &v), PTDP_ERR_WRONG_STATE,
           "not been gathered", "world_rank_get before gather_reports");
    EXPECT_OK(ptdp_trainer_gather_reports(t), "gather_reports");
    for (r = 0; r < 2; r++)
      for (i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (ptdp_trainer_rank_get(t, r, names[i], &local) != PTDP_OK ||
            ptdp_trainer_world_rank_get(t, r, names[i], &world) != PTDP_OK || local != world) {
          printf("     rank %d %s: rank_get %.17g, world_rank_get %.17g (%s)\n", r, names[i],
                 local, world, ptdp_last_error());
          same = 0;
        }
      }
    CHECK(same, "world_rank_get equals rank_get for every value of both ranks");
    EXPECT(ptdp_trainer_world_rank_get(t, 2, "idle_fraction", &v), PTDP_ERR_INVALID_ARGUMENT,
           "outside [0, 2)", "world_rank_get world rank 2 of 2");
    EXPECT(ptdp_trainer_world_rank_get(t, -1, "idle_fraction", &v), PTDP_ERR_INVALID_ARGUMENT,
           "outside [0, 2)", "world_rank_get world rank -1");
    EXPECT(ptdp_trainer_world_rank_get(t, 0, "bubble", &v), PTDP_ERR_INVALID_ARGUMENT,
           "known: world_rank", "world_rank_get an unknown name");
    EXPECT(ptdp_trainer_world_rank_get(t, 0, NULL, &v), PTDP_ERR_INVALID_ARGUMENT, "name",
           "world_rank_get(NULL name)");
    EXPECT(ptdp_trainer_world_rank_get(t, 0, "step_seconds", NULL), PTDP_ERR_INVALID_ARGUMENT,
           "value", "world_rank_get(NULL value)");
    EXPECT(ptdp_trainer_gather_reports(NULL), PTDP_ERR_INVALID_ARGUMENT, "trainer",
           "gather_reports(NULL trainer)");
  }

  /* The trace of the last step as a picture. */
  EXPECT_OK(ptdp_render_timeline(trace, png, 0), "render_timeline (width 0 = 1600)");
  CHECK(is_png(png), "render_timeline wrote a PNG");
  remove(png);
  EXPECT_OK(ptdp_render_timeline(trace, png, 800), "render_timeline width 800");
  CHECK(is_png(png), "render_timeline wrote a PNG 800 px wide");
  EXPECT(ptdp_render_timeline(trace, png, -5), PTDP_ERR_INVALID_ARGUMENT, "width",
         "render_timeline width -5");
  EXPECT(ptdp_render_timeline(trace, png, 100000), PTDP_ERR_INVALID_ARGUMENT, "width",
         "render_timeline width 100000");
  tmp_path(missing, sizeof missing, "capi_no_such_trace.json");
  remove(missing);
  EXPECT(ptdp_render_timeline(missing, png, 0), PTDP_ERR_IO, "capi_no_such_trace.json",
         "render_timeline of a missing trace");
  EXPECT(ptdp_render_timeline(data_path, png, 0), PTDP_ERR_CORRUPT_DATA, NULL,
         "render_timeline of a file that is not JSON");
  EXPECT(ptdp_render_timeline(NULL, png, 0), PTDP_ERR_INVALID_ARGUMENT, "trace_json",
         "render_timeline(NULL trace)");
  EXPECT(ptdp_render_timeline(trace, NULL, 0), PTDP_ERR_INVALID_ARGUMENT, "png",
         "render_timeline(NULL png)");

  /* A --log-json file's plot (ptdp_plot_log): the trainer's own JSON line. */
  {
    char log_path[512], line[4096];
    size_t len = 0;
    FILE *f;
    tmp_path(log_path, sizeof log_path, "capi_log.jsonl");
    EXPECT_OK(ptdp_trainer_log_json(t, line, sizeof line, &len), "trainer_log_json");
    f = fopen(log_path, "w");
    CHECK(f != NULL, "open the metrics file");
    if (f) {
      fprintf(f, "%s\n", line);
      fclose(f);
    }
    remove(png);
    EXPECT_OK(ptdp_plot_log(log_path, png), "plot_log of the trainer's log_json line");
    CHECK(is_png(png), "plot_log wrote a PNG");
    EXPECT(ptdp_plot_log(missing, png), PTDP_ERR_IO, "capi_no_such_trace.json",
           "plot_log of a missing file");
    EXPECT(ptdp_plot_log(data_path, png), PTDP_ERR_CORRUPT_DATA, "is not JSON",
           "plot_log of a file that is not JSON lines");
    EXPECT(ptdp_plot_log(log_path, log_path), PTDP_ERR_INVALID_ARGUMENT, "overwrite an input",
           "plot_log onto its own input");
    EXPECT(ptdp_plot_log(NULL, png), PTDP_ERR_INVALID_ARGUMENT, "log_json", "plot_log(NULL log)");
    EXPECT(ptdp_plot_log(log_path, NULL), PTDP_ERR_INVALID_ARGUMENT, "png", "plot_log(NULL png)");
  }

  /* A step makes the gathered values stale: they must be gathered again. */
  EXPECT_OK(ptdp_trainer_step(t, NULL), "pipeline step 3");
  EXPECT(ptdp_trainer_world_rank_get(t, 1, "step_seconds", &v), PTDP_ERR_WRONG_STATE,
         "not been gathered", "world_rank_get after a later step");
  EXPECT_OK(ptdp_trainer_gather_reports(t), "gather_reports after step 3");
  EXPECT_OK(ptdp_trainer_world_rank_get(t, 1, "pp_rank", &v), "world_rank_get pp_rank");
  CHECK(v == 1, "world rank 1 is pipeline stage 1");

  ptdp_trainer_destroy(t);
}

/* ptdp_checkpoint_export_safetensors_dtype: NULL and "f32" write what the
 * float32 export wrote; bf16 and f16 half its data, with their dtype in the
 * header; anything else is refused with the allowed names. */
static void test_export_dtypes(const char *dir, const char *f32_path) {
  char path[4096];
  size_t f32_size = 0, size = 0, f32_data, data;
  const char *header;
  unsigned char *f32 = read_whole(f32_path, &f32_size), *bytes;
  const char *dtypes[2] = {"bf16", "f16"}, *names[2] = {"\"dtype\":\"BF16\"", "\"dtype\":\"F16\""};
  int i;
  CHECK(f32 != NULL && f32_size > 8, "read the float32 export");
  f32_data = safetensors_data_size(f32, f32_size, &header);
  CHECK(f32_data > 0 && strstr(header, "\"dtype\":\"F32\"") != NULL, "the float32 export says F32");
  tmp_path(path, sizeof path, "capi_export_dtype.safetensors");
  EXPECT_OK(ptdp_checkpoint_export_safetensors_dtype(dir, path, NULL), "export dtype NULL");
  bytes = read_whole(path, &size);
  CHECK(bytes && size == f32_size && memcmp(bytes, f32, size) == 0, "dtype NULL is float32");
  free(bytes);
  EXPECT_OK(ptdp_checkpoint_export_safetensors_dtype(dir, path, "f32"), "export dtype f32");
  bytes = read_whole(path, &size);
  CHECK(bytes && size == f32_size && memcmp(bytes, f32, size) == 0, "dtype f32 is float32");
  free(bytes);
  for (i = 0; i < 2; i++) {
    char what[128];
    snprintf(what, sizeof what, "export dtype %s", dtypes[i]);
    EXPECT_OK(ptdp_checkpoint_export_safetensors_dtype(dir, path, dtypes[i]), what);
    bytes = read_whole(path, &size);
    CHECK(bytes != NULL, "read the 16-bit export");
    data = safetensors_data_size(bytes, size, &header);
    CHECK(data * 2 == f32_data, "a 16-bit export holds half the bytes of data");
    CHECK(strstr(header, names[i]) != NULL && strstr(header, "\"F32\"") == NULL,
          "every tensor of the 16-bit export has its dtype");
    free(bytes);
  }
  free(f32);
  tmp_path(path, sizeof path, "capi_export_int8.safetensors");
  EXPECT(ptdp_checkpoint_export_safetensors_dtype(dir, path, "int8"), PTDP_ERR_BAD_VALUE,
         "allowed: f32, bf16, f16", "export dtype int8");
  CHECK(fopen(path, "rb") == NULL, "a refused export writes no file");
  EXPECT(ptdp_checkpoint_export_safetensors_dtype(NULL, path, "bf16"), PTDP_ERR_INVALID_ARGUMENT,
         "dir", "export_safetensors_dtype(NULL dir)");
  EXPECT(ptdp_checkpoint_export_safetensors_dtype(dir, NULL, "bf16"), PTDP_ERR_INVALID_ARGUMENT,
         "out_path", "export_safetensors_dtype(NULL out_path)");
}

/* Save at (t, p) = (1, 2), resume serially: the next losses equal those of the
 * uninterrupted run (resharding is exact up to summation order; 1e-5
 * relative, as the engine's tests); then the checkpoint tools. */
static void test_checkpoints(const char *data_path) {
  ptdp_config *c = tiny_config(data_path);
  ptdp_trainer *a = NULL, *b = NULL;
  static char text[1 << 16];
  char dir[4096], out[4096];
  size_t len = 0;
  double la = 0, lb = 0, it = 0;
  int k;
  printf("-- checkpoints: save, load into another layout, inspect, verify, export\n");
  tmp_path(dir, sizeof dir, "capi_checkpoints");
  tmp_path(out, sizeof out, "capi_export.safetensors");
  EXPECT_OK(ptdp_config_set_int(c, "pipeline_model_parallel_size", 2), "set p 2");
  EXPECT_OK(ptdp_trainer_create(c, &a), "create at p = 2");
  EXPECT_OK(ptdp_trainer_step(a, NULL), "step 1");
  EXPECT_OK(ptdp_trainer_save(a, dir), "save");
  EXPECT_OK(ptdp_trainer_get_text(a, "last_checkpoint", text, sizeof text, &len),
            "get_text last_checkpoint");
  CHECK(strstr(text, "iter_0000001") != NULL, "last_checkpoint names iter_0000001");
  EXPECT_OK(ptdp_config_set_int(c, "pipeline_model_parallel_size", 1), "set p 1");
  EXPECT_OK(ptdp_trainer_create(c, &b), "create serial");
  EXPECT_OK(ptdp_trainer_load(b, dir), "load into the serial layout");
  /* The model the load would take, told before a load: "" for the same model
   * in another layout, the load's words for another one. */
  EXPECT_OK(ptdp_config_model_differences(c, dir, text, sizeof text, &len), "model_differences");
  CHECK(len == 0 && text[0] == '\0', "model_differences of the same model is empty");
  EXPECT_OK(ptdp_config_set_int(c, "num_layers", 4), "set num_layers 4");
  EXPECT_OK(ptdp_config_model_differences(c, dir, text, sizeof text, &len), "model_differences");
  CHECK(strstr(text, "num_layers: checkpoint 2, this run 4") != NULL,
        "model_differences names the layers");
  EXPECT_OK(ptdp_config_set_int(c, "num_layers", 2), "set num_layers back");
  EXPECT(ptdp_config_model_differences((const ptdp_config *)b, dir, text, sizeof text, &len),
         PTDP_ERR_INVALID_ARGUMENT, "config", "model_differences of a trainer handle");
  EXPECT(ptdp_config_model_differences(c, "/nonexistent/ptdp", text, sizeof text, &len), PTDP_ERR_IO,
         "no checkpoint to open", "model_differences of a missing checkpoint");
  { /* A checkpoint the load refuses (its model.h5 cut short) is refused here
     * too, as is the model taken from it: "" promised a load that fails. */
    char h5[4096 + 64], saved[4096 + 64];
    FILE *f;
    snprintf(h5, sizeof h5, "%s/iter_0000001/model.h5", dir);
    snprintf(saved, sizeof saved, "%s/iter_0000001/model.h5.whole", dir);
    CHECK(rename(h5, saved) == 0, "move model.h5 aside");
    f = fopen(h5, "wb");
    CHECK(f != NULL && fwrite("HDF", 1, 3, f) == 3 && fclose(f) == 0, "write a cut-short model.h5");
    EXPECT(ptdp_config_model_differences(c, dir, text, sizeof text, &len), PTDP_ERR_CORRUPT_DATA,
           "bytes but the manifest says", "model_differences of a checkpoint with a cut-short model.h5");
    EXPECT(ptdp_config_set_model_from_checkpoint(c, dir), PTDP_ERR_CORRUPT_DATA,
           "bytes but the manifest says", "set_model_from_checkpoint of a cut-short model.h5");
    CHECK(rename(saved, h5) == 0, "put model.h5 back");
  }
  EXPECT_OK(ptdp_trainer_get(b, "iteration", &it), "get iteration after load");
  CHECK(it == 1, "the loaded iteration is 1");
  EXPECT_OK(ptdp_trainer_get_text(b, "loaded_checkpoint", text, sizeof text, &len),
            "get_text loaded_checkpoint");
  CHECK(strstr(text, "saved with (t=1, p=2, d=1, v=1)") != NULL, "the load names the saved layout");
  /* A load sets the iteration but runs no step: the last step's values, log
   * line and rank reports do not exist yet (they read as zeros before), also
   * for a trainer that had stepped before it loaded. */
  EXPECT(ptdp_trainer_log_line(b, text, sizeof text, &len), PTDP_ERR_WRONG_STATE,
         "before the first", "log_line after a load, before a step");
  EXPECT(ptdp_trainer_log_json(b, text, sizeof text, &len), PTDP_ERR_WRONG_STATE,
         "before the first", "log_json after a load, before a step");
  EXPECT(ptdp_trainer_rank_get(b, 0, "step_seconds", &it), PTDP_ERR_WRONG_STATE,
         "before the first", "rank_get step_seconds after a load, before a step");
  EXPECT(ptdp_trainer_gather_reports(b), PTDP_ERR_WRONG_STATE, "before the first",
         "gather_reports after a load, before a step");
  EXPECT_OK(ptdp_trainer_load(a, dir), "load into the trainer that saved it");
  EXPECT(ptdp_trainer_log_line(a, text, sizeof text, &len), PTDP_ERR_WRONG_STATE,
         "before the first", "log_line of a stepped trainer after a load");
  EXPECT_OK(ptdp_trainer_get(b, "iteration", &it), "get iteration after load");
  for (k = 0; k < 2; k++) {
    EXPECT_OK(ptdp_trainer_step(a, &la), "step the saved trainer");
    EXPECT_OK(ptdp_trainer_step(b, &lb), "step the loaded trainer");
    CHECK(fabs(la - lb) <= 1e-5 * fabs(la), "resumed losses equal the uninterrupted run's");
  }
  EXPECT(ptdp_trainer_get_text(b, "no_such_text", text, sizeof text, &len),
         PTDP_ERR_INVALID_ARGUMENT, "loaded_checkpoint", "get_text of an unknown name");
  EXPECT(ptdp_trainer_load(b, "/nonexistent/ptdp"), PTDP_ERR_IO, "no checkpoint to open",
         "load from a missing directory");
  { /* A path the system refuses (a name past NAME_MAX) is an I/O error naming it, not an
     * internal one. */
    char long_name[4096];
    size_t at = strlen(dir);
    memcpy(long_name, dir, at);
    long_name[at++] = '/';
    memset(long_name + at, 'x', 300);
    strcpy(long_name + at + 300, ".safetensors");
    EXPECT(ptdp_checkpoint_import_safetensors(long_name, NULL, out), PTDP_ERR_IO,
           "File name too long", "import_safetensors from a name too long");
  }
  { /* A script's message quoting a name stays one printable line, as the engine's do. */
    static const char name[] = "a\nb\t\0c\xff";
    EXPECT_OK(ptdp_one_line_text(name, sizeof name - 1, text, sizeof text, &len), "one_line_text");
    CHECK(strcmp(text, "a\\x0Ab\\x09\\x00c\\xFF") == 0 && len == strlen(text),
          "one_line_text escapes line breaks, tabs, NUL and ill-formed bytes");
    EXPECT(ptdp_one_line_text(NULL, 0, text, sizeof text, &len), PTDP_ERR_INVALID_ARGUMENT, "text",
           "one_line_text(NULL)");
  }
  {
    int32_t same = 0;
    EXPECT(ptdp_same_output("", "", &same), PTDP_ERR_INVALID_ARGUMENT, "empty path",
           "same_output of two empty paths");
  }
  EXPECT(ptdp_trainer_save(NULL, dir), PTDP_ERR_INVALID_ARGUMENT, "trainer", "save(NULL)");
  EXPECT(ptdp_trainer_load(b, NULL), PTDP_ERR_INVALID_ARGUMENT, "dir", "load(NULL dir)");

  EXPECT_OK(ptdp_checkpoint_inspect(dir, text, sizeof text, &len), "checkpoint_inspect");
  CHECK(strstr(text, "/model/wte.weight") != NULL, "inspect lists /model/wte.weight");
  EXPECT_OK(ptdp_checkpoint_verify(dir, text, sizeof text, &len), "checkpoint_verify");
  EXPECT(ptdp_checkpoint_inspect(dir, text, 4, &len), PTDP_ERR_BUFFER_TOO_SMALL, NULL,
         "inspect into a 4-byte buffer");
  CHECK(len > 4, "the needed size is returned");
  EXPECT_OK(ptdp_checkpoint_export_safetensors(dir, out), "export_safetensors");
  test_export_dtypes(dir, out);
  EXPECT(ptdp_checkpoint_verify("/nonexistent/ptdp", text, sizeof text, &len), PTDP_ERR_IO,
         "no checkpoint to open", "verify of a missing directory");
  {  /* A report quotes a file's bytes as \xNN, never raw: a tracker of two ill-formed bytes */
    char tracker[4096 + 16];
    snprintf(tracker, sizeof tracker, "%s/latest", dir);
    char was[256] = "";
    FILE *f = fopen(tracker, "rb");
    if (f) {
      size_t got = fread(was, 1, sizeof was - 1, f);
      was[got] = 0;
      fclose(f);
    }
    f = fopen(tracker, "wb");
    CHECK(f != NULL, "open the tracker");
    if (f) {
      fputs("\xff\xfe\n", f);
      fclose(f);
    }
    EXPECT_OK(ptdp_checkpoint_inspect(dir, text, sizeof text, &len), "inspect with a stale tracker");
    CHECK(strstr(text, "it holds '\\xFF\\xFE'") != NULL, "inspect shows the tracker's bytes as \\xNN");
    EXPECT_OK(ptdp_checkpoint_verify(dir, text, sizeof text, &len), "verify with a stale tracker");
    CHECK(strstr(text, "\xff") == NULL, "verify prints no raw byte 0xFF");
    f = fopen(tracker, "wb");  /* as it was, for the next run of this test */
    if (f) {
      fputs(was, f);
      fclose(f);
    }
  }
  ptdp_trainer_destroy(a);
  ptdp_trainer_destroy(b);
  ptdp_config_destroy(c);
}

int main(int argc, char **argv) {
  const char *corpus;
  char data_path[4096];
  const char *inputs[1];
  int64_t docs = -1, tokens = -1;
  if (argc != 3) {
    fprintf(stderr, "usage: %s CORPUS.txt TMPDIR\n", argv[0]);
    return 2;
  }
  corpus = argv[1];
  g_tmpdir = argv[2];
  setvbuf(stdout, NULL, _IOLBF, 0);

  test_status_strings();

  printf("-- tokenize\n");
  tmp_path(data_path, sizeof data_path, "capi_test.ptdp");
  inputs[0] = corpus;
  EXPECT_OK(ptdp_tokenize(inputs, 1, "lines", "byte", data_path, &docs, &tokens),
            "tokenize the corpus");
  printf("     %lld documents, %lld tokens\n", (long long)docs, (long long)tokens);
  CHECK(docs >= 100, "the corpus has at least 100 lines");
  CHECK(tokens > docs * 10, "the corpus has tokens");
  EXPECT_OK(ptdp_tokenize(inputs, 1, "lines", "byte", data_path, NULL, NULL),
            "tokenize again with NULL counts (overwrites)");

  test_null_arguments(corpus, data_path);
  test_options();
  test_bad_configs(corpus, data_path);
  test_bad_handles(data_path);
  test_training(data_path);
  test_pipeline(data_path);
  test_checkpoints(data_path);

  printf("PASS: %d checks\n", g_checks);
  return 0;
}
