// accel's native kernels alone, per instruction-set level, on data in cache, where their
// arithmetic (not memory) sets the time: what the 16-bit conversions cost against fp32.
//
// - The shared-memory all-reduce's two-rank sum, out = a + b, fp32 (csrc/shm_comm/sum2_f32.h)
//   against bf16 and fp16 (summed in fp32, rounded once: csrc/common/vec_level.inc's
//   add_rounded), the kernels shm_comm.cpp runs, on buffers of equal bytes: the ratio is the
//   cost per byte.
// - The Adam step (csrc/cpu_optim/adam_level.inc, the kernel cpu_optim.cpp runs) on 64Ki
//   parameters, one thread, with bf16 or fp16 parameters and gradients (with fp32 states,
//   then with states of their dtype) against fp32 ones: the ratio is the cost per
//   parameter.
//
// Needs no Python and no torch (the extension's flags, from setup.py):
//
//   g++ -O3 -fno-math-errno -fno-trapping-math -std=c++17 -Wall -Wextra -I csrc benchmarks/native_kernels.cpp -o /tmp/native_kernels
//   /tmp/native_kernels [--quick]
//
// Every 16-bit result is first checked: the sums against half.h's scalar conversions, the
// 16-bit Adam step (fp32 or 16-bit states) against the fp32 step rounded.
// Each vector level's fp32 sum must also be no slower than the baseline's (1.25x at most).
#include "common/dtypes.h"
#include "common/half.h"
#include "common/simd.h"
#include "common/vec.h"
#include "cpu_optim/adam_levels.h"
#include "cpu_optim/adam_scalars.h"
#include "shm_comm/sum2_f32.h"

// The Adam step once more per level with its square root and divisions made multiplies
// (adam_level.inc, ACCEL_ADAM_TIMING_WITHOUT_DIVIDER): wrong results, timed only.
#if ACCEL_X86_GCC
#define ACCEL_ADAM_TIMING_WITHOUT_DIVIDER
ACCEL_BEGIN_V4
namespace accel {
namespace adam_v4_without_divider {
#define LEVEL v4
#include "cpu_optim/adam_level.inc"
#undef LEVEL
}  // namespace adam_v4_without_divider
}  // namespace accel
ACCEL_END_LEVEL
ACCEL_BEGIN_V3
namespace accel {
namespace adam_v3_without_divider {
#define LEVEL v3
#include "cpu_optim/adam_level.inc"
#undef LEVEL
}  // namespace adam_v3_without_divider
}  // namespace accel
ACCEL_END_LEVEL
#undef ACCEL_ADAM_TIMING_WITHOUT_DIVIDER
#endif

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#if !ACCEL_X86_GCC
int main() {
  std::puts("native_kernels: the vector levels exist only on x86-64 with gcc");
  return 0;
}
#else

namespace {

using accel::AdamScalars;
using accel::kBFloat16;
using accel::kFloat16;
using accel::kFloat32;

// shm_comm.cpp's two-rank fp32 sum (shm_comm/sum2_f32.h), its variants made by the same
// macro with the same attribute: sum2_f32_v4, sum2_f32_v3 and sum2_f32_baseline.
using accel::sum2_f32_body;
ACCEL_DISPATCHED_WITH(__attribute__((optimize("no-tree-loop-distribute-patterns"))), sum2_f32,
                      (float* out, float* out2, const float* a, const float* b, int64_t n), (out, out2, a, b, n))

template <int D>
ACCEL_TARGET_V4 __attribute__((noinline)) void add_16_v4(uint16_t* out, const uint16_t* a, const uint16_t* b, int64_t n) {
  accel::vec::v4::add_rounded<D>(out, a, b, n);
}
template <int D>
ACCEL_TARGET_V3 __attribute__((noinline)) void add_16_v3(uint16_t* out, const uint16_t* a, const uint16_t* b, int64_t n) {
  accel::vec::v3::add_rounded<D>(out, a, b, n);
}

using AddF32 = void (*)(float*, float*, const float*, const float*, int64_t);
using Add16 = void (*)(uint16_t*, const uint16_t*, const uint16_t*, int64_t);
using AdamStep = bool (*)(int, int, int, void*, const void*, void*, void*, int64_t, const AdamScalars&);

struct Level {
  const char* name;
  AddF32 add_f32;
  Add16 add_bf16;
  Add16 add_f16;
  AdamStep adam;
  AdamStep adam_without_divider;
};

const Level kLevels[] = {
    {"x86-64-v4", sum2_f32_v4, add_16_v4<kBFloat16>, add_16_v4<kFloat16>, accel::adam_v4::adam_step,
     accel::adam_v4_without_divider::adam_step},
    {"x86-64-v3", sum2_f32_v3, add_16_v3<kBFloat16>, add_16_v3<kFloat16>, accel::adam_v3::adam_step,
     accel::adam_v3_without_divider::adam_step},
};

bool supported(const Level& level) {
  __builtin_cpu_init();
  return std::strcmp(level.name, "x86-64-v4") == 0 ? __builtin_cpu_supports("x86-64-v4")
                                                   : __builtin_cpu_supports("x86-64-v3");
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

template <typename Run>
double timed(Run run) {
  const auto start = std::chrono::steady_clock::now();
  run();
  return seconds_since(start);
}

float to_float(uint16_t bits, int dtype) {
  return dtype == kBFloat16 ? accel::bf16_to_float(bits) : accel::half_to_float(bits);
}

uint16_t from_float(float value, int dtype) {
  return dtype == kBFloat16 ? accel::float_to_bf16(value) : accel::float_to_half(value);
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

// Ordinary training values: parameters near 1, small gradients.
std::vector<uint16_t> training_values(int64_t n, uint32_t seed, float scale, int dtype) {
  std::mt19937 generator(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<uint16_t> values(static_cast<size_t>(n));
  for (auto& value : values) value = from_float(normal(generator), dtype);
  return values;
}

// AdamW's first step at lr 5e-3, weight decay 0.01, betas (0.9, 0.999): updates of a few
// bf16 units in the last place, so the check meets rounding at every magnitude.
const AdamScalars kAdam{0.1f, 0.999f, 0.001f, 0.05f, 0.0316227766f, 1e-8f, 0.01f, 0.99995f, true};

bool sums_are_exact(const Level& level, int dtype) {
  const int64_t n = 4099;  // whole vectors and a tail
  const auto a = random_terms(n, 1, dtype), b = random_terms(n, 2, dtype);
  std::vector<uint16_t> out(static_cast<size_t>(n));
  (dtype == kBFloat16 ? level.add_bf16 : level.add_f16)(out.data(), a.data(), b.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t expected = from_float(to_float(a[i], dtype) + to_float(b[i], dtype), dtype);
    if (out[i] != expected) {
      std::printf("%s %s sum differs at %lld: 0x%04x + 0x%04x gave 0x%04x, expected 0x%04x\n", level.name,
                  accel::dtype_name(dtype), static_cast<long long>(i), a[i], b[i], out[i], expected);
      return false;
    }
  }
  return true;
}

// The Adam step on 16-bit parameters and gradients of `dtype`, with fp32 states or with
// states of `dtype` too, against the fp32 step on widened copies, rounded.
bool adam_is_exact(const Level& level, int dtype, bool sixteen_bit_states) {
  const int64_t n = 4099;
  auto params = training_values(n, 5, 1.0f, dtype);
  const auto grads = training_values(n, 6, 1e-3f, dtype);
  std::vector<float> wide_params(static_cast<size_t>(n)), wide_grads(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    wide_params[i] = to_float(params[i], dtype);
    wide_grads[i] = to_float(grads[i], dtype);
  }
  // States from earlier steps, so that updates land anywhere between bf16/fp16 values.
  std::mt19937 generator(7);
  std::normal_distribution<float> normal(0.0f, 1e-3f);
  std::vector<float> m(static_cast<size_t>(n)), v(static_cast<size_t>(n));
  std::vector<uint16_t> m16(static_cast<size_t>(n)), v16(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    m[i] = normal(generator);
    v[i] = normal(generator) * normal(generator) + 1e-7f;
    m16[i] = from_float(m[i], dtype);
    v16[i] = from_float(v[i], dtype);
    if (sixteen_bit_states) {
      m[i] = to_float(m16[i], dtype);
      v[i] = to_float(v16[i], dtype);
    }
  }
  std::vector<float> m_wide(m), v_wide(v);
  const int state_dtype = sixteen_bit_states ? dtype : kFloat32;
  void* exp_avg = sixteen_bit_states ? static_cast<void*>(m16.data()) : m.data();
  void* exp_avg_sq = sixteen_bit_states ? static_cast<void*>(v16.data()) : v.data();
  if (!level.adam(dtype, dtype, state_dtype, params.data(), grads.data(), exp_avg, exp_avg_sq, n, kAdam)) {
    std::printf("%s has no Adam kernel for %s with %s states\n", level.name, accel::dtype_name(dtype),
                accel::dtype_name(state_dtype));
    return false;
  }
  level.adam(kFloat32, kFloat32, kFloat32, wide_params.data(), wide_grads.data(), m_wide.data(), v_wide.data(), n,
             kAdam);
  for (int64_t i = 0; i < n; ++i) {
    const bool states = sixteen_bit_states
                            ? m16[i] == from_float(m_wide[i], dtype) && v16[i] == from_float(v_wide[i], dtype)
                            : m[i] == m_wide[i] && v[i] == v_wide[i];
    if (params[i] != from_float(wide_params[i], dtype) || !states) {
      std::printf("%s %s Adam step (%s states) differs from the fp32 step rounded at %lld\n", level.name,
                  accel::dtype_name(dtype), accel::dtype_name(state_dtype), static_cast<long long>(i));
      return false;
    }
  }
  return true;
}

// A vector level's fp32 sum must not be slower than the baseline's on the same data in
// cache (best of interleaved calls): a kernel whose vectors gcc takes apart through the
// stack at one level (sum2_f32.h says how) runs several times slower there.
bool fp32_sum_is_not_slower_than_the_baseline(const Level& level) {
  const int64_t n = 4096;  // 16 KiB per buffer
  std::vector<float> a(static_cast<size_t>(n), 1.5f), b(static_cast<size_t>(n), 2.25f), out(static_cast<size_t>(n));
  double vector = 1e30, baseline = 1e30;
  for (int r = 0; r < 2000; ++r) {
    vector = std::min(vector, timed([&] { level.add_f32(out.data(), nullptr, a.data(), b.data(), n); }));
    baseline = std::min(baseline, timed([&] { sum2_f32_baseline(out.data(), nullptr, a.data(), b.data(), n); }));
  }
  if (vector <= 1.25 * baseline) return true;
  std::printf("%s: the fp32 two-rank sum takes %.0f ns for 16 KiB, the baseline's %.0f ns\n", level.name,
              vector * 1e9, baseline * 1e9);
  return false;
}

void time_sums(const Level& level, const std::vector<int64_t>& sizes, bool quick) {
  for (const int64_t bytes : sizes) {
    const int64_t floats = bytes / 4, halves = bytes / 2;
    std::vector<float> fa(static_cast<size_t>(floats), 1.5f), fb(static_cast<size_t>(floats), 2.25f),
        fout(static_cast<size_t>(floats));
    const auto ha = random_terms(halves, 3, kBFloat16), hb = random_terms(halves, 4, kBFloat16);
    std::vector<uint16_t> hout(static_cast<size_t>(halves));
    const int repetitions = quick ? 3 : static_cast<int>(std::max<int64_t>(20, (int64_t{2} << 30) / (bytes * 256)));
    double f32 = 1e30, bf16 = 1e30, f16 = 1e30;
    for (int r = 0; r < repetitions; ++r) {  // interleaved: a busy spell slows all three
      f32 = std::min(f32, timed([&] { level.add_f32(fout.data(), nullptr, fa.data(), fb.data(), floats); }));
      bf16 = std::min(bf16, timed([&] { level.add_bf16(hout.data(), ha.data(), hb.data(), halves); }));
      f16 = std::min(f16, timed([&] { level.add_f16(hout.data(), ha.data(), hb.data(), halves); }));
    }
    std::printf("| %s | %lld KiB | %.1f | %.2fx | %.2fx |\n", level.name, static_cast<long long>(bytes >> 10),
                3.0 * static_cast<double>(bytes) / f32 / 1e9, bf16 / f32, f16 / f32);
  }
}

void time_adam(const Level& level, bool quick) {
  const int64_t n = 64 << 10;
  const auto filled = [n](auto value) { return std::vector<decltype(value)>(static_cast<size_t>(n), value); };
  auto params = filled(1.0f), grads = filled(1e-3f), m = filled(0.0f), v = filled(1e-6f);
  // bf16 and fp16: 1.0, 1e-3 (about), 0 and 1e-6 (about).
  auto bf16_params = filled(uint16_t{0x3f80}), bf16_grads = filled(uint16_t{0x3a83});
  auto f16_params = filled(uint16_t{0x3c00}), f16_grads = filled(uint16_t{0x1419});
  auto bf16_m = filled(uint16_t{0}), bf16_v = filled(uint16_t{0x3586});
  auto f16_m = filled(uint16_t{0}), f16_v = filled(uint16_t{0x0011});
  const auto step = [&](int dtype, int state_dtype, void* p, const void* g, void* exp_avg, void* exp_avg_sq) {
    level.adam(dtype, dtype, state_dtype, p, g, exp_avg, exp_avg_sq, n, kAdam);
  };
  double f32 = 1e30, bf16 = 1e30, f16 = 1e30, bf16_states = 1e30, f16_states = 1e30;
  for (int r = 0; r < (quick ? 3 : 400); ++r) {  // interleaved: a busy spell slows all five
    f32 = std::min(f32, timed([&] { step(kFloat32, kFloat32, params.data(), grads.data(), m.data(), v.data()); }));
    bf16 = std::min(bf16, timed([&] {
      step(kBFloat16, kFloat32, bf16_params.data(), bf16_grads.data(), m.data(), v.data());
    }));
    f16 = std::min(f16, timed([&] { step(kFloat16, kFloat32, f16_params.data(), f16_grads.data(), m.data(), v.data()); }));
    bf16_states = std::min(bf16_states, timed([&] {
      step(kBFloat16, kBFloat16, bf16_params.data(), bf16_grads.data(), bf16_m.data(), bf16_v.data());
    }));
    f16_states = std::min(f16_states, timed([&] {
      step(kFloat16, kFloat16, f16_params.data(), f16_grads.data(), f16_m.data(), f16_v.data());
    }));
  }
  std::printf("| %s | %.3f | %.2fx | %.2fx | %.2fx | %.2fx |\n", level.name, f32 / static_cast<double>(n) * 1e9,
              bf16 / f32, f16 / f32, bf16_states / f32, f16_states / f32);
}

// The Adam step on 1Ki parameters (28 KiB in fp32: all in the L1 cache), one thread, per
// layout, as it is and with the divider's work made multiplies: its arithmetic alone, to
// set against the time memory takes to move the step's bytes.
void time_adam_in_l1(const Level& level, bool quick) {
  const int64_t n = 1024;
  struct Layout {
    const char* name;
    int dtype, state_dtype;
  };
  const Layout layouts[] = {{"fp32", kFloat32, kFloat32}, {"bf16, fp32 states", kBFloat16, kFloat32},
                            {"bf16, bf16 states", kBFloat16, kBFloat16}, {"fp16, fp32 states", kFloat16, kFloat32},
                            {"fp16, fp16 states", kFloat16, kFloat16}};
  for (const Layout& layout : layouts) {
    // Four buffers at different offsets within a page, so that no two alias in the L1.
    std::vector<char> memory(static_cast<size_t>(4 * n * 4 + 4 * 4096));
    char* buffers[4];
    for (int k = 0; k < 4; ++k) {
      buffers[k] = memory.data() + k * (n * 4 + 4096 + 1056);
      const bool state = k >= 2;
      const int dtype = state ? layout.state_dtype : layout.dtype;
      const float value = k == 0 ? 1.0f : k == 1 ? 1e-3f : k == 2 ? 0.0f : 1e-6f;
      for (int64_t i = 0; i < n; ++i) {
        if (dtype == kFloat32) reinterpret_cast<float*>(buffers[k])[i] = value;
        else reinterpret_cast<uint16_t*>(buffers[k])[i] = from_float(value, dtype);
      }
    }
    double with = 1e30, without = 1e30;
    const auto steps = [&](AdamStep adam) {
      for (int k = 0; k < 64; ++k)
        adam(layout.dtype, layout.dtype, layout.state_dtype, buffers[0], buffers[1], buffers[2], buffers[3], n, kAdam);
    };
    for (int r = 0; r < (quick ? 3 : 300); ++r) {  // interleaved
      with = std::min(with, timed([&] { steps(level.adam); }));
      without = std::min(without, timed([&] { steps(level.adam_without_divider); }));
    }
    const double per_parameter = 1e9 / (64.0 * static_cast<double>(n));
    std::printf("| %s | %s | %.3f | %.3f | %.0f%% |\n", level.name, layout.name, with * per_parameter,
                without * per_parameter, 100.0 * (1.0 - without / with));
  }
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  const std::vector<int64_t> sizes =
      quick ? std::vector<int64_t>{16 << 10} : std::vector<int64_t>{16 << 10, 64 << 10, 256 << 10, 1 << 20};
  std::vector<const Level*> levels;
  bool exact = true;
  for (const Level& level : kLevels) {
    if (!supported(level)) continue;
    for (const int dtype : {kBFloat16, kFloat16})
      exact = sums_are_exact(level, dtype) && adam_is_exact(level, dtype, false) && adam_is_exact(level, dtype, true) &&
              exact;
    exact = fp32_sum_is_not_slower_than_the_baseline(level) && exact;
    levels.push_back(&level);
  }
  if (!exact) return 1;
  std::printf("Best of interleaved repetitions, one thread; above 1: the 16-bit kernel is slower.\n\n");
  std::printf("Two-rank sum, time over fp32's for the same bytes:\n\n");
  std::printf("| level | bytes per buffer | fp32 GB/s (a, b and out) | bf16 / fp32 | fp16 / fp32 |\n");
  std::printf("|---|---|---|---|---|\n");
  for (const Level* level : levels) time_sums(*level, sizes, quick);
  std::printf("\nAdam step on 64Ki parameters, time over fp32's (16-bit parameters and gradients,\n");
  std::printf("with fp32 states, then with states of their dtype):\n\n");
  std::printf("| level | fp32 ns per parameter | bf16 / fp32 | fp16 / fp32 | bf16 states | fp16 states |\n");
  std::printf("|---|---|---|---|---|---|\n");
  for (const Level* level : levels) time_adam(*level, quick);
  std::printf("\nAdam step on 1Ki parameters (in L1), ns per parameter, as it is and with the\n");
  std::printf("square root and both divisions made multiplies (wrong results, timed only):\n\n");
  std::printf("| level | layout | ns per parameter | without the divider | divider's share |\n");
  std::printf("|---|---|---|---|---|\n");
  for (const Level* level : levels) time_adam_in_l1(*level, quick);
  return 0;
}

#endif  // ACCEL_X86_GCC
