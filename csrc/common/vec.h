// Float vectors for the x86-64-v4 and x86-64-v3 levels (simd.h), with bf16 and IEEE half
// loads and stores done in registers: bf16 -> float is a 16-bit shift, float -> bf16 rounds
// to nearest even with integer adds; half goes through the CPU's conversion instructions
// (AVX-512F, or F16C on AVX2 machines). Every conversion gives the bits half.h gives (tested
// over every 16-bit pattern): exact or round to nearest even, subnormals and infinities
// kept, NaN quieted with its sign and leading payload bits. (The hardware bf16 instruction
// of AVX512_BF16 is not used: it flushes subnormals to zero, which torch does not.)
//
// Kernels written against a vector type V (V::F, V::kWidth, V::add, ...) are compiled once
// per level by including them inside ACCEL_BEGIN_V4/ACCEL_END_LEVEL (or _V3) regions, where
// `#pragma GCC target` gives every function the level's instruction set (a target
// attribute on a template cannot vary with its argument).
#pragma once

#include "dtypes.h"
#include "half.h"
#include "simd.h"

#include <cstdint>
#include <cstring>
#include <type_traits>

#if ACCEL_X86_GCC

#define ACCEL_BEGIN_V4 _Pragma("GCC push_options") _Pragma("GCC target(\"arch=x86-64-v4\")")
#define ACCEL_BEGIN_V3 _Pragma("GCC push_options") _Pragma("GCC target(\"arch=x86-64-v3\")")
#define ACCEL_END_LEVEL _Pragma("GCC pop_options")

ACCEL_BEGIN_V4
namespace accel {
namespace vec {

struct Avx512 {
  using F = __m512;
  static constexpr int kWidth = 16;
  // The maskz forms with an all-ones mask throughout: gcc 12 warns that the plain forms'
  // undefined source may be used uninitialised.
  static constexpr __mmask16 kAll = 0xffff;

  static F load(const float* in) { return _mm512_loadu_ps(in); }
  static void store(float* out, F x) { _mm512_storeu_ps(out, x); }
  static F set1(float x) { return _mm512_set1_ps(x); }
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F div(F a, F b) { return _mm512_div_ps(a, b); }
  static F sqrt(F x) { return _mm512_maskz_sqrt_ps(kAll, x); }
  static F fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }    // a * b + c
  static F fnmadd(F a, F b, F c) { return _mm512_fnmadd_ps(a, b, c); }  // c - a * b

  static F load_bf16(const uint16_t* in) {
    const __m512i wide = _mm512_maskz_cvtepu16_epi32(kAll, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in)));
    return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(kAll, wide, 16));
  }
  // Each lane's bf16 rounding of x, in the lane's high 16 bits (the low 16 are garbage):
  // bits + 0x7fff, plus 1 where the lowest kept bit (bit 16) is set, so that ties go to
  // even. Right for every value but a NaN with payload bits in its low half, which the
  // carry can turn into an infinity or a zero. (A masked add in place of a shift and an
  // and: the bf16 sum of two ranks runs ~9% faster in cache, benchmarks/native_kernels.cpp.)
  static __m512i bf16_rounded_high_bits(__m512i bits) {
    const __m512i biased = _mm512_add_epi32(bits, _mm512_set1_epi32(0x7fff));
    const __mmask16 lowest_kept = _mm512_test_epi32_mask(bits, _mm512_set1_epi32(0x10000));
    return _mm512_mask_add_epi32(biased, lowest_kept, biased, _mm512_set1_epi32(1));
  }
  // The same for every value: a NaN keeps its high half, with the quiet bit set.
  static __m512i bf16_high_bits(F x) {
    const __m512i bits = _mm512_castps_si512(x);
    return _mm512_mask_or_epi32(bf16_rounded_high_bits(bits), _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), bits,
                                _mm512_set1_epi32(0x400000));
  }
  static void store_bf16(uint16_t* out, F x) {
    const __m512i rounded = _mm512_maskz_srli_epi32(kAll, bf16_high_bits(x), 16);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm512_maskz_cvtepi32_epi16(kAll, rounded));
  }
  // 2 * kWidth bf16 values as two float vectors, the even elements and the odd ones, and
  // back: for element-wise arithmetic, one load, a shift and an and, where two widening
  // loads take two shifts; and one shift and a blend, where two narrowing stores take two.
  // store_bf16_pair takes results of arithmetic on bf16 values only: such a NaN has a zero
  // low half (the operand's payload, quieted, or the default NaN), so plain rounding keeps
  // it (see bf16_rounded_high_bits).
  static void load_bf16_pair(const uint16_t* in, F& even, F& odd) {
    const __m512i x = _mm512_loadu_si512(in);
    even = _mm512_castsi512_ps(_mm512_maskz_slli_epi32(kAll, x, 16));
    odd = _mm512_castsi512_ps(_mm512_and_si512(x, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
  }
  static void store_bf16_pair(uint16_t* out, F even, F odd) {
    const __m512i low = _mm512_maskz_srli_epi32(kAll, bf16_rounded_high_bits(_mm512_castps_si512(even)), 16);
    _mm512_storeu_si512(out, _mm512_mask_blend_epi16(0xaaaaaaaau, low, bf16_rounded_high_bits(_mm512_castps_si512(odd))));
  }
  // As Avx2's, for code written against either; two stores here, and the Adam step keeps
  // its one-vector loop (kPairedBf16Stores): masks make the NaN test cheap already.
  static constexpr bool kPairedBf16Stores = false;
  static void store_bf16_two(uint16_t* out, F low, F high) {
    store_bf16(out, low);
    store_bf16(out + kWidth, high);
  }
  static F load_f16(const uint16_t* in) {
    return _mm512_maskz_cvtph_ps(kAll, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in)));
  }
  static void store_f16(uint16_t* out, F x) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out),
                        _mm512_maskz_cvtps_ph(kAll, x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
};

}  // namespace vec
}  // namespace accel
ACCEL_END_LEVEL

ACCEL_BEGIN_V3
namespace accel {
namespace vec {

struct Avx2 {
  using F = __m256;
  static constexpr int kWidth = 8;

  static F load(const float* in) { return _mm256_loadu_ps(in); }
  static void store(float* out, F x) { _mm256_storeu_ps(out, x); }
  static F set1(float x) { return _mm256_set1_ps(x); }
  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static F sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F div(F a, F b) { return _mm256_div_ps(a, b); }
  static F sqrt(F x) { return _mm256_sqrt_ps(x); }
  static F fmadd(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F fnmadd(F a, F b, F c) { return _mm256_fnmadd_ps(a, b, c); }

  static F load_bf16(const uint16_t* in) {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }
  // As Avx512's, without masks: bits + 0x8000, plus the compare's -1 where the lowest kept
  // bit is clear. (In place of a shift and an and: the bf16 sum of two ranks runs ~4%
  // faster in cache, benchmarks/native_kernels.cpp.)
  static __m256i bf16_rounded_high_bits(__m256i bits) {
    const __m256i lowest_clear =
        _mm256_cmpeq_epi32(_mm256_and_si256(bits, _mm256_set1_epi32(0x10000)), _mm256_setzero_si256());
    return _mm256_add_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x8000)), lowest_clear);
  }
  static __m256i bf16_high_bits(F x) {
    const __m256i bits = _mm256_castps_si256(x);
    const __m256i quiet = _mm256_or_si256(bits, _mm256_set1_epi32(0x400000));
    return _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(bf16_rounded_high_bits(bits)),
                                                _mm256_castsi256_ps(quiet), _mm256_cmp_ps(x, x, _CMP_UNORD_Q)));
  }
  static void store_bf16(uint16_t* out, F x) {
    const __m256i rounded = _mm256_srli_epi32(bf16_high_bits(x), 16);
    // Every lane holds a value below 0x10000, so the saturating pack only narrows.
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out),
                     _mm_packus_epi32(_mm256_castsi256_si128(rounded), _mm256_extracti128_si256(rounded, 1)));
  }
  // 2 * kWidth values, `low` then `high`, in one register-wide store, with one NaN test
  // for both: NaNs are rare, and the values without one skip bf16_high_bits' blend (the
  // bf16 Adam step in cache went from ~1.36x to ~1.15x of fp32's time,
  // benchmarks/native_kernels.cpp). packus narrows within each 128-bit half (every lane
  // is below 0x10000); the permute restores the order.
  static constexpr bool kPairedBf16Stores = true;
  static void store_bf16_two(uint16_t* out, F low, F high) {
    __m256i low_bits, high_bits;
    if (__builtin_expect(_mm256_movemask_ps(_mm256_cmp_ps(low, high, _CMP_UNORD_Q)) == 0, 1)) {
      low_bits = bf16_rounded_high_bits(_mm256_castps_si256(low));
      high_bits = bf16_rounded_high_bits(_mm256_castps_si256(high));
    } else {
      low_bits = bf16_high_bits(low);
      high_bits = bf16_high_bits(high);
    }
    const __m256i packed = _mm256_packus_epi32(_mm256_srli_epi32(low_bits, 16), _mm256_srli_epi32(high_bits, 16));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_permute4x64_epi64(packed, 0xd8));
  }
  static void load_bf16_pair(const uint16_t* in, F& even, F& odd) {  // as Avx512's
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in));
    even = _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));
    odd = _mm256_castsi256_ps(_mm256_and_si256(x, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
  }
  static void store_bf16_pair(uint16_t* out, F even, F odd) {  // as Avx512's
    const __m256i low = _mm256_srli_epi32(bf16_rounded_high_bits(_mm256_castps_si256(even)), 16);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out),
                        _mm256_blend_epi16(low, bf16_rounded_high_bits(_mm256_castps_si256(odd)), 0xaa));
  }
  static F load_f16(const uint16_t* in) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in)));
  }
  static void store_f16(uint16_t* out, F x) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
};

}  // namespace vec
}  // namespace accel
ACCEL_END_LEVEL

#endif  // ACCEL_X86_GCC

#if ACCEL_X86_GCC
ACCEL_BEGIN_V4
namespace accel {
namespace vec {
namespace v4 {
using V = Avx512;
#include "vec_level.inc"
}  // namespace v4
}  // namespace vec
}  // namespace accel
ACCEL_END_LEVEL

ACCEL_BEGIN_V3
namespace accel {
namespace vec {
namespace v3 {
using V = Avx2;
#include "vec_level.inc"
}  // namespace v3
}  // namespace vec
}  // namespace accel
ACCEL_END_LEVEL
#endif  // ACCEL_X86_GCC
