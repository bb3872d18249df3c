// Instruction-set levels. Every kernel marked with ACCEL_DISPATCHED is compiled three times,
// for x86-64-v4 (AVX-512F/BW/DQ/VL), x86-64-v3 (AVX2, FMA, F16C) and the x86-64 baseline,
// and each call runs the variant of the process's level: the best the CPU has, capped by
// the environment variable ACCEL_CPU_ISA ("x86-64-v4", "x86-64-v3" or "baseline"), so that
// one machine can run, test and measure every lower level. A wheel never needs
// -march=native. (The "avx2"/"avx512f" spellings would miss FMA/F16C and AVX512BW.)
//
// The level is decided once, by accel::init_isa() in each module's init (which raises on
// a bad ACCEL_CPU_ISA, so a typo never silently runs the wrong code); accel/ops/isa.py
// checks the variable first and reads the level back for `accel report`.
#pragma once

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define ACCEL_X86_GCC 1
#include <immintrin.h>
#define ACCEL_TARGET_V4 __attribute__((target("arch=x86-64-v4")))
#define ACCEL_TARGET_V3 __attribute__((target("arch=x86-64-v3")))
#else
#define ACCEL_X86_GCC 0
#define ACCEL_TARGET_V4
#define ACCEL_TARGET_V3
#endif

// A kernel body meant to be compiled into each variant (inlined, so it takes on the
// variant's instruction set).
#define ACCEL_KERNEL_BODY inline __attribute__((always_inline))

namespace accel {

enum Isa : int { kBaseline = 0, kV3 = 1, kV4 = 2 };

inline const char* isa_name(int level) {
  switch (level) {
    case kV4: return "x86-64-v4";
    case kV3: return "x86-64-v3";
    default: return "baseline";
  }
}

// The best level this CPU runs (always baseline off x86-64 or with another compiler).
inline int cpu_isa() {
#if ACCEL_X86_GCC
  __builtin_cpu_init();
  if (__builtin_cpu_supports("x86-64-v4")) return kV4;
  if (__builtin_cpu_supports("x86-64-v3")) return kV3;
#endif
  return kBaseline;
}

inline int& isa_storage() {
  static int level = kBaseline;
  return level;
}

// The level every dispatched call uses in this process.
inline int isa() { return isa_storage(); }

// Decide the level from the CPU and ACCEL_CPU_ISA; throws std::invalid_argument naming a
// bad value. Idempotent.
inline void init_isa() {
  int level = cpu_isa();
  const char* cap = std::getenv("ACCEL_CPU_ISA");
  if (cap != nullptr && *cap != '\0') {
    int limit = -1;
    for (int candidate : {kV4, kV3, kBaseline})
      if (std::strcmp(cap, isa_name(candidate)) == 0) limit = candidate;
    if (limit < 0)
      throw std::invalid_argument(std::string("ACCEL_CPU_ISA is '") + cap +
                                  "'; expected one of baseline, x86-64-v3, x86-64-v4 (or unset)");
    level = level < limit ? level : limit;
  }
  isa_storage() = level;
}

}  // namespace accel

// ACCEL_DISPATCHED(NAME, (params), (args)) defines `void NAME(params)` from an
// ACCEL_KERNEL_BODY function NAME##_body(params): one variant per level and a switch on
// accel::isa(). ACCEL_DISPATCHED_WITH adds attributes to every variant.
#define ACCEL_DISPATCHED_WITH(ATTRIBUTES, NAME, PARAMS, ARGS)                  \
  ATTRIBUTES ACCEL_TARGET_V4 void NAME##_v4 PARAMS { NAME##_body ARGS; }       \
  ATTRIBUTES ACCEL_TARGET_V3 void NAME##_v3 PARAMS { NAME##_body ARGS; }       \
  ATTRIBUTES void NAME##_baseline PARAMS { NAME##_body ARGS; }                 \
  [[maybe_unused]] void NAME PARAMS {                                          \
    switch (::accel::isa()) {                                                  \
      case ::accel::kV4: return NAME##_v4 ARGS;                                \
      case ::accel::kV3: return NAME##_v3 ARGS;                                \
      default: return NAME##_baseline ARGS;                                    \
    }                                                                          \
  }
#define ACCEL_DISPATCHED(NAME, PARAMS, ARGS) ACCEL_DISPATCHED_WITH(, NAME, PARAMS, ARGS)
