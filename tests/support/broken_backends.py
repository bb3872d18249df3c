"""Sample backends, each broken in one way the conformance kit must catch.

All start from the (honest) CPU backend and break one promise, so each report should
contain the violation of that promise.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from typing import Any

import torch

from accel.backends.cpu import CPUAccelerator


class LeakyRNGState(CPUAccelerator):
    """set_rng_state() validates its argument, then forgets to restore it."""

    def set_rng_state(self, new_state: torch.Tensor, device_index: int | None = None) -> None:
        torch.zeros(0).add_(0)  # does some work, but not the restore


class DriftingSeed(CPUAccelerator):
    """manual_seed() mixes in a call counter: the same seed never repeats."""

    _calls = itertools.count()

    def manual_seed(self, seed: int) -> None:
        super().manual_seed((seed + next(self._calls)) % 2**64)


class LowPeak(CPUAccelerator):
    """max_memory_allocated() reports half the current usage."""

    def max_memory_allocated(self, device_index: int | None = None) -> int:
        return self.memory_allocated(device_index) // 2


class MisnamedDevice(CPUAccelerator):
    """device() and device_name() name different devices."""

    def device(self, device_index: int | None = None) -> torch.device:
        return torch.device("meta")


class OverclaimedDTypes(CPUAccelerator):
    """supported_dtypes() lists float16 while is_fp16_supported() says no."""

    def is_fp16_supported(self) -> bool:
        return False

    def supported_dtypes(self) -> list[torch.dtype]:
        return [torch.float32, torch.bfloat16, torch.float16]


class StubbedProfiler(CPUAccelerator):
    """Claims ProfilerAPI, but range_push() is a stub."""

    def range_push(self, msg: str) -> None:
        raise NotImplementedError


class NoneForMemory(CPUAccelerator):
    """total_memory() returns None where an int is typed."""

    def total_memory(self, device_index: int | None = None) -> int:
        return None  # type: ignore[return-value]


class HalfAGraphAPI(CPUAccelerator):
    """Offers create_graph() without the rest of GraphAPI: a capability that cannot be used."""

    def create_graph(self) -> Any:  # type: ignore[override]
        return object()


class _FakeEvent(torch.Event):
    elapsed = 1.0

    def record(self, stream: Any = None) -> None:
        return None

    def synchronize(self) -> None:
        return None

    def query(self) -> bool:
        return True

    def elapsed_time(self, end_event: Any) -> float:
        return self.elapsed


class _FakeStream(torch.Stream):
    def wait_event(self, event: Any) -> None:
        return None  # CPU work is already done when it returns

    def wait_stream(self, stream: Any) -> None:
        return None


class FakeStreams(CPUAccelerator):
    """Streams and events that are honest for a synchronous device (ordering is trivial)."""

    event_class: type[_FakeEvent] = _FakeEvent

    def __init__(self) -> None:
        super().__init__()
        self._default = _FakeStream()
        self._current: list[torch.Stream] = [self._default]

    def Stream(self, device_index: int | None = None, priority: int = 0) -> torch.Stream:  # type: ignore[override]
        return _FakeStream()

    def Event(
        self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False
    ) -> torch.Event:  # type: ignore[override]
        return self.event_class()

    @contextlib.contextmanager
    def _switch(self, stream: torch.Stream) -> Iterator[None]:
        self._current.append(stream)
        try:
            yield
        finally:
            self._current.pop()

    def stream(self, stream: torch.Stream | None) -> contextlib.AbstractContextManager[None]:  # type: ignore[override]
        if stream is not None and not isinstance(stream, torch.Stream):
            raise TypeError(f"stream must be a torch.Stream or None, got {type(stream).__name__}")
        return self._switch(stream) if stream is not None else contextlib.nullcontext()

    def current_stream(self, device_index: int | None = None) -> torch.Stream:  # type: ignore[override]
        return self._current[-1]

    def default_stream(self, device_index: int | None = None) -> torch.Stream:  # type: ignore[override]
        return self._default

    def is_synchronized_device(self) -> bool:
        return False


class _BackwardsEvent(_FakeEvent):
    elapsed = -0.5


class BackwardsClock(FakeStreams):
    """Events whose elapsed time runs backwards."""

    event_class = _BackwardsEvent


class _NeverDoneStream(_FakeStream):
    def synchronize(self) -> None:
        return None  # waits for nothing

    def query(self) -> bool:
        return False  # ... and its work never ends


class NeverDoneStreams(FakeStreams):
    """Streams whose synchronize() leaves work pending for ever."""

    def Stream(self, device_index: int | None = None, priority: int = 0) -> torch.Stream:  # type: ignore[override]
        return _NeverDoneStream()


class RenamedParameter(CPUAccelerator):
    """memory_allocated(index=...): a caller's memory_allocated(device_index=0) fails."""

    def memory_allocated(self, index: int | None = None) -> int:  # type: ignore[override]
        return super().memory_allocated(index)


class InstanceCapability(CPUAccelerator):
    """Adds HostCacheAPI's member to the instance (as if its device had one): isinstance,
    decided per class, then answers for every instance of the class."""

    def __init__(self) -> None:
        super().__init__()
        self.empty_host_cache = lambda: None


class FrozenUsage(CPUAccelerator):
    """memory_allocated() (and reserved) stay put whatever lives."""

    def memory_allocated(self, device_index: int | None = None) -> int:
        return 4096

    def memory_reserved(self, device_index: int | None = None) -> int:
        return 4096


class ReservedBelowAllocated(CPUAccelerator):
    """memory_reserved() is 0: the allocator holds less than it hands out."""

    def memory_reserved(self, device_index: int | None = None) -> int:
        return 0


class UnrelatedStats(CPUAccelerator):
    """memory_stats() says 7 bytes are allocated, whatever memory_allocated() says."""

    def memory_stats(self, device_index: int | None = None) -> dict[str, int]:
        return {**super().memory_stats(device_index), "allocated_bytes.all.current": 7}


class ExportsWithoutAccel(CPUAccelerator):
    """export_envs() leaves out ACCEL, so ACCEL_BACKEND would not reach remote ranks."""

    def export_envs(self) -> list[str]:
        return ["MASTER"]


class _FrozenGraph:
    def replay(self) -> None:
        return None  # replays nothing

    def reset(self) -> None:
        return None


class FrozenGraph(CPUAccelerator):
    """A graph API whose capture records nothing and whose replay does nothing."""

    def create_graph(self) -> Any:  # type: ignore[override]
        return _FrozenGraph()

    def capture_to_graph(self, graph: Any, pool: Any = None, stream: Any = None) -> Any:  # type: ignore[override]
        return contextlib.nullcontext()

    def replay_graph(self, graph: Any) -> None:  # type: ignore[override]
        if not isinstance(graph, _FrozenGraph):
            raise TypeError(f"graph must come from create_graph(), got {type(graph).__name__}")
        graph.replay()


class LenientIndex(CPUAccelerator):
    """Names two devices by index ("cpu:0", "cpu:1"), and set_device takes any index past
    them."""

    _current = 0

    def device_name(self, device_index: int | None = None) -> str:
        name = super().device_name(device_index)
        return name if device_index is None else f"{name}:{device_index}"

    def device(self, device_index: int | None = None) -> torch.device:
        return torch.device(self.device_name(device_index))

    def device_count(self) -> int:
        return 2

    def current_device(self) -> int:
        return self._current

    def set_device(self, device_index: Any) -> None:
        super().set_device(device_index)  # refuses negative and ill-typed indices
        self._current = device_index


class FloatPeak(CPUAccelerator):
    """max_memory_allocated() is a float."""

    def max_memory_allocated(self, device_index: int | None = None) -> int:
        return super().max_memory_allocated(device_index) + 0.5  # type: ignore[return-value]


class BoolReserved(CPUAccelerator):
    """memory_reserved() is a bool (which Python counts as an int)."""

    def memory_reserved(self, device_index: int | None = None) -> int:
        super().memory_reserved(device_index)
        return True


class FloatSeed(CPUAccelerator):
    """initial_seed() is a float."""

    def initial_seed(self) -> int:
        return float(super().initial_seed())  # type: ignore[return-value]


class WordyPinned(CPUAccelerator):
    """is_pinned() answers "yes"."""

    def is_pinned(self, tensor: torch.Tensor) -> bool:
        return "yes"  # type: ignore[return-value]


class NoDevices(CPUAccelerator):
    """Available, yet counts no device."""

    def device_count(self) -> int:
        return 0
