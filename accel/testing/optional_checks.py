"""Checks of the optional capabilities; each runs only on backends that claim the protocol."""

from __future__ import annotations

import inspect
from types import ModuleType

import torch
from typing_extensions import get_protocol_members

from accel.protocols import (
    Accelerator,
    GraphAPI,
    OpBuilderAPI,
    ProfilerAPI,
    StreamAPI,
)
from accel.testing._framework import check
from accel.testing.core_checks import raises

# ---------------------------------------------------------------- StreamAPI


def _streams(acc: Accelerator) -> StreamAPI:
    assert isinstance(acc, StreamAPI)
    return acc


@check(StreamAPI, "Stream/Event/current_stream/default_stream")
def stream_factories_return_torch_types(acc: Accelerator) -> None:
    s = _streams(acc)
    for name, made, kind in (("Stream()", s.Stream(), torch.Stream), ("current_stream()", s.current_stream(), torch.Stream),
                             ("default_stream()", s.default_stream(), torch.Stream), ("Event()", s.Event(), torch.Event)):  # fmt: skip
        assert isinstance(made, kind), f"{name} returned {type(made).__name__}, not {kind.__name__}"


@check(StreamAPI, "stream")
def stream_context_switches_and_restores(acc: Accelerator) -> None:
    s = _streams(acc)
    before = s.current_stream()
    side = s.Stream()
    with s.stream(side):
        assert s.current_stream() == side, "inside stream(side), current_stream() is not side"
    assert s.current_stream() == before, "stream() did not restore the previous stream"
    raises(TypeError, "stream", lambda: s.stream("side"))  # type: ignore[arg-type]


@check(StreamAPI, "Event.elapsed_time")
def event_timing_is_never_negative(acc: Accelerator) -> None:
    s = _streams(acc)
    start, end = s.Event(enable_timing=True), s.Event(enable_timing=True)
    start.record()
    torch.ones(1 << 20, device=acc.current_device_name()).mul_(2)
    end.record()
    end.synchronize()
    elapsed = start.elapsed_time(end)
    assert elapsed >= 0, f"elapsed_time() between two ordered events is {elapsed}"


@check(StreamAPI, "Event.record/wait_event")
def events_order_streams(acc: Accelerator) -> None:
    s = _streams(acc)
    side, done = s.Stream(), s.Event()
    with s.stream(side):
        result = torch.arange(1 << 16, device=acc.current_device_name(), dtype=torch.float64).sum()
        done.record()
    s.current_stream().wait_event(done)
    assert float(result) == (1 << 16) * ((1 << 16) - 1) / 2, (
        "work ordered by an event gave a wrong result"
    )


# ---------------------------------------------------------------- GraphAPI


@check(GraphAPI, "capture_to_graph/replay_graph")
def graph_replay_recomputes(acc: Accelerator) -> None:
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
    for value in (3.0, -1.0):
        static_in.fill_(value)
        acc.replay_graph(graph)
        acc.synchronize()
        got = float(static_out[0])
        assert got == value * 2 + 1, (
            f"after replay with input {value}, output is {got}, not {value * 2 + 1}"
        )
    raises(TypeError, "graph", lambda: acc.replay_graph(object()))  # type: ignore[arg-type]


# ---------------------------------------------------------------- ProfilerAPI


@check(ProfilerAPI, "range_push/range_pop")
def profiler_ranges_nest(acc: Accelerator) -> None:
    assert isinstance(acc, ProfilerAPI)
    acc.range_push("outer")
    acc.range_push("inner")
    acc.range_pop()
    acc.range_pop()
    raises(RuntimeError, "no open range", acc.range_pop)
    raises(TypeError, "msg", lambda: acc.range_push(3))  # type: ignore[arg-type]


# ---------------------------------------------------------------- OpBuilderAPI


@check(OpBuilderAPI, "create_op_builder/get_op_builder/op_builder_names")
def op_builders_load_or_explain(acc: Accelerator) -> None:
    assert isinstance(acc, OpBuilderAPI)
    names = acc.op_builder_names()
    assert names, "op_builder_names() is empty on a backend that claims OpBuilderAPI"
    for name in names:
        builder = acc.create_op_builder(name)
        assert builder is not None, f"create_op_builder({name!r}) is None but the name is listed"
        assert acc.get_op_builder(name) is type(builder), (
            f"get_op_builder({name!r}) is not the builder's class"
        )
        if builder.is_compatible():
            assert builder.incompatibility_reason() is None, (
                f"{name} is compatible but gives a reason"
            )
            assert isinstance(builder.load(), ModuleType), f"{name}.load() did not return a module"
        else:
            assert builder.incompatibility_reason(), f"{name} is incompatible without a reason"
            raises(RuntimeError, "cannot load", builder.load)
    assert acc.create_op_builder("NoSuchBuilder") is None, (
        "an unknown builder name did not give None"
    )


# ---------------------------------------------------------------- every protocol

# Members that may not be called bare: they need a state the check cannot set up.
_PRECONDITIONS = {"range_pop"}


def members_are_real(acc: Accelerator, protocol: type) -> None:
    """Claimed members run without NotImplementedError and return a value where one is typed."""
    for member in sorted(get_protocol_members(protocol)):
        declared = getattr(protocol, member)
        signature = inspect.signature(declared)
        parameters = list(signature.parameters.values())[1:]  # without self
        if member in _PRECONDITIONS or any(
            p.default is inspect.Parameter.empty for p in parameters
        ):
            continue  # needs arguments: the property checks exercise it
        try:
            result = getattr(acc, member)()
        except NotImplementedError as error:
            raise AssertionError(
                f"{member}() raises NotImplementedError on a backend that claims it"
            ) from error
        if signature.return_annotation not in ("None", None):
            assert result is not None, (
                f"{member}() returned None; it is typed {signature.return_annotation}"
            )


def no_partial_capabilities(acc: Accelerator, protocol: type) -> None:
    """An unclaimed capability has no callable members (they could only be silent no-ops)."""
    callables = [
        member
        for member in sorted(get_protocol_members(protocol))
        if callable(inspect.getattr_static(acc, member, None))
    ]
    assert not callables, (
        f"{', '.join(callables)} callable, but the backend is not a {protocol.__name__}"
    )
