/* test_capi_step_tokens — ptdp_trainer_step_tokens from plain C99.
 *
 *   test_capi_step_tokens TMPDIR
 *
 * Every sample of a dataset made of one repeated line is the same 17 ids, so
 * the caller knows exactly what the dataset gives: fed those ids, a trainer
 * must make the dataset's run bit for bit (serial and t = p = d = 2, dropout
 * on). Bad batches give PTDP_ERR_INVALID_ARGUMENT and change nothing.
 * Prints each check; exits 1 at the first failure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The deprecated functions are still part of the ABI and tested. */
#define PTDP_ALLOW_DEPRECATED
#include "capi/ptdp_tools.h"

#define SEQ 16
#define BATCH 8
#define COUNT (BATCH * (SEQ + 1))

static void check(int cond, const char *what) {
  if (!cond) {
    fprintf(stderr, "FAIL %s\n     ptdp_last_error(): \"%s\"\n", what, ptdp_last_error());
    exit(1);
  }
  printf("ok   %s\n", what);
}

/* The call failed with INVALID_ARGUMENT and a message holding `needle`. */
static void check_invalid(ptdp_status st, const char *needle, const char *what) {
  check(st == PTDP_ERR_INVALID_ARGUMENT && strstr(ptdp_last_error(), needle) != NULL, what);
  printf("     -> %s\n", ptdp_last_error());
}

static double get(const ptdp_trainer *t, const char *name) {
  double v = -1;
  check(ptdp_trainer_get(t, name, &v) == PTDP_OK, name);
  return v;
}

static ptdp_trainer *make_trainer(const char *data_path, int t, int p, int d) {
  ptdp_config *c = NULL;
  ptdp_trainer *tr = NULL;
  int ok = ptdp_config_create(&c) == PTDP_OK;
  ok = ok && ptdp_config_set_int(c, "num_layers", 2) == PTDP_OK;
  ok = ok && ptdp_config_set_int(c, "hidden_size", 32) == PTDP_OK;
  ok = ok && ptdp_config_set_int(c, "num_attention_heads", 4) == PTDP_OK;
  ok = ok && ptdp_config_set_int(c, "seq_length", SEQ) == PTDP_OK;
  ok = ok && ptdp_config_set_int(c, "micro_batch_size", 2) == PTDP_OK;
  ok = ok && ptdp_config_set_int(c, "global_batch_size", BATCH) == PTDP_OK;
  ok = ok && ptdp_config_set_int(c, "lr_warmup_iters", 1) == PTDP_OK;
  ok = ok && ptdp_config_set_double(c, "hidden_dropout", 0.1) == PTDP_OK;
  ok = ok && ptdp_config_set_double(c, "attention_dropout", 0.1) == PTDP_OK;
  ok = ok && ptdp_config_set_int(c, "num_threads", 1) == PTDP_OK;
  ok = ok && ptdp_config_set_int(c, "tensor_model_parallel_size", t) == PTDP_OK;
  ok = ok && ptdp_config_set_int(c, "pipeline_model_parallel_size", p) == PTDP_OK;
  ok = ok && ptdp_config_set_int(c, "data_parallel_size", d) == PTDP_OK;
  ok = ok && ptdp_config_set(c, "data_path", data_path) == PTDP_OK;
  ok = ok && ptdp_trainer_create(c, &tr) == PTDP_OK;
  ptdp_config_destroy(c);
  check(ok && tr != NULL, "trainer created");
  return tr;
}

/* Three steps from the dataset and three from the caller's ids: equal losses,
 * gradient norms and sample counts. */
static void check_same_run(const char *data_path, const int32_t *ids, int t, int p, int d) {
  ptdp_trainer *data = make_trainer(data_path, t, p, d), *fed = make_trainer(data_path, t, p, d);
  int k;
  printf("-- layout t=%d p=%d d=%d\n", t, p, d);
  for (k = 0; k < 3; k++) {
    double a = 0, b = 0;
    check(ptdp_trainer_step(data, &a) == PTDP_OK, "dataset step");
    check(ptdp_trainer_step_tokens(fed, ids, COUNT, &b) == PTDP_OK, "step on the caller's ids");
    printf("     loss %.17g (dataset) %.17g (caller)\n", a, b);
    check(a == b, "the same loss, bit for bit");
    check(get(data, "grad_norm") == get(fed, "grad_norm"), "the same gradient norm");
    check(get(fed, "consumed_samples") == (k + 1) * BATCH, "consumed samples advance by the batch");
  }
  ptdp_trainer_destroy(data);
  ptdp_trainer_destroy(fed);
}

int main(int argc, char **argv) {
  char corpus[1024], data_path[1024];
  const char *inputs[1];
  int32_t ids[COUNT], bad[COUNT];
  ptdp_trainer *tr;
  double loss = 0;
  FILE *f;
  int i;
  if (argc != 2) {
    fprintf(stderr, "usage: %s TMPDIR\n", argv[0]);
    return 2;
  }
  /* 14 letters, the newline and the end-of-document token: 16 ids per
   * document, so every window of 17 ids is the same. */
  snprintf(corpus, sizeof corpus, "%s/periodic.txt", argv[1]);
  snprintf(data_path, sizeof data_path, "%s/periodic.ptdp", argv[1]);
  f = fopen(corpus, "w");
  check(f != NULL, "corpus written");
  for (i = 0; i < 200; i++) fputs("abcdefghijklmn\n", f);
  fclose(f);
  inputs[0] = corpus;
  check(ptdp_tokenize(inputs, 1, "lines", "byte", data_path, NULL, NULL) == PTDP_OK, "tokenized");
  for (i = 0; i < COUNT; i++) {
    const int k = i % (SEQ + 1);
    ids[i] = k < 14 ? 'a' + k : k == 14 ? '\n' : k == 15 ? 256 : 'a';
  }

  check_same_run(data_path, ids, 1, 1, 1);
  check_same_run(data_path, ids, 2, 2, 2);

  printf("-- bad batches\n");
  tr = make_trainer(data_path, 1, 1, 2);
  check(ptdp_trainer_step_tokens(tr, ids, COUNT, NULL) == PTDP_OK, "a step with loss NULL");
  check_invalid(ptdp_trainer_step_tokens(NULL, ids, COUNT, &loss), "trainer", "NULL trainer");
  check_invalid(ptdp_trainer_step_tokens(tr, NULL, COUNT, &loss), "got NULL", "NULL ids");
  check_invalid(ptdp_trainer_step_tokens(tr, ids, COUNT - 1, &loss),
                "global_batch_size x (seq_length + 1) = 8 x 17 = 136 token ids, got 135",
                "one id short");
  check_invalid(ptdp_trainer_step_tokens(tr, ids, 0, &loss), "got 0", "no ids");
  memcpy(bad, ids, sizeof bad);
  bad[40] = 257;
  check_invalid(ptdp_trainer_step_tokens(tr, bad, COUNT, &loss),
                "token id 257 at index 40 (sequence 2, position 6) is outside the vocabulary [0, 257)",
                "an id past the vocabulary");
  bad[40] = -5;
  check_invalid(ptdp_trainer_step_tokens(tr, bad, COUNT, &loss), "token id -5 at index 40",
                "a negative id");
  check(get(tr, "iteration") == 1 && get(tr, "consumed_samples") == BATCH,
        "refused batches change neither the iteration nor the consumed samples");
  check(ptdp_trainer_step_tokens(tr, ids, COUNT, &loss) == PTDP_OK && get(tr, "iteration") == 2,
        "the trainer goes on after refused batches");
  ptdp_trainer_destroy(tr);
  printf("test_capi_step_tokens: PASS\n");
  return 0;
}
