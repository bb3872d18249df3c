// Array forms of half.h's 16-bit conversions, shared by the extensions. The dtype is chosen
// outside each loop, so every loop vectorises, and each function is cloned per instruction
// set (simd.h).
#pragma once

#include "half.h"
#include "simd.h"

#include <cstdint>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#endif

namespace accel {
namespace {

// Portable loops (the compiler vectorises them for each instruction set).
[[maybe_unused]] ACCEL_SIMD_CLONES void to_f32_portable(const uint16_t* __restrict in,
                                                        float* __restrict out, int64_t n,
                                                        int dtype) {
  if (dtype == kBFloat16) {
    for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_float(in[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = half_to_float(in[i]);
  }
}

[[maybe_unused]] ACCEL_SIMD_CLONES void from_f32_portable(const float* __restrict in,
                                                          uint16_t* __restrict out, int64_t n,
                                                          int dtype) {
  if (dtype == kBFloat16) {
    for (int64_t i = 0; i < n; ++i) out[i] = float_to_bf16(in[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = float_to_half(in[i]);
  }
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
// IEEE half through the CPU's own conversion instructions (AVX-512F, or F16C on AVX2
// machines): one instruction per 16 or 8 elements where the portable bit arithmetic takes
// a dozen. Both directions are exact
// or round to nearest even and keep subnormals and infinities, as half.h does (tested over
// every bit pattern); a NaN keeps its sign and leading payload bits, quieted. (The maskz
// forms with an all-ones mask: gcc 12 warns that the plain forms' undefined source may be
// used uninitialised.)
__attribute__((target("avx512f"))) inline void half_to_f32_avx512(const uint16_t* in, float* out,
                                                                   int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(out + i, _mm512_maskz_cvtph_ps(0xffff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i))));
  for (; i < n; ++i) out[i] = half_to_float(in[i]);
}

__attribute__((target("avx512f"))) inline void f32_to_half_avx512(const float* in, uint16_t* out,
                                                                   int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                        _mm512_maskz_cvtps_ph(0xffff, _mm512_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < n; ++i) out[i] = float_to_half(in[i]);
}

__attribute__((target("avx,f16c"))) inline void half_to_f32_f16c(const uint16_t* in, float* out,
                                                                  int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  for (; i < n; ++i) out[i] = half_to_float(in[i]);
}

__attribute__((target("avx,f16c"))) inline void f32_to_half_f16c(const float* in, uint16_t* out,
                                                                  int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < n; ++i) out[i] = float_to_half(in[i]);
}

// 2: AVX-512F, 1: F16C, 0: neither (decided once per process).
inline int half_instructions() {
  static const int level = __builtin_cpu_supports("avx512f") ? 2 : (__builtin_cpu_supports("f16c") ? 1 : 0);
  return level;
}
#endif

// out[i] = float(in[i]) for a kBFloat16 or kFloat16 buffer.
[[maybe_unused]] inline void to_f32(const uint16_t* __restrict in, float* __restrict out, int64_t n,
                                    int dtype) {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  if (dtype == kFloat16 && half_instructions() == 2) return half_to_f32_avx512(in, out, n);
  if (dtype == kFloat16 && half_instructions() == 1) return half_to_f32_f16c(in, out, n);
#endif
  to_f32_portable(in, out, n, dtype);
}

// out[i] = in[i] rounded to nearest even in kBFloat16 or kFloat16.
[[maybe_unused]] inline void from_f32(const float* __restrict in, uint16_t* __restrict out, int64_t n,
                                      int dtype) {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  if (dtype == kFloat16 && half_instructions() == 2) return f32_to_half_avx512(in, out, n);
  if (dtype == kFloat16 && half_instructions() == 1) return f32_to_half_f16c(in, out, n);
#endif
  from_f32_portable(in, out, n, dtype);
}

}  // namespace
}  // namespace accel
