// CPU optimizer steps (Adam/AdamW, Adagrad, Lion) over many tensors in one call.
//
// Built by `pip install` (setup.py) without libtorch: tensors arrive as raw addresses,
// element counts and dtype codes, already validated by accel/ops/cpu_optim.py; the checks
// here repeat the ones that would otherwise corrupt memory (lengths, dtypes, null and
// overlapping buffers; an address that is not a live buffer cannot be checked here, which
// is why the op builders hand out the validating Python module, never this one), and the
// ranges of the hyper-parameters (hyperparameters.h: out of range, a step writes NaN or
// garbage into the tensors). The GIL is released while the kernels run. Every kernel is
// compiled for x86-64-v4, x86-64-v3 and baseline and runs at the process's level
// (../common/simd.h), so one binary is portable and still uses AVX-512 where it exists.
// Parameters, gradients and states may each be fp32, bf16 or fp16 (all states of one
// parameter share a dtype). Adam converts the common combinations in registers
// (adam_level.inc on v4/v3: fp32 states, and 16-bit states of the parameter's dtype;
// adam_typed, bf16 parameters or gradients with fp32 states, on baseline); every other
// case, and the other optimizers, convert through small L1-resident buffers around one
// fp32 kernel. Either way a 16-bit tensor gets the fp32 step's result, rounded.

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "../common/bindings.h"
#include "../common/convert.h"
#include "../common/half.h"
#include "../common/simd.h"
#include "../common/vec.h"
#include "adam_levels.h"
#include "adam_scalars.h"
#include "hyperparameters.h"
#include "step_channel.h"

#include <omp.h>
#include <pthread.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace py = pybind11;

namespace {

using accel::kBFloat16;
using accel::kFloat16;
using accel::kFloat32;
constexpr int kNone = -1;

int64_t element_size(int dtype) { return accel::dtype_size(dtype); }

void to_f32(const void* in, int dtype, float* out, int64_t n) {
  accel::to_f32(static_cast<const uint16_t*>(in), out, n, dtype);
}

void from_f32(const float* in, void* out, int dtype, int64_t n) {
  accel::from_f32(in, static_cast<uint16_t*>(out), n, dtype);
}

// ---------------------------------------------------------------- math kernels
// Each mirrors torch's single-tensor implementation op for op (same formulas, same
// order), so results agree with torch.optim to fp32 rounding.

using accel::AdamScalars;

// The portable step: the baseline level, and CPUs other than x86-64.
void adam_kernel(float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v,
                 int64_t n, const AdamScalars s) {
  for (int64_t i = 0; i < n; ++i) {
    float param = s.decoupled ? p[i] * s.decay : p[i];
    const float grad = s.decoupled ? g[i] : g[i] + s.weight_decay * param;
    const float exp_avg = m[i] + s.lerp_weight * (grad - m[i]);
    const float exp_avg_sq = v[i] * s.beta2 + s.one_minus_beta2 * grad * grad;
    const float denom = std::sqrt(exp_avg_sq) / s.bias_correction2_sqrt + s.eps;
    m[i] = exp_avg;
    v[i] = exp_avg_sq;
    p[i] = param - s.step_size * (exp_avg / denom);
  }
}

// The same step with a bf16 parameter or gradient converted in registers (one pass over
// memory). half.h's fp16 conversions do not vectorise inside this loop (gcc 12), so fp16
// tensors take run()'s conversion buffers instead on this level.
template <int P, int G>
void adam_typed(void* __restrict p, const void* __restrict g, float* __restrict m, float* __restrict v, int64_t n,
                const AdamScalars s) {
  for (int64_t i = 0; i < n; ++i) {
    const float stored = accel::load_as_float<P>(p, i);
    const float param = s.decoupled ? stored * s.decay : stored;
    const float raw = accel::load_as_float<G>(g, i);
    const float grad = s.decoupled ? raw : raw + s.weight_decay * param;
    const float exp_avg = m[i] + s.lerp_weight * (grad - m[i]);
    const float exp_avg_sq = v[i] * s.beta2 + s.one_minus_beta2 * grad * grad;
    const float denom = std::sqrt(exp_avg_sq) / s.bias_correction2_sqrt + s.eps;
    m[i] = exp_avg;
    v[i] = exp_avg_sq;
    accel::store_from_float<P>(p, i, param - s.step_size * (exp_avg / denom));
  }
}

using AdamTyped = void (*)(void*, const void*, float*, float*, int64_t, const AdamScalars);

// [param dtype][grad dtype]: the portable typed kernels.
constexpr AdamTyped kAdamTyped[3][3] = {
    {nullptr, adam_typed<kFloat32, kBFloat16>, nullptr},
    {adam_typed<kBFloat16, kFloat32>, adam_typed<kBFloat16, kBFloat16>, nullptr},
    {nullptr, nullptr, nullptr},
};

// The Adam step on the process's level for a combination of dtypes; false (nothing done)
// where that level has no kernel for it and run() must convert through fp32 buffers.
bool adam_any(int param_dtype, int grad_dtype, int state_dtype, void* p, const void* g, void* m, void* v,
              int64_t n, const AdamScalars& s) {
#if ACCEL_X86_GCC
  if (accel::isa() == accel::kV4)
    return accel::adam_v4::adam_step(param_dtype, grad_dtype, state_dtype, p, g, m, v, n, s);
  if (accel::isa() == accel::kV3)
    return accel::adam_v3::adam_step(param_dtype, grad_dtype, state_dtype, p, g, m, v, n, s);
#endif
  if (state_dtype != kFloat32) return false;
  float* exp_avg = static_cast<float*>(m);
  float* exp_avg_sq = static_cast<float*>(v);
  if (param_dtype == kFloat32 && grad_dtype == kFloat32) {
    adam_kernel(static_cast<float*>(p), static_cast<const float*>(g), exp_avg, exp_avg_sq, n, s);
    return true;
  }
  const AdamTyped kernel = kAdamTyped[param_dtype][grad_dtype];
  if (kernel == nullptr) return false;
  kernel(p, g, exp_avg, exp_avg_sq, n, s);
  return true;
}

struct AdagradScalars {
  float clr;  // lr / (1 + (step - 1) * lr_decay)
  float eps;
  float weight_decay;
};

ACCEL_KERNEL_BODY void adagrad_kernel_body(float* __restrict p, const float* __restrict g,
                                           float* __restrict sum, int64_t n, const AdagradScalars s) {
  for (int64_t i = 0; i < n; ++i) {
    const float grad = g[i] + s.weight_decay * p[i];
    const float state = sum[i] + grad * grad;
    sum[i] = state;
    p[i] = p[i] - s.clr * (grad / (std::sqrt(state) + s.eps));
  }
}
ACCEL_DISPATCHED(adagrad_kernel,
                 (float* __restrict p, const float* __restrict g, float* __restrict sum, int64_t n,
                  const AdagradScalars s),
                 (p, g, sum, n, s))

struct LionScalars {
  float beta1, one_minus_beta1, beta2, one_minus_beta2, lr, decay;
};

ACCEL_KERNEL_BODY void lion_kernel_body(float* __restrict p, const float* __restrict g,
                                        float* __restrict m, int64_t n, const LionScalars s) {
  for (int64_t i = 0; i < n; ++i) {
    const float update = m[i] * s.beta1 + s.one_minus_beta1 * g[i];
    // sign() that keeps NaN (as torch.sign does) and maps +-0 to +-0.
    const float sign = update > 0.0f ? 1.0f : (update < 0.0f ? -1.0f : update);
    p[i] = p[i] * s.decay - s.lr * sign;
    m[i] = m[i] * s.beta2 + s.one_minus_beta2 * g[i];
  }
}
ACCEL_DISPATCHED(lion_kernel,
                 (float* __restrict p, const float* __restrict g, float* __restrict m, int64_t n,
                  const LionScalars s),
                 (p, g, m, n, s))

// ---------------------------------------------------------------- batches

// One call's tensors. Every parameter has one or two states (state2 is empty for
// optimizers with one), both of state_dtypes[t].
struct Batch {
  std::vector<uintptr_t> params, grads, state1, state2, copies;
  std::vector<int64_t> numels;
  std::vector<int> param_dtypes, grad_dtypes, copy_dtypes, state_dtypes;
};

void require(bool ok, const std::string& message) {
  if (!ok) throw std::invalid_argument(message);
}

void check_dtype(int dtype, bool allow_none, const char* what, size_t i) {
  require(accel::is_dtype(dtype) || (allow_none && dtype == kNone),
          std::string(what) + "[" + std::to_string(i) + "] has dtype code " + std::to_string(dtype) +
              ", which is none of float32 (0), bfloat16 (1), float16 (2)");
}

struct Span {
  uintptr_t begin, end;
  std::string what;
  bool written;
};

// The kernels promise __restrict and run parameters on several threads: no buffer written
// may share a byte with any other buffer of the call, across parameters as well as within
// one. Gradients are only read, so they may share memory with each other (restrict allows
// that: nothing reached through them is modified). One sweep over the sorted spans: a span
// clashes with an earlier one exactly when it starts before the farthest end so far, of
// every span if it is written, of the written ones if it is read.
void require_disjoint(std::vector<Span> spans) {
  // Stable: of two spans that start together, the one listed first is named first.
  std::stable_sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
  const Span* farthest = nullptr;
  const Span* farthest_written = nullptr;
  for (const Span& span : spans) {
    const Span* clash = span.written ? farthest : farthest_written;
    require(clash == nullptr || span.begin >= clash->end,
            (clash ? clash->what : std::string()) + " and " + span.what +
                " overlap in memory; each tensor needs its own storage");
    if (farthest == nullptr || span.end > farthest->end) farthest = &span;
    if (span.written && (farthest_written == nullptr || span.end > farthest_written->end))
      farthest_written = &span;
  }
}

// The Python wrapper validated everything; these checks keep a caller that bypasses it
// from writing through null pointers or reading past mismatched lists.
void validate(const Batch& b, bool two_states) {
  const size_t n = b.params.size();
  require(b.grads.size() == n && b.state1.size() == n && b.numels.size() == n &&
              b.param_dtypes.size() == n && b.grad_dtypes.size() == n &&
              b.copies.size() == n && b.copy_dtypes.size() == n && b.state_dtypes.size() == n &&
              (!two_states || b.state2.size() == n),
          "every per-tensor list must have one entry per parameter");
  for (size_t i = 0; i < n; ++i) {
    require(b.numels[i] >= 0, "numels[" + std::to_string(i) + "] is negative");
    check_dtype(b.param_dtypes[i], false, "params", i);
    check_dtype(b.grad_dtypes[i], false, "grads", i);
    check_dtype(b.copy_dtypes[i], true, "param_copies", i);
    check_dtype(b.state_dtypes[i], false, "states", i);
    require(b.copy_dtypes[i] != kFloat32, "param_copies must be bfloat16 or float16");
    if (b.numels[i] == 0) continue;
    require(b.params[i] && b.grads[i] && b.state1[i] && (!two_states || b.state2[i]),
            "null buffer for parameter " + std::to_string(i));
    require(b.copy_dtypes[i] == kNone || b.copies[i],
            "null param_copies buffer for parameter " + std::to_string(i));
  }
  std::vector<Span> spans;
  const auto add = [&](uintptr_t base, int64_t numel, int dtype, const char* what, size_t i, bool written) {
    if (numel > 0)
      spans.push_back({base, base + static_cast<uintptr_t>(numel * element_size(dtype)),
                       std::string(what) + "[" + std::to_string(i) + "]", written});
  };
  for (size_t i = 0; i < n; ++i) {
    add(b.params[i], b.numels[i], b.param_dtypes[i], "params", i, true);
    add(b.grads[i], b.numels[i], b.grad_dtypes[i], "grads", i, false);
    add(b.state1[i], b.numels[i], b.state_dtypes[i], "state", i, true);
    if (two_states) add(b.state2[i], b.numels[i], b.state_dtypes[i], "second state", i, true);
    if (b.copy_dtypes[i] != kNone) add(b.copies[i], b.numels[i], b.copy_dtypes[i], "param_copies", i, true);
  }
  require_disjoint(std::move(spans));
}

struct Chunk {
  size_t tensor;
  int64_t begin, end;
};

constexpr int64_t kBlock = 1024;  // elements converted at once (fits L1 with two buffers)

// Elements a thread takes at a time. Each chunk starts the hardware prefetchers' streams
// anew, which costs the 16-bit steps most (half the bytes per chunk): with 64Ki-element
// chunks, 64M parameters on 2 threads of an AMD EPYC streaming ~110 GB/s took 1.07 of the
// fp32 step's byte bound and 0.56x of its time all-bf16, with up to 1Mi 0.95-0.99 and
// 0.52-0.54x (benchmarks/optim_bound.py; docs/benchmarks.md, "Each step against its byte
// bound"). Still at least kChunksPerThread chunks a thread, so that dynamic scheduling can
// even out a thread the machine slows down, and never under 64Ki (a chunk's fixed costs).
constexpr int64_t kMinChunk = 1 << 16, kMaxChunk = 1 << 20, kChunksPerThread = 4;

int64_t chunk_length(int64_t total_elements, int threads) {
  const int64_t even_share = total_elements / (static_cast<int64_t>(threads) * kChunksPerThread);
  return std::clamp((even_share + kBlock - 1) / kBlock * kBlock, kMinChunk, kMaxChunk);
}

// Runs `kernel(p, g, state1, state2, tensor, length)` over every element of every
// tensor, split into chunks shared by the OpenMP threads. p, g and the states are fp32
// views: the tensors themselves when they are fp32, else L1 buffers converted on the way
// in (and, for p and the states, on the way out); state2 is null for one-state optimizers.
// `typed(p, g, t, begin, n)` may handle a whole chunk on the tensors' own dtypes and
// return true; otherwise everything goes through fp32 views for `kernel`.
struct NoTyped {
  bool operator()(void*, const void*, size_t, int64_t, int64_t) const { return false; }
};

void* element_at(uintptr_t base, int64_t index, int dtype) {
  return reinterpret_cast<char*>(base) + index * element_size(dtype);
}

// A state's elements [begin, begin + length) as fp32: the state itself when it is fp32,
// else `buffer`, filled from it.
float* state_view(uintptr_t base, int64_t begin, int64_t length, int dtype, float* buffer) {
  void* state = element_at(base, begin, dtype);
  if (dtype == kFloat32) return static_cast<float*>(state);
  to_f32(state, dtype, buffer, length);
  return buffer;
}

void store_state(const float* view, uintptr_t base, int64_t begin, int64_t length, int dtype) {
  if (dtype != kFloat32) from_f32(view, element_at(base, begin, dtype), dtype, length);
}

template <class Kernel, class Typed = NoTyped>
void run(const Batch& b, Kernel kernel, Typed typed = Typed{}) {
  int64_t total = 0;
  for (const int64_t numel : b.numels) total += numel;
  const int64_t length = chunk_length(total, omp_get_max_threads());
  std::vector<Chunk> chunks;
  for (size_t t = 0; t < b.params.size(); ++t)
    for (int64_t begin = 0; begin < b.numels[t]; begin += length)
      chunks.push_back({t, begin, std::min(b.numels[t], begin + length)});
  const int64_t count = static_cast<int64_t>(chunks.size());
  const bool two_states = !b.state2.empty();
  py::gil_scoped_release released;
#pragma omp parallel for schedule(dynamic, 1) if (count > 1)
  for (int64_t c = 0; c < count; ++c) {
    alignas(64) float param_buffer[kBlock];
    alignas(64) float grad_buffer[kBlock];
    alignas(64) float state1_buffer[kBlock];
    alignas(64) float state2_buffer[kBlock];
    const Chunk chunk = chunks[c];
    const size_t t = chunk.tensor;
    const int pdt = b.param_dtypes[t], gdt = b.grad_dtypes[t], cdt = b.copy_dtypes[t], sdt = b.state_dtypes[t];
    const bool all_fp32 = pdt == kFloat32 && gdt == kFloat32 && sdt == kFloat32;
    if (cdt == kNone && !all_fp32 &&
        typed(element_at(b.params[t], chunk.begin, pdt), element_at(b.grads[t], chunk.begin, gdt), t, chunk.begin,
              chunk.end - chunk.begin))
      continue;
    const int64_t step = (all_fp32 && cdt == kNone) ? chunk.end - chunk.begin : kBlock;
    for (int64_t begin = chunk.begin; begin < chunk.end; begin += step) {
      const int64_t length = std::min(step, chunk.end - begin);
      void* param_at = element_at(b.params[t], begin, pdt);
      const void* grad_at = element_at(b.grads[t], begin, gdt);
      float* p = static_cast<float*>(param_at);
      const float* g = static_cast<const float*>(grad_at);
      if (pdt != kFloat32) {
        to_f32(param_at, pdt, param_buffer, length);
        p = param_buffer;
      }
      if (gdt != kFloat32) {
        to_f32(grad_at, gdt, grad_buffer, length);
        g = grad_buffer;
      }
      float* state1 = state_view(b.state1[t], begin, length, sdt, state1_buffer);
      float* state2 = two_states ? state_view(b.state2[t], begin, length, sdt, state2_buffer) : nullptr;
      kernel(p, g, state1, state2, t, length);
      if (pdt != kFloat32) from_f32(p, param_at, pdt, length);
      store_state(state1, b.state1[t], begin, length, sdt);
      if (two_states) store_state(state2, b.state2[t], begin, length, sdt);
      if (cdt != kNone) from_f32(p, element_at(b.copies[t], begin, cdt), cdt, length);
    }
  }
}

Batch make_batch(std::vector<uintptr_t> params, std::vector<uintptr_t> grads,
                 std::vector<uintptr_t> state1, std::vector<uintptr_t> state2,
                 std::vector<uintptr_t> copies, std::vector<int64_t> numels,
                 std::vector<int> param_dtypes, std::vector<int> grad_dtypes,
                 std::vector<int> copy_dtypes, std::vector<int> state_dtypes) {
  // No state dtypes given: all fp32 (what callers built before 16-bit states passed).
  if (state_dtypes.empty()) state_dtypes.assign(params.size(), kFloat32);
  return Batch{std::move(params),       std::move(grads),       std::move(state1),
               std::move(state2),       std::move(copies),      std::move(numels),
               std::move(param_dtypes), std::move(grad_dtypes), std::move(copy_dtypes),
               std::move(state_dtypes)};
}

void adam_step(std::vector<uintptr_t> params, std::vector<uintptr_t> grads,
               std::vector<uintptr_t> exp_avgs, std::vector<uintptr_t> exp_avg_sqs,
               std::vector<uintptr_t> copies, std::vector<int64_t> numels,
               std::vector<int> param_dtypes, std::vector<int> grad_dtypes,
               std::vector<int> copy_dtypes, std::vector<int64_t> steps, double lr,
               double beta1, double beta2, double eps, double weight_decay, bool decoupled,
               bool bias_correction, std::vector<int> state_dtypes) {
  Batch b = make_batch(std::move(params), std::move(grads), std::move(exp_avgs),
                       std::move(exp_avg_sqs), std::move(copies), std::move(numels),
                       std::move(param_dtypes), std::move(grad_dtypes), std::move(copy_dtypes),
                       std::move(state_dtypes));
  validate(b, true);
  accel::check_non_negative(lr, "lr");
  accel::check_beta(beta1, "beta1");
  accel::check_beta(beta2, "beta2");
  accel::check_eps(eps, "eps");
  accel::check_non_negative(weight_decay, "weight_decay");
  require(steps.size() == b.params.size(), "steps must have one entry per parameter");
  std::vector<AdamScalars> scalars(steps.size());
  for (size_t t = 0; t < steps.size(); ++t) {
    require(steps[t] >= 1, "steps[" + std::to_string(t) + "] must be >= 1");
    const double step = static_cast<double>(steps[t]);
    const double bc1 = bias_correction ? 1.0 - std::pow(beta1, step) : 1.0;
    const double bc2 = bias_correction ? 1.0 - std::pow(beta2, step) : 1.0;
    scalars[t] = AdamScalars{static_cast<float>(1.0 - beta1),
                             static_cast<float>(beta2),
                             static_cast<float>(1.0 - beta2),
                             static_cast<float>(lr / bc1),
                             static_cast<float>(std::sqrt(bc2)),
                             static_cast<float>(eps),
                             static_cast<float>(weight_decay),
                             static_cast<float>(1.0 - lr * weight_decay),
                             decoupled};
  }
  run(
      b,
      [&](float* p, const float* g, float* m, float* v, size_t t, int64_t n) {
        adam_any(kFloat32, kFloat32, kFloat32, p, g, m, v, n, scalars[t]);
      },
      [&](void* p, const void* g, size_t t, int64_t begin, int64_t n) {
        const int sdt = b.state_dtypes[t];
        return adam_any(b.param_dtypes[t], b.grad_dtypes[t], sdt, p, g, element_at(b.state1[t], begin, sdt),
                        element_at(b.state2[t], begin, sdt), n, scalars[t]);
      });
}

void adagrad_step(std::vector<uintptr_t> params, std::vector<uintptr_t> grads,
                  std::vector<uintptr_t> sums, std::vector<uintptr_t> copies,
                  std::vector<int64_t> numels, std::vector<int> param_dtypes,
                  std::vector<int> grad_dtypes, std::vector<int> copy_dtypes,
                  std::vector<int64_t> steps, double lr, double lr_decay, double eps,
                  double weight_decay, std::vector<int> state_dtypes) {
  Batch b = make_batch(std::move(params), std::move(grads), std::move(sums), {},
                       std::move(copies), std::move(numels), std::move(param_dtypes),
                       std::move(grad_dtypes), std::move(copy_dtypes), std::move(state_dtypes));
  validate(b, false);
  accel::check_non_negative(lr, "lr");
  accel::check_non_negative(lr_decay, "lr_decay");
  accel::check_eps(eps, "eps");
  accel::check_non_negative(weight_decay, "weight_decay");
  require(steps.size() == b.params.size(), "steps must have one entry per parameter");
  std::vector<AdagradScalars> scalars(steps.size());
  for (size_t t = 0; t < steps.size(); ++t) {
    require(steps[t] >= 1, "steps[" + std::to_string(t) + "] must be >= 1");
    const double clr = lr / (1.0 + static_cast<double>(steps[t] - 1) * lr_decay);
    scalars[t] = AdagradScalars{static_cast<float>(clr), static_cast<float>(eps),
                                static_cast<float>(weight_decay)};
  }
  run(b, [&](float* p, const float* g, float* sum, float*, size_t t, int64_t n) {
    adagrad_kernel(p, g, sum, n, scalars[t]);
  });
}

void lion_step(std::vector<uintptr_t> params, std::vector<uintptr_t> grads,
               std::vector<uintptr_t> exp_avgs, std::vector<uintptr_t> copies,
               std::vector<int64_t> numels, std::vector<int> param_dtypes,
               std::vector<int> grad_dtypes, std::vector<int> copy_dtypes, double lr,
               double beta1, double beta2, double weight_decay, std::vector<int> state_dtypes) {
  Batch b = make_batch(std::move(params), std::move(grads), std::move(exp_avgs), {},
                       std::move(copies), std::move(numels), std::move(param_dtypes),
                       std::move(grad_dtypes), std::move(copy_dtypes), std::move(state_dtypes));
  validate(b, false);
  accel::check_non_negative(lr, "lr");
  accel::check_beta(beta1, "beta1");
  accel::check_beta(beta2, "beta2");
  accel::check_non_negative(weight_decay, "weight_decay");
  const LionScalars s{static_cast<float>(beta1),        static_cast<float>(1.0 - beta1),
                      static_cast<float>(beta2),        static_cast<float>(1.0 - beta2),
                      static_cast<float>(lr),           static_cast<float>(1.0 - lr * weight_decay)};
  run(b, [&](float* p, const float* g, float* m, float*, size_t, int64_t n) { lion_kernel(p, g, m, n, s); });
}

// Memory-bandwidth probe for benchmarks: x = x * a in place, threaded like the steps. Its
// time per byte is the roofline an optimizer step (pure streaming) can approach.
ACCEL_KERNEL_BODY void scale_kernel_body(float* __restrict x, int64_t n, float a) {
  for (int64_t i = 0; i < n; ++i) x[i] *= a;
}
ACCEL_DISPATCHED(scale_kernel, (float* __restrict x, int64_t n, float a), (x, n, a))

void scale_in_place(uintptr_t data, int64_t numel, float factor) {
  require(numel >= 0, "numel must be >= 0");
  require(numel == 0 || data != 0, "null buffer");
  float* x = reinterpret_cast<float*>(data);
  const int64_t chunks = (numel + kMinChunk - 1) / kMinChunk;
  py::gil_scoped_release released;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kMinChunk;
    scale_kernel(x + begin, std::min(kMinChunk, numel - begin), factor);
  }
}

// "x86-64-v3 (AVX2+FMA+F16C)", and what capped it when ACCEL_CPU_ISA did.
std::string simd_level() {
  static const char* const kDescriptions[] = {"baseline (SSE2)", "x86-64-v3 (AVX2+FMA+F16C)", "x86-64-v4 (AVX-512)"};
  std::string level = ACCEL_X86_GCC ? kDescriptions[accel::isa()] : "baseline (compiler auto-vectorisation)";
  if (accel::isa() < accel::cpu_isa())
    level += std::string(", capped by ACCEL_CPU_ISA; the CPU has ") + accel::isa_name(accel::cpu_isa());
  return level;
}

// After fork() the child has no OpenMP worker threads, and libgomp can hang the first
// parallel region that expects them; a single thread is always safe.
void single_thread_after_fork() { omp_set_num_threads(1); }

}  // namespace

PYBIND11_MODULE(_cpu_optim, m) {
  m.doc() = "accel's prebuilt CPU optimizer kernels (no libtorch; see accel/ops/cpu_optim.py)";
  accel::export_isa(m);
  pthread_atfork(nullptr, nullptr, single_thread_after_fork);
  accel::export_dtypes(m);
  // state_dtypes: one dtype code per parameter for all its states; left out, all float32.
  const auto state_dtypes = py::arg("state_dtypes") = std::vector<int>();
  m.def("adam_step", &adam_step, "Adam/AdamW step over many tensors.", py::arg("params"), py::arg("grads"),
        py::arg("exp_avgs"), py::arg("exp_avg_sqs"), py::arg("copies"), py::arg("numels"), py::arg("param_dtypes"),
        py::arg("grad_dtypes"), py::arg("copy_dtypes"), py::arg("steps"), py::kw_only(), py::arg("lr"),
        py::arg("beta1"), py::arg("beta2"), py::arg("eps"), py::arg("weight_decay"), py::arg("decoupled"),
        py::arg("bias_correction"), state_dtypes);
  m.def("adagrad_step", &adagrad_step, "Adagrad step over many tensors.", py::arg("params"), py::arg("grads"),
        py::arg("sums"), py::arg("copies"), py::arg("numels"), py::arg("param_dtypes"), py::arg("grad_dtypes"),
        py::arg("copy_dtypes"), py::arg("steps"), py::kw_only(), py::arg("lr"), py::arg("lr_decay"), py::arg("eps"),
        py::arg("weight_decay"), state_dtypes);
  m.def("lion_step", &lion_step, "Lion step over many tensors.", py::arg("params"), py::arg("grads"),
        py::arg("exp_avgs"), py::arg("copies"), py::arg("numels"), py::arg("param_dtypes"), py::arg("grad_dtypes"),
        py::arg("copy_dtypes"), py::kw_only(), py::arg("lr"), py::arg("beta1"), py::arg("beta2"),
        py::arg("weight_decay"), state_dtypes);
  m.def("scale_in_place", &scale_in_place,
        "x *= factor over a float32 buffer: the read-modify-write bandwidth probe.", py::arg("data"),
        py::arg("numel"), py::arg("factor"));
  m.def("simd_level", &simd_level, "The instruction set the kernels run with on this CPU.");
  m.def("max_threads", []() { return omp_get_max_threads(); },
        "OpenMP threads a step may use.");
  accel::export_step_channel(m);
}
