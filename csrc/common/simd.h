// Portable SIMD: a function marked ACCEL_SIMD_CLONES is compiled for x86-64-v4 (AVX-512),
// x86-64-v3 (AVX2+FMA) and baseline, and the loader picks the best one for the CPU, so a
// wheel never needs -march=native. ("avx2"/"avx512f" spellings would miss FMA/AVX512BW.)
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define ACCEL_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define ACCEL_SIMD_CLONES
#endif
