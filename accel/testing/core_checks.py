"""The core protocols' checks under the module name of accel 0.1 (they now live in
:mod:`accel.testing.checks`, one module per capability)."""

from __future__ import annotations

from accel.testing.checks._helpers import holds, raises
from accel.testing.checks.device import (
    bad_device_index_is_rejected,
    counts_and_synchronize,
    current_device_round_trips,
    device_name_agrees_with_device,
    device_properties_describe_the_device,
    devices_are_selected_however_torch_names_them,
)
from accel.testing.checks.dtype import (
    dtype_answers_agree,
)
from accel.testing.checks.memory import (
    accumulated_counters_reset,
    memory_rejects_bad_device_index,
    peak_is_real_and_resettable,
    peaks_are_never_below_current,
    sizes_are_consistent,
)
from accel.testing.checks.rng import (
    bad_seeds_and_states_are_rejected,
    fork_rng_restores_every_generator,
    generators_follow_the_seeds,
    rng_state_round_trips,
    seeds_are_deterministic,
)
from accel.testing.checks.runtime import (
    compile_backend_round_trips,
    lazy_call_runs_the_callback,
    runtime_answers,
    visible_devices_env_round_trips,
)
from accel.testing.checks.tensor import (
    tensor_placement_and_staging,
)

__all__ = [
    "accumulated_counters_reset",
    "bad_device_index_is_rejected",
    "bad_seeds_and_states_are_rejected",
    "compile_backend_round_trips",
    "counts_and_synchronize",
    "current_device_round_trips",
    "device_name_agrees_with_device",
    "device_properties_describe_the_device",
    "devices_are_selected_however_torch_names_them",
    "dtype_answers_agree",
    "fork_rng_restores_every_generator",
    "generators_follow_the_seeds",
    "holds",
    "lazy_call_runs_the_callback",
    "memory_rejects_bad_device_index",
    "peak_is_real_and_resettable",
    "peaks_are_never_below_current",
    "raises",
    "rng_state_round_trips",
    "runtime_answers",
    "seeds_are_deterministic",
    "sizes_are_consistent",
    "tensor_placement_and_staging",
    "visible_devices_env_round_trips",
]
