"""GraphAPI: the No-marker for devices without graphs, and device-module graphs.

The markers work as ``NoStreamMixin``'s do (see ``accel.mixins.stream``). For graphs,

CUDA names them ``torch.cuda.CUDAGraph`` / ``torch.cuda.graph`` and XPU
``torch.xpu.XPUGraph`` / ``torch.xpu.graph``: the class is ``<TYPE>Graph``.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import ClassVar

import torch

from accel._device_module import device_module
from accel.protocols.graph import Graph


class NoGraphMixin:
    """The device cannot capture and replay graphs (class-level ``None`` markers)."""

    create_graph: None = None
    capture_to_graph: None = None
    replay_graph: None = None


def graph_class(device_type: str) -> type | None:
    """The device module's graph class, or ``None`` when it has none."""
    module = device_module(device_type)
    cls = getattr(module, f"{device_type.upper()}Graph", None)
    return cls if isinstance(cls, type) and callable(getattr(module, "graph", None)) else None


class TorchGraphMixin:
    """Capture and replay with the device module's graphs."""

    device_type: ClassVar[str]

    def _checked(self, graph: Graph) -> Graph:
        expected = graph_class(self.device_type)
        if expected is None or not isinstance(graph, expected):
            raise TypeError(
                f"graph must be a graph from create_graph() on {self.device_type}, "
                f"got {type(graph).__name__}"
            )
        return graph

    def create_graph(self) -> Graph:
        """A new, empty device graph."""
        cls = graph_class(self.device_type)
        if cls is None:
            raise RuntimeError(f"torch.{self.device_type} has no graph class")
        graph: Graph = cls()
        return graph

    def capture_to_graph(
        self,
        graph: Graph,
        pool: tuple[int, int] | None = None,
        stream: torch.Stream | None = None,
    ) -> AbstractContextManager[None]:
        """Record the device work issued inside the ``with`` block into ``graph``."""
        context: AbstractContextManager[None] = device_module(self.device_type).graph(
            self._checked(graph), pool=pool, stream=stream
        )
        return context

    def replay_graph(self, graph: Graph) -> None:
        """Replay a captured graph."""
        self._checked(graph).replay()
