// The shared-memory all-reduce's two-rank sum kernels alone, per instruction-set level:
// out = a + b over buffers of one size, fp32 against bf16 and fp16 (summed in fp32,
// rounded once: csrc/common/vec_level.inc's add_rounded, the kernel shm_comm.cpp runs).
// Buffers of equal bytes, at the sizes where the all-reduce's data sits in cache, so the
// ratio is what the 16-bit arithmetic costs per byte there. Needs no Python and no torch
// (the extension's flags, from setup.py):
//
//   g++ -O3 -fno-math-errno -fno-trapping-math -std=c++17 -Wall -Wextra -I csrc benchmarks/sum_kernels.cpp -o /tmp/sum_kernels
//   /tmp/sum_kernels [--quick]
//
// Every 16-bit result is first checked against half.h's scalar conversions.
#include "common/half.h"
#include "common/simd.h"
#include "common/vec.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#if !ACCEL_X86_GCC
int main() {
  std::puts("sum_kernels: the vector levels exist only on x86-64 with gcc");
  return 0;
}
#else

namespace {

using accel::kBFloat16;
using accel::kFloat16;

// shm_comm.cpp's add_f32_body, compiled for each level.
ACCEL_TARGET_V4 __attribute__((noinline)) void add_f32_v4(float* __restrict out, const float* __restrict a,
                                                          const float* __restrict b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}
ACCEL_TARGET_V3 __attribute__((noinline)) void add_f32_v3(float* __restrict out, const float* __restrict a,
                                                          const float* __restrict b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

template <int D>
ACCEL_TARGET_V4 __attribute__((noinline)) void add_16_v4(uint16_t* out, const uint16_t* a, const uint16_t* b, int64_t n) {
  accel::vec::v4::add_rounded<D>(out, a, b, n);
}
template <int D>
ACCEL_TARGET_V3 __attribute__((noinline)) void add_16_v3(uint16_t* out, const uint16_t* a, const uint16_t* b, int64_t n) {
  accel::vec::v3::add_rounded<D>(out, a, b, n);
}

struct Level {
  const char* name;
  const char* cpu_feature;  // for __builtin_cpu_supports
  void (*add_f32)(float*, const float*, const float*, int64_t);
  void (*add_bf16)(uint16_t*, const uint16_t*, const uint16_t*, int64_t);
  void (*add_f16)(uint16_t*, const uint16_t*, const uint16_t*, int64_t);
};

const Level kLevels[] = {
    {"x86-64-v4", "x86-64-v4", add_f32_v4, add_16_v4<kBFloat16>, add_16_v4<kFloat16>},
    {"x86-64-v3", "x86-64-v3", add_f32_v3, add_16_v3<kBFloat16>, add_16_v3<kFloat16>},
};

bool supported(const Level& level) {
  __builtin_cpu_init();
  return std::strcmp(level.cpu_feature, "x86-64-v4") == 0 ? __builtin_cpu_supports("x86-64-v4")
                                                           : __builtin_cpu_supports("x86-64-v3");
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Finite 16-bit patterns of every exponent, with ties and cancellations among them.
std::vector<uint16_t> random_terms(int64_t n, uint32_t seed, int dtype) {
  std::mt19937 generator(seed);
  std::vector<uint16_t> terms(static_cast<size_t>(n));
  const uint16_t exponent_mask = dtype == kBFloat16 ? 0x7f80 : 0x7c00;
  for (auto& term : terms) {
    do term = static_cast<uint16_t>(generator()); while ((term & exponent_mask) == exponent_mask);
  }
  return terms;
}

bool check(const Level& level, int dtype) {
  const int64_t n = 4099;  // whole vectors and a tail
  const auto a = random_terms(n, 1, dtype), b = random_terms(n, 2, dtype);
  std::vector<uint16_t> out(static_cast<size_t>(n));
  (dtype == kBFloat16 ? level.add_bf16 : level.add_f16)(out.data(), a.data(), b.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t expected =
        dtype == kBFloat16 ? accel::float_to_bf16(accel::bf16_to_float(a[i]) + accel::bf16_to_float(b[i]))
                           : accel::float_to_half(accel::half_to_float(a[i]) + accel::half_to_float(b[i]));
    if (out[i] != expected) {
      std::printf("%s %s sum differs at %lld: 0x%04x + 0x%04x gave 0x%04x, expected 0x%04x\n", level.name,
                  accel::dtype_name(dtype), static_cast<long long>(i), a[i], b[i], out[i], expected);
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  const std::vector<int64_t> sizes = quick ? std::vector<int64_t>{16 << 10}
                                           : std::vector<int64_t>{16 << 10, 64 << 10, 256 << 10, 1 << 20};
  std::printf("two-rank sum kernels, best of interleaved repetitions; ratio above 1: the 16-bit sum is slower per byte\n");
  std::printf("| level | bytes per buffer | fp32 GB/s (a, b and out) | bf16 / fp32 time | fp16 / fp32 time |\n");
  std::printf("|---|---|---|---|---|\n");
  bool all_exact = true;
  for (const Level& level : kLevels) {
    if (!supported(level)) continue;
    if (!check(level, kBFloat16) || !check(level, kFloat16)) {
      all_exact = false;
      continue;
    }
    for (const int64_t bytes : sizes) {
      const int64_t floats = bytes / 4, halves = bytes / 2;
      std::vector<float> fa(static_cast<size_t>(floats), 1.5f), fb(static_cast<size_t>(floats), 2.25f),
          fout(static_cast<size_t>(floats));
      const auto ha = random_terms(halves, 3, kBFloat16), hb = random_terms(halves, 4, kBFloat16);
      std::vector<uint16_t> hout(static_cast<size_t>(halves));
      const int repetitions = quick ? 3 : static_cast<int>(std::max<int64_t>(20, (int64_t{2} << 30) / (bytes * 256)));
      double best_f32 = 1e30, best_bf16 = 1e30, best_f16 = 1e30;
      for (int r = 0; r < repetitions; ++r) {  // interleaved: a busy spell slows all three
        auto start = std::chrono::steady_clock::now();
        level.add_f32(fout.data(), fa.data(), fb.data(), floats);
        best_f32 = std::min(best_f32, seconds_since(start));
        start = std::chrono::steady_clock::now();
        level.add_bf16(hout.data(), ha.data(), hb.data(), halves);
        best_bf16 = std::min(best_bf16, seconds_since(start));
        start = std::chrono::steady_clock::now();
        level.add_f16(hout.data(), ha.data(), hb.data(), halves);
        best_f16 = std::min(best_f16, seconds_since(start));
      }
      std::printf("| %s | %lld KiB | %.1f | %.2fx | %.2fx |\n", level.name, static_cast<long long>(bytes >> 10),
                  3.0 * static_cast<double>(bytes) / best_f32 / 1e9, best_bf16 / best_f32, best_f16 / best_f32);
    }
  }
  return all_exact ? 0 : 1;
}

#endif  // ACCEL_X86_GCC
