#include "engine/core/dtype.h"

#include <immintrin.h>

namespace ptdp {

bool parse_dtype(const std::string &s, DType *out) {
  if (s == "f32" || s == "fp32" || s == "float32") *out = DType::f32;
  else if (s == "bf16" || s == "bfloat16") *out = DType::bf16;
  else if (s == "f16" || s == "fp16" || s == "float16") *out = DType::f16;
  else if (s == "f64" || s == "fp64" || s == "float64") *out = DType::f64;
  else return false;
  return true;
}

namespace {
// Eight floats at a time; the scalar functions above are the reference (the
// unit test checks every bf16 and f16 value and the ties between them).
void round_bf16(float *x, size_t n) {
  size_t i = 0;
#ifdef __AVX2__
  const __m256i lsb = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff);
  const __m256i keep = _mm256_set1_epi32((int)0xffff0000u), quiet = _mm256_set1_epi32(0x400000);
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    __m256i u = _mm256_castps_si256(v);
    __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(bias, _mm256_and_si256(_mm256_srli_epi32(u, 16), lsb)));
    r = _mm256_and_si256(r, keep);
    // NaN stays NaN (quieted), as float_to_bf16.
    __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    __m256i q = _mm256_and_si256(_mm256_or_si256(u, quiet), keep);
    r = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(r), _mm256_castsi256_ps(q), nan));
    _mm256_storeu_ps(x + i, _mm256_castsi256_ps(r));
  }
#endif
  for (; i < n; i++) x[i] = bf16_to_float(float_to_bf16(x[i]));
}

void round_f16(float *x, size_t n) {
  size_t i = 0;
#ifdef __F16C__
  // The F16C conversion rounds to nearest even, with subnormals and overflow to inf.
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(x + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i),
                                                            _MM_FROUND_TO_NEAREST_INT)));
#endif
  for (; i < n; i++) x[i] = f16_to_float(float_to_f16(x[i]));
}

// f(begin, end) over [0, n) in chunks of 2^16 elements (multiples of 8), on
// the OpenMP threads when there are several chunks.
template <class F>
void in_chunks(size_t n, F f) {
  const size_t chunk = 1 << 16;
#pragma omp parallel for schedule(static) if (n > 2 * chunk)
  for (size_t c = 0; c < n; c += chunk) f(c, n - c < chunk ? n : c + chunk);
}
}  // namespace

void round_to(DType t, float *x, size_t n) {
  if (t != DType::bf16 && t != DType::f16) return;
  in_chunks(n, [&](size_t b, size_t e) {
    if (t == DType::bf16)
      round_bf16(x + b, e - b);
    else
      round_f16(x + b, e - b);
  });
}

void to_16bit(DType t, const float *in, uint16_t *out, size_t n) {
  in_chunks(n, [&](size_t b, size_t e) {
    size_t i = b;
#if defined(__AVX2__) && defined(__F16C__)
    // Eight at a time, as round_bf16 / round_f16 round (the scalar loop is the
    // reference; a NaN stays a NaN).
    const __m256i lsb = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff);
    const __m256i quiet = _mm256_set1_epi32(0x400000);
    for (; i + 8 <= e; i += 8) {
      const __m256 v = _mm256_loadu_ps(in + i);
      __m128i h;
      if (t == DType::bf16) {
        const __m256i u = _mm256_castps_si256(v);
        __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(bias, _mm256_and_si256(_mm256_srli_epi32(u, 16), lsb)));
        const __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
        r = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(r),
                                                 _mm256_castsi256_ps(_mm256_or_si256(u, quiet)), nan));
        r = _mm256_srli_epi32(r, 16);
        // packus works per 128-bit lane: gather the two lanes' halves.
        r = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
        h = _mm256_castsi256_si128(r);
      } else {
        h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
      }
      _mm_storeu_si128(reinterpret_cast<__m128i *>(out + i), h);
    }
#endif
    if (t == DType::bf16)
      for (; i < e; i++) out[i] = float_to_bf16(in[i]);
    else
      for (; i < e; i++) out[i] = float_to_f16(in[i]);
  });
}

void from_16bit(DType t, const uint16_t *in, float *out, size_t n) {
  in_chunks(n, [&](size_t b, size_t e) {
    size_t i = b;
#if defined(__AVX2__) && defined(__F16C__)
    for (; i + 8 <= e; i += 8) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i *>(in + i));
      const __m256 v = t == DType::bf16
                           ? _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
                           : _mm256_cvtph_ps(h);
      _mm256_storeu_ps(out + i, v);
    }
#endif
    if (t == DType::bf16)
      for (; i < e; i++) out[i] = bf16_to_float(in[i]);
    else
      for (; i < e; i++) out[i] = f16_to_float(in[i]);
  });
}

}  // namespace ptdp
