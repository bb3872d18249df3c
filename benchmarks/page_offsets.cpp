// Streams over large arrays at the same offset within a page, a little more than 128 MiB
// apart, as a CPU optimizer step meets them: the allocator mmaps each large tensor, so
// element i of p, g, m and v share their page offset, and tensors allocated one after
// another lie (size rounded up to pages) + 4 KiB apart. Four arrays of 64M uint16 values,
// 2 OpenMP threads over chunks of 64Ki elements (as cpu_optim.cpp's run()), best of 5:
//
// - read: the four arrays, 32 bytes at a time (no stores);
// - update: three arrays x += g, loading and storing 16 or 32 bytes of each in turn, or a
//   64-byte line of each in turn;
// - Adam: the kernel cpu_optim.cpp runs (csrc/cpu_optim/adam_level.inc), every tensor
//   fp16 or bf16, at x86-64-v3 and (where the CPU has it) x86-64-v4.
//
//   g++ -O3 -fno-math-errno -fno-trapping-math -std=c++17 -Wall -Wextra -fopenmp -I csrc benchmarks/page_offsets.cpp -o /tmp/page_offsets
//   /tmp/page_offsets 1    # arrays 128 MiB + 4 KiB apart (what torch's allocations give)
//   /tmp/page_offsets 4    # 128 MiB + 16 KiB apart
#include "common/dtypes.h"
#include "common/simd.h"
#include "cpu_optim/adam_levels.h"
#include "cpu_optim/adam_scalars.h"

#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#if ACCEL_X86_GCC

namespace {

using accel::AdamScalars;
using accel::kBFloat16;
using accel::kFloat16;

constexpr int64_t kElements = int64_t{64} << 20;
constexpr int64_t kChunk = int64_t{1} << 16;
const AdamScalars kAdam{0.1f, 0.999f, 0.001f, 0.05f, 0.0316227766f, 1e-8f, 0.01f, 0.99995f, true};

// An array in a mapping of its own, 64 bytes in (torch's allocations start so), the
// mapping `extra_pages` pages longer than the array.
uint16_t* mapped_array(int64_t extra_pages) {
  const size_t bytes = static_cast<size_t>(kElements * 2 + extra_pages * 4096);
  void* mapping = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapping == MAP_FAILED) {
    std::perror("mmap");
    std::exit(1);
  }
  return static_cast<uint16_t*>(mapping) + 32;
}

template <typename Run>
double best_ms(Run run) {
  double best = 1e30;
  for (int r = 0; r < 5; ++r) {
    const auto start = std::chrono::steady_clock::now();
    run();
    best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

template <typename Body>
void over_chunks(Body body) {
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t c = 0; c < kElements / kChunk; ++c) body(c * kChunk);
}

ACCEL_TARGET_V3 __attribute__((noinline)) int read4(const uint16_t* a, const uint16_t* b, const uint16_t* c,
                                                     const uint16_t* d, int64_t n) {
  __m256i acc = _mm256_setzero_si256();
  for (int64_t i = 0; i < n; i += 16) {
    const __m256i ab = _mm256_add_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + i)),
                                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + i)));
    const __m256i cd = _mm256_add_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + i)),
                                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(d + i)));
    acc = _mm256_xor_si256(acc, _mm256_add_epi16(ab, cd));
  }
  return _mm256_extract_epi16(acc, 0);
}

// x += g for x in (c, d, a), `Bytes` of each array in turn.
template <int Bytes>
ACCEL_TARGET_V3 __attribute__((noinline)) void update(uint16_t* a, const uint16_t* g, uint16_t* c, uint16_t* d,
                                                      int64_t n) {
  if constexpr (Bytes == 16) {
    for (int64_t i = 0; i < n; i += 8) {
      const __m128i grad = _mm_loadu_si128(reinterpret_cast<const __m128i*>(g + i));
      for (uint16_t* x : {c, d, a}) {
        __m128i* at = reinterpret_cast<__m128i*>(x + i);
        _mm_storeu_si128(at, _mm_add_epi16(_mm_loadu_si128(at), grad));
      }
    }
  } else {
    for (int64_t i = 0; i < n; i += 16) {
      const __m256i grad = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + i));
      for (uint16_t* x : {c, d, a}) {
        __m256i* at = reinterpret_cast<__m256i*>(x + i);
        _mm256_storeu_si256(at, _mm256_add_epi16(_mm256_loadu_si256(at), grad));
      }
    }
  }
}

// The same, a 64-byte line of each array in turn (16-byte accesses).
ACCEL_TARGET_V3 __attribute__((noinline)) void update_lines(uint16_t* a, const uint16_t* g, uint16_t* c, uint16_t* d,
                                                            int64_t n) {
  for (int64_t i = 0; i < n; i += 32) {
    __m128i grad[4];
    for (int k = 0; k < 4; ++k) grad[k] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(g + i) + k);
    for (uint16_t* x : {c, d, a}) {
      __m128i* at = reinterpret_cast<__m128i*>(x + i);
      __m128i sums[4];
      for (int k = 0; k < 4; ++k) sums[k] = _mm_add_epi16(_mm_loadu_si128(at + k), grad[k]);
      for (int k = 0; k < 4; ++k) _mm_storeu_si128(at + k, sums[k]);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t extra_pages = argc > 1 ? std::atoll(argv[1]) : 1;
  if (extra_pages < 1) {
    std::fprintf(stderr, "usage: %s EXTRA_PAGES (>= 1: the arrays lie 128 MiB + EXTRA_PAGES * 4 KiB apart)\n", argv[0]);
    return 2;
  }
  uint16_t* arrays[4];
  for (uint16_t*& array : arrays) array = mapped_array(extra_pages);
  const auto fill = [&](uint16_t value, uint16_t v_value) {
    for (int k = 0; k < 4; ++k) std::fill(arrays[k], arrays[k] + kElements, k == 3 ? v_value : value);
  };
  uint16_t *p = arrays[0], *g = arrays[1], *m = arrays[2], *v = arrays[3];
  std::printf("arrays at");
  for (uint16_t* array : arrays) std::printf(" %p", static_cast<void*>(array));
  std::printf(", %d threads; best of 5, ms:\n", omp_get_max_threads());
  fill(0x3c00, 0x0011);
  volatile int sink = 0;
  std::printf("read %.1f\n", best_ms([&] { over_chunks([&](int64_t b) { sink = sink + read4(p + b, g + b, m + b, v + b, kChunk); }); }));
  std::printf("update, 16 bytes of each array in turn %.1f\n",
              best_ms([&] { over_chunks([&](int64_t b) { update<16>(p + b, g + b, m + b, v + b, kChunk); }); }));
  std::printf("update, 32 bytes of each array in turn %.1f\n",
              best_ms([&] { over_chunks([&](int64_t b) { update<32>(p + b, g + b, m + b, v + b, kChunk); }); }));
  std::printf("update, a 64-byte line of each array in turn %.1f\n",
              best_ms([&] { over_chunks([&](int64_t b) { update_lines(p + b, g + b, m + b, v + b, kChunk); }); }));
  __builtin_cpu_init();
  const bool v4 = __builtin_cpu_supports("x86-64-v4");
  for (const int dtype : {kFloat16, kBFloat16}) {
    fill(dtype == kFloat16 ? 0x3c00 : 0x3f80, dtype == kFloat16 ? 0x0011 : 0x3586);  // 1.0; v about 1e-6
    const double v3_ms = best_ms([&] {
      over_chunks([&](int64_t b) { accel::adam_v3::adam_step(dtype, dtype, dtype, p + b, g + b, m + b, v + b, kChunk, kAdam); });
    });
    std::printf("Adam, every tensor %s, x86-64-v3 %.1f", accel::dtype_name(dtype), v3_ms);
    if (v4)
      std::printf(", x86-64-v4 %.1f", best_ms([&] {
                    over_chunks([&](int64_t b) {
                      accel::adam_v4::adam_step(dtype, dtype, dtype, p + b, g + b, m + b, v + b, kChunk, kAdam);
                    });
                  }));
    std::printf("\n");
  }
  return static_cast<int>(sink & 0);
}

#else
int main() {
  std::printf("x86-64 with gcc only\n");
  return 0;
}
#endif  // ACCEL_X86_GCC
