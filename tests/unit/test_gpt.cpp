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

using ptdp::GPT;
using ptdp::GptConfig;
using ptdp::StepContext;

namespace {

GptConfig tiny_config() {
  GptConfig c;
  c.num_layers = 2;
  c.hidden_size = 8;
  c.num_attention_heads = 2;
  c.ffn_hidden_size = 12;
  c.vocab_size = 11;
  c.make_vocab_size_divisible_by = 8;  // padded to 16: padding must stay out of the loss
  c.seq_length = 5;
  c.max_position_embeddings = 7;
  c.hidden_dropout = 0.2f;
  c.attention_dropout = 0.3f;
  c.init_method_std = 0.3f;  // large enough that attention is far from uniform
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

double reference_loss(GPT<double> &model, const Batch &bt) {
  const GptConfig &c = model.config();
  const int h = c.hidden_size, a = c.num_attention_heads, hd = h / a, f = c.ffn();
  auto P = [&](const std::string &n) { return model.params() + model.param(n).offset; };
  double total = 0;
  for (int bi = 0; bi < bt.b; bi++) {
    // x[t] for t < s
    std::vector<std::vector<double>> x(bt.s, std::vector<double>(h));
    for (int t = 0; t < bt.s; t++)
      for (int j = 0; j < h; j++)
        x[t][j] = P("wte.weight")[bt.tokens[t * bt.b + bi] * h + j] + P("wpe.weight")[t * h + j];
    for (int l = 0; l < c.num_layers; l++) {
      std::string pre = "h." + std::to_string(l) + ".";
      std::vector<std::vector<double>> q(bt.s), k(bt.s), v(bt.s);
      for (int t = 0; t < bt.s; t++) {
        auto ln = ref_layernorm(x[t], P(pre + "ln_1.weight"), P(pre + "ln_1.bias"), c.layernorm_epsilon);
        auto qkv = ref_linear(ln, P(pre + "attn.c_attn.weight"), P(pre + "attn.c_attn.bias"), 3 * h);
        // output features ordered [head][q|k|v][hd]
        for (int hh = 0; hh < a; hh++)
          for (int d = 0; d < hd; d++) {
            q[t].push_back(qkv[hh * 3 * hd + d]);
            k[t].push_back(qkv[hh * 3 * hd + hd + d]);
            v[t].push_back(qkv[hh * 3 * hd + 2 * hd + d]);
          }
      }
      for (int t = 0; t < bt.s; t++) {
        std::vector<double> ctx(h, 0.0);
        for (int hh = 0; hh < a; hh++) {
          std::vector<double> sc(t + 1);
          double mx = -1e300;
          for (int u = 0; u <= t; u++) {
            double d = 0;
            for (int e = 0; e < hd; e++) d += q[t][hh * hd + e] * k[u][hh * hd + e];
            sc[u] = d / std::sqrt((double)hd);
            mx = std::max(mx, sc[u]);
          }
          double z = 0;
          for (double &e : sc) z += (e = std::exp(e - mx));
          for (int u = 0; u <= t; u++)
            for (int e = 0; e < hd; e++) ctx[hh * hd + e] += sc[u] / z * v[u][hh * hd + e];
        }
        auto o = ref_linear(ctx, P(pre + "attn.c_proj.weight"), P(pre + "attn.c_proj.bias"), h);
        for (int j = 0; j < h; j++) x[t][j] += o[j];
        auto ln2 = ref_layernorm(x[t], P(pre + "ln_2.weight"), P(pre + "ln_2.bias"), c.layernorm_epsilon);
        auto hid = ref_linear(ln2, P(pre + "mlp.c_fc.weight"), P(pre + "mlp.c_fc.bias"), f);
        for (double &e : hid) e = ref_gelu(e);
        auto m = ref_linear(hid, P(pre + "mlp.c_proj.weight"), P(pre + "mlp.c_proj.bias"), h);
        for (int j = 0; j < h; j++) x[t][j] += m[j];
      }
    }
    for (int t = 0; t < bt.s; t++) {
      auto y = ref_layernorm(x[t], P("ln_f.weight"), P("ln_f.bias"), c.layernorm_epsilon);
      auto logits = ref_linear(y, P("wte.weight"), nullptr, c.vocab_size);  // real vocab only
      double mx = -1e300, z = 0;
      for (double e : logits) mx = std::max(mx, e);
      for (double e : logits) z += std::exp(e - mx);
      total += std::log(z) + mx - logits[bt.targets[t * bt.b + bi]];
    }
  }
  return total / (bt.s * bt.b);
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

void check_gradients_against_finite_differences(bool flash) {
  GptConfig c = tiny_config();
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
      if (p.name == "wte.weight" && i >= (size_t)c.vocab_size * c.hidden_size) continue;
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

// The fused attention's backward (probabilities recomputed from the row
// log-sum-exp, dropout drawn again) against finite differences too.
TEST(Gpt, FlashAttentionGradientsMatchFiniteDifferences) {
  check_gradients_against_finite_differences(true);
}

// Fused and unfused attention compute the same function with the same dropout
// masks: in double they agree to rounding, and the fused one stashes no
// [b, a, s, s] probabilities.
TEST(Gpt, FlashAttentionEqualsUnfusedInDouble) {
  GptConfig c = tiny_config();
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
