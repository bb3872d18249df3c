// bfloat16 / IEEE half <-> float conversions shared by accel's extensions.
//
// Written with integer and float operations only, so loops that call them vectorise on
// every instruction set (gcc 12 keeps _Float16 conversions as scalar library calls, and the
// hardware bf16 instruction flushes subnormals, which torch does not). All conversions are
// exact or round to nearest even, keep subnormals, infinities and NaN (quieted), and match
// torch's .to(dtype) bit for bit (tested over every 16-bit pattern).
#pragma once

#include "dtypes.h"

#include <cstdint>
#include <cstring>

namespace accel {


inline float bits_to_float(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

inline uint32_t float_to_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

inline float bf16_to_float(uint16_t h) { return bits_to_float(static_cast<uint32_t>(h) << 16); }

inline uint16_t float_to_bf16(float value) {
  const uint32_t bits = float_to_bits(value);
  const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  // (A float compare, one instruction per vector, where an integer test of the exponent
  // and mantissa bits takes three.)
  return static_cast<uint16_t>(value != value ? ((bits >> 16) | 0x40u) : rounded);
}

// After F. Giesen, "half to float done quick": rebias by multiplying, which also turns
// subnormal halves into normal floats.
inline float half_to_float(uint16_t h) {
  const uint32_t magnitude = (static_cast<uint32_t>(h) & 0x7fffu) << 13;
  uint32_t bits = float_to_bits(bits_to_float(magnitude) * 0x1p112f);
  bits = magnitude >= (0x7c00u << 13) ? (magnitude | 0x7f800000u) : bits;  // inf, NaN
  return bits_to_float(bits | ((static_cast<uint32_t>(h) & 0x8000u) << 16));
}

inline uint16_t float_to_half(float value) {
  const uint32_t denorm_bits = ((127u - 15u) + (23u - 10u) + 1u) << 23;
  uint32_t bits = float_to_bits(value);
  const uint32_t sign = bits & 0x80000000u;
  bits ^= sign;
  // Overflow to inf (and NaN to a quiet NaN).
  const uint32_t huge = bits > 0x7f800000u ? 0x7e00u : 0x7c00u;
  // Below the smallest normal half: let the FPU round into the subnormal range.
  const uint32_t tiny = float_to_bits(bits_to_float(bits) + bits_to_float(denorm_bits)) - denorm_bits;
  // Normal results: rebias and round to nearest even by hand.
  const uint32_t odd = (bits >> 13) & 1u;
  const uint32_t normal = (bits + (static_cast<uint32_t>(15 - 127) << 23) + 0xfffu + odd) >> 13;
  const uint32_t half = bits >= (143u << 23) ? huge : (bits < (113u << 23) ? tiny : normal);
  return static_cast<uint16_t>(half | (sign >> 16));
}

// Element i of a buffer of dtype D, as float; and the reverse.
template <int D>
inline float load_as_float(const void* base, int64_t i) {
  if constexpr (D == kFloat32) return static_cast<const float*>(base)[i];
  else if constexpr (D == kBFloat16) return bf16_to_float(static_cast<const uint16_t*>(base)[i]);
  else return half_to_float(static_cast<const uint16_t*>(base)[i]);
}

template <int D>
inline void store_from_float(void* base, int64_t i, float value) {
  if constexpr (D == kFloat32) static_cast<float*>(base)[i] = value;
  else if constexpr (D == kBFloat16) static_cast<uint16_t*>(base)[i] = float_to_bf16(value);
  else static_cast<uint16_t*>(base)[i] = float_to_half(value);
}

}  // namespace accel
