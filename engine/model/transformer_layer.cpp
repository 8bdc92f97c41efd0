// One pre-norm transformer layer, forward and backward: the norm, the
// column-parallel QKV GEMM (rotary positions on q and k), attention, the
// row-parallel projection (g: an all-reduce), bias+dropout+residual; then the
// MLP (GeLU or SwiGLU) the same way.
#include "engine/model/gpt_internal.h"

namespace ptdp {

using namespace gpt_detail;

// The rotary embedding of q and k in place (qkv's row: groups_ of heads_ /
// groups_ queries, a key and a value): rows (si*b + bi)*groups_ + g of
// (r + 2)*hd values, their first r + 1 vectors turned by position si.
// inverse: the backward (the transpose of a rotation is its inverse).
template <class T>
void GPT<T>::rotate_qk(Act qkv, int s, int b, bool inverse, int first_position) {
  const int hd = cfg_.head_dim(), r = heads_ / groups_;
  const size_t from = (size_t)first_position * (hd / 2);  // the tables' rows: [positions, hd/2]
  ops_->rope_rotate(qkv, rope_cos_.data() + from, rope_sin_.data() + from, s, b * groups_,
                    (r + 2) * hd, r + 1, hd, hd, inverse);
}

// One transformer layer: out = x + attention(x), then + MLP; fills a.
// With sequence parallelism x, out, mid and the norms' statistics are this
// rank's s/t rows; ln1, ln2 (the GEMMs' inputs) and the rest all N rows.
template <class T>
void GPT<T>::layer_forward(int li, CAct x, Act out, LayerActs &a, int s, int b,
                           const StepContext &ctx) {
  const int N = s * b, h = cfg_.hidden_size, w = width_, f = ffn_, q = qkv_width_;
  const int l = first_layer(li / layers_per_chunk_) + li % layers_per_chunk_;  // global
  const int s_rows = local_rows(s, b) / b;  // positions of this rank's rows
  Layer P = layer(params_.data(), li);
  DropoutSpec hid{{seed_, dropout_stream(l, kAttentionOut), ctx.iteration},
                  ctx.training ? cfg_.hidden_dropout : 0.f,
                  ctx.sample_offset, first_position(s)};
  // Attention block: mid = x + dropout(g(proj(attn(f(ln1(x))))) + proj_b)
  // (Every op stores its output in the activation type, rounded once.)
  norm_to_gemm_input(a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(), x, P.ln1_w, P.ln1_b, s,
                     b);
  // Incremental decoding writes QKV straight into its rows of the cache.
  const int pos0 = ctx.first_position;
  Act qkv = ctx.kv_cache ? kv_cache_[(size_t)li].data() + (int64_t)pos0 * b * q : a.qkv.data();
  ops_->linear_bias(N, q, h, a.ln1.data(), P.qkv_w, P.qkv_b, qkv);
  if (cfg_.rope()) rotate_qk(qkv, s, b, false, pos0);
  if (ctx.kv_cache)
    attention_decode(li, a, s, b, pos0);
  else
    attention_forward(l, a, s, b, ctx);
  ops_->gemm(false, true, N, h, w, 1, a.ctxv.data(), w, P.proj_w, w, 0, tmp_h_.data(), h);
  CAct y = reduce_row_parallel(tmp_h_.data(), s, b);  // g: row-parallel partial sums
  ops_->bias_dropout_add_forward(a.mid.data(), x, y, P.proj_b, s_rows, b, h, hid);
  // MLP block: out = mid + dropout(g(fc2(act(fc1(f(ln2(mid)))))) + fc2_b), act
  // GeLU with fc1's bias, or SwiGLU over [gate | up] (two column-parallel GEMMs
  // into one [N, 2f] array; their biases added by the SwiGLU op).
  norm_to_gemm_input(a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), a.mid.data(), P.ln2_w,
                     P.ln2_b, s, b);
  if (cfg_.swiglu) {
    ops_->gemm(false, true, N, f, h, 1, a.ln2.data(), h, P.gate_w, h, 0, a.fc1_z.data(), 2 * f);
    ops_->gemm(false, true, N, f, h, 1, a.ln2.data(), h, P.up_w, h, 0, a.fc1_z.data() + (int64_t)f,
               2 * f);
    ops_->swiglu_forward(a.fc1_z.data(), a.fc1_g.data(), a.fc1_z.data(), P.gate_up_b, N, f);
  } else {
    ops_->linear_bias_gelu(N, f, h, a.ln2.data(), P.fc1_w, P.fc1_b, a.fc1_z.data(), a.fc1_g.data());
  }
  ops_->gemm(false, true, N, h, f, 1, a.fc1_g.data(), f, P.fc2_w, f, 0, tmp_h_.data(), h);
  y = reduce_row_parallel(tmp_h_.data(), s, b);  // g
  hid.key.stream = dropout_stream(l, kMlpOut);
  ops_->bias_dropout_add_forward(out, a.mid.data(), y, P.fc2_b, s_rows, b, h, hid);
}

// dresid [N, h] (this rank's rows with sequence parallelism): in, the
// gradient of the layer's output; out, of its input x. defer (a zero-bubble
// B): the weight GEMMs' output gradients go to a's W part and
// layer_weight_grads runs the GEMMs (with the QKV and fc1 bias gradients)
// later; otherwise they run here.
template <class T>
void GPT<T>::layer_backward(int li, CAct x, LayerActs &a, Act dresid, int s, int b,
                            const StepContext &ctx, bool defer) {
  const int N = s * b, h = cfg_.hidden_size, w = width_, f = ffn_;
  const int l = first_layer(li / layers_per_chunk_) + li % layers_per_chunk_;
  const bool sp = seq_parallel(s);
  const int rows = local_rows(s, b), s_rows = rows / b;
  Layer P = layer(params_.data(), li);
  Layer G = layer(grads_.data(), li);
  if (defer) size_weight_grads(a, s, b);
  Act dln = tmp_h2_.data();
  Act dy = defer ? a.dy_mlp.data() : tmp_h_.data(), dfc = defer ? a.dfc.data() : dfc_.data();
  Act dqkv = defer ? a.dqkv.data() : dqkv_.data();
  DropoutSpec hid{{seed_, dropout_stream(l, kMlpOut), ctx.iteration},
                  ctx.training ? cfg_.hidden_dropout : 0.f,
                  ctx.sample_offset, first_position(s)};
  // The output's gradient dy of a block for all N rows: through the dropout
  // on this rank's rows, gathered along the sequence with sequence parallelism
  // (the bias gradient then sums this rank's rows: added over the ranks later).
  auto block_output_grad = [&](Act dy_all, T *dbias) {
    if (!sp) {
      ops_->bias_dropout_add_backward(dy_all, dbias, dresid, s, b, h, hid);
      return;
    }
    ops_->bias_dropout_add_backward(sp_dy_.data(), dbias, dresid, s_rows, b, h, hid);
    tp_all_gather(tp_, *ops_, sp_dy_.data(), dy_all, (size_t)rows * h);
  };

  // MLP block; the input's gradient is a partial sum over tensor ranks (f backward).
  // Activation gradients are in the activation type; the weight gradients
  // accumulate into grads() in fp32 (rounded per chunk when grads are 16-bit).
  block_output_grad(dy, G.fc2_b);
  if (cfg_.swiglu) {
    // d(silu(gate) up), then [dgate | dup].
    Act dact = dact_.data();
    ops_->gemm(false, false, N, f, h, 1, dy, h, P.fc2_w, f, 0, dact, f);
    ops_->swiglu_backward(dfc, G.gate_up_b, dact, a.fc1_z.data(), N, f);
    const CAct dup = dfc + (int64_t)f;
    ops_->gemm(false, false, N, h, f, 1, dfc, 2 * f, P.gate_w, h, 0, dln, h);
    ops_->gemm(false, false, N, h, f, 1, dup, 2 * f, P.up_w, h, 1, dln, h);
  } else {
    ops_->linear_dgelu(N, f, h, dy, P.fc2_w, a.fc1_z.data(), dfc, nullptr);  // fc1_b: with W
    ops_->gemm(false, false, N, h, f, 1, dfc, f, P.fc1_w, h, 0, dln, h);
  }
  if (!defer) mlp_weight_grads(li, a, dy, dfc, N);
  CAct dln_rows = reduce_row_parallel(dln, s, b);
  norm_backward(dresid, G.ln2_w, G.ln2_b, dln_rows, a.mid.data(), P.ln2_w, a.ln2_mean.data(),
                a.ln2_rstd.data(), rows);

  // Attention block.
  hid.key.stream = dropout_stream(l, kAttentionOut);
  if (defer) dy = a.dy_attn.data();
  block_output_grad(dy, G.proj_b);
  ops_->gemm(false, false, N, w, h, 1, dy, h, P.proj_w, w, 0, dctx_.data(), w);
  attention_backward(l, a, dqkv, s, b, ctx);
  if (cfg_.rope()) rotate_qk(dqkv, s, b, true);  // back to the unrotated q and k
  if (!defer) attention_weight_grads(li, a, dy, dqkv, N);
  ops_->gemm(false, false, N, h, qkv_width_, 1, dqkv, qkv_width_, P.qkv_w, h, 0, dln, h);
  dln_rows = reduce_row_parallel(dln, s, b);
  norm_backward(dresid, G.ln1_w, G.ln1_b, dln_rows, x, P.ln1_w, a.ln1_mean.data(),
                a.ln1_rstd.data(), rows);
}

// The MLP's weight gradients: fc2 from the GeLU/SwiGLU output, fc1 (or gate
// and up) from ln2, and fc1's bias with its weight (one pass on CUDA).
template <class T>
void GPT<T>::mlp_weight_grads(int li, const LayerActs &a, CAct dy, CAct dfc, int N) {
  const int h = cfg_.hidden_size, f = ffn_;
  Layer G = layer(grads_.data(), li);
  ops_->gemm(true, false, h, f, N, 1, dy, h, a.fc1_g.data(), f, 1, G.fc2_w, f);
  if (cfg_.swiglu) {
    ops_->gemm(true, false, f, h, N, 1, dfc, 2 * f, a.ln2.data(), h, 1, G.gate_w, h);
    ops_->gemm(true, false, f, h, N, 1, dfc + (int64_t)f, 2 * f, a.ln2.data(), h, 1, G.up_w, h);
  } else {
    ops_->linear_weight_grad(N, f, h, dfc, a.ln2.data(), G.fc1_w, G.fc1_b);
  }
}

// The attention block's: the projection from the context, QKV (and its bias)
// from ln1.
template <class T>
void GPT<T>::attention_weight_grads(int li, const LayerActs &a, CAct dy, CAct dqkv, int N) {
  const int h = cfg_.hidden_size, w = width_, q = qkv_width_;
  Layer G = layer(grads_.data(), li);
  ops_->gemm(true, false, h, w, N, 1, dy, h, a.ctxv.data(), w, 1, G.proj_w, w);
  ops_->linear_weight_grad(N, q, h, dqkv, a.ln1.data(), G.qkv_w, G.qkv_b);
}

// W of a deferred layer_backward.
template <class T>
void GPT<T>::layer_weight_grads(int li, const LayerActs &a, int s, int b) {
  const int N = s * b;
  mlp_weight_grads(li, a, a.dy_mlp.data(), a.dfc.data(), N);
  attention_weight_grads(li, a, a.dy_attn.data(), a.dqkv.data(), N);
}

template <class T>
void GPT<T>::size_weight_grads(LayerActs &a, int s, int b) {
  const size_t N = (size_t)s * b, h = cfg_.hidden_size, f = ffn_;
  a.dy_attn.resize(*dev_, N * h, act_);
  a.dy_mlp.resize(*dev_, N * h, act_);
  a.dqkv.resize(*dev_, N * qkv_width_, act_);
  a.dfc.resize(*dev_, N * f * (cfg_.swiglu ? 2 : 1), act_);
}

#define PTDP_INSTANTIATE(T)                                                        \
  template void GPT<T>::rotate_qk(Act, int, int, bool, int);                       \
  template void GPT<T>::layer_forward(int, CAct, Act, LayerActs &, int, int,   \
                                      const StepContext &);                      \
  template void GPT<T>::layer_backward(int, CAct, LayerActs &, Act, int, int,  \
                                       const StepContext &, bool);               \
  template void GPT<T>::mlp_weight_grads(int, const LayerActs &, CAct, CAct, int); \
  template void GPT<T>::attention_weight_grads(int, const LayerActs &, CAct, CAct, int); \
  template void GPT<T>::layer_weight_grads(int, const LayerActs &, int, int);    \
  template void GPT<T>::size_weight_grads(LayerActs &, int, int);
PTDP_INSTANTIATE(float)
PTDP_INSTANTIATE(double)
#undef PTDP_INSTANTIATE

}  // namespace ptdp
