"""GraphAPI: capture a sequence of device work once, replay it without launch overhead."""

from __future__ import annotations

from contextlib import AbstractContextManager
from types import TracebackType
from typing import TYPE_CHECKING, Literal, TypeAlias

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


CaptureErrorMode: TypeAlias = Literal["default", "global", "thread_local", "relaxed"]
"""What a capture may do that could touch other threads, as ``torch.accelerator.Graph`` takes it."""


class CaptureGraph(Graph, Protocol):
    """A graph with ``torch.accelerator.Graph``'s shape: settings given when it is made,
    capture by ``capture_begin``/``capture_end`` or as a ``with`` block on the current
    stream, and ``pool()`` to share its memory pool with another graph."""

    def capture_begin(self) -> None:
        """Start recording the work issued to the current stream, with the pool and capture
        error mode the graph was made with."""
        ...

    def capture_end(self) -> None:
        """Stop recording; unless the graph keeps its graph, make it ready to replay."""
        ...

    def instantiate(self) -> None:
        """Make the recorded graph ready to replay (done by ``capture_end`` unless the graph
        was made with ``keep_graph=True``)."""
        ...

    def pool(self) -> tuple[int, int]:
        """The id of this graph's memory pool, to pass as another graph's ``pool``.

        Returns:
            An opaque pair of ints.
        """
        ...

    def __enter__(self) -> None:
        """:meth:`capture_begin`."""
        ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """:meth:`capture_end`."""
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


@fast_protocol
@runtime_checkable
class GraphObjectAPI(Protocol):
    """Graphs as ``torch.accelerator.Graph`` objects (since API version 3).

    :class:`GraphAPI`'s ``create_graph``/``capture_to_graph`` stay for DeepSpeed's callers;
    a graph made here is accepted by them too.
    """

    def Graph(
        self,
        keep_graph: bool = False,
        *,
        pool: tuple[int, int] | None = None,
        capture_error_mode: CaptureErrorMode = "default",
    ) -> CaptureGraph:
        """A new, empty graph of the current device.

        Args:
            keep_graph: Keep the recorded graph after ``capture_end`` (then ``instantiate``
                or the first ``replay`` makes it ready); ``False`` makes it ready at once.
            pool: Another graph's ``pool()``, to share its memory pool; ``None`` for a pool
                of its own.
            capture_error_mode: What the capture may do that could touch other threads; the
                backend's default for ``"default"``.

        Returns:
            The graph.

        Raises:
            TypeError: ``keep_graph`` is not a ``bool`` or ``pool`` not a pair of ints.
            ValueError: ``capture_error_mode`` is none of the four modes.
        """
        ...
