"""StreamAPI: streams and events (only on backends that claim it)."""

from __future__ import annotations

import contextlib

import torch
from hypothesis import strategies as st

from accel.protocols import (
    Accelerator,
    StreamAPI,
)
from accel.testing._framework import check
from accel.testing.checks._helpers import holds, ill_typed, raises


def _streams(acc: Accelerator) -> StreamAPI:
    assert isinstance(acc, StreamAPI)
    return acc


def _device_indices(acc: Accelerator) -> st.SearchStrategy[int]:
    return st.integers(min_value=0, max_value=acc.device_count() - 1)


@check(StreamAPI, "Stream/Event/current_stream/default_stream")
def stream_factories_return_torch_types(acc: Accelerator) -> None:
    """``Stream``, ``current_stream`` and ``default_stream`` give a ``torch.Stream`` on every
    device, and ``Event`` a ``torch.Event``.
    """
    s = _streams(acc)

    def body(index: int, timing: bool) -> None:
        for name, made, kind in (("Stream", s.Stream(index), torch.Stream), ("current_stream", s.current_stream(index), torch.Stream),
                                 ("default_stream", s.default_stream(index), torch.Stream), ("Event", s.Event(enable_timing=timing), torch.Event)):  # fmt: skip
            assert isinstance(made, kind), (
                f"{name}() returned {type(made).__name__}, not {kind.__name__}"
            )

    holds(body, index=_device_indices(acc), timing=st.booleans())


@check(StreamAPI, "stream")
def stream_context_switches_and_restores(acc: Accelerator) -> None:
    """Nested ``stream(side)`` blocks make ``side`` current and restore the previous stream on
    exit; what is not a stream is rejected.
    """
    s = _streams(acc)

    def body(depth: int) -> None:
        before = s.current_stream()
        sides = [s.Stream() for _ in range(depth)]
        with contextlib.ExitStack() as stack:
            for level, side in enumerate(sides):
                stack.enter_context(s.stream(side))
                assert s.current_stream() == side, (
                    f"inside stream(side) at depth {level + 1}, current_stream() is not side"
                )
        assert s.current_stream() == before, "stream() did not restore the previous stream"

    holds(body, depth=st.integers(min_value=1, max_value=4))
    raises(TypeError, "stream", lambda: ill_typed(s).stream("side"))


@check(StreamAPI, "Event.elapsed_time")
def event_timing_is_never_negative(acc: Accelerator) -> None:
    """``elapsed_time`` between two timing events recorded in order is never negative."""
    s = _streams(acc)

    def body(elements: int) -> None:
        start, end = s.Event(enable_timing=True), s.Event(enable_timing=True)
        start.record()
        torch.ones(elements, device=acc.current_device_name()).mul_(2)
        end.record()
        end.synchronize()
        elapsed = start.elapsed_time(end)
        assert elapsed >= 0, f"elapsed_time() between two ordered events is {elapsed}"

    holds(body, elements=st.integers(min_value=1, max_value=1 << 20))


@check(StreamAPI, "Event.record/wait_event")
def events_order_streams(acc: Accelerator) -> None:
    """Work on a side stream that the current stream waits for through an event is complete when
    the current stream reads it.
    """
    s = _streams(acc)

    def body(elements: int) -> None:
        side, done = s.Stream(), s.Event()
        with s.stream(side):
            result = torch.arange(
                elements, device=acc.current_device_name(), dtype=torch.float64
            ).sum()
            done.record()
        s.current_stream().wait_event(done)
        assert float(result) == elements * (elements - 1) / 2, (
            "work ordered by an event gave a wrong result"
        )

    holds(body, elements=st.integers(min_value=1, max_value=1 << 16))


@check(StreamAPI, "Stream.synchronize/query/wait_stream, Event.synchronize/query/wait")
def synchronizing_completes_work(acc: Accelerator) -> None:
    """After ``Stream.synchronize()`` the stream's work is done and its ``query()`` is True;
    after ``Event.synchronize()`` the event's ``query()`` is True; ``wait_stream`` and
    ``Event.wait`` order the current stream after a side stream's work.
    """
    s = _streams(acc)

    def body(elements: int) -> None:
        side, done = s.Stream(), s.Event()
        with s.stream(side):
            values = torch.full((elements,), 2.0, device=acc.current_device_name()).mul_(3)
            done.record()
        side.synchronize()
        answer = side.query()
        assert answer is True, f"Stream.query() is {answer!r} after the stream's synchronize()"
        done.synchronize()
        answer = done.query()
        assert answer is True, f"Event.query() is {answer!r} after the event's synchronize()"
        current = s.current_stream()
        current.wait_stream(side)
        done.wait()
        current.synchronize()
        answer = current.query()
        assert answer is True, f"Stream.query() is {answer!r} after the stream's synchronize()"
        assert float(values.sum()) == 6.0 * elements, "work on a synchronized stream is wrong"

    holds(body, elements=st.integers(min_value=1, max_value=1 << 16))
