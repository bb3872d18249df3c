// The Adam/AdamW step compiled for each vector level (adam_level.inc, inside the level's
// `#pragma GCC target` region): accel::adam_v4::adam_step and accel::adam_v3::adam_step.
// cpu_optim.cpp dispatches to them; benchmarks/native_kernels.cpp times them.
#pragma once

#include "../common/dtypes.h"
#include "../common/simd.h"
#include "../common/vec.h"
#include "adam_scalars.h"

#include <cstdint>

#if ACCEL_X86_GCC
ACCEL_BEGIN_V4
namespace accel {
namespace adam_v4 {
#define LEVEL v4
#include "adam_level.inc"
#undef LEVEL
}  // namespace adam_v4
}  // namespace accel
ACCEL_END_LEVEL

ACCEL_BEGIN_V3
namespace accel {
namespace adam_v3 {
#define LEVEL v3
#include "adam_level.inc"
#undef LEVEL
}  // namespace adam_v3
}  // namespace accel
ACCEL_END_LEVEL
#endif  // ACCEL_X86_GCC
