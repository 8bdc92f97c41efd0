// Shared by the CPU kernel tests (tests/kernels, one file per op): inputs,
// finite differences and tolerances.
//
// Every backward is checked against central finite differences of its own
// forward, in double precision, through the scalar objective L = sum(out * R)
// with a fixed random R (so dL/dout = R is what the backward receives).
#pragma once
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "engine/core/status.h"
#include "kernels/kernels.h"

namespace ptdp::cpu {

using Vec = std::vector<double>;

// Deterministic inputs, magnitudes in [0.2, 1] with random sign: never zero, so
// no term of a gradient vanishes by accident. Built from raw mt19937_64 output
// (std distributions differ between standard libraries).
struct Rng {
  std::mt19937_64 g;
  explicit Rng(uint64_t seed) : g(seed) {}
  double uniform() { return (double)(g() >> 11) * 0x1p-53; }  // [0, 1)
  double nonzero() {
    double m = 0.2 + 0.8 * uniform();
    return (g() & 1) ? -m : m;
  }
  Vec vec(size_t n) {
    Vec v(n);
    for (auto &x : v) x = nonzero();
    return v;
  }
};

inline double dot(const Vec &a, const Vec &b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); i++) s += a[i] * b[i];
  return s;
}

// dloss/dx by central differences; x is perturbed one element at a time and
// restored. `loss` must recompute the forward from the current inputs.
template <class F>
Vec numeric_grad(Vec &x, F loss) {
  const double eps = 1e-6;
  Vec g(x.size());
  for (size_t i = 0; i < x.size(); i++) {
    const double saved = x[i];
    // volatile: with -ffp-contract=fast (GCC's default, -mfma builds) an inlined
    // `dloss * L` could fuse into `lp - lm` and turn an exact 0 into rounding noise.
    x[i] = saved + eps;
    volatile double lp = loss();
    x[i] = saved - eps;
    volatile double lm = loss();
    x[i] = saved;
    g[i] = (lp - lm) / (2 * eps);
  }
  return g;
}

// Relative error in the max norm: max|a - n| / max(|a|, |n|). Per-element
// relative error is meaningless where a component is ~0 (GeLU' crosses zero).
inline double rel_err(const Vec &a, const Vec &n) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); i++) {
    diff = std::max(diff, std::fabs(a[i] - n[i]));
    scale = std::max(scale, std::max(std::fabs(a[i]), std::fabs(n[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

// Tolerance for FD checks. In double with eps = 1e-6 the truncation error is
// O(eps^2) ~ 1e-12 and the rounding error ~ ulp(L)/eps ~ 1e-10 relative, both
// far below 1e-6; a wrong or missing term in a backward gives O(1e-2..1) error.
constexpr double kFdTol = 1e-6;

inline DropoutSpec make_spec(float p, uint32_t iteration = 3, uint32_t sample_offset = 0) {
  DropoutSpec d;
  d.key = DropoutKey{0x0123456789abcdefull, 0x5eed1234u, iteration};
  d.p = p;
  d.sample_offset = sample_offset;
  return d;
}

// Restores the OpenMP thread count on scope exit: later tests must not inherit ours.
struct ThreadGuard {
  int saved = omp_get_max_threads();
  ~ThreadGuard() { omp_set_num_threads(saved); }
};

}  // namespace ptdp::cpu
