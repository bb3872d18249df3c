// What every extension module exports besides its functions.
#pragma once

#include <pybind11/pybind11.h>

#include "dtypes.h"

namespace accel {

// module.DTYPES = {"float32": 0, "bfloat16": 1, "float16": 2}: Python's only source of codes.
inline void export_dtypes(pybind11::module_& m) {
  pybind11::dict table;
  for (const DTypeInfo& info : kDTypes) table[info.name] = static_cast<int>(info.code);
  m.attr("DTYPES") = table;
}

}  // namespace accel
