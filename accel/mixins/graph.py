"""GraphAPI: the No-marker for devices without graphs, and device-module graphs.

The No-mixin works as ``NoStreamMixin`` does (see ``accel.mixins.stream``). For graphs,
CUDA names them ``torch.cuda.CUDAGraph`` / ``torch.cuda.graph`` and XPU
``torch.xpu.XPUGraph`` / ``torch.xpu.graph``: the class is ``<TYPE>Graph``.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Generator
from contextlib import AbstractContextManager
from typing import Any, ClassVar

import torch

from accel._device_module import device_module
from accel._signatures import takes_keyword, takes_positional
from accel.protocols._contract import implements
from accel.protocols._unsupported import Absence, AbsentMembers

# Aliased: inside TorchGraphMixin, `Graph` is the factory method.
from accel.protocols.graph import CaptureErrorMode, CaptureGraph, GraphAPI, GraphObjectAPI
from accel.protocols.graph import Graph as GraphHandle

CAPTURE_ERROR_MODES = ("default", "global", "thread_local", "relaxed")

_WHY = "the device cannot capture and replay graphs"


class NoGraphMixin(AbsentMembers):
    """The device cannot capture and replay graphs (members annotated ``None``, absent)."""

    _accel_absent = (
        Absence("GraphAPI", "supports_graphs", _WHY,
                ("create_graph", "capture_to_graph", "replay_graph")),
        Absence("GraphObjectAPI", "", _WHY, ("Graph",)),
    )  # fmt: skip
    create_graph: None
    capture_to_graph: None
    replay_graph: None
    Graph: None


def module_graph_class(device_type: str) -> type | None:
    """The device module's own graph class (with its ``graph`` capture context), or ``None``.

    Args:
        device_type: A torch device type, e.g. ``"cuda"``.

    Returns:
        ``torch.<device_type>.<DEVICE_TYPE>Graph`` when it is a class and the module has a
        callable ``graph``; else ``None``.

    Raises:
        RuntimeError: torch has no ``torch.<device_type>`` module.
    """
    module = device_module(device_type)
    cls = getattr(module, f"{device_type.upper()}Graph", None)
    return cls if isinstance(cls, type) and callable(getattr(module, "graph", None)) else None


@functools.cache
def accelerator_graph_class(device_type: str) -> type | None:
    """``torch.accelerator.Graph`` when ``device_type`` is torch's current accelerator and a
    graph can be made on it (torch >= 2.10 offers it for any accelerator that implements
    capture); else ``None``. Asked once per device type: it makes one empty graph.

    Args:
        device_type: A torch device type, e.g. ``"cuda"``.

    Returns:
        ``torch.accelerator.Graph``, or ``None`` (also for a device type torch does not
        know).
    """
    cls = getattr(torch.accelerator, "Graph", None)
    current = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
    if not isinstance(cls, type) or current is None or current.type != device_type:
        return None
    try:
        cls()
    except (RuntimeError, NotImplementedError):  # the device implements no capture
        return None
    return cls


def graph_class(device_type: str) -> type | None:
    """The graph class for ``device_type``: its module's own, else torch.accelerator's.

    Args:
        device_type: A torch device type, e.g. ``"cuda"``.

    Returns:
        :func:`module_graph_class`'s answer, else :func:`accelerator_graph_class`'s; ``None``
        when the device has neither.

    Raises:
        RuntimeError: torch has no ``torch.<device_type>`` module.
    """
    return module_graph_class(device_type) or accelerator_graph_class(device_type)


@functools.cache
def capture_graph_class(device_type: str) -> type | None:
    """A graph class with ``torch.accelerator.Graph``'s shape for ``device_type``.

    Where the device module has its own graph class (``torch.cuda.CUDAGraph``), a subclass
    of it that takes ``keep_graph``, ``pool`` and ``capture_error_mode`` when made and
    captures as a ``with`` block, so ``create_graph``/``capture_to_graph`` accept it too;
    else ``torch.accelerator.Graph`` where the device captures through it.

    Args:
        device_type: A torch device type, e.g. ``"cuda"``.

    Returns:
        The class, or ``None`` when the device has no graphs.

    Raises:
        RuntimeError: torch has no ``torch.<device_type>`` module.
    """
    base = module_graph_class(device_type)
    if base is None:
        return accelerator_graph_class(device_type)
    module = device_module(device_type)

    # torch.cuda.CUDAGraph takes keep_graph and capture_error_mode; torch.xpu.XPUGraph no
    # capture_error_mode; torch_npu's NPUGraph no keep_graph; Gaudi's HPUGraph neither.
    found: Any = base
    base_name = f"torch.{device_type}.{found.__name__}"
    takes_keep = takes_positional(found.__init__, bound=True)
    takes_mode = takes_keyword(found.capture_begin, "capture_error_mode")
    takes_pool = takes_keyword(found.capture_begin, "pool")

    class DeviceGraph(base):  # type: ignore[misc, valid-type]  # a class found at run time
        """``torch.<type>.<TYPE>Graph`` with ``torch.accelerator.Graph``'s shape."""

        def __new__(cls, keep_graph: bool = False, *_: Any, **__: Any) -> Any:
            # torch's graph classes take only keep_graph when made: __init__ keeps the rest
            # (object.__new__, Gaudi's, takes nothing more).
            passed = (keep_graph,) if takes_keep and found.__new__ is not object.__new__ else ()
            return super().__new__(cls, *passed)  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]

        def __init__(
            self,
            keep_graph: bool = False,
            *,
            pool: tuple[int, int] | None = None,
            capture_error_mode: CaptureErrorMode = "default",
        ) -> None:
            if keep_graph and not takes_keep:
                raise ValueError(
                    f"keep_graph=True: {base_name} keeps no graph "
                    "after capture; expected keep_graph=False on this device"
                )
            if pool is not None and not takes_pool:
                raise ValueError(
                    f"pool={pool!r}: {base_name} shares no memory "
                    "pools; expected pool=None on this device"
                )
            if capture_error_mode != "default" and not takes_mode:
                raise ValueError(
                    f"capture_error_mode={capture_error_mode!r}: {base_name}.capture_begin "
                    "takes no capture_error_mode; expected "
                    "'default' on this device"
                )
            if takes_keep:
                super().__init__(keep_graph)  # pyright: ignore[reportUnknownMemberType]
            else:
                super().__init__()  # pyright: ignore[reportUnknownMemberType]
            self.graph_pool = pool
            self.capture_error_mode = capture_error_mode

        def capture_begin(
            self, pool: Any = None, capture_error_mode: Any = None, **kwargs: Any
        ) -> None:
            """Start capturing with the settings given when the graph was made (or these);
            other keywords (``torch.cuda.graph`` passes ``check_input_liveness``) go to the
            device's own ``capture_begin``."""
            mode = self.capture_error_mode if capture_error_mode is None else capture_error_mode
            extra = dict(kwargs)
            if mode != "default":
                extra["capture_error_mode"] = mode
            chosen = self.graph_pool if pool is None else pool
            if chosen is not None or takes_pool:
                extra["pool"] = chosen
            super().capture_begin(**extra)  # pyright: ignore[reportUnknownMemberType]

        def __enter__(self) -> None:
            # As torch.accelerator.Graph does: nothing queued or cached leaks into the capture.
            module.synchronize()
            module.empty_cache()
            self.capture_begin()

        def __exit__(self, *exc_info: object) -> None:
            self.capture_end()  # pyright: ignore[reportUnknownMemberType]

    DeviceGraph.__name__ = DeviceGraph.__qualname__ = f"{device_type.upper()}CaptureGraph"
    return DeviceGraph


@contextlib.contextmanager
def _accelerator_capture(
    graph: Any, pool: tuple[int, int] | None, stream: torch.Stream | None
) -> Generator[None, None, None]:
    # torch.accelerator.Graph captures on the current stream with the pool it holds.
    graph.graph_pool = pool
    with contextlib.ExitStack() as context:
        if stream is not None:
            context.enter_context(stream)  # a torch.Stream is a context manager
        graph.capture_begin()
        try:
            yield
        finally:
            graph.capture_end()


@implements(GraphAPI, GraphObjectAPI)
class TorchGraphMixin:
    """Capture and replay with the device module's graphs, else ``torch.accelerator.Graph``."""

    device_type: ClassVar[str]

    def _checked(self, graph: GraphHandle) -> GraphHandle:
        expected = graph_class(self.device_type)
        if expected is None or not isinstance(graph, expected):
            raise TypeError(
                f"graph must be a graph from create_graph() on {self.device_type}, "
                f"got {type(graph).__name__}"
            )
        return graph

    def create_graph(self) -> GraphHandle:
        """An instance of the device module's graph class, else ``torch.accelerator.Graph``;
        ``RuntimeError`` where the device has neither."""
        cls = graph_class(self.device_type)
        if cls is None:
            raise RuntimeError(f"torch.{self.device_type} has no graph class")
        graph: GraphHandle = cls()
        return graph

    def capture_to_graph(
        self,
        graph: GraphHandle,
        pool: tuple[int, int] | None = None,
        stream: torch.Stream | None = None,
    ) -> AbstractContextManager[None]:
        """``torch.<type>.graph(graph, pool=pool, stream=stream)`` where the device module has
        graphs, else ``capture_begin``/``capture_end`` of ``torch.accelerator.Graph`` (which
        captures on the current stream where ``stream`` is ``None``)."""
        checked = self._checked(graph)
        if module_graph_class(self.device_type) is None:
            return _accelerator_capture(checked, pool, stream)
        capture = device_module(self.device_type).graph
        if takes_keyword(capture, "pool"):
            context: AbstractContextManager[None] = capture(checked, pool=pool, stream=stream)
            return context
        if pool is not None:  # Gaudi's torch.hpu.graph(hpu_graph, stream, dry_run)
            raise ValueError(
                f"pool={pool!r}: torch.{self.device_type}.graph shares no memory pools; "
                "expected pool=None on this device"
            )
        context = capture(checked, stream=stream)
        return context

    def Graph(
        self,
        keep_graph: bool = False,
        *,
        pool: tuple[int, int] | None = None,
        capture_error_mode: CaptureErrorMode = "default",
    ) -> CaptureGraph:
        """An instance of :func:`capture_graph_class`; ``RuntimeError`` where the device has no
        graph class."""
        if not isinstance(keep_graph, bool):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError(f"keep_graph must be a bool, got {type(keep_graph).__name__}")
        if pool is not None and not (
            isinstance(pool, tuple) and len(pool) == 2 and all(type(p) is int for p in pool)  # pyright: ignore[reportUnnecessaryIsInstance]
        ):
            raise TypeError(f"pool must be None or a pair of ints from graph.pool(), got {pool!r}")
        if capture_error_mode not in CAPTURE_ERROR_MODES:
            raise ValueError(
                f"capture_error_mode must be one of {', '.join(CAPTURE_ERROR_MODES)}, "
                f"got {capture_error_mode!r}"
            )
        cls = capture_graph_class(self.device_type)
        if cls is None:
            raise RuntimeError(f"torch.{self.device_type} has no graph class")
        graph: CaptureGraph = cls(keep_graph, pool=pool, capture_error_mode=capture_error_mode)
        return graph

    def replay_graph(self, graph: GraphHandle) -> None:
        """``graph.replay()``."""
        self._checked(graph).replay()
