// Array forms of half.h's 16-bit conversions, shared by the extensions. The dtype is chosen
// outside each loop, so every loop vectorises, and each function is cloned per instruction
// set (simd.h).
#pragma once

#include "half.h"
#include "simd.h"

#include <cstdint>

namespace accel {
namespace {

// out[i] = float(in[i]) for a kBFloat16 or kFloat16 buffer.
[[maybe_unused]] ACCEL_SIMD_CLONES void to_f32(const uint16_t* __restrict in, float* __restrict out,
                                               int64_t n, int dtype) {
  if (dtype == kBFloat16) {
    for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_float(in[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = half_to_float(in[i]);
  }
}

// out[i] = in[i] rounded to nearest even in kBFloat16 or kFloat16.
[[maybe_unused]] ACCEL_SIMD_CLONES void from_f32(const float* __restrict in, uint16_t* __restrict out,
                                                 int64_t n, int dtype) {
  if (dtype == kBFloat16) {
    for (int64_t i = 0; i < n; ++i) out[i] = float_to_bf16(in[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = float_to_half(in[i]);
  }
}

}  // namespace
}  // namespace accel
