// The two-rank fp32 sum of the shared-memory all-reduce, shared by shm_comm.cpp and
// benchmarks/native_kernels.cpp (which times it per level and fails if a vector level takes
// over 1.25x the baseline's time).
#pragma once

#include "../common/simd.h"

#include <cstdint>
#include <cstring>

namespace accel {

// out (and a non-null out2) = a + b in one pass, 32 bytes at a time through registers (out
// may be a or b, element for element: each piece is read whole before it is written). The
// same single addition as a sum of two slots, so the same bits, without a block buffer and
// its second read.
//
// The piece is one 32-byte vector: a register at x86-64-v3 and v4, two at the baseline. A
// wider piece (a 16-float array, or a 64-byte vector) is taken apart through the stack below
// AVX-512, with stores that later wider loads cannot forward from: gcc 12 made the
// x86-64-v3 variant ten times slower than v4 and five times slower than the baseline
// (`benchmarks/native_kernels.cpp` checks the levels against each other).
ACCEL_KERNEL_BODY void sum2_f32_body(float* out, float* out2, const float* a, const float* b, int64_t n) {
  typedef float Piece __attribute__((vector_size(32)));
  constexpr int64_t kFloats = sizeof(Piece) / sizeof(float);
  const int64_t whole = n / kFloats * kFloats;
  for (int64_t i = 0; i < whole; i += kFloats) {
    Piece x, y;
    std::memcpy(&x, a + i, sizeof x);
    std::memcpy(&y, b + i, sizeof y);
    x += y;
    std::memcpy(out + i, &x, sizeof x);
    if (out2 != nullptr) std::memcpy(out2 + i, &x, sizeof x);
  }
  for (int64_t i = whole; i < n; ++i) {
    const float sum = a[i] + b[i];
    out[i] = sum;
    if (out2 != nullptr) out2[i] = sum;
  }
}

}  // namespace accel
