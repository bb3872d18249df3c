// What every extension module exports besides its functions.
#pragma once

#include <pybind11/pybind11.h>

#include "dtypes.h"
#include "simd.h"

#include <string>

namespace accel {

// module.DTYPES = {"float32": 0, "bfloat16": 1, "float16": 2}: Python's only source of codes.
inline void export_dtypes(pybind11::module_& m) {
  pybind11::dict table;
  for (const DTypeInfo& info : kDTypes) table[info.name] = static_cast<int>(info.code);
  m.attr("DTYPES") = table;
}

// Decide the module's instruction-set level (simd.h) and export isa() and cpu_isa(). A bad
// ACCEL_CPU_ISA fails the import with a message naming it (accel/ops/__init__.py raises
// ValueError for it first; this catches a direct import of the extension).
inline void export_isa(pybind11::module_& m) {
  init_isa();
  m.def("isa", []() { return std::string(isa_name(isa())); },
        "The instruction-set level the kernels use: x86-64-v4, x86-64-v3 or baseline.");
  m.def("cpu_isa", []() { return std::string(isa_name(cpu_isa())); }, "The best instruction-set level this CPU runs.");
}

}  // namespace accel
