// The one table of element types the extensions understand. Python reads it from each
// module's DTYPES attribute (see bindings.h and accel/ops/_dtypes.py), so the codes are
// written down once.
#pragma once

#include <cstdint>

namespace accel {

enum DType : int { kFloat32 = 0, kBFloat16 = 1, kFloat16 = 2 };

struct DTypeInfo {
  DType code;
  const char* name;  // torch's attribute name: torch.float32, torch.bfloat16, torch.float16
  int64_t size;      // bytes per element
};

constexpr DTypeInfo kDTypes[] = {
    {kFloat32, "float32", 4},
    {kBFloat16, "bfloat16", 2},
    {kFloat16, "float16", 2},
};

inline bool is_dtype(int code) { return code == kFloat32 || code == kBFloat16 || code == kFloat16; }

// For error messages: the name, never the bare code, for any int.
inline const char* dtype_name(int code) { return is_dtype(code) ? kDTypes[code].name : "an unknown dtype"; }

inline int64_t dtype_size(int code) { return is_dtype(code) ? kDTypes[code].size : 0; }

}  // namespace accel
