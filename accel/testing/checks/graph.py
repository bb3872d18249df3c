"""GraphAPI: capture and replay (only on backends that claim it)."""

from __future__ import annotations

import torch

from accel.protocols import (
    Accelerator,
    GraphAPI,
    StreamAPI,
)
from accel.testing._framework import check
from accel.testing.checks._helpers import float32s, holds, ill_typed, raises


@check(GraphAPI, "capture_to_graph/replay_graph")
def graph_replay_recomputes(acc: Accelerator) -> None:
    """A graph captured once recomputes ``x * 2 + 1`` from new input on every replay;
    ``replay_graph`` rejects what is not a graph.
    """
    assert isinstance(acc, GraphAPI)
    static_in = torch.zeros(1024, device=acc.current_device_name())
    if isinstance(acc, StreamAPI):  # warm up off the default stream, as torch advises
        side = acc.Stream()
        side.wait_stream(acc.current_stream())
        with acc.stream(side):
            _ = static_in * 2 + 1
        acc.current_stream().wait_stream(side)
    graph = acc.create_graph()
    with acc.capture_to_graph(graph):
        static_out = static_in * 2 + 1

    def body(value: float) -> None:
        static_in.fill_(value)
        acc.replay_graph(graph)
        acc.synchronize()
        got = float(static_out[0])
        expected = float(torch.tensor(value, dtype=torch.float32) * 2 + 1)
        assert got == expected, f"after replay with input {value}, output is {got}, not {expected}"

    holds(body, value=float32s)
    raises(TypeError, "graph", lambda: ill_typed(acc).replay_graph(object()))
