// Philox4x32-10 counter-based RNG (Salmon et al., SC '11). Stateless: the
// output is a pure function of (key, counter), which is what lets every
// parallel layout draw exactly the numbers of the serial run (ARCHITECTURE §3).
#pragma once
#include <cmath>
#include <cstdint>
#include <string_view>

// Callable from CUDA kernels too, so a GPU dropout mask is the CPU's bit for bit.
#ifdef __CUDACC__
#define PTDP_HOST_DEVICE __host__ __device__
#else
#define PTDP_HOST_DEVICE
#endif

namespace ptdp {

struct Philox4x32 {
  uint32_t v[4];
};

PTDP_HOST_DEVICE inline Philox4x32 philox4x32(uint32_t k0, uint32_t k1, uint32_t c0, uint32_t c1, uint32_t c2,
                             uint32_t c3) {
  const uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u;
  const uint32_t W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
  for (int r = 0; r < 10; r++) {
    uint64_t p0 = (uint64_t)M0 * c0, p1 = (uint64_t)M1 * c2;
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
    uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    c1 = (uint32_t)p1;
    c3 = (uint32_t)p0;
    c0 = n0;
    c2 = n2;
    k0 += W0;
    k1 += W1;
  }
  return {{c0, c1, c2, c3}};
}

// Uniform in (0, 1]: never 0, so log() is safe.
inline double uniform_from_u32(uint32_t x) { return ((double)x + 1.0) / 4294967296.0; }

// 64-bit FNV-1a: stable across platforms, used to key RNG streams by name.
inline uint64_t fnv1a64(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// Standard normals for elements 2k (first) and 2k + 1 (second) of the stream
// keyed by (seed, stream): one Philox call, Box-Muller.
struct NormalPair {
  double first, second;
};
inline NormalPair normal_pair_at(uint64_t seed, uint64_t stream, uint64_t pair) {
  Philox4x32 r = philox4x32((uint32_t)seed, (uint32_t)(seed >> 32), (uint32_t)pair,
                            (uint32_t)(pair >> 32), (uint32_t)stream, (uint32_t)(stream >> 32));
  double u1 = uniform_from_u32(r.v[0]), u2 = uniform_from_u32(r.v[1]);
  double rad = std::sqrt(-2.0 * std::log(u1));
  double ang = 6.283185307179586 * u2;
  return {rad * std::cos(ang), rad * std::sin(ang)};
}

// Standard normal for element `index` of that stream.
inline double normal_at(uint64_t seed, uint64_t stream, uint64_t index) {
  const NormalPair n = normal_pair_at(seed, stream, index >> 1);
  return (index & 1) ? n.second : n.first;
}

// Dropout keep-decision source: a 32-bit uniform for (seed, stream, sample, element).
// Four consecutive elements share one Philox call.
struct DropoutKey {
  uint64_t seed;
  uint32_t stream;     // hash of (iteration, layer, site)
  uint32_t iteration;
};

// The four draws of elements 4q .. 4q+3.
PTDP_HOST_DEVICE inline Philox4x32 dropout_quad(const DropoutKey &k, uint32_t sample, uint64_t quad) {
  return philox4x32((uint32_t)k.seed, (uint32_t)(k.seed >> 32), (uint32_t)quad, sample, k.stream,
                    k.iteration ^ (uint32_t)(quad >> 32));
}
PTDP_HOST_DEVICE inline uint32_t dropout_bits(const DropoutKey &k, uint32_t sample, uint64_t element) {
  return dropout_quad(k, sample, element >> 2).v[element & 3];
}

// Dropout of one site: the key, the drop probability, and the global index of
// the micro-batch's sample 0 (samples are numbered globally, ARCHITECTURE §3).
struct DropoutSpec {
  DropoutKey key;
  float p = 0.f;               // drop probability; 0 = identity
  uint32_t sample_offset = 0;  // global index of this micro-batch's sample 0
  // Hidden dropout over rows of a sequence slice (sequence parallelism): the
  // position of its first row, so the slice draws the full sequence's bits.
  uint32_t position_offset = 0;
};
PTDP_HOST_DEVICE inline bool dropout_keep(const DropoutSpec &d, uint32_t sample, uint64_t element) {
  return dropout_bits(d.key, sample, element) >= (uint32_t)(d.p * 4294967296.0);
}

// Attention-probability dropout draws 8 bits an element, 16 consecutive
// elements a Philox call (byte e % 16 of the call for e / 16, little-endian in
// v[0..3]), as FlashAttention does: a head's s*s probabilities are most of a
// step's draws, and a call for every four of them was a third of the fused
// attention's time. So its rate is p rounded to a multiple of 1/256 (0.1 is
// drawn as 26/256 = 0.1016; any p > 0 as at least 1/256, below 1 as at most
// 255/256), and the kept values scale by 1 / (1 - that rate).
PTDP_HOST_DEVICE inline uint32_t attention_drop_threshold(float p) {  // keep where byte >= it
  if (!(p > 0.f)) return 0u;
  const float t = p * 256.f + 0.5f;
  return t < 1.f ? 1u : t >= 255.f ? 255u : (uint32_t)t;
}
PTDP_HOST_DEVICE inline float attention_dropout_rate(float p) {  // the rate drawn for p
  return (float)attention_drop_threshold(p) / 256.f;
}
// The 16 draws of elements 16c .. 16c + 15.
PTDP_HOST_DEVICE inline Philox4x32 attention_draws(const DropoutKey &k, uint32_t sample, uint64_t chunk) {
  return dropout_quad(k, sample, chunk);
}
PTDP_HOST_DEVICE inline uint32_t draw_byte(const Philox4x32 &r, int e) {  // e in 0..15
  const uint32_t w = e < 4 ? r.v[0] : e < 8 ? r.v[1] : e < 12 ? r.v[2] : r.v[3];
  return (w >> (8 * (e & 3))) & 0xffu;
}
PTDP_HOST_DEVICE inline bool attention_keep(const DropoutSpec &d, uint32_t sample, uint64_t element) {
  return draw_byte(attention_draws(d.key, sample, element >> 4), (int)(element & 15)) >=
         attention_drop_threshold(d.p);
}

}  // namespace ptdp
