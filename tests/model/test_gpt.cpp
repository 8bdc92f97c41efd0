// The whole model in double precision: gradients against central finite
// differences, and the loss against a plain unfused reference written here.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <string>

#include "engine/comm/thread_comm.h"
#include "engine/core/status.h"
#include "engine/model/gpt.h"
#include "tests/support/tiny_model.h"

using ptdp::GPT;
using ptdp::GptConfig;
using ptdp::StepContext;

namespace {

GptConfig tiny_config() {
  GptConfig c = tiny_gpt(2, 8, 2, 11, 5);  // vocabulary padded to 16
  c.ffn_hidden_size = 12;
  c.max_position_embeddings = 7;
  c.attention_dropout = 0.3f;
  c.init_method_std = 0.3f;
  return c;
}

struct Batch {
  int s = 5, b = 3;
  std::vector<int32_t> tokens, targets;
  explicit Batch(int vocab) {
    std::mt19937 rng(7);
    for (int i = 0; i < s * b; i++) {
      tokens.push_back((int32_t)(rng() % vocab));
      targets.push_back((int32_t)(rng() % vocab));
    }
  }
};

// ---- straightforward reference: per sample, per position, no fusion ----
double ref_gelu(double z) {
  return 0.5 * z * (1 + std::tanh(0.7978845608028654 * (z + 0.044715 * z * z * z)));
}

std::vector<double> ref_layernorm(const std::vector<double> &x, const double *w, const double *b,
                                  double eps) {
  double m = 0, v = 0;
  for (double e : x) m += e;
  m /= x.size();
  for (double e : x) v += (e - m) * (e - m);
  v /= x.size();
  std::vector<double> y(x.size());
  for (size_t j = 0; j < x.size(); j++) y[j] = (x[j] - m) / std::sqrt(v + eps) * w[j] + b[j];
  return y;
}

// y = W x + bias, W: [out, in]
std::vector<double> ref_linear(const std::vector<double> &x, const double *W, const double *bias,
                               int out) {
  std::vector<double> y(out);
  for (int o = 0; o < out; o++) {
    double acc = bias ? bias[o] : 0;
    for (size_t i = 0; i < x.size(); i++) acc += W[o * x.size() + i] * x[i];
    y[o] = acc;
  }
  return y;
}

std::vector<double> ref_rmsnorm(const std::vector<double> &x, const double *w, double eps) {
  double ms = 0;
  for (double e : x) ms += e * e;
  ms /= x.size();
  std::vector<double> y(x.size());
  for (size_t j = 0; j < x.size(); j++) y[j] = x[j] / std::sqrt(ms + eps) * w[j];
  return y;
}

// Rotary embedding of one head vector at position t, rotate-half form, the
// angles in fp32 as transformers' LlamaRotaryEmbedding makes them.
void ref_rope(double *v, int hd, int t, double base) {
  const int half = hd / 2;
  for (int d = 0; d < half; d++) {
    const float inv = 1.f / std::pow((float)base, (float)(2 * d) / (float)hd);
    const float angle = (float)t * inv;
    const double c = (float)std::cos((double)angle), sn = (float)std::sin((double)angle);
    const double a = v[d], e = v[d + half];
    v[d] = a * c - e * sn;
    v[d + half] = a * sn + e * c;
  }
}

double reference_loss(GPT<double> &model, const Batch &bt) {
  const GptConfig &c = model.config();
  const int h = c.hidden_size, a = c.num_attention_heads, hd = h / a, f = c.ffn();
  const int G = c.query_groups(), r = a / G;  // query heads per key/value head
  auto P = [&](const std::string &n) { return model.params() + model.param(n).offset; };
  auto Popt = [&](const std::string &n) -> const double * {
    const ptdp::ParamInfo *p = model.find_param(n);
    return p ? model.params() + p->offset : nullptr;
  };
  auto norm = [&](const std::vector<double> &x, const std::string &name) {
    return c.rms_norm() ? ref_rmsnorm(x, P(name + ".weight"), c.layernorm_epsilon)
                        : ref_layernorm(x, P(name + ".weight"), P(name + ".bias"), c.layernorm_epsilon);
  };
  double total = 0;
  for (int bi = 0; bi < bt.b; bi++) {
    // x[t] for t < s
    std::vector<std::vector<double>> x(bt.s, std::vector<double>(h));
    for (int t = 0; t < bt.s; t++)
      for (int j = 0; j < h; j++)
        x[t][j] = P("wte.weight")[bt.tokens[t * bt.b + bi] * h + j] +
                  (c.rope() ? 0.0 : P("wpe.weight")[t * h + j]);
    for (int l = 0; l < c.num_layers; l++) {
      std::string pre = "h." + std::to_string(l) + ".";
      // q per query head; k, v per group.
      std::vector<std::vector<double>> q(bt.s), k(bt.s), v(bt.s);
      for (int t = 0; t < bt.s; t++) {
        auto ln = norm(x[t], pre + "ln_1");
        auto qkv = ref_linear(ln, P(pre + "attn.c_attn.weight"), Popt(pre + "attn.c_attn.bias"),
                              (int)c.qkv_rows());
        // output features ordered [group][r queries | key | value][hd]
        for (int hh = 0; hh < a; hh++)
          for (int d = 0; d < hd; d++) q[t].push_back(qkv[((hh / r) * (r + 2) + hh % r) * hd + d]);
        for (int g = 0; g < G; g++)
          for (int d = 0; d < hd; d++) {
            k[t].push_back(qkv[(g * (r + 2) + r) * hd + d]);
            v[t].push_back(qkv[(g * (r + 2) + r + 1) * hd + d]);
          }
        if (c.rope()) {
          for (int hh = 0; hh < a; hh++) ref_rope(&q[t][hh * hd], hd, t, c.rotary_base);
          for (int g = 0; g < G; g++) ref_rope(&k[t][g * hd], hd, t, c.rotary_base);
        }
      }
      for (int t = 0; t < bt.s; t++) {
        std::vector<double> ctx(h, 0.0);
        for (int hh = 0; hh < a; hh++) {
          const int g = hh / r;
          std::vector<double> sc(t + 1);
          double mx = -1e300;
          for (int u = 0; u <= t; u++) {
            double d = 0;
            for (int e = 0; e < hd; e++) d += q[t][hh * hd + e] * k[u][g * hd + e];
            sc[u] = d / std::sqrt((double)hd);
            mx = std::max(mx, sc[u]);
          }
          double z = 0;
          for (double &e : sc) z += (e = std::exp(e - mx));
          for (int u = 0; u <= t; u++)
            for (int e = 0; e < hd; e++) ctx[hh * hd + e] += sc[u] / z * v[u][g * hd + e];
        }
        auto o = ref_linear(ctx, P(pre + "attn.c_proj.weight"), Popt(pre + "attn.c_proj.bias"), h);
        for (int j = 0; j < h; j++) x[t][j] += o[j];
        auto ln2 = norm(x[t], pre + "ln_2");
        std::vector<double> hid;
        if (c.swiglu) {
          // The biases [gate; up], one [2, f] tensor (none without linear biases).
          const double *gate_up_b = Popt(pre + "mlp.gate_up_proj.bias");
          auto gate = ref_linear(ln2, P(pre + "mlp.gate_proj.weight"), gate_up_b, f);
          auto up = ref_linear(ln2, P(pre + "mlp.up_proj.weight"), gate_up_b ? gate_up_b + f : nullptr, f);
          for (int j = 0; j < f; j++) hid.push_back(gate[j] / (1 + std::exp(-gate[j])) * up[j]);
        } else {
          hid = ref_linear(ln2, P(pre + "mlp.c_fc.weight"), Popt(pre + "mlp.c_fc.bias"), f);
          for (double &e : hid) e = ref_gelu(e);
        }
        auto m = ref_linear(hid, P(pre + "mlp.c_proj.weight"), Popt(pre + "mlp.c_proj.bias"), h);
        for (int j = 0; j < h; j++) x[t][j] += m[j];
      }
    }
    for (int t = 0; t < bt.s; t++) {
      auto y = norm(x[t], "ln_f");
      const double *W = P(c.tied() ? "wte.weight" : "lm_head.weight");
      auto logits = ref_linear(y, W, nullptr, c.vocab_size);  // real vocab only
      double mx = -1e300, z = 0;
      for (double e : logits) mx = std::max(mx, e);
      for (double e : logits) z += std::exp(e - mx);
      total += std::log(z) + mx - logits[bt.targets[t * bt.b + bi]];
    }
  }
  return total / (bt.s * bt.b);
}

// The LLaMA family's block in a tiny model: RMSNorm, rotary positions (a base
// other than 10000), 4 query heads over 2 key/value heads, SwiGLU, an untied
// head, no linear biases but QKV's (Qwen2's shape).
GptConfig llama_config() {
  GptConfig c = tiny_config();
  c.hidden_size = 16;
  c.num_attention_heads = 4;  // head dim 4
  c = with_llama_block(c, 500.f, 2, c.ffn_hidden_size);
  c.layernorm_epsilon = 1e-6f;
  return c;
}

}  // namespace

TEST(Gpt, LossMatchesUnfusedReference) {
  GptConfig c = tiny_config();
  GPT<double> model(c, 42);
  Batch bt(c.vocab_size);
  double loss = model.forward(bt.tokens.data(), bt.targets.data(), bt.s, bt.b, StepContext{false, 0, 0});
  double ref = reference_loss(model, bt);
  // Same math in double, different summation order: agreement to ~1e-13 relative.
  EXPECT_NEAR(loss, ref, 1e-12 * std::abs(ref));
  EXPECT_GT(loss, 1.0);  // not a degenerate model
}

void check_gradients_against_finite_differences(bool flash, GptConfig c = tiny_config()) {
  GPT<double> model(c, 3);
  model.set_flash_attention(flash);
  Batch bt(c.vocab_size);
  // Dropout on: the masks are a pure function of (seed, iteration, site, index),
  // so every forward below sees the same masks and the loss is a smooth function.
  const StepContext ctx{true, 5, 100};
  const int N = bt.s * bt.b;
  for (size_t i = 0; i < model.num_params(); i++) model.grads()[i] = 0;
  model.forward(bt.tokens.data(), bt.targets.data(), bt.s, bt.b, ctx);
  model.backward(1.0 / N);  // gradient of the mean loss

  std::mt19937 rng(11);
  int checked = 0;
  for (const auto &p : model.param_table()) {
    // Every tensor, several elements each (all of them for the small ones).
    int samples = p.numel <= 16 ? (int)p.numel : 12;
    for (int k = 0; k < samples; k++) {
      size_t i = p.numel <= 16 ? (size_t)k : rng() % p.numel;
      if (p.vocab_rows && i >= (size_t)c.vocab_size * c.hidden_size) continue;
      double *w = model.params() + p.offset + i;
      const double eps = 1e-5, orig = *w;
      *w = orig + eps;
      double lp = model.forward(bt.tokens.data(), bt.targets.data(), bt.s, bt.b, ctx);
      *w = orig - eps;
      double lm = model.forward(bt.tokens.data(), bt.targets.data(), bt.s, bt.b, ctx);
      *w = orig;
      double fd = (lp - lm) / (2 * eps);
      double g = model.grads()[p.offset + i];
      // Central differences: truncation O(eps^2) ~ 1e-10, rounding ~1e-16/eps ~ 1e-11.
      EXPECT_NEAR(g, fd, 1e-8 + 1e-6 * std::abs(fd)) << p.name << "[" << i << "]";
      checked++;
    }
  }
  EXPECT_GT(checked, 150);
}

TEST(Gpt, GradientsMatchFiniteDifferences) { check_gradients_against_finite_differences(false); }

// The LLaMA block against the same plain reference, and its gradients (the
// inverse rotation, GQA's summed key/value gradients, SwiGLU, RMSNorm, the
// untied head) against finite differences.
TEST(Gpt, LlamaBlockLossMatchesUnfusedReference) {
  GptConfig c = llama_config();
  GPT<double> model(c, 42);
  EXPECT_EQ(model.find_param("wpe.weight"), nullptr);  // rotary: no learned positions
  EXPECT_EQ(model.find_param("h.0.ln_1.bias"), nullptr);
  EXPECT_EQ(model.find_param("h.0.attn.c_proj.bias"), nullptr);
  ASSERT_NE(model.find_param("h.0.attn.c_attn.bias"), nullptr);
  EXPECT_EQ(model.param("h.0.attn.c_attn.weight").global_shape,
            (std::vector<int64_t>{(4 + 2 * 2) * 4, 16}));
  int64_t counted = 0;
  for (const auto &p : model.param_table())
    counted += p.vocab_rows ? (int64_t)c.vocab_size * c.hidden_size : (int64_t)p.numel;
  EXPECT_EQ(model.num_real_params(), counted);
  Batch bt(c.vocab_size);
  double loss = model.forward(bt.tokens.data(), bt.targets.data(), bt.s, bt.b, StepContext{false, 0, 0});
  double ref = reference_loss(model, bt);
  EXPECT_NEAR(loss, ref, 1e-12 * std::abs(ref));
  EXPECT_GT(loss, 1.0);
  // Each option alone against the reference too (the others at GPT-2's).
  for (int option = 0; option < 7; option++) {
    GptConfig one = tiny_config();
    one.hidden_size = 16;
    one.num_attention_heads = 4;
    if (option == 0) one.normalization = GptConfig::RMSNorm;
    if (option == 1) one.position_embedding_type = GptConfig::Rope;
    if (option == 2) one.num_query_groups = 1;  // multi-query attention
    if (option == 3) one.swiglu = one.disable_bias_linear = 1;
    if (option == 4) one.untie_embeddings_and_output_weights = 1;
    if (option == 5) one.disable_bias_linear = 1;
    if (option == 6) one.swiglu = 1;  // with every linear bias, SwiGLU's gate and up too
    GPT<double> m(one, 7);
    if (option == 6)  // biases start at zero: give them values, so that each must be added right
      for (const auto &p : m.param_table())
        if (p.name.size() > 5 && p.name.compare(p.name.size() - 5, 5, ".bias") == 0)
          for (size_t i = 0; i < p.numel; i++) m.params()[p.offset + i] = 0.1 * std::sin(1.0 + i + p.offset);
    const double l = m.forward(bt.tokens.data(), bt.targets.data(), bt.s, bt.b, StepContext{false, 0, 0});
    const double want = reference_loss(m, bt);
    EXPECT_NEAR(l, want, 1e-12 * std::abs(want)) << "option " << option;
  }
}

TEST(Gpt, LlamaBlockGradientsMatchFiniteDifferences) {
  check_gradients_against_finite_differences(false, llama_config());
  // Every linear layer with its bias (LLaMA's attention_bias and mlp_bias).
  GptConfig biased = llama_config();
  biased.disable_bias_linear = 0;
  check_gradients_against_finite_differences(false, biased);
}

// Fused attention with rotary positions and grouped-query attention: a
// group's key and value read by its heads, their gradients summed; and
// multi-query attention (one group).
TEST(Gpt, LlamaBlockFlashGradientsMatchFiniteDifferences) {
  check_gradients_against_finite_differences(true, llama_config());
  GptConfig mqa = llama_config();
  mqa.num_query_groups = 1;
  check_gradients_against_finite_differences(true, mqa);
}

// The fused attention's backward (probabilities recomputed from the row
// log-sum-exp, dropout drawn again) against finite differences too.
TEST(Gpt, FlashAttentionGradientsMatchFiniteDifferences) {
  check_gradients_against_finite_differences(true);
}

// Fused and unfused attention compute the same function with the same dropout
// masks: in double they agree to rounding, and the fused one stashes no
// [b, a, s, s] probabilities. GPT-2's block, and the LLaMA block with 2 and 1
// key/value groups for 4 heads.
void check_flash_equals_unfused(const GptConfig &c) {
  GPT<double> plain(c, 9), flash(c, 9);
  flash.set_flash_attention(true);
  Batch bt(c.vocab_size);
  const StepContext ctx{true, 2, 40};
  const int N = bt.s * bt.b;
  const double l0 = plain.forward(bt.tokens.data(), bt.targets.data(), bt.s, bt.b, ctx);
  const double l1 = flash.forward(bt.tokens.data(), bt.targets.data(), bt.s, bt.b, ctx);
  EXPECT_NEAR(l1, l0, 1e-13 * l0);
  EXPECT_LT(flash.stashed_bytes(), plain.stashed_bytes());
  plain.backward(1.0 / N);
  flash.backward(1.0 / N);
  double worst = 0, largest = 0;
  for (size_t i = 0; i < plain.num_params(); i++) {
    worst = std::max(worst, std::abs(flash.grads()[i] - plain.grads()[i]));
    largest = std::max(largest, std::abs(plain.grads()[i]));
  }
  EXPECT_LT(worst, 1e-12 * largest) << "largest gradient " << largest;
  EXPECT_GT(largest, 1e-3);
  // Not between a forward and its backward (the stash holds one kind).
  flash.forward(bt.tokens.data(), bt.targets.data(), bt.s, bt.b, ctx);
  EXPECT_THROW(flash.set_flash_attention(false), ptdp::Error);
}

TEST(Gpt, FlashAttentionEqualsUnfusedInDouble) {
  check_flash_equals_unfused(tiny_config());
  GptConfig grouped = llama_config();
  check_flash_equals_unfused(grouped);
  grouped.num_query_groups = 1;
  check_flash_equals_unfused(grouped);
}

TEST(Gpt, PaddedVocabularyRowsStayZeroAndGetNoGradient) {
  GptConfig c = tiny_config();
  GPT<double> model(c, 1);
  Batch bt(c.vocab_size);
  const auto &wte = model.param("wte.weight");
  for (size_t i = 0; i < model.num_params(); i++) model.grads()[i] = 0;
  model.forward(bt.tokens.data(), bt.targets.data(), bt.s, bt.b, StepContext{true, 1, 0});
  model.backward(1.0);
  for (size_t i = (size_t)c.vocab_size * c.hidden_size; i < wte.numel; i++) {
    EXPECT_EQ(model.params()[wte.offset + i], 0.0);
    EXPECT_EQ(model.grads()[wte.offset + i], 0.0);
  }
}

TEST(Gpt, InitIsAFunctionOfTheSeed) {
  GptConfig c = tiny_config();
  GPT<float> a(c, 9), b(c, 9), d(c, 10);
  size_t differ = 0;
  for (size_t i = 0; i < a.num_params(); i++) {
    ASSERT_EQ(a.params()[i], b.params()[i]);
    differ += a.params()[i] != d.params()[i];
  }
  EXPECT_GT(differ, a.num_params() / 2);
  // Output projections are scaled by 1/sqrt(2 L) (Megatron's scaled init).
  auto rms = [&](const char *n) {
    const auto &p = a.param(n);
    double s = 0;
    for (size_t i = 0; i < p.numel; i++) s += a.params()[p.offset + i] * a.params()[p.offset + i];
    return std::sqrt(s / p.numel);
  };
  EXPECT_NEAR(rms("h.0.mlp.c_fc.weight"), c.init_method_std, 0.1 * c.init_method_std);
  EXPECT_NEAR(rms("h.0.mlp.c_proj.weight"), c.init_method_std / 2, 0.1 * c.init_method_std);
}

TEST(Gpt, RejectsBadInputs) {
  GptConfig c = tiny_config();
  GPT<float> model(c, 1);
  std::vector<int32_t> toks(8 * 1, 1), bad(8 * 1, 1);
  bad[3] = c.vocab_size;  // a padding id is not a token
  try {
    model.forward(bad.data(), nullptr, 8, 1, StepContext{false, 0, 0});
    FAIL() << "sequence longer than max positions accepted";
  } catch (const ptdp::Error &e) {
    EXPECT_NE(std::string(e.what()).find("max_position_embeddings"), std::string::npos);
  }
  try {
    model.forward(bad.data(), nullptr, 4, 1, StepContext{false, 0, 0});
    FAIL() << "token outside the vocabulary accepted";
  } catch (const ptdp::Error &e) {
    EXPECT_NE(std::string(e.what()).find("outside the vocabulary"), std::string::npos);
  }
  EXPECT_THROW(model.backward(1.f), ptdp::Error);  // no training forward before
  GptConfig bad_heads = c;
  bad_heads.num_attention_heads = 3;
  EXPECT_THROW(GPT<float>(bad_heads, 1), ptdp::Error);
  // Attention dropout is drawn in 8 bits: a rate it cannot come within 1/512
  // of is refused, not rounded silently (0.1 is drawn as 26/256: accepted).
  for (float p : {0.001f, 0.999f}) {
    GptConfig d = c;
    d.attention_dropout = p;
    try {
      d.validate(1);
      FAIL() << "attention_dropout " << p << " accepted";
    } catch (const ptdp::Error &e) {
      EXPECT_NE(std::string(e.what()).find("attention dropout is drawn in 8 bits"), std::string::npos)
          << e.what();
    }
  }
  for (float p : {0.f, 0.00196f, 0.1f, 0.5f, 0.998f}) {
    GptConfig d = c;
    d.attention_dropout = p;
    EXPECT_NO_THROW(d.validate(1)) << p;
  }
}

// The op profile times every op and changes nothing: the same loss and
// gradients bit for bit, each op counted as often as the model calls it.
TEST(Gpt, OpProfileCountsEveryOpAndChangesNothing) {
  GptConfig c = tiny_config();
  GPT<float> plain(c, 9), profiled(c, 9);
  profiled.set_op_profiling(true);
  Batch bt(c.vocab_size);
  const StepContext ctx{true, 2, 40};
  const double l0 = plain.forward(bt.tokens.data(), bt.targets.data(), bt.s, bt.b, ctx);
  const double l1 = profiled.forward(bt.tokens.data(), bt.targets.data(), bt.s, bt.b, ctx);
  EXPECT_EQ(l0, l1);
  plain.backward(1.f / 15);
  profiled.backward(1.f / 15);
  for (size_t i = 0; i < plain.num_params(); i++) ASSERT_EQ(plain.grads()[i], profiled.grads()[i]);

  const std::vector<ptdp::OpTime> rows = profiled.take_op_profile();
  std::map<std::string, ptdp::OpTime> by_op;
  double gemm_flops = 0;
  for (const ptdp::OpTime &r : rows) {
    by_op[r.op] = r;
    EXPECT_GE(r.ms, 0.0) << r.op;
    if (r.op.rfind("gemm ", 0) == 0) gemm_flops += r.flops;
  }
  for (size_t i = 1; i < rows.size(); i++) EXPECT_GE(rows[i - 1].ms, rows[i].ms);  // slowest first
  // Two layernorms per layer and the final one, forward and backward.
  EXPECT_EQ(by_op["layernorm_forward"].calls, 2 * c.num_layers + 1);
  EXPECT_EQ(by_op["layernorm_backward"].calls, 2 * c.num_layers + 1);
  EXPECT_EQ(by_op["bias_gelu_forward"].calls, c.num_layers);
  // Forward GEMMs alone: qkv, proj, fc1, fc2 per layer and the logits, 2 N k n each.
  const double N = bt.s * bt.b, h = c.hidden_size, f = c.ffn_hidden_size;
  const double forward_flops = 2 * N * (c.num_layers * (3 * h * h + h * h + 2 * h * f) + h * 16);
  EXPECT_GT(gemm_flops, 2.9 * forward_flops);  // with the backward's two per forward one
  const std::string table = ptdp::format_op_profile(rows);
  EXPECT_NE(table.find("layernorm_forward"), std::string::npos);
  EXPECT_NE(table.find("total"), std::string::npos);

  EXPECT_TRUE(profiled.take_op_profile().empty());  // taken: the sums start again
  profiled.set_op_profiling(false);
  profiled.forward(bt.tokens.data(), bt.targets.data(), bt.s, bt.b, ctx);
  profiled.backward(1.f / 15);
  EXPECT_TRUE(profiled.take_op_profile().empty());
}

// Every initial value is the named stream's normal at the element's global
// index (the pairwise draw of init_parameters is only a shortcut): on a tensor
// rank whose column shards start at odd global columns too.
TEST(Gpt, InitIsTheNormalAtEachGlobalIndex) {
  GptConfig c = tiny_config();
  c.hidden_size = 6;  // heads of 3: shards of 3 columns, odd starts
  c.ffn_hidden_size = 10;
  const uint64_t seed = 21;
  ptdp::ThreadWorld world(2, 60);
  for (int rank = 0; rank < 2; rank++) {
    const auto tp = world.group("tp", {0, 1}, rank);  // the init draws without it
    GPT<double> m(c, seed, ptdp::TensorParallel{rank, 2, tp.get()});
    const double std_out = c.init_method_std / std::sqrt(2.0 * c.num_layers);
    for (const ptdp::ParamInfo &p : m.param_table()) {
      const std::string &n = p.name;
      if (n.find("ln_") != std::string::npos || (n.size() > 5 && n.substr(n.size() - 5) == ".bias"))
        continue;
      const double sd = n.find("c_proj.weight") != std::string::npos ? std_out : c.init_method_std;
      for (size_t i = 0; i < p.numel; i++) {
        const int64_t g = m.global_index(p, i);
        const bool padding = n == "wte.weight" && g >= (int64_t)c.vocab_size * c.hidden_size;
        const double want = padding ? 0.0 : sd * ptdp::normal_at(seed, ptdp::fnv1a64(n), (uint64_t)g);
        ASSERT_EQ(m.params()[p.offset + i], want) << n << " element " << i << " rank " << rank;
      }
    }
  }
}

// The engine's count of the LLaMA family's published models, exactly: LLaMA 2
// 7B (6,738,415,616) and LLaMA 3 8B (8 key/value heads; 8,030,261,248).
TEST(Gpt, LlamaParameterCountsArePublishedOnes) {
  struct Case {
    int groups, ffn, vocab;
    int64_t published;
  };
  for (const Case c : {Case{32, 11008, 32000, 6738415616}, Case{8, 14336, 128256, 8030261248}}) {
    GptConfig g;
    g.num_layers = 32;
    g.hidden_size = 4096;
    g.num_attention_heads = 32;
    g.num_query_groups = c.groups;
    g.ffn_hidden_size = c.ffn;
    g.vocab_size = c.vocab;
    g.seq_length = 4096;
    g.normalization = GptConfig::RMSNorm;
    g.position_embedding_type = GptConfig::Rope;
    g.swiglu = g.untie_embeddings_and_output_weights = g.disable_bias_linear = 1;
    EXPECT_NO_THROW(g.validate(8));
    EXPECT_EQ(g.num_params(), c.published);
    int64_t table = 0;  // the parameter table (t = 1) holds as many, padding aside
    for (const ptdp::ParamInfo &p : ptdp::gpt_param_table(g, 1, {}))
      table += p.vocab_rows ? (int64_t)g.vocab_size * g.hidden_size : (int64_t)p.numel;
    EXPECT_EQ(table, c.published);
  }
}

// Incremental decoding with the KV cache: a prompt, then one token at a time,
// gives the logits of the whole sequence's forward at every new position
// (double: the same products summed in the same order up to the softmax's
// length; agreement to 1e-12 relative). GPT-2's block (learned positions) and
// the LLaMA block (rope, 2 and 1 key/value groups), fused attention on too
// (decoding itself runs the unfused core); b = 3 sequences at once.
void check_kv_cache_decoding(const GptConfig &c, bool flash) {
  SCOPED_TRACE(std::string(c.rope() ? "rope" : "learned positions") + ", groups " +
               std::to_string(c.query_groups()) + (flash ? ", flash" : ""));
  GPT<double> full(c, 4), inc(c, 4);
  full.set_flash_attention(flash);
  inc.set_flash_attention(flash);
  const int b = 3, n = c.max_positions(), prompt = 3, Vl = full.local_vocab();
  std::mt19937 rng(3);
  std::vector<int32_t> tokens((size_t)n * b);  // [s, b]
  for (auto &t : tokens) t = (int32_t)(rng() % c.vocab_size);
  StepContext eval{false, 0, 0};
  full.forward(tokens.data(), nullptr, n, b, eval);
  const std::vector<double> want = full.logits_to_host(0, n * b);
  StepContext ctx = eval;
  ctx.kv_cache = true;
  inc.forward(tokens.data(), nullptr, prompt, b, ctx);
  double worst = 0, largest = 0;
  auto compare = [&](const std::vector<double> &got, int pos, int rows) {
    for (int i = 0; i < rows * b; i++)
      for (int v = 0; v < inc.local_real_vocab(); v++) {
        const double w = want[((size_t)pos * b + i) * Vl + v];
        worst = std::max(worst, std::abs(got[(size_t)i * Vl + v] - w));
        largest = std::max(largest, std::abs(w));
      }
  };
  compare(inc.logits_to_host(0, prompt * b), 0, prompt);
  for (int pos = prompt; pos < n; pos++) {
    ctx.first_position = pos;
    inc.forward(tokens.data() + (size_t)pos * b, nullptr, 1, b, ctx);
    compare(inc.logits_to_host(0, b), pos, 1);
  }
  EXPECT_LT(worst, 1e-12 * largest);
  EXPECT_GT(largest, 1e-2);
  // A step that does not continue at the cache's end, two tokens after the
  // prompt, a training forward with the cache: refused, naming the cache.
  ctx.first_position = 2;
  EXPECT_THROW(inc.forward(tokens.data(), nullptr, 1, b, ctx), ptdp::Error);
  ctx.first_position = n;
  EXPECT_THROW(inc.forward(tokens.data(), nullptr, 2, b, ctx), ptdp::Error);
  ctx.training = true;
  ctx.first_position = 0;
  EXPECT_THROW(inc.forward(tokens.data(), tokens.data(), 1, b, ctx), ptdp::Error);
}

TEST(Gpt, KvCacheDecodingEqualsTheWholeForward) {
  check_kv_cache_decoding(tiny_config(), false);
  check_kv_cache_decoding(tiny_config(), true);
  GptConfig llama = llama_config();
  check_kv_cache_decoding(llama, false);
  check_kv_cache_decoding(llama, true);
  llama.num_query_groups = 1;
  check_kv_cache_decoding(llama, false);
}
