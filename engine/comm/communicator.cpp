#include "engine/comm/communicator.h"

#include "engine/core/status.h"
#include "engine/trace/timeline.h"

#include <algorithm>
#include <chrono>

namespace ptdp {

const char *comm_op_name(CommOp op) {
  switch (op) {
    case CommOp::all_reduce: return "all_reduce";
    case CommOp::all_gather: return "all_gather";
    case CommOp::reduce_scatter: return "reduce_scatter";
    case CommOp::broadcast: return "broadcast";
    case CommOp::send: return "send";
    case CommOp::recv: return "recv";
    case CommOp::barrier: return "barrier";
    case CommOp::count: break;
  }
  return "?";
}

static int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
CommTimer::CommTimer(CommStats &s) : s_(s), start_ns_(now_ns()) {}
CommTimer::~CommTimer() {
  const int64_t end = now_ns();
  s_.seconds += (double)(end - start_ns_) * 1e-9;
  if (s_.timeline && s_.timeline->enabled()) {
    const char *op = comm_op_name(s_.last_op);
    const bool p2p = s_.last_op == CommOp::send || s_.last_op == CommOp::recv;
    s_.timeline->add(Span{op, p2p ? op : "comm", start_ns_, end, -1, -1, s_.group, s_.last_bytes});
  }
}

size_t Communicator::elem_size(DType dt, CommOp op) const {
  switch (dt) {
    case DType::f32:
    case DType::f64:
    case DType::bf16:
    case DType::f16: return dtype_size(dt);
  }
  fail(Status::invalid_argument, "group '", name_, "': ", comm_op_name(op), " with dtype ",
       (int)dt, ", which is none of f32, f64, bf16, f16");
}

DType Communicator::check_16bit(DType dt, CommOp op) const {
  if (dt != DType::bf16 && dt != DType::f16)
    fail(Status::invalid_argument, "group '", name_, "': ", comm_op_name(op),
         " of a uint16_t buffer needs dtype bf16 or f16, got ", dtype_name(dt));
  return dt;
}

namespace {

// Storage type S, accumulator type A: f32/f64 accumulate in themselves,
// bf16/f16 in fp32 and are rounded once when the block is written back.
struct F32 {
  using S = float;
  using A = float;
  static A load(S x) { return x; }
  static S store(A x) { return x; }
};
struct F64 {
  using S = double;
  using A = double;
  static A load(S x) { return x; }
  static S store(A x) { return x; }
};
struct BF16 {
  using S = uint16_t;
  using A = float;
  static A load(S x) { return bf16_to_float(x); }
  static S store(A x) { return float_to_bf16(x); }
};
struct F16 {
  using S = uint16_t;
  using A = float;
  static A load(S x) { return f16_to_float(x); }
  static S store(A x) { return float_to_f16(x); }
};

// Blocks of kBlock elements: member after member over one block (streams that
// vectorise), and every input of a block is read before the block's output is
// written, so `out` may be one of the inputs. Each element still sees the
// members in order 0, 1, 2, ...
template <class T, bool kMax>
void reduce_blocks(const void *const *in, int count, void *out, size_t n) {
  using S = typename T::S;
  using A = typename T::A;
  constexpr size_t kBlock = 512;
  A acc[kBlock];
  for (size_t lo = 0; lo < n; lo += kBlock) {
    const size_t m = std::min(kBlock, n - lo);
    const S *x = static_cast<const S *>(in[0]) + lo;
    for (size_t k = 0; k < m; k++) acc[k] = T::load(x[k]);
    for (int r = 1; r < count; r++) {
      x = static_cast<const S *>(in[r]) + lo;
      for (size_t k = 0; k < m; k++) {
        const A v = T::load(x[k]);
        if (kMax)
          acc[k] = v > acc[k] ? v : acc[k];
        else
          acc[k] += v;
      }
    }
    S *y = static_cast<S *>(out) + lo;
    for (size_t k = 0; k < m; k++) y[k] = T::store(acc[k]);
  }
}

template <class T>
void reduce_typed(const void *const *in, int count, void *out, size_t n, ReduceOp op) {
  if (op == ReduceOp::max)
    reduce_blocks<T, true>(in, count, out, n);
  else
    reduce_blocks<T, false>(in, count, out, n);
}

}  // namespace

void reduce_in_order(const void *const *in, int count, void *out, size_t n, DType dt,
                     ReduceOp op) {
  switch (dt) {
    case DType::f32: return reduce_typed<F32>(in, count, out, n, op);
    case DType::f64: return reduce_typed<F64>(in, count, out, n, op);
    case DType::bf16: return reduce_typed<BF16>(in, count, out, n, op);
    case DType::f16: return reduce_typed<F16>(in, count, out, n, op);
  }
  fail(Status::invalid_argument, "reduce_in_order: dtype ", (int)dt, " is none of f32, f64, bf16, f16");
}

}  // namespace ptdp
