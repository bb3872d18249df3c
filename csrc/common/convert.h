// Array forms of the 16-bit conversions, shared by the extensions: in registers through
// vec.h on x86-64-v4 and x86-64-v3, and through half.h's bit arithmetic (which the
// compiler vectorises) on the baseline level and other CPUs. Every path gives the same
// bits (tested over every 16-bit pattern on each level).
#pragma once

#include "half.h"
#include "simd.h"
#include "vec.h"

#include <cstdint>

namespace accel {
namespace {

// The baseline level's (and other CPUs') conversions. The dtype is chosen outside each
// loop, so every loop vectorises.
inline void to_f32_portable(const uint16_t* __restrict in, float* __restrict out, int64_t n, int dtype) {
  if (dtype == kBFloat16) {
    for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_float(in[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = half_to_float(in[i]);
  }
}

inline void from_f32_portable(const float* __restrict in, uint16_t* __restrict out, int64_t n, int dtype) {
  if (dtype == kBFloat16) {
    for (int64_t i = 0; i < n; ++i) out[i] = float_to_bf16(in[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = float_to_half(in[i]);
  }
}

// out[i] = float(in[i]) for a kBFloat16 or kFloat16 buffer.
[[maybe_unused]] inline void to_f32(const uint16_t* __restrict in, float* __restrict out, int64_t n,
                                    int dtype) {
#if ACCEL_X86_GCC
  if (isa() == kV4) return dtype == kBFloat16 ? vec::v4::to_f32<kBFloat16>(in, out, n) : vec::v4::to_f32<kFloat16>(in, out, n);
  if (isa() == kV3) return dtype == kBFloat16 ? vec::v3::to_f32<kBFloat16>(in, out, n) : vec::v3::to_f32<kFloat16>(in, out, n);
#endif
  to_f32_portable(in, out, n, dtype);
}

// out[i] = in[i] rounded to nearest even in kBFloat16 or kFloat16.
[[maybe_unused]] inline void from_f32(const float* __restrict in, uint16_t* __restrict out, int64_t n,
                                      int dtype) {
#if ACCEL_X86_GCC
  if (isa() == kV4)
    return dtype == kBFloat16 ? vec::v4::from_f32<kBFloat16>(in, out, n) : vec::v4::from_f32<kFloat16>(in, out, n);
  if (isa() == kV3)
    return dtype == kBFloat16 ? vec::v3::from_f32<kBFloat16>(in, out, n) : vec::v3::from_f32<kFloat16>(in, out, n);
#endif
  from_f32_portable(in, out, n, dtype);
}

}  // namespace
}  // namespace accel
