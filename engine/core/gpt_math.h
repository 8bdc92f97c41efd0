// The arithmetic of a GPT's shape that both the engine and the planner need,
// in one place: the padded vocabulary and the training FLOPs (Narayanan et al.,
// SC '21, eq. 3, without the f = 4h simplification).
#pragma once
#include <cstdint>

namespace ptdp {

// The vocabulary padded to a multiple of `multiple` (make_vocab_size_divisible_by
// times t), so every tensor rank holds the same number of rows.
inline int64_t padded_vocab_size(int64_t vocab, int64_t multiple) {
  return (vocab + multiple - 1) / multiple * multiple;
}

// Forward FLOPs of one transformer layer over B samples of s tokens: the QKV
// GEMM 2Bsh qkv (qkv = 3h without grouped-query attention), the projection
// 2Bsh^2, the MLP 2Bsh f per matrix (2 matrices; SwiGLU's 3), scores and
// context 4Bs^2h.
inline double layer_forward_flops(double B, double s, double h, double f, double qkv,
                                  double mlp_matrices) {
  return 2 * B * s * h * (qkv + h + mlp_matrices * f) + 4 * B * s * s * h;
}
inline double layer_forward_flops(double B, double s, double h, double f) {
  return layer_forward_flops(B, s, h, f, 3 * h, 2);
}
// The LM head's forward over V vocabulary columns: 2BshV.
inline double logits_forward_flops(double B, double s, double h, double V) {
  return 2 * B * s * h * V;
}
// One training iteration: the layers' forward once, backward twice as much,
// one more forward with full recomputation (recomputed_forwards = 1), plus
// extra (selective recomputation's attention).
inline double training_flops(double B, double s, double h, double f, double V, double layers,
                             int recomputed_forwards, double extra = 0, double qkv = 0,
                             double mlp_matrices = 2) {
  if (qkv == 0) qkv = 3 * h;
  return (3.0 + recomputed_forwards) * layers *
             layer_forward_flops(B, s, h, f, qkv, mlp_matrices) +
         3.0 * logits_forward_flops(B, s, h, V) + extra;
}

}  // namespace ptdp
