// Where a head's query, key and value sit in the model's fused QKV activation,
// for the fused attention kernels of both backends (one source: the CPU twin
// and the CUDA kernels must read the same columns).
//
// qkv is [s, b, groups, r + 2, hd] with r = heads / groups query heads per
// key/value group: the group's r queries, then its key, then its value
// (GPT::attention_forward's layout). groups == heads is multi-head attention,
// [s, b, heads, 3, hd]. ctx is [s, b, heads, hd]; lse and D are [b * heads, s].
// Query head h belongs to group h / r.
#pragma once
#include <cstddef>

#include "engine/core/philox.h"  // PTDP_HOST_DEVICE
#include "engine/core/status.h"

namespace ptdp {

struct QkvLayout {
  int b, heads, groups, hd;

  PTDP_HOST_DEVICE int per_group() const { return heads / groups; }
  // Row stride (one position s) of qkv and of ctx.
  PTDP_HOST_DEVICE size_t qkv_ld() const { return (size_t)b * (heads + 2 * groups) * hd; }
  PTDP_HOST_DEVICE size_t ctx_ld() const { return (size_t)b * heads * hd; }
  // Columns within a row: group g of sample bi starts at unit (bi*groups + g).
  PTDP_HOST_DEVICE size_t group_col(int unit) const { return (size_t)unit * (per_group() + 2) * hd; }
  PTDP_HOST_DEVICE size_t q_col(int bi, int head) const {
    return group_col(bi * groups + head / per_group()) + (size_t)(head % per_group()) * hd;
  }
  PTDP_HOST_DEVICE size_t k_col(int unit) const { return group_col(unit) + (size_t)per_group() * hd; }
  PTDP_HOST_DEVICE size_t v_col(int unit) const { return k_col(unit) + hd; }
  PTDP_HOST_DEVICE size_t ctx_col(int bi, int head) const { return ((size_t)bi * heads + head) * hd; }
};

// The one check of a head count and its key/value groups, for the op table
// and for the kernels called directly (tests, benchmarks).
inline void check_attention_groups(const char *op, int heads, int groups) {
  if (groups < 1 || groups > heads || heads % groups != 0)
    fail(Status::invalid_argument, op, ": ", groups, " key/value groups for ", heads,
         " heads (allowed: a divisor of heads, 1 .. ", heads, ")");
}

}  // namespace ptdp
