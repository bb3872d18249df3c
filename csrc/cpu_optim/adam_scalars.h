// One Adam/AdamW step's scalars, as the kernels take them (cpu_optim.cpp computes them
// from the hyper-parameters and the step count; adam_level.inc reads them).
#pragma once

namespace accel {

struct AdamScalars {
  float lerp_weight;  // 1 - beta1 (torch updates exp_avg with lerp_)
  float beta2, one_minus_beta2;
  float step_size;    // lr / bias_correction1
  float bias_correction2_sqrt;
  float eps;
  float weight_decay;  // L2 (Adam) when !decoupled
  float decay;         // 1 - lr * weight_decay (AdamW) when decoupled
  bool decoupled;
};

}  // namespace accel
