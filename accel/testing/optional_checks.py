"""The optional capabilities' checks under the module name of accel 0.1 (they now live in
:mod:`accel.testing.checks`, one module per capability)."""

from __future__ import annotations

from accel.testing.checks.generic import (
    members_are_real,
    no_partial_capabilities,
)
from accel.testing.checks.graph import (
    graph_replay_recomputes,
)
from accel.testing.checks.op_builder import (
    op_builders_load_or_explain,
)
from accel.testing.checks.profiler import (
    profiler_ranges_nest,
)
from accel.testing.checks.stream import (
    event_timing_is_never_negative,
    events_order_streams,
    stream_context_switches_and_restores,
    stream_factories_return_torch_types,
)

__all__ = [
    "event_timing_is_never_negative",
    "events_order_streams",
    "graph_replay_recomputes",
    "members_are_real",
    "no_partial_capabilities",
    "op_builders_load_or_explain",
    "profiler_ranges_nest",
    "stream_context_switches_and_restores",
    "stream_factories_return_torch_types",
]
