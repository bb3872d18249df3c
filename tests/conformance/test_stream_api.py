"""StreamAPI: streams switch, events order and time work. Runs on backends that claim it."""

from __future__ import annotations

import pytest
import torch

from accel.protocols import Accelerator, StreamAPI
from tests.conftest import require


@pytest.fixture
def streams(accelerator: Accelerator) -> StreamAPI:
    require(accelerator, StreamAPI)
    assert isinstance(accelerator, StreamAPI)
    return accelerator


def test_factories_return_torch_streams_and_events(streams: StreamAPI) -> None:
    assert isinstance(streams.Stream(), torch.Stream)
    assert isinstance(streams.current_stream(), torch.Stream)
    assert isinstance(streams.default_stream(), torch.Stream)
    assert isinstance(streams.Event(), torch.Event)


def test_stream_context_switches_and_restores(streams: StreamAPI) -> None:
    before = streams.current_stream()
    side = streams.Stream()
    with streams.stream(side):
        assert streams.current_stream() == side
    assert streams.current_stream() == before
    with streams.stream(None):
        assert streams.current_stream() == before


def test_work_on_a_side_stream_is_ordered_by_events(
    streams: StreamAPI, accelerator: Accelerator
) -> None:
    device = accelerator.current_device_name()
    side = streams.Stream()
    done = streams.Event()
    with streams.stream(side):
        result = torch.arange(1 << 20, device=device, dtype=torch.float64).sum()
        done.record()
    streams.current_stream().wait_event(done)
    assert float(result) == (1 << 20) * ((1 << 20) - 1) / 2


def test_elapsed_time_is_never_negative(streams: StreamAPI, accelerator: Accelerator) -> None:
    start, end = streams.Event(enable_timing=True), streams.Event(enable_timing=True)
    start.record()
    torch.ones(1 << 20, device=accelerator.current_device_name()).mul_(2)
    end.record()
    end.synchronize()
    assert start.elapsed_time(end) >= 0


def test_bad_stream_is_rejected(streams: StreamAPI) -> None:
    with pytest.raises(TypeError, match="stream"):
        streams.stream("side")  # type: ignore[arg-type]
