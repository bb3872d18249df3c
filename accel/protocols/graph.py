"""GraphAPI: capture a sequence of device work once, replay it without launch overhead."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from typing_extensions import Protocol, runtime_checkable

from accel.protocols._fast import fast_protocol

if TYPE_CHECKING:
    import torch


class Graph(Protocol):
    """A captured graph handle (``torch.cuda.CUDAGraph``, ``torch.accelerator.Graph``, ...)."""

    def replay(self) -> None:
        """Run the captured work again on the tensors it captured."""
        ...

    def reset(self) -> None:
        """Release the captured work and its memory pool."""
        ...


@fast_protocol
@runtime_checkable
class GraphAPI(Protocol):
    """Graph capture and replay."""

    def create_graph(self) -> Graph:
        """A new, empty graph.

        Returns:
            A graph to pass to :meth:`capture_to_graph`.
        """
        ...

    def capture_to_graph(
        self,
        graph: Graph,
        pool: tuple[int, int] | None = None,
        stream: torch.Stream | None = None,
    ) -> AbstractContextManager[None]:
        """Record the device work issued inside the ``with`` block into ``graph``.

        Args:
            graph: A graph from :meth:`create_graph` of this accelerator.
            pool: A memory pool to share with another graph (``graph.pool()``).
            stream: The stream to capture on; ``None`` leaves the choice to the backend.

        Returns:
            The capture context manager.

        Raises:
            TypeError: ``graph`` is not a graph of this accelerator's kind.
        """
        ...

    def replay_graph(self, graph: Graph) -> None:
        """Replay a captured graph.

        Args:
            graph: A graph captured with :meth:`capture_to_graph`.

        Raises:
            TypeError: ``graph`` is not a graph of this accelerator's kind.
        """
        ...
