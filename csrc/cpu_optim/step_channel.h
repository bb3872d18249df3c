// A shared-memory channel through which one process asks another to run optimizer steps
// (step_channel.cpp). Part of the _cpu_optim module.
#pragma once

#include <pybind11/pybind11.h>

namespace accel {

// Adds channel_size, channel_init, channel_submit, channel_wait, channel_exit,
// channel_next and channel_complete to the module.
void export_step_channel(pybind11::module_& m);

}  // namespace accel
